"""`akchat-fsm show`: readable, deterministic rendering; one-line errors with exit codes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from akchat_fsm.cli.show import show

GOLDEN = Path(__file__).resolve().parent / "golden"
FIXTURE = GOLDEN / "snapshot.json"
EXPECTED = GOLDEN / "show.txt"


def run(*args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(show, list(args), input=stdin)


def test_golden_output() -> None:
    result = run(str(FIXTURE))
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    if os.environ.get("AKCHAT_UPDATE_GOLDEN") == "1":
        EXPECTED.write_text(result.stdout, encoding="utf-8")
    assert result.stdout == EXPECTED.read_text(encoding="utf-8")


def test_output_shows_what_a_human_needs() -> None:
    out = run(str(FIXTURE)).stdout
    assert "golden-session" in out
    assert "HOST_FAILED: Synthetic host failure." in out
    assert "AWAITING CONFIRMATION" in out
    assert "Awaiting confirmation: app-choice-1" in out
    assert "Usage: prompt 12, completion 7, total 19" in out
    assert 'Draft input: "draft reply"' in out
    assert "0000-02-29T00:00:00.000Z" in out


def test_untrusted_text_cannot_drive_the_terminal() -> None:
    out = run(str(FIXTURE)).stdout
    assert "\x1b" not in out
    assert "\\x1b[31mnot a colour" in out


def test_stdin_gives_the_same_output() -> None:
    assert run("-", stdin=FIXTURE.read_bytes()).stdout == run(str(FIXTURE)).stdout


def test_width_option() -> None:
    out = run("--width", "60", str(FIXTURE)).stdout
    assert max(len(line) for line in out.splitlines()) <= 60


def _write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "snap.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def _fixture() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize(
    ("change", "layer"),
    [
        ({"status": "private-state"}, "shell"),
        ({"transport": "private"}, "shell"),
        ({"messages": [{"id": "m", "role": "owner"}]}, "messages"),
    ],
)
def test_invalid_snapshot_is_one_line_exit_1(
    tmp_path: Path, change: dict[str, object], layer: str
) -> None:
    result = run(_write(tmp_path, {**_fixture(), **change}))
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {layer}: ")


def test_messages_error_names_the_rule(tmp_path: Path) -> None:
    bad = {**_fixture(), "messages": [{"id": "m", "role": "owner"}]}
    assert "messages[0]" in run(_write(tmp_path, bad)).stderr


def test_invalid_json_text_is_a_shell_error(tmp_path: Path) -> None:
    result = run(_write(tmp_path, "{not json"))
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr.startswith("error: shell: ")


def test_unreadable_file_is_one_line_exit_2(tmp_path: Path) -> None:
    for path in (tmp_path / "missing.json", tmp_path):
        result = run(str(path))
        assert result.exit_code == 2
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("error: cannot read ")


@pytest.mark.parametrize("hostile", ["a\nb", "x\ty", "\x1b[2J", "\u2028"])
def test_error_line_stays_one_line_whatever_the_snapshot_says(tmp_path: Path, hostile: str) -> None:
    message = {**_fixture()["messages"][0], "parts": [{"type": hostile}]}  # type: ignore[index]
    result = run(_write(tmp_path, {**_fixture(), "messages": [message]}))
    assert result.exit_code == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert hostile not in result.stderr  # the reason names the rule, not the payload
    assert "parts.0.type: not one of" in result.stderr


def test_unreadable_file_with_line_breaks_in_its_name_is_one_line(tmp_path: Path) -> None:
    result = run(str(tmp_path / "a\nb\u2028c.json"))
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1
    assert "a\\nb\\u2028c.json" in result.stderr
