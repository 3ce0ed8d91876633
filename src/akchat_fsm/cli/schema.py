"""``akchat-fsm schema``: the JSON Schemas of the wire documents (:mod:`akchat_fsm.wire.schema`).

The text is exactly the checked-in ``models/schema/*.schema.json`` (same generator, same
rendering). The decoders stay the authority: what a JSON Schema cannot express (UTF-16 lengths,
uniqueness, bounded JSON) is written in the schema's descriptions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from ..wire.schema import (
    controlled_shell_json_schema,
    memory_record_json_schema,
    session_json_schema,
)
from ..wire.schema import render as render_schema

__all__ = ["WHICH", "render", "schema"]

#: ``--which`` name → (generator, checked-in file name under ``models/schema/``).
WHICH: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "session": (session_json_schema, "session-v1.schema.json"),
    "controlled": (controlled_shell_json_schema, "controlled-shell.schema.json"),
    "memory": (memory_record_json_schema, "memory-record-v1.schema.json"),
}


def render(which: str | None) -> str:
    """The command's exact output: one schema, or every schema keyed by ``--which`` name."""
    if which is not None:
        return render_schema(WHICH[which][0]())
    every = {name: generate() for name, (generate, _) in WHICH.items()}
    return json.dumps(every, indent=2, ensure_ascii=False) + "\n"


@click.command("schema")
@click.option(
    "--which",
    type=click.Choice(list(WHICH)),
    default=None,
    help="Print only this schema (default: all, as one object keyed by name).",
)
def schema(which: str | None) -> None:
    """Print the JSON Schemas: session envelope v1, controlled snapshot shell, chat-memory record.

    \b
    Example:
      akchat-fsm schema --which session > session-v1.schema.json
    """
    click.echo(render(which), nl=False)
