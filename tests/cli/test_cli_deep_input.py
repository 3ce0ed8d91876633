"""A deeply nested input is refused before anything parses it (issue 27: 20 MB nested 10^7
deep took 29 s and 1.6 GB through the CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import run

from akchat_fsm.wire import jsontext

#: The deepest nesting a verb accepts (docs/cli.md states it).
MAX_INPUT_DEPTH = 512

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


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (b"[" * (MAX_INPUT_DEPTH + 1) + b"]" * (MAX_INPUT_DEPTH + 1), True),
        (b'["' + b"[" * (MAX_INPUT_DEPTH + 1) + b'"]', False),  # brackets inside a string
        (b'["\\"' + b"{" * (MAX_INPUT_DEPTH + 1) + b'"]', False),  # after an escaped quote
        (b"[" + b"[]," * (MAX_INPUT_DEPTH + 1) + b"[]]", False),  # many brackets, never deep
    ],
    ids=["deep", "in-a-string", "after-an-escape", "wide"],
)
def test_only_nesting_outside_strings_counts(text: bytes, refused: bool, tmp_path: Path) -> None:
    source = tmp_path / "input.json"
    source.write_bytes(text)
    result = run("inspect", str(source))
    assert result.exit_code == 1
    assert ("refused before parsing" in result.stderr) is refused, result.stderr
    assert ("SESSION_INVALID_SNAPSHOT" in result.stderr) is not refused, result.stderr


def test_an_input_at_the_limit_is_read_and_judged_for_what_it_is(tmp_path: Path) -> None:
    shallow = tmp_path / "at-limit.json"
    shallow.write_bytes(b"[" * MAX_INPUT_DEPTH + b"]" * MAX_INPUT_DEPTH)
    result = run("inspect", str(shallow))
    assert result.exit_code == 1
    assert "SESSION_INVALID_SNAPSHOT" in result.stderr
