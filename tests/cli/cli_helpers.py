"""Helpers for the CLI tests: a store holding stuck claims, and one deliberately broken adapter.

The stuck claims are made through the public session API and the public recording doubles,
with a crashing client (a client process that dies right before / right after its upstream
call).
"""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from akchat_fsm.cli import main
from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session
from akchat_fsm.storage import open_storage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.session import SessionSnapshot


def sqlite_url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


def postgres_url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh PostgreSQL table pair for one test (dropped afterwards) as a storage URL."""
    import psycopg

    pg_url, table = request.getfixturevalue("pg_url"), f"cli_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
            ).fetchall():
                conn.execute(f"DROP TABLE IF EXISTS {name}")

    request.addfinalizer(drop)
    return f"{pg_url}?table={table}"


def run(*args: str, input: str | None = None) -> Result:
    """Invoke ``akchat-fsm`` in-process, stdout and stderr kept apart."""
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


class ClientCrashed(BaseException):  # a simulated process death, not an error
    """The simulated death of one client process (never caught by the library)."""


class CrashingClient:
    """One client's handle on the shared upstream, dying around its resolution call:
    ``"before"`` (after its claim was saved) or ``"after"`` (after upstream acted)."""

    def __init__(self, shared: RecordingUpstream, crash: str | None = None) -> None:
        self.shared, self.crash = shared, crash

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self.shared.propose_tool_call(id, name, args)

    def _resolve(self, act: Callable[[], None]) -> None:
        if self.crash == "before":
            raise ClientCrashed("died after its claim was saved, before calling upstream")
        act()
        if self.crash == "after":
            raise ClientCrashed("died after upstream acted, before recording the result")

    def approve(self, tool_call_id: str) -> None:
        self._resolve(lambda: self.shared.approve(tool_call_id))

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._resolve(lambda: self.shared.deny(tool_call_id, reason))


def stuck_session(url: str, session_id: str) -> dict[str, Any]:
    """Store ``session_id`` with two stuck claims; return the chat-memory record.

    ``approving``: the claimant died before calling upstream (tool call still
    ``requires_confirmation``); ``rejecting``: it died after upstream denied (tool call
    ``error``). A third record stays ``pending``, not due for a century (a sweep expires only
    due ones).
    """
    readings = iter(range(1_783_728_000_250, 1_783_728_000_250 + 250 * 10_000, 250))
    upstream = RecordingUpstream()
    storage = open_storage(url)
    try:
        definition = ChatDefinition("cli-test")
        for crash, act in (("before", "approve"), ("after", "reject")):
            session = resume_chat_session(
                definition, session_id=session_id, storage=storage, clock=lambda: next(readings)
            )
            coordinator = session.confirmations_for(CrashingClient(upstream, crash))
            binding = coordinator.propose(f"tool.{act}", {"n": 1})
            with pytest.raises(ClientCrashed):
                getattr(coordinator, act)(binding.token)
        century = 100 * 365 * 86_400_000
        session.confirmations_for(CrashingClient(upstream), ttl_ms=century).propose(
            "tool.later", {}
        )
    finally:
        storage.close()
    return RecordingChatMemory(upstream).load()


class LastWriteWins:
    """Broken on purpose: ``save`` ignores the expected cursor (last write wins)."""

    def __init__(self) -> None:
        self._data: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def load(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            return copy.deepcopy(self._data.get(session_id))

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            self._data[snapshot.session_id] = snapshot.to_wire()
            return True

    def close(self) -> None:
        pass


class ClaimantDied(BaseException):
    """Raised inside a tool body: like SIGKILL, nothing records the body's outcome."""


def bridged_session(url: str, session_id: str) -> None:
    """Store ``session_id`` with a pydantic-ai run (real package, scripted model) that paused on
    two approval calls, ``c1`` approved (its body executed) and ``c2`` rejected, then completed;
    and a ledger entry ``c9`` whose claimant died inside the body (outcome unknown, still
    processing)."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from akchat_fsm.integrations.ledger import ToolLedger
    from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            calls = [("send_email", {"to": "a@x"}, "c1"), ("refund", {"amount": 5}, "c2")]
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in calls])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    def dies() -> None:
        raise ClaimantDied

    storage = open_storage(url)
    try:
        session = resume_chat_session(
            ChatDefinition("cli-test"), session_id=session_id, storage=storage
        )
        bridge = PydanticAIBridge(agent, session, storage, owner="host-a:1")
        paused = bridge.run("go", run_id="run-1")
        tokens = {b.tool_call_id: b.token for b in paused.pending}
        bridge.approve(tokens["c1"])
        assert bridge.reject(tokens["c2"], "no").run.status == "completed"  # type: ignore[union-attr]
        with pytest.raises(ClaimantDied):
            ToolLedger(storage, session_id, owner="host-b:2").execute("c9", "wipe", {}, dies)
    finally:
        storage.close()


def crash_inside_a_tool(url: str, session_id: str, tool_call_id: str, tool: str) -> None:
    """A ledger entry ``tool_call_id`` whose claimant died inside the body (outcome unknown)."""
    from akchat_fsm.integrations.ledger import ToolLedger

    def dies() -> None:
        raise ClaimantDied

    storage = open_storage(url)
    try:
        with pytest.raises(ClaimantDied):
            ToolLedger(storage, session_id, owner="worker-b:2").execute(
                tool_call_id, tool, {}, dies
            )
    finally:
        storage.close()
