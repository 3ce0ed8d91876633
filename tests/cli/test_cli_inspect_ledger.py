"""``inspect URL SESSION_ID`` shows a session's agent runs and tool-execution ledger (the
records beside the envelope), on SQLite and PostgreSQL; an execution whose outcome is unknown is
highlighted with how to settle it. Read-only: nothing is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import bridged_session, postgres_url, run, sqlite_url, stuck_session

from akchat_fsm.storage import open_storage
from akchat_fsm.wire.decode import decode_session_snapshot


@pytest.fixture(params=[sqlite_url, postgres_url], ids=["sqlite", "postgres"])
def url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    made: str = request.param(tmp_path, request)
    bridged_session(made, "s1")
    return made


def _records_snapshot(url: str) -> tuple[list[str], list[str], int]:
    storage = open_storage(url)
    try:
        raw = storage.load("s1")
        keys = storage.list_records("s1")  # type: ignore[attr-defined]
        processing = [p.session_id for p in storage.list_processing()]  # type: ignore[attr-defined]
    finally:
        storage.close()
    snapshot = decode_session_snapshot(raw).snapshot
    assert snapshot is not None
    return keys, processing, snapshot.cursor


def test_the_text_view_shows_runs_ledger_and_the_unknown_execution(url: str) -> None:
    before = _records_snapshot(url)
    result = run("inspect", url, "s1", "--width", "200")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Agent runs (1)" in out and "run-1" in out and "pydantic-ai" in out
    assert "c1 send_email (approval)" in out and "c2 refund (approval)" in out
    assert "Tool executions (2)" in out
    assert "OUTCOME UNKNOWN" in out and "host-b:2" in out
    assert "execution outcome unknown: 1 (c9)" in out and "settle_execution" in out
    assert "Confirmations approved (1)" in out  # the envelope is still shown first
    assert _records_snapshot(url) == before  # read-only


def test_ledger_json_lists_runs_entries_and_unknowns(url: str) -> None:
    result = run("inspect", url, "s1", "--ledger", "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["records"] is True
    [run_json] = data["runs"]
    assert (run_json["runId"], run_json["state"]) == ("run-1", "completed")
    assert [c["id"] for c in run_json["calls"]] == ["c1", "c2"]
    by_id = {e["toolCallId"]: e for e in data["ledger"]}
    assert by_id["c1"]["state"] == "executed" and by_id["c1"]["result"] == "sent to a@x"
    assert by_id["c9"]["state"] == "executing" and by_id["c9"]["unknown"] is True
    assert data["executionUnknown"] == ["c9"]
    assert "akchat-fsm settle" in data["settle"] and "--did-not-run" in data["settle"]


def test_envelope_json_stays_the_wire_envelope(url: str) -> None:
    wire = json.loads(run("inspect", url, "s1", "--json").stdout)
    assert wire["protocol"] == "agentskit.chat.session" and "runs" not in wire
    assert [c["toolCallId"] for c in wire["confirmations"]] == ["c1", "c2"]


def test_a_settled_ledger_has_no_warning(url: str) -> None:
    from akchat_fsm.integrations.ledger import ToolLedger

    storage = open_storage(url)
    try:
        ToolLedger(storage, "s1").settle("c9", ran=False)
    finally:
        storage.close()
    out = run("inspect", url, "s1", "--ledger").stdout
    assert "Tool executions (2)" in out and "released" in out
    assert "OUTCOME UNKNOWN" not in out and "outcome unknown" not in out
    data = json.loads(run("inspect", url, "s1", "--ledger", "--json").stdout)
    assert data["executionUnknown"] == [] and data["settle"] is None


def test_a_session_without_bridge_records_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    stuck_session(url, "p")
    assert "No agent runs or ledger entries." in run("inspect", url, "p", "--ledger").stdout
    data = json.loads(run("inspect", url, "p", "--ledger", "--json").stdout)
    assert data == {
        "records": True,
        "runs": [],
        "ledger": [],
        "executionUnknown": [],
        "settle": None,
        "settleCommands": [],
        "nextSteps": [],
    }
    assert "Agent runs" not in run("inspect", url, "p").stdout


def test_ledger_needs_a_store() -> None:
    result = run("inspect", "snapshot.json", "--ledger")
    assert result.exit_code == 2 and "--ledger reads a store" in result.stderr


def test_reconcile_all_reports_the_unknown_execution_never_settled(
    url: str, tmp_path: Path
) -> None:
    dry = json.loads(run("reconcile", url, "--all", "--older-than", "0", "--json").stdout)
    [listed] = dry["sessions"]
    assert (listed["sessionId"], listed["status"]) == ("s1", "execution outcome unknown")
    assert [(r["toolCallId"], r["tool"]) for r in listed["records"]] == [("c9", "wipe")]
    memories = tmp_path / "memories"
    memories.mkdir()
    (memories / "s1.json").write_text('{"version": 1, "messages": []}', encoding="utf-8")
    argv = ("reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(memories))
    applied = run(*argv, "--apply", "--width", "300")
    assert applied.exit_code == 3, applied.stderr  # a person settles it: exit 3 says so
    assert "1 execution outcome unknown" in applied.stdout and "settled" not in applied.stdout
    report = json.loads(run(*argv, "--apply", "--json").stdout)
    assert report["counts"] == {"execution outcome unknown": 1}
    assert [r["toolCallId"] for r in report["sessions"][0]["records"]] == ["c9"]
    # never re-run nor released: the ledger entry is still the dead claimant's
    ledger = json.loads(run("inspect", url, "s1", "--ledger", "--json").stdout)
    assert ledger["executionUnknown"] == ["c9"]


def test_an_invalid_record_is_one_error_line(url: str) -> None:
    storage = open_storage(url)
    try:
        storage.save_record("s1", "run:broken", '{"v": 1}', None)  # type: ignore[attr-defined]
    finally:
        storage.close()
    result = run("inspect", url, "s1")
    assert result.exit_code == 1 and result.stdout == ""
    assert "session 's1' has an invalid record" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_the_settle_hint_is_the_real_command_and_no_line_wraps(url: str) -> None:
    """Issue 22: the hint names this store, session and tool call (copy-pasteable), and
    ``OUTCOME UNKNOWN`` is never broken over two lines, even in a narrow terminal."""
    import shlex

    out = run("inspect", url, "s1", "--ledger", "--width", "40").stdout
    lines = [line.split("  #")[0].strip() for line in out.splitlines()]
    assert any("OUTCOME UNKNOWN" in line for line in lines), out
    ran = [line for line in lines if line.startswith("akchat-fsm settle") and "--ran" in line]
    did_not = [line for line in lines if line.endswith("--did-not-run")]
    assert ran == [f"akchat-fsm settle {shlex.quote(url)} s1 c9 --ran"], out
    assert did_not == [f"akchat-fsm settle {shlex.quote(url)} s1 c9 --did-not-run"], out
    data = json.loads(run("inspect", url, "s1", "--ledger", "--json").stdout)
    [command] = data["settleCommands"]
    assert command == {"toolCallId": "c9", "ran": ran[0], "didNotRun": did_not[0]}


def test_reconcile_all_names_an_agent_run_left_never_stuck(tmp_path: Path) -> None:
    """Issue 22: a paused run is in the index (it has work left); the operator's dry run says
    it is an agent run for the bridge's sweep or a person, not a stuck or unknown session."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from akchat_fsm import ChatDefinition, resume_chat_session
    from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

    def model(messages: list[Any], info: Any) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": "a@x"}, "c1")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    made = f"sqlite:///{tmp_path / 'runs.db'}"
    storage = open_storage(made)
    try:
        session = resume_chat_session(ChatDefinition("cli-test"), session_id="w1", storage=storage)
        assert PydanticAIBridge(agent, session, storage).run("go", run_id="r1").status == "paused"
    finally:
        storage.close()
    result = run("reconcile", made, "--all", "--older-than", "0", "--json")
    assert result.exit_code == 3, result.stderr  # the run waits: exit 3, with its next step
    [entry] = json.loads(result.stdout)["sessions"]
    assert entry["status"] == "agent run not finished", entry
    assert [r["runId"] for r in entry["records"]] == ["r1"]
