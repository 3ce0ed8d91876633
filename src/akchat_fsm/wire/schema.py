"""JSON Schema (draft 2020-12) of the wire formats, and the generator of the checked-in files.

    python -m akchat_fsm.wire.schema --write   # regenerate models/schema/*.schema.json
    python -m akchat_fsm.wire.schema --check   # exit 1 if a checked-in file drifted

A JSON Schema cannot say everything the decoders check. What it cannot express is written in
the ``description`` of the node concerned: lengths are UTF-16 code units (JSON Schema counts
code points), ids must be unique within their array, and a confirmation ``input`` obeys the
bounded-JSON rules. A document that passes the schema may still be rejected by the decoder;
one the decoder accepts always passes the schema (after unknown keys are dropped, which the
schema allows anyway).

To add a schema, register a zero-argument generator in :data:`SCHEMAS`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .js import IDENTIFIER_PATTERN, MAX_SAFE_INTEGER
from .memory import MAX_CONTAINER_ITEMS, MAX_DEPTH, MAX_NODES, MessageStatus, Role, ToolCallStatus
from .session import SessionSnapshot

__all__ = [
    "SCHEMAS",
    "SCHEMA_DIR",
    "controlled_shell_json_schema",
    "memory_record_json_schema",
    "render",
    "session_json_schema",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Where the checked-in schema files live, relative to the repository root (the working
#: directory of ``python -m akchat_fsm.wire.schema``); an installed package has no such folder.
SCHEMA_DIR = Path("models") / "schema"

_UTF16 = "Lengths count UTF-16 code units, as JavaScript does."
_UNIQUE = "Each {key} must be unique within this array."


def _walk(node: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            _walk(value, visit)


def _note(node: dict[str, Any], text: str) -> None:
    node["description"] = f"{node['description']} {text}" if "description" in node else text


def session_json_schema() -> dict[str, Any]:
    """The v1 envelope ``agentskit.chat.session`` as the decoder accepts it (docs/reference.md
    §1.1)."""
    schema = SessionSnapshot.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    # The Python constructor defaults `protocol` and `version`; the wire requires both.
    schema["required"] = ["protocol", "version", *schema["required"]]
    for key in ("protocol", "version", "activeTurn", "terminalTurns", "conversation"):
        schema["properties"][key].pop("default", None)
    schema["properties"]["version"] = {"const": 1}
    schema["properties"]["protocol"] = {"const": "agentskit.chat.session", "type": "string"}
    # Model docstrings describe the Python API, not the wire; property titles add nothing.
    for node in (schema, *defs.values()):
        node.pop("description", None)
        for prop in node.get("properties", {}).values():
            prop.pop("title", None)
    schema["description"] = (
        "Session envelope v1. Unknown keys are allowed and dropped by the decoder. An optional "
        "key is omitted when absent; null is never accepted for it. " + _UTF16
    )
    _note(schema["properties"]["confirmations"], _UNIQUE.format(key="token and toolCallId"))
    _note(schema["properties"]["terminalTurns"], _UNIQUE.format(key="turnId"))
    _note(defs["Conversation"]["properties"]["decisions"], _UNIQUE.format(key="messageId"))

    def tidy(node: dict[str, Any]) -> None:
        # Every string constraint here is exact except lengths (see the module docstring).
        if node.get("type") == "string" and ("maxLength" in node or "minLength" in node):
            _note(node, _UTF16)

    _walk(schema, tidy)
    return {"$schema": DIALECT, "$id": "agentskit.chat.session/v1", **schema}


def controlled_shell_json_schema() -> dict[str, Any]:
    """The strict controlled-snapshot shell (docs/reference.md §5.1); messages are validated
    upstream."""
    safe_int = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}
    identifier = {"type": "string", "pattern": IDENTIFIER_PATTERN}
    return {
        "$schema": DIALECT,
        "$id": "agentskit.chat.controlled/shell",
        "title": "ControlledChatSnapshot",
        "description": "Strict shell: unknown keys are rejected. Each item of `messages` must "
        "also be a canonical memory-record message (validated separately). " + _UTF16,
        "type": "object",
        "additionalProperties": False,
        "required": ["sessionId", "messages", "status", "input", "error", "usage"],
        "properties": {
            "sessionId": identifier,
            "messages": {"type": "array", "maxItems": 10_000},
            "status": {"enum": ["idle", "streaming", "complete", "error"]},
            "input": {"type": "string", "maxLength": 100_000},
            "error": {
                "anyOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["message"],
                        "properties": {
                            "message": {"type": "string", "minLength": 1, "maxLength": 4_096},
                            "code": identifier,
                        },
                    },
                ]
            },
            "usage": {
                "type": "object",
                "additionalProperties": False,
                "required": ["promptTokens", "completionTokens", "totalTokens"],
                "properties": {
                    "promptTokens": safe_int,
                    "completionTokens": safe_int,
                    "totalTokens": safe_int,
                },
            },
        },
    }


def memory_record_json_schema() -> dict[str, Any]:
    """The canonical chat-memory record v1, as ``validate_memory_record`` accepts it.

    Reconciliation reads only ``messages[].toolCalls[].id`` and ``.status``
    (docs/reconciliation.md spells the record out).
    """
    text = {"type": "string"}
    non_empty = {"type": "string", "minLength": 1}
    plain_object = {"type": "object", "description": "A plain JSON object (bounded JSON)."}

    def part(kind: str, **extra: Any) -> dict[str, Any]:
        properties: dict[str, Any] = {"type": {"const": kind}, **extra}
        required = ["type", *(k for k in ("text", "source") if k in extra)]
        return {"type": "object", "required": required, "properties": properties}

    source = {"source": text, "mimeType": text}
    duration = {"type": "number", "minimum": 0}
    tool_call = {
        "type": "object",
        "required": ["id", "name", "args", "status"],
        "properties": {
            "id": non_empty,
            "name": non_empty,
            "args": plain_object,
            "status": {
                "enum": [status.value for status in ToolCallStatus],
                "description": "requires_confirmation: upstream has not acted. A denial is "
                "error. The only field reconciliation reads, with id.",
            },
            "result": text,
            "error": text,
        },
    }
    message = {
        "type": "object",
        "required": ["id", "role", "content", "status", "createdAt"],
        "properties": {
            "id": non_empty,
            "role": {"enum": [role.value for role in Role]},
            "content": text,
            "status": {"enum": [status.value for status in MessageStatus]},
            "createdAt": {
                "type": "string",
                "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
                "description": "ISO-8601 UTC with milliseconds; the date must exist.",
            },
            "toolCallId": text,
            "parts": {
                "type": "array",
                "items": {
                    "oneOf": [
                        part("text", text=text),
                        part("image", **source, detail={"description": "low, high or auto"}),
                        part("audio", **source, durationSec=duration),
                        part("video", **source, durationSec=duration),
                        part("file", **source, filename=text),
                    ]
                },
            },
            "toolCalls": {"type": "array", "items": tool_call},
            "metadata": plain_object,
        },
    }
    return {
        "$schema": DIALECT,
        "$id": "agentskit.chat.memory/v1",
        "title": "MemoryRecord",
        "description": "Canonical chat-memory record. Unknown keys are dropped; an optional key "
        f"is omitted when absent, never null. Bounds: at most {MAX_NODES} JSON values in the "
        f"whole record, depth at most {MAX_DEPTH}, containers of at most {MAX_CONTAINER_ITEMS} "
        "items, finite numbers only.",
        "type": "object",
        "required": ["version", "messages"],
        "properties": {"version": {"const": 1}, "messages": {"type": "array", "items": message}},
    }


#: File name -> generator. `--write` renders each into :data:`SCHEMA_DIR`.
SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "session-v1.schema.json": session_json_schema,
    "controlled-shell.schema.json": controlled_shell_json_schema,
    "memory-record-v1.schema.json": memory_record_json_schema,
}


def render(schema: dict[str, Any]) -> str:
    """The checked-in text of a schema: stable key order, 2-space indent, final newline."""
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m akchat_fsm.wire.schema")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="regenerate the schema files")
    action.add_argument("--check", action="store_true", help="fail if a file drifted")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="output folder")
    args = parser.parse_args(argv)
    drifted = []
    for name, generate in SCHEMAS.items():
        path = args.dir / name
        text = render(generate())
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        elif not path.is_file() or path.read_text(encoding="utf-8") != text:
            drifted.append(name)
    for name in drifted:
        print(f"drifted: {name} (run python -m akchat_fsm.wire.schema --write)", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    raise SystemExit(main())
