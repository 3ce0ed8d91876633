"""``schema`` and ``diagram`` print exactly the checked-in documents."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli_helpers import run

from akchat_fsm.machines.tables import MACHINES
from akchat_fsm.wire.decode import decode_session_snapshot

DOCS = Path(__file__).resolve().parents[2] / "docs"
MODELS = DOCS.parent / "models"


@pytest.mark.parametrize(
    ("which", "file"),
    [
        ("session", "session-v1.schema.json"),
        ("controlled", "controlled-shell.schema.json"),
        ("memory", "memory-record-v1.schema.json"),
    ],
)
def test_schema_equals_the_checked_in_file(which: str, file: str) -> None:
    result = run("schema", "--which", which)
    assert result.exit_code == 0
    assert result.stdout == (MODELS / "schema" / file).read_text("utf-8")


def test_schema_without_which_prints_every_schema() -> None:
    both = json.loads(run("schema").stdout)
    assert set(both) == {"session", "controlled", "memory"}
    assert both["session"] == json.loads(run("schema", "--which", "session").stdout)


def test_session_schema_names_the_wire_keys_and_limits() -> None:
    schema = json.loads(run("schema", "--which", "session").stdout)
    assert schema["$schema"].endswith("2020-12/schema")
    required = set(schema["required"])
    assert {"sessionId", "definitionId", "cursor", "confirmations", "updatedAt"} <= required
    assert schema["properties"]["confirmations"]["maxItems"] == 1000
    # the canonical example of docs/reference.md §1.1 has exactly the keys the schema declares
    example = decode_session_snapshot(
        (DOCS.parent / "tests" / "cli" / "data" / "v1.json").read_text("utf-8")
    ).snapshot
    assert example is not None
    assert set(example.to_wire()) <= set(schema["properties"])


def _mermaid_block(page: str) -> str:
    match = re.search(r"```mermaid\n(.*?)```", page, re.S)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_diagram_equals_the_docs_page(machine: str) -> None:
    result = run("diagram", machine)
    assert result.exit_code == 0
    page = (DOCS / "machines" / f"{machine}.md").read_text("utf-8")
    assert result.stdout == _mermaid_block(page)


def test_dot_format_and_all_machines() -> None:
    dot = run("diagram", "confirmation", "--format", "dot").stdout
    assert dot.startswith("digraph ") and dot.rstrip().endswith("}")
    assert "approving" in dot and "->" in dot
    every = run("diagram").stdout
    for machine in MACHINES:
        assert run("diagram", machine).stdout in every
