"""Every verb: ``--help`` with an example; bad input is one line on stderr, exit 1 or 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run

VERBS = ["demo", "check-storage", "inspect", "reconcile", "schema", "diagram", "show"]


def test_the_group_lists_every_verb() -> None:
    result = run("--help")
    assert result.exit_code == 0
    for verb in VERBS:
        assert verb in result.stdout


@pytest.mark.parametrize("verb", VERBS)
def test_each_verb_has_help(verb: str) -> None:
    result = run(verb, "--help")
    assert result.exit_code == 0
    assert f" {verb} " in result.stdout.splitlines()[0]
    assert result.stdout.startswith("Usage: ")
    if verb != "show":  # show is another helper's verb, registered as is
        assert "Example" in result.stdout
        assert f"akchat-fsm {verb}" in result.stdout


def _one_line_error(result: object, code: int) -> str:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.exit_code == code, (result.stdout, stderr)  # type: ignore[attr-defined]
    assert "Traceback" not in stderr + result.stdout  # type: ignore[attr-defined]
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def test_unknown_verb_and_option_are_usage_errors() -> None:
    assert "No such command" in _one_line_error(run("frobnicate"), 2)
    assert "--bogus" in _one_line_error(run("demo", "--bogus"), 2)
    assert "--seed" in _one_line_error(run("demo", "--seed", "x"), 2)
    assert "--seed" in _one_line_error(run("demo", "--seed", "-1"), 2)


def test_inspect_bad_inputs(tmp_path: Path) -> None:
    assert "cannot read" in _one_line_error(run("inspect", str(tmp_path / "absent.json")), 2)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    line = _one_line_error(run("inspect", str(bad)), 1)
    assert "SESSION_INVALID_SNAPSHOT: Session snapshot is not valid JSON." in line
    bad.write_text(json.dumps({"version": 7}), encoding="utf-8")
    assert "SESSION_UNSUPPORTED_VERSION" in _one_line_error(run("inspect", str(bad)), 1)
    assert "needs a SESSION_ID" in _one_line_error(run("inspect", "memory://"), 2)
    assert "scheme" in _one_line_error(run("inspect", "nosuch://x", "s1"), 2)
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    line = _one_line_error(run("inspect", url, "s1"), 2)
    assert line.endswith("typo.db does not exist (read-only commands never create one)")
    assert not (tmp_path / "typo.db").exists()
    assert "not valid JSON" in _one_line_error(run("inspect", "-", input="\x00"), 1)


def test_reconcile_bad_inputs(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    missing = _one_line_error(run("reconcile", url, "s1"), 2)
    assert "--memory" in missing
    memory = tmp_path / "memory.json"
    memory.write_text(json.dumps({"version": 2, "messages": []}), encoding="utf-8")
    assert str(memory) in _one_line_error(run("reconcile", url, "s1", "--memory", str(memory)), 1)
    memory.write_text("[1,", encoding="utf-8")
    _one_line_error(run("reconcile", url, "s1", "--memory", str(memory)), 1)
    memory.write_text(json.dumps({"version": 1, "messages": []}), encoding="utf-8")
    assert "does not exist" in _one_line_error(
        run("reconcile", url, "s1", "--memory", str(memory)), 2
    )
    assert not (tmp_path / "s.db").exists()


def test_other_verbs_bad_inputs() -> None:
    assert "cannot import" in _one_line_error(run("check-storage", "no_such_module:make"), 2)
    assert "scheme" in _one_line_error(run("check-storage", "bogus://x"), 2)
    down = "postgresql://127.0.0.1:1/none?connect_timeout=1"
    assert "cannot reach storage" in _one_line_error(run("check-storage", down), 2)
    assert "cannot reach storage" in _one_line_error(run("check-storage", "redis://127.0.0.1:1"), 2)
    assert "machine" in _one_line_error(run("diagram", "nope"), 2).lower()
    assert "--format" in _one_line_error(run("diagram", "--format", "png"), 2)
    assert "--which" in _one_line_error(run("schema", "--which", "x"), 2)
    assert "cannot open storage" in _one_line_error(run("demo", "--store", "bogus://x"), 2)
    unreachable = "postgresql://127.0.0.1:1/none?connect_timeout=1"
    assert "unreachable" in _one_line_error(run("demo", "--store", unreachable), 2)
