"""What the bridges share beside the ledger: one ``RecordedToolFailure``, and the public guard a
runtime module runs calls through (approved ones, and ungated ones that need no approval).

Run on each record-capable backend; bodies count their runs, so "once" is counted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bridge_harness import RecordsBackend

from akchat_fsm.errors import ConfirmationError
from akchat_fsm.integrations import ledger, openai_agents, pydantic_ai
from akchat_fsm.integrations.guard import ExecutionGuard
from akchat_fsm.integrations.ledger import AsyncToolLedger, ExecutionState
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.session import ChatDefinition, resume_chat_session

SID = "s-guard"


def test_both_runtime_modules_raise_the_ledgers_one_recorded_failure() -> None:
    assert pydantic_ai.RecordedToolFailure is ledger.RecordedToolFailure
    assert openai_agents.RecordedToolFailure is ledger.RecordedToolFailure
    assert "RecordedToolFailure" in ledger.__all__


def _guard(backend: RecordsBackend, approved: frozenset[str] = frozenset()) -> ExecutionGuard:
    return ExecutionGuard(AsyncToolLedger(backend.async_(), SID, owner="p1"), approved)


def test_an_ungated_call_runs_once_through_the_ledger_and_a_repeat_replays(
    records_backend: RecordsBackend,
) -> None:
    runs: list[str] = []

    def body() -> str:
        runs.append("x")
        return f"looked up {len(runs)}"

    async def twice() -> tuple[Any, Any]:
        first = await _guard(records_backend).execute_ungated("u1", "lookup", {"q": "z"}, body)
        again = await _guard(records_backend).execute_ungated("u1", "lookup", {"q": "z"}, body)
        return first, again

    first, again = asyncio.run(twice())
    assert runs == ["x"]
    assert first.ran and not again.ran and again.value == "looked up 1"
    assert again.entry.state is ExecutionState.EXECUTED


def test_the_approved_path_still_refuses_a_call_without_approval(
    records_backend: RecordsBackend,
) -> None:
    runs: list[str] = []
    guard = _guard(records_backend, frozenset({"c1"}))
    with pytest.raises(ConfirmationError, match="without an approved confirmation"):
        asyncio.run(guard.execute("c2", "send", {}, lambda: runs.append("x")))
    assert runs == []
    assert asyncio.run(guard.execute("c1", "send", {}, lambda: runs.append("y"))).ran
    assert runs == ["y"]


@pytest.mark.parametrize("bridge_class", [PydanticAIBridge, OpenAIAgentsBridge])
def test_every_bridge_hands_out_a_guard_on_its_own_ledger(
    records_backend: RecordsBackend, bridge_class: Any
) -> None:
    storage = records_backend.sync()
    session = resume_chat_session(ChatDefinition("guard"), session_id=SID, storage=storage)
    bridge = bridge_class(_agent(bridge_class), session, storage, idempotent_tools=["lookup"])
    guard = bridge.execution_guard(["c1"])
    assert guard.approved == frozenset({"c1"})
    assert guard.idempotent_tools == frozenset({"lookup"})
    assert asyncio.run(guard.execute("c1", "send", {}, lambda: "sent")).value == "sent"
    # the bridge's own ledger holds what its guard ran
    stored = bridge.ledger.get("c1")  # a sync bridge has the sync ledger
    assert stored is not None and stored.state is ExecutionState.EXECUTED
    assert bridge.execution_guard().approved == frozenset()


def _agent(bridge_class: Any) -> Any:
    if bridge_class is PydanticAIBridge:
        from pydantic_ai import Agent, DeferredToolRequests
        from pydantic_ai.models.test import TestModel

        return Agent(TestModel(), output_type=[str, DeferredToolRequests])
    from agents import Agent as OAIAgent

    return OAIAgent(name="a")
