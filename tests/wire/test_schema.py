"""The checked-in JSON Schemas: no drift, valid draft 2020-12, and agreement with the decoders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from jsonschema import Draft202012Validator

from akchat_fsm.errors import InvalidMemoryRecord
from akchat_fsm.testing.strategies import wire_session_objects
from akchat_fsm.testing.strategies_memory import memory_records
from akchat_fsm.wire.js import DATETIME_PATTERN, IDENTIFIER_PATTERN
from akchat_fsm.wire.memory import validate_memory_record
from akchat_fsm.wire.schema import (
    SCHEMA_DIR,
    SCHEMAS,
    main,
    render,
    session_json_schema,
)

VECTORS = Path(__file__).resolve().parent / "vectors"
REPO = Path(__file__).resolve().parents[2]
CONTROLLED = Path(__file__).resolve().parents[1] / "controlled" / "vectors"
SESSION = Draft202012Validator(session_json_schema())


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_checked_in_schema_has_not_drifted(name: str) -> None:
    path = REPO / SCHEMA_DIR / name
    assert path.read_text(encoding="utf-8") == render(SCHEMAS[name]()), (
        f"{name} drifted: run python -m akchat_fsm.wire.schema --write"
    )
    Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))


def test_check_command_reports_drift(tmp_path: Path) -> None:
    assert main(["--write", "--dir", str(tmp_path)]) == 0
    assert main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "session-v1.schema.json").write_text("{}\n", encoding="utf-8")
    assert main(["--check", "--dir", str(tmp_path)]) == 1


def test_patterns_are_exported_verbatim() -> None:
    text = json.dumps(session_json_schema())
    assert json.dumps(DATETIME_PATTERN) in text and json.dumps(IDENTIFIER_PATTERN) in text


def _vectors(folder: Path, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob(prefix))]


def test_every_accepted_session_vector_satisfies_the_schema() -> None:
    accepted = [v for v in _vectors(VECTORS, "session-*.json") if v["expect"] == "accept"]
    assert len(accepted) == 10
    for vector in accepted:
        SESSION.validate(vector["migrated"])


@pytest.mark.parametrize(
    "name",
    [
        "session-null-activeTurn",
        "session-sessionId-bad-char",
        "session-sessionId-too-long",
        "session-definitionRevision-zero",
        "session-negative-cursor",
        "session-fractional-cursor",
        "session-updatedAt-without-zone",
        "session-terminalTurns-over-64",
        "session-missing-confirmations",
        "session-v1-missing-protocol",
        "session-wrong-protocol",
        "session-decision-kind-agentic",
        "session-unknown-confirmation-status",
        "session-confirmation-input-not-record",
        "session-array-input",
    ],
)
def test_schema_rejects_what_it_can_express(name: str) -> None:
    vector = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    assert not SESSION.is_valid(vector["input"])


@given(wire_session_objects())
def test_generated_envelopes_satisfy_the_schema(wire: dict[str, Any]) -> None:
    SESSION.validate(wire)


def test_controlled_shell_schema_matches_the_vectors() -> None:
    shell = Draft202012Validator(SCHEMAS["controlled-shell.schema.json"]())
    vectors = _vectors(CONTROLLED, "controlled-*.json")
    assert vectors
    for vector in vectors:
        if vector["expect"] == "accept":
            shell.validate(vector["input"])
        elif vector.get("error", {}).get("class") == "ZodError":
            assert not shell.is_valid(vector["input"]), vector["name"]


MEMORY = Draft202012Validator(SCHEMAS["memory-record-v1.schema.json"]())


@given(memory_records())
def test_every_valid_memory_record_satisfies_the_memory_schema(record: dict[str, Any]) -> None:
    validate_memory_record(record)  # the decoder is the authority: the record is valid
    MEMORY.validate(record)


def _record(**changes: Any) -> dict[str, Any]:
    message = {"id": "m", "role": "assistant", "content": "", "status": "complete"}
    message["createdAt"] = "2026-07-11T00:00:00.000Z"
    return {"version": 1, "messages": [{**message, **changes}]}


@pytest.mark.parametrize(
    "broken",
    [
        {"messages": []},
        {"version": 2, "messages": []},
        _record(role="robot"),
        _record(createdAt="2026-07-11T00:00:00Z"),
        _record(toolCalls=[{"id": "c", "name": "n", "args": {}, "status": "approved"}]),
    ],
)
def test_memory_schema_rejects_what_the_validator_rejects(broken: dict[str, Any]) -> None:
    with pytest.raises(InvalidMemoryRecord):
        validate_memory_record(broken)
    assert not MEMORY.is_valid(broken)
