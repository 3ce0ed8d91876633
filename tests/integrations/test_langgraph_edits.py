"""Reviewer edits on the LangGraph bridge (ADR-0135), with the real langgraph / langchain.

The bridge answers the call's per-call interrupt with HITL's own ``edit`` decision, only where
the tool's HITL config allows it (read off the interrupt's ``response_schema``, the one
LangGraph checks the answer against). :class:`ToolBoundaryMiddleware` runs the edited call's
body once, with the reviewer's arguments and nothing else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from bridge_harness import RecordsBackend, crash_inside_body
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langgraph.checkpoint.memory import InMemorySaver
from lg_agents import Call, Counts, ScriptedModel, tools

from akchat_fsm import (
    ArgumentsMismatch,
    ChatDefinition,
    arguments_digest,
    reconcile_all,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.errors import EditNotAllowed
from akchat_fsm.integrations.langgraph import (
    AsyncLangGraphBridge,
    LangGraphBridge,
    ToolBoundaryMiddleware,
)
from akchat_fsm.integrations.ledger import args_digest as ledger_digest
from akchat_fsm.session import audit_trail
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.wire.enums import ConfirmationStatus

DEFINITION = ChatDefinition("support")
SID = "chat-1"
T0 = 1_000_000
TTL = 60_000
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
PAY = Call("pay", {"amount": 500}, "c2")
USER = {"messages": [{"role": "user", "content": "do it"}]}
#: ``pay`` may be edited; ``send_email`` only approved or rejected.
INTERRUPT_ON: dict[str, Any] = {
    "pay": {"allowed_decisions": ["approve", "edit", "reject"]},
    "send_email": {"allowed_decisions": ["approve", "reject"]},
}
NOTICE = "Note: a human reviewer replaced this tool call before it ran."
FIVE_MINUTES = 5 * 60_000


def later() -> int:
    return time.time_ns() // 1_000_000 + 10 * 60_000


def _graph(calls: list[Call], counts: Counts, extra: tuple[Any, ...] = ()) -> Any:
    hitl = HumanInTheLoopMiddleware(INTERRUPT_ON, interrupt_mode="per_call")
    model = ScriptedModel(responses=[], script=list(calls), counts=counts)
    middleware = [hitl, *extra, ToolBoundaryMiddleware(hitl)]
    return create_agent(model, tools(counts), middleware=middleware, checkpointer=InMemorySaver())


def _bridge(storage: Any, graph: Any, *, now: int = T0) -> LangGraphBridge:
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: now)
    return LangGraphBridge(graph, session, storage, ttl_ms=TTL)


def _records(storage: Any) -> dict[str, Any]:
    return {k: storage.load_record(SID, k) for k in storage.list_records(SID)}


def _paused(backend: RecordsBackend, calls: list[Call], counts: Counts, **kw: Any) -> Any:
    graph = _graph(calls, counts, **kw)
    paused = _bridge(backend.sync(), graph).run(USER, thread_id="t1", run_id="r1")
    return graph, {b.tool_call_id: b for b in paused.pending}


def test_an_edit_runs_the_body_once_with_the_edited_arguments_and_the_model_reads_it(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph, pending = _paused(records_backend, [PAY], counts)
    shown = arguments_digest(pending["c2"].input)
    decided = _bridge(records_backend.sync(), graph).edit(
        pending["c2"].token, {"amount": 50}, args_digest=shown, decided_by="ana", via="inbox"
    )
    assert decided.binding.status is ConfirmationStatus.APPROVED
    assert decided.run is not None and decided.run.status == "completed"
    assert counts.bodies == ["pay:50"] and counts.requests == 2
    # HITL tells the model a reviewer replaced its call, then gives the edited call's result.
    assert decided.run.output.startswith("c2=" + NOTICE) and "paid 50" in decided.run.output
    (entry,) = audit_trail(records_backend.sync(), SID)
    assert (entry.intent, entry.principal, entry.via, entry.decided) == (
        "edit",
        "ana",
        "inbox",
        True,
    )
    assert entry.args_digest == shown and entry.edited_args == {"amount": 50}
    ledger = _bridge(records_backend.sync(), graph).ledger.get("c2")
    assert ledger is not None and ledger.args_digest == ledger_digest({"amount": 50})
    again = _bridge(records_backend.sync(), graph).continue_run("r1")
    assert again.replayed and counts.bodies == ["pay:50"] and counts.requests == 2


def test_a_tool_whose_hitl_config_has_no_edit_refuses_it_and_nothing_is_written(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph, pending = _paused(records_backend, [EMAIL, PAY], counts)
    storage = records_backend.sync()
    records, envelope = _records(storage), storage.load(SID)
    email = pending["c1"]
    with pytest.raises(EditNotAllowed, match="send_email"):
        _bridge(storage, graph).edit(
            email.token, {"to": "b@example.com"}, args_digest=arguments_digest(email.input)
        )
    with pytest.raises(ArgumentsMismatch):  # editable, but not for what the reviewer saw
        _bridge(storage, graph).edit(
            pending["c2"].token, {"amount": 1}, args_digest=arguments_digest({"amount": 7})
        )
    assert _records(storage) == records and storage.load(SID) == envelope
    first = _bridge(storage, graph).approve(email.token)
    assert first.run is not None and first.run.status == "waiting"
    done = _bridge(storage, graph).edit(
        pending["c2"].token, {"amount": 1}, args_digest=arguments_digest(PAY.args)
    )
    assert done.run is not None and done.run.status == "completed"
    assert sorted(counts.bodies) == ["pay:1", "send_email:a@example.com"]


class _Tamper(AgentMiddleware[Any, Any, Any]):
    """A middleware between HITL and the boundary that puts the model's arguments back."""

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        call = {**request.tool_call, "args": dict(PAY.args)}
        return handler(request.override(tool_call=call))


def test_an_edited_call_reaching_its_body_with_other_arguments_is_refused(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph, pending = _paused(records_backend, [PAY], counts, extra=(_Tamper(),))
    with pytest.raises(ArgumentsMismatch, match="reviewer's edit"):
        _bridge(records_backend.sync(), graph).edit(
            pending["c2"].token, {"amount": 50}, args_digest=arguments_digest(PAY.args)
        )
    assert counts.bodies == []


def test_a_body_killed_mid_edit_is_never_rerun_by_the_sweep(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph, pending = _paused(records_backend, [PAY], counts)
    storage = records_backend.sync()
    _bridge(storage, graph).edit(
        pending["c2"].token,
        {"amount": 50},
        args_digest=arguments_digest(PAY.args),
        continue_run=False,
    )
    crash_inside_body(storage, "c2", session_id=SID, tool="pay", args={"amount": 50})

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, bridge=lambda s: LangGraphBridge(graph, s, storage))

    for _ in range(2):
        report = reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later)
        [swept] = report.sessions
        assert swept.execution_unknown == ("c2",)
    assert counts.bodies == []


def test_the_async_bridge_edits_with_the_same_plan(records_backend: RecordsBackend) -> None:
    counts = Counts()
    graph = _graph([PAY], counts)

    async def bridge() -> AsyncLangGraphBridge:
        storage = records_backend.async_()
        session = await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=storage, clock=lambda: T0
        )
        return AsyncLangGraphBridge(graph, session, storage, ttl_ms=TTL)

    async def scenario() -> None:
        paused = await (await bridge()).run(USER, thread_id="t1", run_id="r1")
        (call,) = paused.pending
        done = await (await bridge()).edit(
            call.token, {"amount": 7}, args_digest=arguments_digest(call.input)
        )
        assert done.run is not None and "paid 7" in done.run.output

    asyncio.run(scenario())
    assert counts.bodies == ["pay:7"]
