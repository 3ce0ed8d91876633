"""A deeply nested input is refused before anything parses it (issue 27: 20 MB nested 10^7
deep took 29 s and 1.6 GB through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run

from akchat_fsm.cli import _common
from akchat_fsm.cli._common import MAX_INPUT_DEPTH
from akchat_fsm.wire import jsontext

VERBS = [
    ["inspect", "{file}"],
    ["show", "{file}"],
    ["reconcile", "memory://", "s1", "--memory", "{file}"],
]


def _never_parsed(*_: object) -> None:
    raise AssertionError("a too-deep input reached the JSON parser")


@pytest.mark.parametrize("argv", VERBS, ids=["inspect", "show", "reconcile-memory"])
def test_a_file_nested_a_million_deep_is_refused_before_parsing(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_bytes(b"[" * 1_000_000 + b"]" * 1_000_000)
    # The refusal comes from the scan, not from a parse that gave up: parsing would fail here.
    monkeypatch.setattr(jsontext, "parse_json_text", _never_parsed)
    monkeypatch.setattr(jsontext._DECODER, "decode", _never_parsed)
    result = run(*[part.format(file=deep) for part in argv])
    assert result.exit_code == 1, result.output
    assert f"nested deeper than {MAX_INPUT_DEPTH} levels; refused before parsing" in result.stderr


def test_the_scan_counts_only_brackets_outside_strings() -> None:
    limit = MAX_INPUT_DEPTH
    assert _common._too_deep(b"[" * (limit + 1) + b"]" * (limit + 1))
    assert not _common._too_deep(b"[" * limit + b"]" * limit)  # at the limit: accepted
    assert not _common._too_deep(b'["' + b"[" * (limit + 1) + b'"]')  # brackets in a string
    assert not _common._too_deep(b'["\\"' + b"{" * (limit + 1) + b'"]')  # after an escape
    assert not _common._too_deep(b"[]" * (limit + 1))  # many brackets, never deep


def test_an_input_at_the_limit_is_read_and_judged_for_what_it_is(tmp_path: Path) -> None:
    shallow = tmp_path / "at-limit.json"
    shallow.write_bytes(b"[" * MAX_INPUT_DEPTH + b"]" * MAX_INPUT_DEPTH)
    result = run("inspect", str(shallow))
    assert result.exit_code == 1
    assert "SESSION_INVALID_SNAPSHOT" in result.stderr
