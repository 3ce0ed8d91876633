"""Every ``$ akchat-fsm ...`` example in docs/cli.md runs, with the output the page shows (a line
``# exit N: why`` right after a command is the status it ends with, output unchecked)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from cli_helpers import crash_inside_a_tool, run, stuck_session

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
DATA = Path(__file__).resolve().parent / "data"


def examples() -> list[tuple[str, list[str]]]:
    """(command line, lines shown after it) for each example, in page order."""
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", PAGE.read_text("utf-8"), re.S):
        for chunk in re.split(r"^(?=\$ )", block, flags=re.M):
            if chunk.startswith("$ "):
                command, *shown = chunk.rstrip("\n").split("\n")
                found.append((command[2:], shown))
    return found


def test_the_page_has_an_example_per_verb() -> None:
    verbs = {shlex.split(command)[1] for command, _ in examples()}
    assert verbs >= {
        "demo",
        "check-storage",
        "inspect",
        "reconcile",
        "settle",
        "pending",
        "inbox",
        "schema",
        "audit",
        "diagram",
    }


def test_every_example_runs_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    memory = stuck_session("sqlite:///sessions.db", "support-42")
    (tmp_path / "memory.json").write_text(json.dumps(memory), encoding="utf-8")
    (tmp_path / "memories").mkdir()
    (tmp_path / "memories" / "support-42.json").write_text(json.dumps(memory), encoding="utf-8")
    shutil.copy(DATA / "v0.json", tmp_path / "snapshot-v0.json")
    crash_inside_a_tool("sqlite:///sessions.db", "support-42", "call-9", "charge_card")
    ran = 0
    for command, shown in examples():
        argv = shlex.split(command)
        assert argv[0] == "akchat-fsm"
        result = run(*argv[1:])
        status = re.fullmatch(r"# exit (\d+): .*", shown[0]) if shown else None
        if status is not None:  # a documented non-zero status that is not an error
            assert result.exit_code == int(status[1]), (command, result.stdout, result.stderr)
            assert result.stderr == "", command
        elif shown and shown[0].startswith("error:"):
            assert result.exit_code != 0, command
            assert result.stderr.splitlines() == shown, command
        else:
            assert result.exit_code == 0, (command, result.stderr)
            if shown:
                assert result.stdout.splitlines() == shown, command
        ran += 1
    assert ran == len(examples()) >= 10
    # the examples did what the page says: --apply settled the rejection from memory
    after = run("inspect", "sqlite:///sessions.db", "support-42", "--json")
    statuses = [c["status"] for c in json.loads(after.stdout)["confirmations"]]
    assert statuses == ["approving", "rejected", "pending"]
