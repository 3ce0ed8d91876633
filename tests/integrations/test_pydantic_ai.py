"""The pydantic-ai bridge, with the real pydantic-ai package driven by its ``FunctionModel``.

Every decision is made by a *different* session object (a fresh resume over the same storage),
as separate approver processes would; bodies and model requests are counted (:mod:`pai_agents`).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from bridge_harness import RecordsBackend, crash_inside_body
from pai_agents import Call, Counts, build_agent
from pydantic_ai import ApprovalRequired, RunContext

from akchat_fsm import (
    AlreadyResolved,
    ChatDefinition,
    ConfigError,
    UpstreamFailed,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.integrations.ledger import ExecutionState, ExecutionUnknown, ToolLedger
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge, PydanticAIBridge
from akchat_fsm.integrations.runs import EXPIRED_MESSAGE, REJECTED_MESSAGE, RunState
from akchat_fsm.testing.doubles import RecordingUpstream

DEFINITION = ChatDefinition("support")
SID = "chat-1"
T0 = 1_000_000
TTL = 60_000
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
REFUND = Call("refund", {"amount": 5}, "c2")
EMAIL_B = Call("send_email", {"to": "b@example.com"}, "c3")
LOOKUP = Call("lookup_order", {"order": "o-9"}, "e1")


def _bridge(
    backend: RecordsBackend, agent: Any, *, now: int = T0, **options: Any
) -> PydanticAIBridge:
    storage = backend.sync()
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: now)
    return PydanticAIBridge(agent, session, storage, ttl_ms=TTL, **options)


def _start(backend: RecordsBackend, calls: list[Call], counts: Counts) -> tuple[Any, Any]:
    agent = build_agent(calls, counts)
    outcome = _bridge(backend, agent).run("do it", run_id="r1")
    return agent, outcome


def test_a_pause_becomes_confirmations_named_after_the_runtime_calls(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    _, outcome = _start(records_backend, [EMAIL, REFUND], counts)
    assert outcome.status == "paused" and counts.bodies == [] and counts.requests == 1
    by_id = {b.tool_call_id: b for b in outcome.pending}
    assert set(by_id) == {"c1", "c2"}
    assert by_id["c1"].action == "send_email" and dict(by_id["c1"].input) == EMAIL.args
    assert by_id["c2"].action == "refund" and dict(by_id["c2"].input) == REFUND.args
    assert {b.expires_at for b in outcome.pending} == {T0 + TTL}  # session clock + ttl_ms
    assert all(b.status.value == "pending" for b in outcome.pending)


DECISIONS = ("approve", "reject", "expire")


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_calls_decided_in_any_order_by_different_sessions_continue_once(
    records_backend: RecordsBackend, order: tuple[int, ...]
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL, REFUND, EMAIL_B], counts)
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    plan = {"c1": "approve", "c2": "reject", "c3": "expire"}
    statuses = []
    for i in order:
        call_id = ("c1", "c2", "c3")[i]
        verb = plan[call_id]
        if verb == "expire":  # only the expirer's clock is past the expiry
            decided = _bridge(records_backend, agent, now=T0 + TTL).expire(tokens[call_id])
        elif verb == "reject":
            decided = _bridge(records_backend, agent).reject(tokens[call_id], "too much")
        else:
            decided = _bridge(records_backend, agent).approve(tokens[call_id])
        assert decided.binding.tool_call_id == call_id
        statuses.append(decided.run.status)
    assert statuses == ["waiting", "waiting", "completed"]
    assert counts.bodies == ["send_email:a@example.com"]
    assert counts.requests == 2  # the pause and exactly one continuation
    final = _bridge(records_backend, agent).continue_run("r1")
    assert final.status == "completed" and final.replayed and counts.requests == 2
    assert final.output == (f"c1=sent to a@example.com; c2=too much; c3={EXPIRED_MESSAGE}")
    record = _bridge(records_backend, agent).run_record("r1")
    assert record is not None and record.state is RunState.COMPLETED


def test_a_rejection_without_reason_still_tells_the_model(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    done = _bridge(records_backend, agent).reject(paused.pending[0].token)
    assert done.run.status == "completed" and done.run.output == f"c2={REJECTED_MESSAGE}"
    assert counts.bodies == []


def test_a_loser_gets_the_typed_error_and_a_repeat_calls_nothing(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    token = paused.pending[0].token
    first = _bridge(records_backend, agent).approve(token)
    assert first.run.status == "completed" and not first.run.replayed
    repeat = _bridge(records_backend, agent).approve(token)
    assert repeat.binding.status.value == "approved" and repeat.run.replayed
    with pytest.raises(AlreadyResolved):
        _bridge(records_backend, agent).reject(token, "changed my mind")
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2


def test_external_calls_pass_through_to_the_host(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL, LOOKUP], counts)
    assert [c.tool_call_id for c in paused.external] == ["e1"]
    assert paused.external[0].tool == "lookup_order" and paused.external[0].args == LOOKUP.args
    assert [b.tool_call_id for b in paused.pending] == ["c1"]  # only approvals are confirmations
    waiting = _bridge(records_backend, agent).approve(paused.pending[0].token)
    assert waiting.run.status == "waiting"
    assert [c.tool_call_id for c in waiting.run.external] == ["e1"]
    done = _bridge(records_backend, agent).continue_run("r1", external={"e1": "shipped"})
    assert done.status == "completed"
    assert done.output == "c1=sent to a@example.com; e1=shipped"
    assert counts.bodies == ["send_email:a@example.com"]


def test_concurrent_continuations_run_the_body_and_the_model_once(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL, REFUND], counts)
    for binding in paused.pending:
        _bridge(records_backend, agent).approve(binding.token, continue_run=False)
    barrier = threading.Barrier(4)
    results: list[Any] = []

    def worker() -> None:
        bridge = _bridge(records_backend, agent)
        barrier.wait()
        results.append(bridge.continue_run("r1"))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts.bodies) == ["refund:5", "send_email:a@example.com"]
    assert counts.requests == 2
    ran = [r for r in results if r.status == "completed" and not r.replayed]
    assert len(ran) == 1
    assert {r.status for r in results} <= {"completed", "continuing"}


def test_a_crash_after_the_body_ran_replays_it_on_the_next_continuation(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    counts.fail_next_answer = 1  # the model fails after the body ran, before the run is saved
    with pytest.raises(ConnectionError):
        _bridge(records_backend, agent).approve(paused.pending[0].token)
    bridge = _bridge(records_backend, agent)
    record = bridge.run_record("r1")
    assert record is not None and record.state is RunState.PAUSED  # released for a retry
    entry = ToolLedger(records_backend.sync(), SID).get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTED
    done = bridge.continue_run("r1")
    assert done.status == "completed" and done.output == "c1=sent to a@example.com"
    assert counts.bodies == ["send_email:a@example.com"]


def test_an_unknown_execution_is_never_rerun_until_an_operator_settles_it(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    _bridge(records_backend, agent).approve(paused.pending[0].token, continue_run=False)
    crash_inside_body(records_backend.sync(), "c1", session_id=SID, tool="send_email")
    bridge = _bridge(records_backend, agent)
    with pytest.raises(ExecutionUnknown):
        bridge.continue_run("r1")
    report = bridge.reconcile()
    assert [e.tool_call_id for e in report.execution_unknown] == ["c1"]
    assert [r.status for r in report.runs] == ["waiting"]
    bridge.settle_execution("c1", ran=True, result="sent (confirmed by ops)")
    done = bridge.continue_run("r1")
    assert done.output == "c1=sent (confirmed by ops)"
    assert counts.bodies == []
    assert bridge.reconcile().execution_unknown == ()


def test_a_sibling_cancelled_by_a_failing_call_still_records_its_body(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    report = Call("slow_report", {"pages": 3}, "c9")
    agent, paused = _start(records_backend, [EMAIL, report], counts)
    for binding in paused.pending:
        _bridge(records_backend, agent).approve(binding.token, continue_run=False)
    crash_inside_body(records_backend.sync(), "c1", session_id=SID, tool="send_email")
    bridge = _bridge(records_backend, agent)
    with pytest.raises(ExecutionUnknown):  # c1 fails at once; pydantic-ai cancels c9
        bridge.continue_run("r1")
    entry = ToolLedger(records_backend.sync(), SID).get("c9")
    assert entry is not None and entry.state is ExecutionState.EXECUTED  # not an unknown
    assert counts.bodies == ["slow_report:3"]
    bridge.settle_execution("c1", ran=False)
    done = bridge.continue_run("r1")
    assert done.output == "c1=sent to a@example.com; c9=3 pages"
    assert counts.bodies == ["slow_report:3", "send_email:a@example.com"]


def test_an_idempotent_tool_is_run_again_after_an_unknown_outcome(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    _bridge(records_backend, agent).approve(paused.pending[0].token, continue_run=False)
    crash_inside_body(records_backend.sync(), "c1", session_id=SID, tool="send_email")
    bridge = _bridge(records_backend, agent, idempotent_tools=["send_email"])
    assert bridge.continue_run("r1").status == "completed"
    assert counts.bodies == ["send_email:a@example.com"]
    entry = ToolLedger(records_backend.sync(), SID).get("c1")
    assert entry is not None and entry.attempt == 2


def test_reconcile_settles_a_processing_claim_from_the_ledger_and_continues(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    storage = records_backend.sync()
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: T0)
    crashing = RecordingUpstream()  # an approver whose upstream call fails mid-resolution
    crashing.fail_next = 1
    with pytest.raises(UpstreamFailed):
        session.confirmations_for(crashing).approve(paused.pending[0].token)
    assert session.get_by_tool_call("c1").status.value == "approving"  # type: ignore[union-attr]
    ledger = ToolLedger(storage, SID)
    assert ledger.get("c1") is None  # nothing ran: the bridge's memory reads it as pending
    report = _bridge(records_backend, agent).reconcile()
    # resumed, not completed: the ledger (the bridge's chat memory) had no outcome for c1
    assert [(o.tool_call_id, o.action) for o in report.confirmations] == [("c1", "resumed")]
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "completed")]
    assert counts.bodies == ["send_email:a@example.com"]
    entry = ledger.get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTED


def test_the_async_bridge_runs_the_same_plans(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent = build_agent([EMAIL, REFUND], counts)

    async def bridge(now: int = T0) -> AsyncPydanticAIBridge:
        storage = records_backend.async_()
        session = await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=storage, clock=lambda: now
        )
        return AsyncPydanticAIBridge(agent, session, storage, ttl_ms=TTL)

    async def scenario() -> None:
        paused = await (await bridge()).run("do it", run_id="r1")
        tokens = {b.tool_call_id: b.token for b in paused.pending}
        first = await (await bridge()).reject(tokens["c2"], "no refunds")
        assert first.run is not None and first.run.status == "waiting"
        done = await (await bridge()).approve(tokens["c1"])
        assert done.run is not None and done.run.status == "completed"
        assert done.run.output == "c1=sent to a@example.com; c2=no refunds"
        again = await (await bridge()).continue_run("r1")
        assert again.replayed
        report = await (await bridge()).reconcile()
        assert report.execution_unknown == () and report.runs == ()

    asyncio.run(scenario())
    assert counts.bodies == ["send_email:a@example.com"] and counts.requests == 2


def test_storage_without_records_is_refused_naming_the_capability() -> None:
    from akchat_fsm.storage.memory import MemoryStorage

    class EnvelopeOnly:
        def __init__(self) -> None:
            self.inner = MemoryStorage()

        def load(self, session_id: str) -> Any:
            return self.inner.load(session_id)

        def save(self, snapshot: Any, expected: int | None) -> bool:
            return self.inner.save(snapshot, expected)

    storage = EnvelopeOnly()
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage)
    with pytest.raises(ConfigError, match="RecordStorage"):
        PydanticAIBridge(build_agent([EMAIL], Counts()), session, storage)


def test_a_session_of_the_other_flavour_is_refused_before_anything_runs(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent = build_agent([EMAIL], counts)

    async def async_session() -> Any:
        return await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=records_backend.async_()
        )

    with pytest.raises(ConfigError, match="ChatSession"):
        PydanticAIBridge(agent, asyncio.run(async_session()), records_backend.sync())
    sync_session = resume_chat_session(DEFINITION, session_id=SID, storage=records_backend.sync())
    with pytest.raises(ConfigError, match="AsyncChatSession"):
        AsyncPydanticAIBridge(agent, sync_session, records_backend.async_())
    assert counts.requests == 0


def test_a_used_run_id_is_refused(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent, _ = _start(records_backend, [EMAIL], counts)
    with pytest.raises(ConfigError, match="already used"):
        _bridge(records_backend, agent).run("again", run_id="r1")


class _Killed(BaseException):
    """The process dies here (nothing in the library or pydantic-ai handles it)."""


class _KilledAfterItsClaim:
    """A storage whose process dies right after its next envelope save applies: for a
    rejecter, between its claim (CAS#1) and its terminal save (CAS#2)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, snapshot: Any, expected: int | None) -> bool:
        applied = bool(self.inner.save(snapshot, expected))
        if applied:
            raise _Killed()
        return applied

    def save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        # The claim with its audit entry, one write (ADR-0141): the same death after it.
        applied = bool(self.inner.save_with_records(snapshot, expected, records))
        if applied:
            raise _Killed()
        return applied


def test_a_rejecter_killed_after_its_claim_keeps_its_reason_for_the_model(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    storage = _KilledAfterItsClaim(records_backend.sync())
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: T0)
    with pytest.raises(_Killed):
        PydanticAIBridge(agent, session, storage, ttl_ms=TTL).reject(
            paused.pending[0].token, "too much"
        )
    assert _bridge(records_backend, agent).session.confirmations[0].status.is_processing

    report = _bridge(records_backend, agent).reconcile()  # finishes the rejection, continues
    assert [(o.status, o.output) for o in report.runs] == [("completed", "c2=too much")]
    assert counts.bodies == [] and counts.requests == 2


def test_a_tool_that_asks_for_approval_from_its_body_runs_once_when_approved(
    records_backend: RecordsBackend,
) -> None:
    """An ungated tool's body runs through the ledger; one that raises ``ApprovalRequired``
    (pydantic-ai's per-call way) declined to act, so its claim is released, not recorded."""
    counts = Counts()
    agent = build_agent([Call("wire", {"amount": 9}, "w1")], counts)

    @agent.tool
    def wire(ctx: RunContext[None], amount: int) -> str:
        if not ctx.tool_call_approved:
            raise ApprovalRequired()
        counts.bodies.append(f"wire:{amount}")
        return f"wired {amount}"

    paused = _bridge(records_backend, agent).run("do it", run_id="r1")
    assert [b.tool_call_id for b in paused.pending] == ["w1"] and counts.bodies == []
    done = _bridge(records_backend, agent).approve(paused.pending[0].token)
    assert done.run.status == "completed" and done.run.output == "w1=wired 9"
    assert counts.bodies == ["wire:9"]
    entry = ToolLedger(records_backend.sync(), SID).get("w1")
    assert entry is not None and entry.state is ExecutionState.EXECUTED and entry.attempt == 2
