"""``akchat-fsm demo``: the story runs on real stores and its invariants are checked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import run

from akchat_fsm.cli._demo_world import DemoUpstream


def _assert_story(stdout: str) -> None:
    assert re.search(r"bob LOSER: ResolutionInProgress, confirm-\w+ is approving; no call", stdout)
    assert re.search(r"alice WINNER: upstream approve ran once; confirm-\w+ is approved", stdout)
    # bob's stale read (alice's claim in progress) is answered with what storage holds
    assert re.search(
        r"bob still holds cursor \d+ \(alice's claim\), now taps reject\n"
        r"\s+bob reject refused: AlreadyResolved, confirm-\w+ is approved; no call",
        stdout,
    )
    assert re.search(r"carol CRASHED .* is approving at cursor \d+", stdout)
    assert re.search(r"dave CRASHED .* is rejecting at cursor \d+", stdout)
    assert re.search(r"operator reconcile confirm-\w+: approving -> approved \(resumed\)", stdout)
    assert re.search(r"operator reconcile confirm-\w+: rejecting -> rejected \(completed\)", stdout)
    assert "invariants hold" in stdout
    assert "INVARIANT FAILED" not in stdout


def test_demo_tells_the_story_and_invariants_hold() -> None:
    result = run("demo")
    assert result.exit_code == 0, result.stderr
    _assert_story(result.stdout)
    assert result.stderr == ""
    # every confirmation ends terminal, each tool call got exactly one upstream call
    final = result.stdout.split("Final state", 1)[1]
    rows = [line.split() for line in final.splitlines() if line.strip().startswith("confirm-")]
    assert len(rows) == 3
    assert {row[2] for row in rows} <= {"approved", "rejected", "expired"}
    assert all(row[3] == "1" for row in rows)


def test_demo_with_a_seed_is_deterministic() -> None:
    first, again, other = (
        run("demo", "--seed", "7"),
        run("demo", "--seed", "7"),
        run("demo", "--seed", "8"),
    )
    assert first.exit_code == again.exit_code == other.exit_code == 0
    assert first.stdout == again.stdout
    assert "session demo-7 " in first.stdout
    tokens = set(re.findall(r"confirm-\w+", first.stdout))
    assert len(tokens) == 3
    assert tokens.isdisjoint(re.findall(r"confirm-\w+", other.stdout))


def test_demo_on_an_in_memory_store_and_a_reused_sqlite_file(tmp_path: Path) -> None:
    assert run("demo", "--store", "memory://").exit_code == 0
    url = f"sqlite:///{tmp_path / 'reused.db'}"
    assert "session demo-0 " in run("demo", "--store", url).stdout
    second = run("demo", "--store", url)  # the first run's session is left alone
    assert second.exit_code == 0
    assert "session demo-0-2 " in second.stdout


def test_demo_exits_1_when_an_invariant_breaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make upstream receive a second approve: the check must notice the replay."""
    original = DemoUpstream.approve

    def approve_twice(self: DemoUpstream, tool_call_id: str) -> None:
        original(self, tool_call_id)
        self.approve_calls[tool_call_id] += 1

    monkeypatch.setattr(DemoUpstream, "approve", approve_twice)
    result = run("demo")
    assert result.exit_code == 1
    assert "INVARIANT FAILED: replay" in result.stdout
    assert "invariants hold" not in result.stdout


def test_demo_exits_1_on_a_false_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make upstream lose a deny it received: a rejected record without its call is caught."""

    def deny_unrecorded(self: DemoUpstream, tool_call_id: str, reason: str) -> None:
        return None

    monkeypatch.setattr(DemoUpstream, "deny", deny_unrecorded)
    result = run("demo")
    assert result.exit_code == 1
    assert "INVARIANT FAILED: false completion" in result.stdout


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_demo_on_private_sqlite_memory_urls(url: str) -> None:
    result = run("demo", "--store", url)
    assert result.exit_code == 0, result.stderr
    _assert_story(result.stdout)


@pytest.mark.postgres
def test_demo_on_postgresql(pg_url: str) -> None:
    result = run("demo", "--store", pg_url, "--seed", "11")
    assert result.exit_code == 0, result.stderr
    _assert_story(result.stdout)


@pytest.mark.redis
def test_demo_on_redis(redis_url: str) -> None:
    result = run("demo", "--store", redis_url, "--seed", "12")
    assert result.exit_code == 0, result.stderr
    _assert_story(result.stdout)


def test_the_installed_command_runs_in_a_subprocess() -> None:
    script = Path(sys.executable).with_name("akchat-fsm")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "akchat_fsm.cli"]
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run(
        [*command, "demo", "--seed", "3"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    _assert_story(done.stdout)
    assert done.stdout == run("demo", "--seed", "3").stdout  # same bytes off a TTY
