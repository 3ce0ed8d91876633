"""``check-storage``: the conformance kit through the command, on real and broken stores."""

from __future__ import annotations

import contextlib
import re
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import run, stuck_session

from akchat_fsm.testing import CHECKS

FAST = ["round_trip", "stale_cursor_refused", "cas_race_threads", "linearizability_threads"]


def _only(names: list[str]) -> list[str]:
    return [arg for name in names for arg in ("--only", name)]


def _rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("SELECT count(*) FROM akchat_sessions").fetchone()[0])


def test_sqlite_file_is_conformant_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "kit.db"
    stuck_session(f"sqlite:///{path}", "the-users-own")  # something that must survive
    result = run("check-storage", f"sqlite:///{path}", "--seed", "5")
    assert result.exit_code == 0, result.stdout
    assert f"CONFORMANT: {len(CHECKS)} checks, 0 failed" in result.stdout
    assert "seed 5" in result.stdout
    for name in ("linearizability_threads", "processes", "counter_workload"):
        line = next(line for line in result.stdout.splitlines() if line.split()[:1] == [name])
        assert " PASS " in line
    assert result.stderr == ""  # no progress bar when stderr is not a terminal
    # everything the checks wrote, from this process and the racing ones, is gone again
    removed = re.search(r"cleanup: removed the (\d+) session\(s\) the checks wrote", result.stdout)
    assert removed is not None and int(removed[1]) >= 20, result.stdout
    assert _rows(path) == 1
    assert run("inspect", f"sqlite:///{path}", "the-users-own").exit_code == 0


def test_a_last_write_wins_adapter_is_not_conformant() -> None:
    result = run("check-storage", "cli_helpers:LastWriteWins", "--no-processes", *_only(FAST))
    assert result.exit_code == 1
    assert "NOT CONFORMANT" in result.stdout
    failed = {line.split()[0] for line in result.stdout.splitlines() if " FAIL " in line}
    assert {"stale_cursor_refused", "cas_race_threads"} <= failed
    assert "round_trip" not in failed
    assert "cleanup: NOT done: the adapter has no delete()" in result.stdout


@pytest.mark.postgres
def test_postgresql_is_conformant(pg_url: str) -> None:
    result = run("check-storage", pg_url, "--no-processes", *_only(FAST))
    assert result.exit_code == 0, result.stdout
    assert f"CONFORMANT: {len(FAST)} checks, 0 failed" in result.stdout
    assert re.search(r"cleanup: removed the [1-9]\d* session\(s\) the checks wrote", result.stdout)


@pytest.mark.redis
def test_redis_is_conformant(redis_url: str) -> None:
    result = run("check-storage", redis_url, "--no-processes", *_only(FAST))
    assert result.exit_code == 0, result.stdout
    assert f"CONFORMANT: {len(FAST)} checks, 0 failed" in result.stdout
    assert re.search(r"cleanup: removed the [1-9]\d* session\(s\) the checks wrote", result.stdout)
