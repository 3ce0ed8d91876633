"""The LangGraph bridge, with the real langgraph / langchain packages and a scripted model.

Every decision is made by a *different* session object (a fresh resume over the same storage),
as separate approver processes would; bodies and model requests are counted (:mod:`lg_agents`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from bridge_harness import RecordsBackend
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, Interrupt
from lg_agents import Call, Counts, JumpToTools, build_graph, open_async_saver, open_saver
from process_helpers import new_store_spec, open_store, sweep_leaves_only_people

from akchat_fsm import (
    ChatDefinition,
    ConfigError,
    ConfirmationError,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.integrations.langgraph import (
    AsyncLangGraphBridge,
    LangGraphBridge,
    RecordedToolFailure,
    ToolBoundaryMiddleware,
    pending_calls,
    use_guard,
)
from akchat_fsm.session.sweep import SweepPorts

DEFINITION = ChatDefinition("support")
SID = "chat-1"
T0 = 1_000_000
TTL = 60_000
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
PAY = Call("pay", {"amount": 5}, "c2")
LOOKUP = Call("lookup", {"order": "o-9"}, "c3")
USER = {"messages": [{"role": "user", "content": "do it"}]}
EXPIRED = "The approval request for this tool call expired; it was not run."


def _bridge(storage: Any, graph: Any, *, now: int = T0, **options: Any) -> LangGraphBridge:
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: now)
    return LangGraphBridge(graph, session, storage, ttl_ms=TTL, **options)


def _start(storage: Any, graph: Any) -> Any:
    return _bridge(storage, graph).run(USER, thread_id="t1", run_id="r1")


def test_a_pause_becomes_confirmations_and_the_snapshot_is_only_what_resuming_needs(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL, PAY, LOOKUP], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    assert paused.status == "paused" and counts.requests == 1
    assert counts.bodies == ["lookup:o-9"]  # the ungated sibling ran before the pause
    ungated = _bridge(records_backend.sync(), graph).ledger.get("c3")
    assert ungated is not None and ungated.state.value == "executed"  # through the ledger
    by_id = {b.tool_call_id: b for b in paused.pending}
    assert set(by_id) == {"c1", "c2"}
    assert by_id["c1"].action == "send_email" and dict(by_id["c1"].input) == EMAIL.args
    assert by_id["c2"].action == "pay" and dict(by_id["c2"].input) == PAY.args
    assert {b.expires_at for b in paused.pending} == {T0 + TTL}
    snapshot = json.loads(paused.snapshot)
    state = graph.get_state({"configurable": {"thread_id": "t1"}})
    assert snapshot["thread_id"] == "t1"
    assert snapshot["checkpoint_id"] == state.config["configurable"]["checkpoint_id"]
    assert snapshot["interrupts"] == {i.value["tool_call_id"]: i.id for i in state.interrupts}
    assert set(snapshot) == {"thread_id", "checkpoint_id", "interrupts"}  # no graph state


def test_approve_and_reject_continue_once_and_the_reason_reaches_the_model(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL, PAY], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    first = _bridge(records_backend.sync(), graph).approve(tokens["c1"])
    assert first.run is not None and first.run.status == "waiting" and counts.bodies == []
    done = _bridge(records_backend.sync(), graph).reject(tokens["c2"], "too much")
    assert done.run is not None and done.run.status == "completed"
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2
    assert done.run.output == (
        "c1=sent to a@example.com; c2=User rejected the tool call for `pay` with reason: too much"
    )
    again = _bridge(records_backend.sync(), graph).continue_run("r1")
    assert again.status == "completed" and again.replayed and again.output == done.run.output
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2


def test_a_continuation_that_pauses_again_proposes_the_next_turns_calls(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver(), then=[[PAY]])
    paused = _start(records_backend.sync(), graph)
    again = _bridge(records_backend.sync(), graph).approve(paused.pending[0].token)
    assert again.run is not None and again.run.status == "paused"
    assert [(b.tool_call_id, b.action) for b in again.run.pending] == [("c2", "pay")]
    state = graph.get_state({"configurable": {"thread_id": "t1"}})
    assert json.loads(again.run.snapshot)["interrupts"] == {"c2": state.interrupts[0].id}
    assert counts.bodies == ["send_email:a@example.com"]
    done = _bridge(records_backend.sync(), graph).approve(again.run.pending[0].token)
    assert done.run is not None and done.run.status == "completed"
    assert done.run.output == "c1=sent to a@example.com; c2=paid 5"
    assert counts.bodies == ["send_email:a@example.com", "pay:5"] and counts.requests == 3


def test_an_expired_call_tells_the_model_and_never_runs(records_backend: RecordsBackend) -> None:
    counts = Counts()
    graph = build_graph([PAY], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    done = _bridge(records_backend.sync(), graph, now=T0 + TTL).expire(paused.pending[0].token)
    assert done.run is not None and done.run.status == "completed"
    assert done.run.output == f"c2=User rejected the tool call for `pay` with reason: {EXPIRED}"
    assert counts.bodies == []


def test_a_second_continuation_of_the_same_pause_runs_the_body_zero_more_times(
    records_backend: RecordsBackend,
) -> None:
    """Another graph object on the thread (another process's) continues the completed run:
    the run record answers, the graph is not called again."""
    counts = Counts()
    saver = InMemorySaver()
    graph = build_graph([EMAIL], counts, saver)
    paused = _start(records_backend.sync(), graph)
    done = _bridge(records_backend.sync(), graph).approve(paused.pending[0].token)
    assert done.run is not None and done.run.status == "completed"
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2
    other = build_graph([EMAIL], counts, saver)
    again = _bridge(records_backend.sync(), other).continue_run("r1")
    assert again.status == "completed" and again.replayed and again.output == done.run.output
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2


def test_langgraph_re_running_the_pause_itself_replays_the_body_from_the_ledger(
    records_backend: RecordsBackend,
) -> None:
    """Resuming the paused checkpoint id again forks the thread and LangGraph runs the tool
    node again (the model is asked again: a third request); the boundary replays the body."""
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    bridge = _bridge(records_backend.sync(), graph)
    assert bridge.approve(paused.pending[0].token).run is not None
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2
    snapshot = json.loads(paused.snapshot)
    fork = {"configurable": {"thread_id": "t1", "checkpoint_id": snapshot["checkpoint_id"]}}
    answer = Command(resume={snapshot["interrupts"]["c1"]: {"type": "approve"}})
    with use_guard(bridge.execution_guard(["c1"])):
        output = graph.invoke(answer, fork, version="v2")
    assert counts.requests == 3  # LangGraph did run the pause again
    assert output.value["messages"][-1].text == "c1=sent to a@example.com"
    assert counts.bodies == ["send_email:a@example.com"]  # the body did not


def test_concurrent_continuations_run_the_body_and_the_model_once(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL, PAY], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    for binding in paused.pending:
        _bridge(records_backend.sync(), graph).approve(binding.token, continue_run=False)
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def worker() -> None:
        bridge = _bridge(records_backend.sync(), graph)
        barrier.wait()
        results.append(bridge.continue_run("r1"))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts.bodies) == ["pay:5", "send_email:a@example.com"]
    assert counts.requests == 2
    assert len([r for r in results if r.status == "completed" and not r.replayed]) == 1
    assert {r.status for r in results} <= {"completed", "continuing"}


def test_a_continuation_failing_after_the_body_ran_replays_it_on_the_next_one(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    counts.fail_next_answer = 1  # the model fails after the body ran, before the run is saved
    with pytest.raises(ConnectionError):
        _bridge(records_backend.sync(), graph).approve(paused.pending[0].token)
    bridge = _bridge(records_backend.sync(), graph)
    record = bridge.run_record("r1")
    assert record is not None and record.state.value == "paused"  # released for a retry
    entry = bridge.ledger.get("c1")
    assert entry is not None and entry.state.value == "executed"
    done = bridge.continue_run("r1")
    assert done.status == "completed" and done.output == "c1=sent to a@example.com"
    assert counts.bodies == ["send_email:a@example.com"]


def test_reconcile_continues_a_decided_pause_and_a_second_reconcile_runs_nothing(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    _bridge(records_backend.sync(), graph).approve(paused.pending[0].token, continue_run=False)
    report = _bridge(records_backend.sync(), graph).reconcile()
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "completed")]
    assert report.execution_unknown == ()
    again = _bridge(records_backend.sync(), graph).reconcile()
    assert again.runs == () and counts.bodies == ["send_email:a@example.com"]
    assert counts.requests == 2


def test_a_body_that_raised_is_never_run_again(records_backend: RecordsBackend) -> None:
    counts = Counts(failing_tools={"pay"})
    graph = build_graph([PAY], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    with pytest.raises(RuntimeError, match="pay:5 failed"):
        _bridge(records_backend.sync(), graph).approve(paused.pending[0].token)
    with pytest.raises(RecordedToolFailure, match="RuntimeError: pay:5 failed"):
        _bridge(records_backend.sync(), graph).continue_run("r1")
    assert counts.bodies == ["pay:5"]


def test_a_gated_tool_reached_without_approval_is_refused_whatever_skipped_hitl(
    records_backend: RecordsBackend,
) -> None:
    """Batched HITL followed by a middleware that jumps to the tools never pauses; the boundary
    refuses the gated call instead of running it, and lets the ungated one run."""
    counts = Counts()
    graph = build_graph(
        [PAY, LOOKUP], counts, InMemorySaver(), mode="batched", extra=[JumpToTools()]
    )
    with pytest.raises(ConfirmationError, match="'c2'"):
        _start(records_backend.sync(), graph)
    assert "pay:5" not in counts.bodies


def test_the_async_boundary_refuses_the_bypass_too(records_backend: RecordsBackend) -> None:
    counts = Counts()
    graph = build_graph([PAY], counts, InMemorySaver(), mode="batched", extra=[JumpToTools()])

    async def scenario() -> None:
        storage = records_backend.async_()
        session = await resume_chat_session_async(DEFINITION, session_id=SID, storage=storage)
        bridge = AsyncLangGraphBridge(graph, session, storage)
        with pytest.raises(ConfirmationError, match="'c2'"):
            await bridge.run(USER, thread_id="t1", run_id="r1")

    asyncio.run(scenario())
    assert counts.bodies == []


def test_a_graph_run_outside_the_bridge_refuses_gated_tools() -> None:
    counts = Counts()
    graph = build_graph([PAY], counts, InMemorySaver(), mode="batched", extra=[JumpToTools()])
    with pytest.raises(ConfirmationError):
        graph.invoke(USER, {"configurable": {"thread_id": "t1"}})
    assert counts.bodies == []


def test_settings_the_bridge_cannot_keep_are_refused_before_anything_runs(
    records_backend: RecordsBackend,
) -> None:
    from langchain.agents.middleware import HumanInTheLoopMiddleware

    graph = build_graph([PAY], Counts(), InMemorySaver())
    with pytest.raises(ConfigError, match="durability"):
        _bridge(records_backend.sync(), graph, durability="exit")
    with pytest.raises(ConfigError, match="thread_id"):
        _bridge(records_backend.sync(), graph).run(USER, thread_id="", run_id="r1")
    only_approve = HumanInTheLoopMiddleware({"pay": {"allowed_decisions": ["approve"]}})
    with pytest.raises(ConfigError, match="reject"):
        ToolBoundaryMiddleware(only_approve)
    predicate = HumanInTheLoopMiddleware(
        {"pay": {"allowed_decisions": ["approve", "reject"], "when": lambda request: True}}
    )
    with pytest.raises(ConfigError, match="when"):
        ToolBoundaryMiddleware(predicate)


# --------------------------------------------------------------------------- batched HITL
# One interrupt per model turn asks about every gated call: ``{"action_requests": [...]}``,
# answered by one ``{"decisions": [...]}`` in its order (ADR-0140).


def test_a_batched_pause_is_one_confirmation_per_call_and_one_answer_in_its_order(
    records_backend: RecordsBackend,
) -> None:
    """Two gated calls and an ungated one in one turn: nothing runs at the pause (HITL asks
    first), each gated call is its own confirmation, and the answer goes once, when both are
    decided, in the interrupt's order whatever the order of the decisions."""
    counts = Counts()
    graph = build_graph([EMAIL, LOOKUP, PAY], counts, InMemorySaver(), mode="batched")
    paused = _start(records_backend.sync(), graph)
    assert paused.status == "paused" and counts.bodies == []
    assert {b.tool_call_id: b.action for b in paused.pending} == {"c1": "send_email", "c2": "pay"}
    [asked] = graph.get_state({"configurable": {"thread_id": "t1"}}).interrupts
    assert json.loads(paused.snapshot)["interrupts"] == {"c1": asked.id, "c2": asked.id}
    record = _bridge(records_backend.sync(), graph).run_record("r1")
    assert record is not None
    assert {c.tool_call_id: c.metadata["batch"] for c in record.calls} == {"c1": 0, "c2": 1}
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    first = _bridge(records_backend.sync(), graph).reject(tokens["c2"], "too much")
    assert first.run is not None and first.run.status == "waiting"  # c1 undecided: no answer
    assert counts.bodies == [] and counts.requests == 1
    done = _bridge(records_backend.sync(), graph).approve(tokens["c1"])
    assert done.run is not None and done.run.status == "completed"
    assert sorted(counts.bodies) == ["lookup:o-9", "send_email:a@example.com"]
    assert done.run.output == (
        "c1=sent to a@example.com; c2=User rejected the tool call for `pay` with reason: too "
        "much; c3=order o-9 shipped"
    )
    again = _bridge(records_backend.sync(), graph).continue_run("r1")
    assert again.replayed and again.output == done.run.output
    assert sorted(counts.bodies) == ["lookup:o-9", "send_email:a@example.com"]


def test_the_async_bridge_answers_a_batched_pause_too(records_backend: RecordsBackend) -> None:
    counts = Counts()
    graph = build_graph([PAY, EMAIL], counts, InMemorySaver(), mode="batched")

    async def bridge() -> AsyncLangGraphBridge:
        storage = records_backend.async_()
        session = await resume_chat_session_async(DEFINITION, session_id=SID, storage=storage)
        return AsyncLangGraphBridge(graph, session, storage, ttl_ms=TTL)

    async def scenario() -> str:
        paused = await (await bridge()).run(USER, thread_id="t1", run_id="r1")
        tokens = {b.tool_call_id: b.token for b in paused.pending}
        await (await bridge()).reject(tokens["c1"], "not now")  # the batch's second call
        done = await (await bridge()).approve(tokens["c2"])  # its first
        assert done.run is not None and done.run.status == "completed"
        return str(done.run.output)

    rejected = "User rejected the tool call for `send_email` with reason: not now"
    assert asyncio.run(scenario()) == f"c1={rejected}; c2=paid 5"
    assert counts.bodies == ["pay:5"]


def test_a_partial_or_malformed_batched_answer_is_never_sent(
    records_backend: RecordsBackend,
) -> None:
    """LangGraph keeps a malformed batched answer for good (the thread is wedged), so the
    bridge checks a batch whole before building the command: a missing decision, or one its
    tool does not accept, is a ConfigError and nothing is sent."""
    from akchat_fsm.integrations.langgraph import resume_values
    from akchat_fsm.integrations.runs import CallDecision

    graph = build_graph([EMAIL, PAY], Counts(), InMemorySaver(), mode="batched")
    _start(records_backend.sync(), graph)
    run = _bridge(records_backend.sync(), graph).run_record("r1")
    assert run is not None
    with pytest.raises(ConfigError, match="asks about 2 calls but 1 are decided"):
        resume_values(run, [CallDecision("c1", True)])
    only_approve = replace(run, calls=tuple(
        replace(c, metadata={**c.metadata, "decisions": ["approve"]}) for c in run.calls
    ))  # fmt: skip
    with pytest.raises(ConfigError, match="does not accept a 'reject'"):
        resume_values(only_approve, [CallDecision("c1", True), CallDecision("c2", False, "no")])
    [asked] = graph.get_state({"configurable": {"thread_id": "t1"}}).interrupts
    assert resume_values(run, [CallDecision("c2", False, "no"), CallDecision("c1", True)]) == {
        asked.id: {"decisions": [{"type": "approve"}, {"type": "reject", "message": "no"}]}
    }


def test_a_batched_interrupt_that_names_calls_the_state_lacks_is_refused() -> None:
    from langchain_core.messages import AIMessage

    request = {"name": "pay", "args": {"amount": 5}}
    value = {"action_requests": [request], "review_configs": [{"action_name": "pay"}]}
    other = AIMessage("", tool_calls=[{"id": "c9", "name": "pay", "args": {"amount": 6}}])
    with pytest.raises(ConfigError, match="does not hold"):
        pending_calls([Interrupt(value=value, id="i-1")], [other])
    with pytest.raises(ConfigError, match="cannot decide"):
        pending_calls([Interrupt(value={"ask": "anything"}, id="i-2")])


def test_the_async_bridge_runs_the_same_plans(records_backend: RecordsBackend) -> None:
    counts = Counts()
    graph = build_graph([EMAIL, PAY], counts, InMemorySaver())

    async def bridge(now: int = T0) -> AsyncLangGraphBridge:
        storage = records_backend.async_()
        session = await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=storage, clock=lambda: now
        )
        return AsyncLangGraphBridge(graph, session, storage, ttl_ms=TTL)

    async def scenario() -> None:
        paused = await (await bridge()).run(USER, thread_id="t1", run_id="r1")
        tokens = {b.tool_call_id: b.token for b in paused.pending}
        await (await bridge()).approve(tokens["c1"])
        done = await (await bridge(T0 + TTL)).expire(tokens["c2"])
        assert done.run is not None and done.run.status == "completed"
        assert done.run.output.startswith("c1=sent to a@example.com; c2=User rejected")
        again = await (await bridge()).continue_run("r1")
        assert again.replayed

    asyncio.run(scenario())
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2


# --------------------------------------------------------------------------- processes


@pytest.fixture(params=["sqlite", "postgres"])
def stores(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    """(the session's store spec, LangGraph's checkpointer spec) on one kind of server."""
    if request.param == "sqlite":
        yield f"sqlite:{tmp_path / 'sessions.db'}", f"sqlite:{tmp_path / 'checkpoints.db'}"
        return
    import psycopg

    url = request.getfixturevalue("pg_url")
    store, table = new_store_spec("postgres", tmp_path, url)
    schema = f"lg_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield store, f"postgres:{url}|{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")


def _continue_in_a_process(store: str, saver_spec: str, bodies: str) -> tuple[str, bool]:
    saver, close = open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL], Counts(file=Path(bodies)), saver)
        outcome = _bridge(open_store(store), graph).continue_run("r1")
        return outcome.status, outcome.replayed
    finally:
        close()


def test_two_processes_continuing_one_pause_run_the_body_once_on_langgraphs_own_savers(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    """SQLite storage with ``SqliteSaver``, PostgreSQL with ``PostgresSaver``: the pause is
    decided here, then two processes continue it; LangGraph alone would run the body in both."""
    store, saver_spec = stores
    bodies = tmp_path / "bodies.txt"
    saver, close = open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL], Counts(file=bodies), saver)
        paused = _start(open_store(store), graph)
        decided = _bridge(open_store(store), graph).approve(
            paused.pending[0].token, continue_run=False
        )
        assert decided.run is None and not bodies.exists()
    finally:
        close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_continue_in_a_process, [(store, saver_spec, str(bodies))] * 2)
    assert [replayed for _, replayed in results].count(False) == 1  # one continued, once
    assert {status for status, _ in results} <= {"completed", "continuing"}
    assert bodies.read_text(encoding="utf-8").splitlines() == ["send_email:a@example.com"]
    # the sweep with the bridge hook then finds 0 runs it could finish, and runs nothing
    storage, (saver, close) = open_store(store), open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL], Counts(file=bodies), saver)

        def ports_for(session_id: str) -> SweepPorts:
            return SweepPorts(
                DEFINITION, bridge=lambda s: LangGraphBridge(graph, s, storage, ttl_ms=TTL)
            )

        assert sweep_leaves_only_people(storage, ports_for, (SID,)) == {}
    finally:
        close()
        storage.close()
    assert bodies.read_text(encoding="utf-8").splitlines() == ["send_email:a@example.com"]


@pytest.mark.parametrize(
    "value",
    [
        {"type": "tool_approval", "name": "pay", "args": {}},  # no tool_call_id
        {"type": "tool_approval", "tool_call_id": "", "name": "pay", "args": {}},
        {"type": "tool_approval", "tool_call_id": "c1", "args": {}},  # no name
        {"type": "tool_approval", "tool_call_id": "c1", "name": "pay", "args": ["x"]},
        {"type": "tool_approval", "tool_call_id": "c1", "name": "pay", "args": "x"},
    ],
)
def test_a_malformed_approval_interrupt_is_a_typed_refusal(value: dict[str, Any]) -> None:
    """A node's own ``interrupt({"type": "tool_approval", ...})`` reaches the bridge as it is:
    a payload without its call is a ConfigError, never a KeyError or TypeError."""
    with pytest.raises(ConfigError, match="lacks its tool call") as refused:
        pending_calls([Interrupt(value=value, id="i-1")])
    assert "non-empty id" in str(refused.value.hint)


def test_two_interrupts_about_one_call_are_refused() -> None:
    value = {"type": "tool_approval", "tool_call_id": "c1", "name": "pay", "args": {}}
    with pytest.raises(ConfigError, match="twice about one tool call"):
        pending_calls([Interrupt(value=value, id="i-1"), Interrupt(value=value, id="i-2")])


def test_the_boundary_refuses_a_tool_call_without_an_id() -> None:
    """The ledger keys bodies by call id: an id-less call would share another's entry."""
    from langchain.agents.middleware import ToolCallRequest

    boundary = ToolBoundaryMiddleware(["pay"])
    ran: list[str] = []
    request = ToolCallRequest(
        tool_call={"name": "lookup", "args": {}, "id": None, "type": "tool_call"},
        tool=None,
        state={},
        runtime=None,  # type: ignore[arg-type]
    )
    with pytest.raises(ConfigError, match="without an id"):
        boundary.wrap_tool_call(request, lambda _request: ran.append("body"))
    assert ran == []


# --------------------------------------------------------------------------- foreign answers
# A host (or an inbox) answering a paused run through LangGraph itself, beside the bridge:
# LangGraph keeps the first answer written on the pause, so the bridge's continuation must
# not send its own after it on the head (ADR-0138).
FOREIGN_REJECT = {"type": "reject", "message": "someone else says no"}
SENT = "c1=sent to a@example.com"
REJECTED = "c1=User rejected the tool call for `send_email` with reason: too late"
#: (the foreign answer, whether the reviewer approves, the run's output, the bodies run)
FOREIGN = [
    pytest.param(FOREIGN_REJECT, True, SENT, ["send_email:a@example.com"], id="reject-vs-approve"),
    pytest.param({"type": "approve"}, False, REJECTED, [], id="approve-vs-reject"),
]


def _async_store(spec: str) -> Any:
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        from akchat_fsm.storage.sqlite import AsyncSQLiteStorage

        return AsyncSQLiteStorage(rest)
    from akchat_fsm.storage.postgres import AsyncPostgresStorage

    url, _, table = rest.partition("|")
    return AsyncPostgresStorage(url, table=table)


@pytest.mark.parametrize(("answer", "approve", "output", "bodies"), FOREIGN)
def test_the_sessions_decision_wins_over_an_answer_sent_through_langgraph(
    stores: tuple[str, str], answer: dict[str, str], approve: bool, output: str, bodies: list[str]
) -> None:
    """SQLite with ``SqliteSaver``, PostgreSQL with ``PostgresSaver``. A foreign reject ran
    the thread on to the end; a foreign approve was refused by the boundary and stayed the
    pause's first answer. Either way the reviewer's decision is the one the run completes
    with, each body runs at most once, and the thread's head holds that outcome."""
    store, saver_spec = stores
    counts = Counts()
    saver, close = open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL], counts, saver)
        paused = _start(open_store(store), graph)
        interrupt = json.loads(paused.snapshot)["interrupts"]["c1"]
        config = {"configurable": {"thread_id": "t1"}}
        guard = _bridge(open_store(store), graph).execution_guard()
        with contextlib.suppress(ConfirmationError), use_guard(guard):
            graph.invoke(Command(resume={interrupt: answer}), config)
        assert counts.bodies == []
        bridge = _bridge(open_store(store), graph)
        token = paused.pending[0].token
        decided = bridge.approve(token) if approve else bridge.reject(token, "too late")
        assert decided.run is not None and decided.run.status == "completed"
        assert decided.run.output == output and counts.bodies == bodies
        assert graph.get_state(config).values["messages"][-1].text == output
        again = _bridge(open_store(store), graph).continue_run("r1")
        assert again.replayed and again.output == output and counts.bodies == bodies
    finally:
        close()


@pytest.mark.parametrize(("answer", "approve", "output", "bodies"), FOREIGN)
def test_the_async_bridge_wins_over_an_answer_sent_through_langgraph(
    stores: tuple[str, str], answer: dict[str, str], approve: bool, output: str, bodies: list[str]
) -> None:
    """The asyncio twin, on ``AsyncSqliteSaver`` / ``AsyncPostgresSaver``: the same plan."""
    store, saver_spec = stores
    counts = Counts()

    async def bridge(graph: Any) -> AsyncLangGraphBridge:
        storage = _async_store(store)
        session = await resume_chat_session_async(DEFINITION, session_id=SID, storage=storage)
        return AsyncLangGraphBridge(graph, session, storage, ttl_ms=TTL)

    async def scenario() -> None:
        async with open_async_saver(saver_spec) as saver:
            graph = build_graph([EMAIL], counts, saver)
            paused = await (await bridge(graph)).run(USER, thread_id="t1", run_id="r1")
            interrupt = json.loads(paused.snapshot)["interrupts"]["c1"]
            config = {"configurable": {"thread_id": "t1"}}
            guard = (await bridge(graph)).execution_guard()
            with contextlib.suppress(ConfirmationError), use_guard(guard):
                await graph.ainvoke(Command(resume={interrupt: answer}), config)
            assert counts.bodies == []
            reviewer, token = await bridge(graph), paused.pending[0].token
            if approve:
                decided = await reviewer.approve(token)
            else:
                decided = await reviewer.reject(token, "too late")
            assert decided.run is not None and decided.run.status == "completed"
            assert decided.run.output == output and counts.bodies == bodies
            state = await graph.aget_state(config)
            assert state.values["messages"][-1].text == output
            again = await (await bridge(graph)).continue_run("r1")
            assert again.replayed and again.output == output

    asyncio.run(scenario())
    assert counts.bodies == bodies


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
def test_a_host_replaying_the_pause_and_answering_its_fork_cannot_override_the_session(
    records_backend: RecordsBackend, approve: bool
) -> None:
    """A host replays the pause itself (``invoke(None)`` at its checkpoint id: LangGraph forks
    the thread and asks again, under new interrupt ids) and rejects the fork's call: the pause
    holds no foreign answer, but the head is past it, on the host's branch. The continuation
    replays the pause again and answers that with the session's decision."""
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    at = {"thread_id": "t1", "checkpoint_id": json.loads(paused.snapshot)["checkpoint_id"]}
    with use_guard(_bridge(records_backend.sync(), graph).execution_guard()):
        fork = graph.invoke(None, {"configurable": at}, version="v2")
        [asked] = fork.interrupts
        graph.invoke(
            Command(resume={asked.id: FOREIGN_REJECT}), {"configurable": {"thread_id": "t1"}}
        )
    bridge, token = _bridge(records_backend.sync(), graph), paused.pending[0].token
    decided = bridge.approve(token) if approve else bridge.reject(token, "too late")
    assert decided.run is not None and decided.run.status == "completed"
    assert decided.run.output == (SENT if approve else REJECTED)
    assert counts.bodies == (["send_email:a@example.com"] if approve else [])


def test_a_continuation_that_died_past_the_pause_is_replayed_from_the_pause(
    records_backend: RecordsBackend,
) -> None:
    """The continuation ran the body and its checkpoint, then the model failed: the thread's
    head is past the pause. The next continuation replays the pause (a head past it may hold
    answers the session never gave) and hands the model the ledger's result: the body runs
    once, and the fork's answer is the session's."""
    counts = Counts()
    graph = build_graph([EMAIL], counts, InMemorySaver())
    paused = _start(records_backend.sync(), graph)
    counts.fail_next_answer = 1
    with pytest.raises(ConnectionError):
        _bridge(records_backend.sync(), graph).approve(paused.pending[0].token)
    config = {"configurable": {"thread_id": "t1"}}
    head = graph.get_state(config).config["configurable"]["checkpoint_id"]
    assert head != json.loads(paused.snapshot)["checkpoint_id"]  # the thread moved on
    done = _bridge(records_backend.sync(), graph).continue_run("r1")
    assert done.status == "completed" and done.output == SENT
    assert counts.bodies == ["send_email:a@example.com"]


def test_a_pause_its_checkpointer_lost_is_reported_for_an_operator_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """The thread is deleted from ``SqliteSaver`` after the pause. The reviewer's approval is
    recorded, but no continuation can carry it: each raises ``RunBlocked`` naming the
    checkpoint, the run goes back to paused, and the sweep reports the operator's step
    instead of failing the session. Restored from a backup, the next sweep completes it."""
    import sqlite3

    from akchat_fsm import reconcile_all
    from akchat_fsm.integrations import RunBlocked
    from akchat_fsm.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(tmp_path / "sessions.db")
    path, backup = tmp_path / "checkpoints.db", sqlite3.connect(tmp_path / "backup.db")
    counts = Counts()
    saver, close = open_saver(f"sqlite:{path}")
    try:
        graph = build_graph([EMAIL], counts, saver)
        paused = _start(storage, graph)
        checkpoint = json.loads(paused.snapshot)["checkpoint_id"]
        saver.conn.backup(backup)
        saver.delete_thread("t1")
        with pytest.raises(RunBlocked, match=checkpoint) as blocked:
            _bridge(storage, graph).approve(paused.pending[0].token)
        assert "restores checkpoint" in blocked.value.next_step
        bridge = _bridge(storage, graph)
        assert [b.status.value for b in bridge.session.confirmations] == ["approved"]
        run = bridge.run_record("r1")
        assert run is not None and run.state.value == "paused"  # released, nothing ran

        def ports_for(session_id: str) -> SweepPorts:
            return SweepPorts(
                DEFINITION, bridge=lambda s: LangGraphBridge(graph, s, storage, ttl_ms=TTL)
            )

        def later() -> int:  # the processing index is stamped with the wall clock
            return time.time_ns() // 1_000_000 + 10 * TTL

        report = reconcile_all(storage, ports_for, older_than_ms=0, clock=later)
        [swept] = [s for s in report.sessions if s.session_id == SID]
        assert swept.error is None and dict(swept.waiting) == {"r1": blocked.value.next_step}
        assert counts.bodies == []
        backup.backup(saver.conn)  # the operator restores the checkpointer
        report = reconcile_all(storage, ports_for, older_than_ms=0, clock=later)
        [swept] = [s for s in report.sessions if s.session_id == SID]
        assert swept.error is None and swept.waiting == ()
        assert _bridge(storage, graph).continue_run("r1").output == SENT
        assert counts.bodies == ["send_email:a@example.com"]
    finally:
        close()
        backup.close()
        storage.close()


def test_expire_due_reports_a_blocked_run_and_goes_on(tmp_path: Path) -> None:
    """The same lost pause met by ``expire_due``: the call expires, the run cannot be carried
    on, and ``expire_due`` returns it waiting with the operator's step instead of raising (a
    pass over many runs must not stop at one blocked run)."""
    from akchat_fsm.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(tmp_path / "sessions.db")
    counts = Counts()
    saver, close = open_saver(f"sqlite:{tmp_path / 'checkpoints.db'}")
    try:
        graph = build_graph([EMAIL], counts, saver)
        paused = _start(storage, graph)
        checkpoint = json.loads(paused.snapshot)["checkpoint_id"]
        saver.delete_thread("t1")
        bridge = _bridge(storage, graph, now=T0 + 2 * TTL)
        (outcome,) = bridge.expire_due()
        assert (outcome.run_id, outcome.status) == ("r1", "waiting")
        assert outcome.blocked is not None and checkpoint in outcome.blocked
        assert outcome.next_step == outcome.blocked
        assert [b.status.value for b in bridge.session.confirmations] == ["expired"]
        assert counts.bodies == []
        run = bridge.run_record("r1")
        assert run is not None and run.state.value == "paused"
    finally:
        close()
        storage.close()


def _wall_bridge(storage: Any, graph: Any) -> LangGraphBridge:
    """A bridge on the wall clock, 5 minutes to decide: the sweep (which runs a minute on,
    on the wall clock) finds nothing due."""
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage)
    return LangGraphBridge(graph, session, storage, ttl_ms=300_000)


def _approve_then_die(store: str, saver_spec: str, bodies: str, token: str) -> None:
    """A reviewer's process approves one call of a batch, then is SIGKILLed."""
    import os
    import signal

    saver, _ = open_saver(saver_spec)
    graph = build_graph([EMAIL, LOOKUP, PAY], Counts(file=Path(bodies)), saver, mode="batched")
    decided = _wall_bridge(open_store(store), graph).approve(token)
    assert decided.run is not None and decided.run.status == "waiting"
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_batch_killed_half_decided_is_left_to_its_reviewer_then_runs_once(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    """SQLite with ``SqliteSaver``, PostgreSQL with ``PostgresSaver``. A process approves c1
    of a batched pause and is killed. The sweep sends LangGraph nothing (a partial batched
    answer would wedge the thread) and reports the run waiting for c2's reviewer. After c2
    is rejected in another process, the run completes once, each body run once."""
    store, saver_spec = stores
    bodies = tmp_path / "bodies.txt"
    saver, close = open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL, LOOKUP, PAY], Counts(file=bodies), saver, mode="batched")
        paused = _wall_bridge(open_store(store), graph).run(USER, thread_id="t1", run_id="r1")
        tokens = {b.tool_call_id: b.token for b in paused.pending}
    finally:
        close()
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(
        target=_approve_then_die, args=(store, saver_spec, str(bodies), tokens["c1"])
    )
    worker.start()
    worker.join()
    assert worker.exitcode == -9 and not bodies.exists()
    storage, (saver, close) = open_store(store), open_saver(saver_spec)
    try:
        graph = build_graph([EMAIL, LOOKUP, PAY], Counts(file=bodies), saver, mode="batched")

        def ports_for(session_id: str) -> SweepPorts:
            return SweepPorts(
                DEFINITION, bridge=lambda s: LangGraphBridge(graph, s, storage, ttl_ms=300_000)
            )

        waiting = sweep_leaves_only_people(storage, ports_for, (SID,))
        assert waiting == {"r1": "a person approves or rejects tool calls c2"}
        assert not bodies.exists()
        [asked] = graph.get_state({"configurable": {"thread_id": "t1"}}).interrupts
        assert asked.id == json.loads(paused.snapshot)["interrupts"]["c1"]  # still unanswered
        done = _wall_bridge(storage, graph).reject(tokens["c2"], "too much")
        assert done.run is not None and done.run.status == "completed"
        assert done.run.output.startswith("c1=sent to a@example.com; c2=User rejected")
    finally:
        close()
        storage.close()
    assert sorted(bodies.read_text(encoding="utf-8").splitlines()) == [
        "lookup:o-9",
        "send_email:a@example.com",
    ]


@pytest.mark.parametrize(
    "foreign",
    [
        {"decisions": [FOREIGN_REJECT, FOREIGN_REJECT]},
        [{"type": "accept", "args": None}],  # an Agent Inbox reply: HITL fails on it, for good
        {"decisions": [FOREIGN_REJECT]},  # one decision for two calls: the same
    ],
    ids=["reject-all", "inbox-shape", "short"],
)
def test_an_answer_sent_through_langgraph_to_a_batch_cannot_override_the_session(
    records_backend: RecordsBackend, foreign: Any
) -> None:
    """A host answers the batch through LangGraph: it rejects it all, or sends a malformed
    answer, which LangGraph keeps as the batch's answer and fails on at every later resume
    (the thread is wedged). The reviewers approve c1 and reject c2: the run completes with
    their decisions (the pause's HITL step is replayed)."""
    counts = Counts()
    graph = build_graph([EMAIL, PAY], counts, InMemorySaver(), mode="batched")
    paused = _start(records_backend.sync(), graph)
    [asked] = graph.get_state({"configurable": {"thread_id": "t1"}}).interrupts
    config = {"configurable": {"thread_id": "t1"}}
    guard = _bridge(records_backend.sync(), graph).execution_guard()
    with contextlib.suppress(KeyError, TypeError, ValueError), use_guard(guard):
        graph.invoke(Command(resume={asked.id: foreign}), config)
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    _bridge(records_backend.sync(), graph).reject(tokens["c2"], "too much")
    done = _bridge(records_backend.sync(), graph).approve(tokens["c1"])
    assert done.run is not None and done.run.output == (
        "c1=sent to a@example.com; c2=User rejected the tool call for `pay` with reason: too much"
    )
    assert counts.bodies == ["send_email:a@example.com"]
