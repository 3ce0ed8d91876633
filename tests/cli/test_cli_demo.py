"""``akchat-fsm demo``: the story runs on real stores and its invariants are checked."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from cli_helpers import run

import akchat_fsm
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


def _inbox_line(process: subprocess.Popen[str], deadline_s: float = 60.0) -> str:
    """The line the demo prints once its inbox listens (bounded: the story takes a second).
    Read by a thread, so a pipe that stays open and silent cannot hang the test."""
    assert process.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    give_up = time.monotonic() + deadline_s
    while (left := give_up - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=min(left, 1.0))
        except queue.Empty:
            if process.poll() is not None:
                break
            continue
        if line.startswith("inbox:"):
            return line
    process.kill()
    raise AssertionError(f"the demo's inbox did not start: {process.communicate()[1]}")


def test_demo_inbox_serves_the_story_and_a_decision_there_continues_it(tmp_path: Path) -> None:
    source = str(Path(akchat_fsm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": source, "COLUMNS": "400"}
    process = subprocess.Popen(
        [sys.executable, "-m", "akchat_fsm.cli", "demo", "--inbox", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        line = _inbox_line(process)
        found = re.search(r"at (http://127\.0\.0\.1:\d+)/session/demo-0/audit and "
                          r"(confirm-\w+) waits", line)  # fmt: skip
        assert found, line
        base, token = found.groups()
        with httpx.Client(base_url=base, timeout=10) as browser:
            audit = browser.get("/session/demo-0/audit")
            assert audit.status_code == 200
            named = re.findall(r'<td class="principal" dir="auto">(\w+)</td>', audit.text)
            assert {"alice", "carol", "dave"} <= set(named)  # the story's deciders
            listed = browser.get("/")
            assert token in listed.text and "payout.send" in listed.text
            page = browser.get(f"/call/{token}", params={"session": "demo-0"}).text
            fields = dict(re.findall(r'name="(csrf|args_digest)" value="([^"]+)"', page))
            approved = browser.post(
                f"/call/{token}/approve",
                data={**fields, "session": "demo-0"},
                headers={"origin": base},
            )
            assert approved.status_code == 200 and 'data-kind="won"' in approved.text
            again = browser.get("/session/demo-0/audit").text
            assert again.count('<td class="principal" dir="auto">local</td>') == 1
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert "Traceback" not in stderr, stderr
    assert process.returncode == 0, stderr  # the story's invariants held


def test_demo_port_without_inbox_is_a_usage_error() -> None:
    result = run("demo", "--port", "8000")
    assert result.exit_code == 2 and result.stderr.startswith("error: --port goes with --inbox")


def test_the_inbox_socket_listens_before_its_url_is_printed() -> None:
    """``demo --inbox`` prints its URL once the socket is bound; a client that connects at
    once (before uvicorn starts) must wait in the backlog, not be refused."""
    import socket

    from akchat_fsm.cli.demo import bind_loopback

    sock = bind_loopback(0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            pass  # refused (ConnectionRefusedError) unless the socket already listens
    finally:
        sock.close()
