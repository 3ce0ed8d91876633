"""Every verb's unreadable-file path exits as docs/cli.md's table says, naming the file once.

The status is read from the docs' own table (the row listing "unreadable file"), so the docs
and the verbs cannot drift apart silently.
"""

from __future__ import annotations

import re
from pathlib import Path

from cli_helpers import run

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def _documented_status(meaning: str) -> int:
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        row = re.fullmatch(r"\| (\d) \| (.*) \|", line)
        if row and meaning in row.group(2):
            return int(row.group(1))
    raise AssertionError(f"docs/cli.md has no status row for {meaning!r}")


def _cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    missing, folder, plain = tmp_path / "missing.json", tmp_path / "folder", tmp_path / "plain"
    folder.mkdir()
    plain.write_text("{}", encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    cases: list[tuple[list[str], str]] = []
    for unreadable in (missing, folder):
        cases += [
            (["inspect", str(unreadable)], str(unreadable)),
            (["show", str(unreadable)], str(unreadable)),
            (["reconcile", url, "s1", "--memory", str(unreadable)], str(unreadable)),
            (["reconcile", url, "s1", "--memory", str(unreadable), "--apply"], str(unreadable)),
        ]
    for not_a_dir in (missing, plain):
        for extra in ([], ["--apply"]):
            argv = ["reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(not_a_dir)]
            cases.append(([*argv, *extra], str(not_a_dir)))
    return cases


def test_every_unreadable_file_exits_with_the_documented_status(tmp_path: Path) -> None:
    status = _documented_status("unreadable file")
    assert status == 2
    for argv, name in _cases(tmp_path):
        result = run(*argv)
        lines = result.stderr.splitlines()
        assert result.exit_code == status, (argv, result.exit_code, result.stderr)
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, result.stderr)
        assert lines[0].count(Path(name).name) == 1, (argv, lines[0])
        assert not (tmp_path / "store.db").exists(), argv  # refused before the store


def test_a_too_large_memory_file_is_invalid_input_named_once(tmp_path: Path) -> None:
    # A readable file that is too large is invalid input (1), not an unreadable one: the
    # memory file of reconcile is bounded like every input and says so once.
    status = _documented_status("invalid input")
    result = run("reconcile", f"sqlite:///{tmp_path / 'x.db'}", "s1", "--memory", "/dev/zero")
    assert result.exit_code == status, result.stderr
    assert result.stderr.count("/dev/zero") == 1, result.stderr
