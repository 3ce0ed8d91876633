"""``reconcile URL --all --older-than AGE``: the sweep from the command line, on SQLite files and
the real PostgreSQL and Redis servers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import postgres_url, run, sqlite_url, stuck_session

from akchat_fsm.storage import open_storage
from akchat_fsm.wire.decode import decode_session_snapshot
from cleanup import drop_redis_prefix_at

#: ``reconcile --all`` lists work left (docs/cli.md, exit status).
NEEDS_PERSON = 3


def _statuses(url: str, session_id: str) -> list[str]:
    storage = open_storage(url)
    try:
        snapshot = decode_session_snapshot(storage.load(session_id)).snapshot
    finally:
        storage.close()
    assert snapshot is not None
    return [b.status.value for b in snapshot.confirmations]


def _redis_url(tmp_path: Path, request: pytest.FixtureRequest) -> str:

    redis_url, prefix = request.getfixturevalue("redis_url"), f"akra:{uuid.uuid4().hex[:12]}:"

    request.addfinalizer(lambda: drop_redis_prefix_at(redis_url, prefix))
    return f"{redis_url}?prefix={prefix}"


@pytest.fixture(
    params=[
        pytest.param(sqlite_url, id="sqlite"),
        pytest.param(postgres_url, id="postgres"),
        pytest.param(_redis_url, id="redis"),
    ]
)
def crashed(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, Path]:
    """Three sessions with stuck claims; memories for two of them (one of those invalid)."""
    url: str = request.param(tmp_path, request)
    memories = tmp_path / "memories"
    memories.mkdir()
    for sid in ("alpha", "beta", "gamma"):
        memory = stuck_session(url, sid)
        if sid == "alpha":
            (memories / f"{sid}.json").write_text(json.dumps(memory), encoding="utf-8")
    (memories / "beta.json").write_text('{"version": 2, "messages": []}', encoding="utf-8")
    return url, memories


def _json(*argv: str) -> dict[str, Any]:
    result = run(*argv, "--json")
    assert result.exit_code in (0, 1, NEEDS_PERSON), result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_a_dry_run_lists_the_stuck_sessions_and_writes_nothing(crashed: tuple[str, Path]) -> None:
    url, memories = crashed
    result = run("reconcile", url, "--all", "--older-than", "0")
    assert result.exit_code == NEEDS_PERSON, result.stderr  # three sessions need their memory
    assert "3 session(s) last written before" in result.stdout and "3 stuck" in result.stdout
    assert "dry run: nothing written" in result.stdout
    assert result.stderr == ""  # the progress bar is drawn only on a terminal
    listed = _json("reconcile", url, "--all", "--older-than", "0")
    assert [s["sessionId"] for s in listed["sessions"]] == ["alpha", "beta", "gamma"]
    assert [r["status"] for r in listed["sessions"][0]["records"]] == ["approving", "rejecting"]
    planned = _json("reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(memories))
    by_id = {s["sessionId"]: s for s in planned["sessions"]}
    assert by_id["alpha"]["status"] == "planned"
    assert [r["action"] for r in by_id["alpha"]["records"]] == [
        "left as is: needs upstream",
        "complete",
    ]
    assert by_id["beta"]["status"] == "failed" and "AK_CONFIG_INVALID" in by_id["beta"]["error"]
    assert by_id["gamma"]["status"] == "no memory file"
    assert planned["applied"] is False
    for sid in ("alpha", "beta", "gamma"):
        assert _statuses(url, sid) == ["approving", "rejecting", "pending"]


def test_only_sessions_older_than_the_threshold_are_listed(crashed: tuple[str, Path]) -> None:
    url, _ = crashed
    young = _json("reconcile", url, "--all", "--older-than", "5m")
    assert young["sessions"] == [] and young["counts"] == {}
    shown = run("reconcile", url, "--all", "--older-than", "1d")
    assert "0 session(s) last written before" in shown.stdout and shown.exit_code == 0


def test_apply_settles_what_memory_proves_and_reports_each_session(
    crashed: tuple[str, Path],
) -> None:
    url, memories = crashed
    argv = ("reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(memories))
    result = run(*argv, "--apply")
    assert result.exit_code == 1, result.stderr  # one session failed: the status says so
    assert "applied" in result.stdout and "1 failed" in result.stdout
    report = _json(*argv, "--apply")  # a second sweep: alpha is still listed (one left as is)
    assert report["applied"] is True
    # alpha: upstream denied the rejection (completed); the untouched approval needs upstream
    assert _statuses(url, "alpha") == ["approving", "rejected", "pending"]
    assert _statuses(url, "beta") == ["approving", "rejecting", "pending"]  # invalid memory
    assert _statuses(url, "gamma") == ["approving", "rejecting", "pending"]  # no memory file
    by_id = {s["sessionId"]: s for s in report["sessions"]}
    assert by_id["alpha"]["status"] == "unsettled"
    assert by_id["beta"]["status"] == "failed" and by_id["gamma"]["status"] == "no memory file"
    released = _json(*argv, "--apply", "--release-untouched")
    alpha = next(s for s in released["sessions"] if s["sessionId"] == "alpha")
    assert alpha["status"] == "settled"
    assert [r["action"] for r in alpha["records"]] == ["released"]
    assert _statuses(url, "alpha") == ["pending", "rejected", "pending"]
    left = _json("reconcile", url, "--all", "--older-than", "0")
    assert [s["sessionId"] for s in left["sessions"]] == ["beta", "gamma"]


def test_the_limit_takes_the_oldest_and_says_more_may_wait(crashed: tuple[str, Path]) -> None:
    url, _ = crashed
    result = run("reconcile", url, "--all", "--older-than", "0", "--limit", "2")
    assert "limit 2 reached: more may be waiting" in result.stdout
    listed = _json("reconcile", url, "--all", "--older-than", "0", "--limit", "2")
    assert listed["truncated"] is True
    assert [s["sessionId"] for s in listed["sessions"]] == ["alpha", "beta"]


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["s1", "--all", "--older-than", "5m"], "--all takes no SESSION_ID"),
        (["--all"], "--all needs --older-than"),
        (["--all", "--older-than", "5m", "--apply", "--dry-run"], "contradict each other"),
        (["--all", "--older-than", "5x"], "'5x' is not an age like 90s, 5m, 2h or 1d"),
        (["--memory", "m.json"], "give a SESSION_ID, or --all"),
        (["s1", "--memory", "m.json", "--older-than", "5m"], "go with --all"),
    ],
)
def test_misuse_is_one_usage_line(tmp_path: Path, argv: list[str], says: str) -> None:
    result = run("reconcile", f"sqlite:///{tmp_path / 'x.db'}", *argv)
    assert result.exit_code == 2, result.stdout
    assert len(result.stderr.splitlines()) == 1 and says in result.stderr
    assert not (tmp_path / "x.db").exists()
