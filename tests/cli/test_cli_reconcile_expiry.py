"""``reconcile URL --all --apply`` and confirmations past their expiry (issue 22, "waiting on
expiry"): through the host's bridge factory the sweep expires them and the run continues with
the expired answer; without one nothing can deny them upstream, so the session is reported
with the exact next step. Real SQLite files, the real pydantic-ai package on its offline model
(``cli_bridges``)."""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path
from typing import Any

import cli_bridges
import pytest
from click.testing import CliRunner

from akchat_fsm.cli import main
from akchat_fsm.cli.reconcile_all import PAST_EXPIRY
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage import open_storage
from akchat_fsm.testing.doubles import RecordingUpstream

NEEDS_PERSON = 3
SPEC = "cli_bridges:bridge_for"
HOUR = 3_600_000


@pytest.fixture
def bodies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "bodies.log"
    monkeypatch.setenv(cli_bridges.BODIES, str(log))
    monkeypatch.delenv(cli_bridges.KILL, raising=False)
    return log


def an_hour_ago() -> int:
    """A session clock an hour back: what it proposed (five minutes to live) is due now."""
    return time.time_ns() // 1_000_000 - HOUR


def _sweep(url: str, *extra: str) -> Any:
    argv = ["reconcile", url, "--all", "--older-than", "0", *extra]
    return CliRunner().invoke(main, argv, catch_exceptions=False)


def _json(url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    result = _sweep(url, *extra, "--json")
    return result.exit_code, json.loads(result.stdout)


def test_the_bridge_expires_a_due_confirmation_and_the_run_continues(
    tmp_path: Path, bodies: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    storage = open_storage(url)
    try:
        session = resume_chat_session(
            cli_bridges.DEFINITION, session_id="b-1", storage=storage, clock=an_hour_ago
        )
        paused = cli_bridges.bridge(session, storage, "worker-a:1").run("go", run_id="run-1")
        assert [b.tool_call_id for b in paused.pending] == ["c1"]
    finally:
        storage.close()

    code, applied = _json(url, "--bridge", SPEC, "--apply")
    assert code == 0, applied
    [entry] = applied["sessions"]
    assert entry["status"] == "expired" and entry["next"] == []
    assert {"toolCallId": "c1", "status": "expired", "action": "expired"} in entry["records"]
    assert applied["expiringBeforeMs"] is not None
    assert not bodies.exists()  # the tool never ran: the model was told it expired
    storage = open_storage(url)
    try:
        resumed = resume_chat_session(cli_bridges.DEFINITION, session_id="b-1", storage=storage)
        run = cli_bridges.bridge(resumed, storage, "check").run_record("run-1")
        assert run is not None and run.state == "completed" and "expired" in str(run.output)
    finally:
        storage.close()
    code, again = _json(url, "--bridge", SPEC, "--apply")
    assert code == 0 and again["sessions"] == []


def test_without_an_upstream_a_due_confirmation_is_reported_with_its_next_step(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    storage = open_storage(url)
    try:
        session = resume_chat_session(
            ChatDefinition("cli-test"), session_id="p-1", storage=storage, clock=an_hour_ago
        )
        binding = session.confirmations_for(RecordingUpstream()).propose("tool.due", {})
    finally:
        storage.close()
    memories = tmp_path / "memories"
    memories.mkdir()

    code, applied = _json(url, "--memory-dir", str(memories), "--apply")
    assert code == NEEDS_PERSON
    [entry] = applied["sessions"]
    assert entry["status"] == PAST_EXPIRY and entry["lastWriteMs"] is None
    assert entry["records"] == [
        {"toolCallId": binding.tool_call_id, "status": "pending", "action": PAST_EXPIRY}
    ]
    sweep = shlex.join(["akchat-fsm", "reconcile", url, "--all", "--older-than", "0", "--bridge"])
    assert entry["next"][-1].startswith(sweep)

    # On a 40-column terminal the summary and every next step stay whole lines.
    shown = _sweep(url, "--memory-dir", str(memories), "--apply", "--width", "40")
    assert shown.exit_code == NEEDS_PERSON, shown.stderr
    lines = [line.strip() for line in shown.stdout.splitlines()]
    assert any(line.startswith(entry["next"][-1]) for line in lines), shown.stdout
    assert any(
        line.startswith("0 session(s) last written before")
        and "1 with confirmations past their expiry" in line
        for line in lines
    ), shown.stdout
    assert any(binding.tool_call_id in line and "past expiry" in line for line in lines)
