"""``reconcile_all`` over bridged sessions: ``SweepPorts.bridge`` reconciles a session through its
bridge (real pydantic-ai, scripted model), and an execution whose outcome is unknown is reported
as such, by tool call, never as settled and never re-run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bridge_harness import RecordsBackend, crash_inside_body
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, reconcile_all, reconcile_all_async, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge, PydanticAIBridge
from akchat_fsm.session.sweep import AsyncSweepPorts, SweepPorts

DEFINITION = ChatDefinition("support")
SID = "chat-1"
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
FIVE_MINUTES = 5 * 60_000


def later() -> int:
    return time.time_ns() // 1_000_000 + 10 * 60_000


def _crashed_mid_body(backend: RecordsBackend, counts: Counts) -> Any:
    """A run paused on ``c1``, approved, whose executor died inside the tool body."""
    agent = build_agent([EMAIL], counts)
    storage = backend.sync()
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage)
    bridge = PydanticAIBridge(agent, session, storage)
    paused = bridge.run("do it", run_id="r1")
    bridge.approve(paused.pending[0].token, continue_run=False)
    crash_inside_body(storage, "c1", session_id=SID, tool="send_email")
    return agent


def test_the_bridge_hook_names_the_unknown_execution_and_runs_nothing(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent = _crashed_mid_body(records_backend, counts)
    storage = records_backend.sync()

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, bridge=lambda s: PydanticAIBridge(agent, s, storage))

    report = reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later)
    [swept] = report.sessions
    assert swept.execution_unknown == ("c1",) and swept.status == "execution_unknown"
    assert counts.bodies == [] and counts.requests == 1
    # the operator's verdict settles it; the run, decided and paused, stays in the index, so
    # the next sweep continues it once and the session leaves the index
    bridge = PydanticAIBridge(
        agent, resume_chat_session(DEFINITION, session_id=SID, storage=storage), storage
    )
    bridge.settle_execution("c1", ran=True, result="sent (confirmed by ops)")
    [swept] = reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later).sessions
    assert swept.status == "settled"
    assert reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later).sessions == ()
    assert bridge.continue_run("r1").output == "c1=sent (confirmed by ops)"
    assert counts.bodies == [] and counts.requests == 2


def test_the_async_bridge_hook_runs_the_same_plan(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent = _crashed_mid_body(records_backend, counts)

    async def sweep() -> Any:
        storage = records_backend.async_()
        return await reconcile_all_async(
            storage,
            lambda sid: AsyncSweepPorts(
                DEFINITION, bridge=lambda s: AsyncPydanticAIBridge(agent, s, storage)
            ),
            older_than_ms=FIVE_MINUTES,
            clock=later,
        )

    [swept] = asyncio.run(sweep()).sessions
    assert (swept.execution_unknown, swept.status) == (("c1",), "execution_unknown")
    assert counts.bodies == []
