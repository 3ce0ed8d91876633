"""Refusals and rarely taken paths of the session API, each through the public calls.

Every case asserts what a host observes: the typed error (and its message), what storage holds
afterwards, and which upstream calls were made. None of them reaches into the session's
private modules, so the tests hold whatever shape the plans take inside.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from statemachine import State, StateMachine

from akchat_fsm.errors import (
    AkchatError,
    ConfigError,
    IllegalTransition,
    IncompatibleSession,
    InvalidConfirmationToken,
    InvalidMemoryRecord,
    LimitExceeded,
    OutcomeUnknown,
    StorageUnavailable,
)
from akchat_fsm.session import (
    ChatDefinition,
    ConversationFlow,
    Route,
    SessionEvent,
    SessionEventKind,
    UpstreamFailed,
    reconcile,
    reconcile_all,
    reconcile_all_async,
    reconcile_async,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.sweep import AsyncSweepPorts, SweepPorts, SweptSession
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingChatMemory,
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)
from akchat_fsm.wire.memory import validate_memory_record
from akchat_fsm.wire.session import SessionSnapshot

from ._flows import SUPPORT_ROUTES, SupportFlow

PLAIN = ChatDefinition("refusals")
FLOW = ChatDefinition("refusals", 1, ConversationFlow(SupportFlow, SUPPORT_ROUTES))
INVALID = r"Chat definition is invalid\."


def A_MINUTE_LATER() -> int:
    """The sweep lists writes strictly older than its cut-off; the adapters stamp wall time."""
    return time.time_ns() // 1_000_000 + 60_000


def stored(storage: MemoryStorage, session_id: str = "s") -> SessionSnapshot | None:
    raw = storage.load(session_id)
    return None if raw is None else SessionSnapshot.model_validate_json(raw)


def with_claim(storage: MemoryStorage, upstream: RecordingUpstream) -> str:
    """Store session ``s`` holding one ``approving`` claim whose upstream call never ran."""
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    binding = session.confirmations_for(upstream).propose("email.send", {})
    upstream.fail_next = 1  # the claim is saved, then upstream refuses: it stays approving
    with pytest.raises(UpstreamFailed):
        session.confirmations_for(upstream).approve(binding.token)
    (record,) = resume_chat_session(PLAIN, session_id="s", storage=storage).confirmations
    assert record.status.value == "approving"
    return binding.token


# --------------------------------------------------------------------------- definitions


@pytest.mark.parametrize(
    "route",
    [
        lambda: Route("no spaces", "start"),
        lambda: Route("start", ""),
        lambda: Route("start", 5),  # type: ignore[arg-type]
    ],
)
def test_a_route_with_a_bad_id_or_event_is_refused(route: Any) -> None:
    with pytest.raises(ConfigError, match=INVALID):
        route()


def test_a_flow_that_is_not_a_state_machine_class_is_refused() -> None:
    for flow in (object, SupportFlow(), "SupportFlow"):
        with pytest.raises(ConfigError, match=INVALID):
            ConversationFlow(flow, SUPPORT_ROUTES)  # type: ignore[arg-type]


def test_two_routes_with_one_id_are_refused() -> None:
    with pytest.raises(ConfigError, match=INVALID):
        ConversationFlow(SupportFlow, (Route("go", "start"), Route("go", "cancel")))


@pytest.mark.parametrize("revision", [True, "1", 1.0, None])
def test_a_revision_that_is_not_an_int_uses_the_reference_message(revision: Any) -> None:
    with pytest.raises(ConfigError, match=r"Chat definition revision is invalid\."):
        ChatDefinition("d", revision)


def test_a_definition_id_that_is_not_an_identifier_is_refused() -> None:
    with pytest.raises(ConfigError, match=INVALID):
        ChatDefinition("no spaces")


def test_the_conversation_shorthand_builds_the_same_definition() -> None:
    made = ChatDefinition.with_flow("refusals", SupportFlow, SUPPORT_ROUTES)
    assert made == FLOW
    session = resume_chat_session(made, session_id="s", storage=MemoryStorage())
    assert session.conversation_state == "idle"


class GuardedFlow(StateMachine):
    """``start`` is guarded by a host check that raises (a bug in the host's guard)."""

    idle = State(initial=True)
    busy = State(final=True)
    start = idle.to(busy, cond="allowed")

    def allowed(self) -> bool:
        raise RuntimeError("guard bug")


def test_a_host_guard_that_raises_refuses_the_route_and_saves_nothing() -> None:
    storage = MemoryStorage()
    definition = ChatDefinition(
        "guarded", 1, ConversationFlow(GuardedFlow, (Route("go", "start"),))
    )
    session = resume_chat_session(definition, session_id="s", storage=storage)
    with pytest.raises(IllegalTransition):
        session.record_decision("msg-1", "go")
    assert session.conversation_state == "idle" and stored(storage) is None


def test_a_stored_end_state_the_decisions_do_not_reach_is_incompatible() -> None:
    storage = MemoryStorage()
    session = resume_chat_session(FLOW, session_id="s", storage=storage)
    session.record_decision("msg-1", "start")  # idle -> collecting
    wire = dict(session.snapshot.to_wire())
    wire["cursor"] = 2
    wire["conversation"] = {**wire["conversation"], "state": "done"}  # not where msg-1 led
    assert storage.save(SessionSnapshot.model_validate(wire), 1)
    with pytest.raises(IncompatibleSession, match="conversation metadata is incompatible"):
        resume_chat_session(FLOW, session_id="s", storage=storage)


# --------------------------------------------------------------------------- operations


def test_a_turn_released_with_an_unknown_outcome_is_refused_and_the_lease_kept() -> None:
    storage = MemoryStorage()
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    assert session.claim_turn("turn-1", 60_000)
    with pytest.raises(ConfigError):
        session.release_turn("turn-1", "finished-ish")
    assert not resume_chat_session(PLAIN, session_id="s", storage=storage).claim_turn("t-2", 1)
    assert session.release_turn("turn-1", "completed")


def test_a_decision_without_a_conversation_or_of_an_unknown_kind_is_refused() -> None:
    storage = MemoryStorage()
    with pytest.raises(ConfigError, match=r"decision is invalid"):
        resume_chat_session(PLAIN, session_id="s", storage=storage).record_decision("m", "start")
    session = resume_chat_session(FLOW, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match=r"decision is invalid"):
        session.record_decision("m", "start", kind="guessed")
    assert stored(storage) is None and session.conversation_state == "idle"


class LongStateFlow(StateMachine):
    """A host flow whose target state's value is longer than the envelope's 128 characters."""

    idle = State(initial=True)
    far = State(final=True, value="x" * 129)
    go = idle.to(far)


@pytest.mark.parametrize(
    "bad",
    [{"message_id": "no spaces"}, {"input": "x" * 16_385}, {"content": "x" * 65_537}],
)
def test_a_decision_over_its_limits_is_refused_before_the_flow_runs(bad: dict[str, str]) -> None:
    storage = MemoryStorage()
    session = resume_chat_session(FLOW, session_id="s", storage=storage)
    arguments = {"message_id": "msg-1", **bad}
    with pytest.raises(LimitExceeded, match=r"decision is invalid"):
        session.record_decision(arguments.pop("message_id"), "start", **arguments)
    assert stored(storage) is None and session.conversation_state == "idle"


def test_observers_see_the_turn_id_when_a_lease_is_claimed_and_when_it_ends() -> None:
    events: list[SessionEvent] = []
    session = resume_chat_session(
        PLAIN, session_id="s", storage=MemoryStorage(), observers=[events.append]
    )
    assert session.claim_turn("turn-1", 60_000)
    assert session.release_turn("turn-1", "completed")
    assert [(e.kind, e.turn_id, e.cursor) for e in events] == [
        (SessionEventKind.TURN, "turn-1", 1),
        (SessionEventKind.TURN, "turn-1", 2),
    ]


def test_a_decision_the_envelope_cannot_hold_is_a_config_error_not_a_crash() -> None:
    storage = MemoryStorage()
    definition = ChatDefinition("long", 1, ConversationFlow(LongStateFlow, (Route("go", "go"),)))
    session = resume_chat_session(definition, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match=r"decision is invalid"):
        session.record_decision("m", "go")
    assert stored(storage) is None and session.conversation_state == "idle"


# --------------------------------------------------------------------------- proposals


def test_an_upstream_that_raises_on_propose_is_upstream_failed_and_nothing_is_stored() -> None:
    class Refuses(RecordingUpstream):
        def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
            raise ConnectionError("upstream down")

    storage = MemoryStorage()
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    with pytest.raises(UpstreamFailed, match="refused the tool-call proposal") as failed:
        session.confirmations_for(Refuses()).propose("email.send", {})
    assert isinstance(failed.value.__cause__, ConnectionError)
    assert stored(storage) is None and session.confirmations == ()


class _UnknownSave(MemoryStorage):
    """The save applies, then the connection drops before the answer, and stays down: the
    outcome cannot be settled by reading storage again."""

    down = False

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        super().save(snapshot, expected_cursor)
        self.down = True
        raise ConnectionError("reset after write")

    def load(self, session_id: str) -> Any:
        if self.down:
            raise ConnectionError("still down")
        return super().load(session_id)


def test_a_proposal_whose_save_outcome_is_unknown_is_never_denied_upstream() -> None:
    storage, upstream = _UnknownSave(), RecordingUpstream()
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    with pytest.raises(OutcomeUnknown):
        session.confirmations_for(upstream).propose("email.send", {})
    (call,) = upstream.proposed
    assert upstream.calls == []  # it may be bound (here it is): denying it would be wrong
    storage.down = False
    (binding,) = resume_chat_session(PLAIN, session_id="s", storage=storage).confirmations
    assert binding.tool_call_id == call and binding.status.value == "pending"


def test_a_failed_deny_of_an_unbound_call_is_noted_on_the_original_error() -> None:
    class NonsenseThenDown(RecordingUpstream):
        def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
            super().propose_tool_call(id, name, args)
            return "not a proposal"

        def deny(self, tool_call_id: str, reason: str) -> None:
            raise ConnectionError("deny lost")

    upstream = NonsenseThenDown()
    session = resume_chat_session(PLAIN, session_id="s", storage=MemoryStorage())
    with pytest.raises(ConfigError) as refused:
        session.confirmations_for(upstream).propose("email.send", {})
    (call,) = upstream.proposed
    (note,) = refused.value.__notes__
    assert f"upstream tool call {call} is unbound; denying it failed" in note
    assert "deny lost" in note and not session.exists


@pytest.mark.parametrize("token", [None, 7, b"confirm-x"])
def test_a_token_that_is_not_a_string_is_an_invalid_token_and_calls_nothing(token: Any) -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    coordinator.propose("email.send", {})
    cursor = session.cursor
    for resolve in (coordinator.approve, coordinator.reject, coordinator.expire):
        with pytest.raises(InvalidConfirmationToken):
            resolve(token)
    assert upstream.calls == [] and stored(storage).cursor == cursor  # type: ignore[union-attr]


def test_a_coordinator_without_any_upstream_is_refused_when_made() -> None:
    session = resume_chat_session(PLAIN, session_id="s", storage=MemoryStorage())
    with pytest.raises(ConfigError, match="upstream"):
        session.confirmations_for(None)  # type: ignore[arg-type]


def test_a_coordinator_reads_through_to_its_session() -> None:
    upstream = RecordingUpstream()
    session = resume_chat_session(PLAIN, session_id="s", storage=MemoryStorage())
    coordinator = session.confirmations_for(upstream)
    binding = coordinator.propose("email.send", {})
    assert coordinator.get_snapshot() == session.confirmations == (binding,)
    assert coordinator.get_by_tool_call(binding.tool_call_id) == binding
    assert coordinator.get_by_tool_call("call-elsewhere") is None


class _SomeoneClaimsFirst(MemoryStorage):
    """Before the first save reaches storage, another client claims ``token``'s expiry and
    dies before finishing it (upstream refused), so that save meets a newer envelope."""

    def __init__(self) -> None:
        super().__init__()
        self.first: Any = None

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        first, self.first = self.first, None
        if first is not None:
            first()
        return super().save(snapshot, expected_cursor)

    def save_with_records(self, snapshot: Any, expected_cursor: int | None, records: Any) -> bool:
        # An audited claim is this one write (ADR-0141): the other client goes first here too.
        first, self.first = self.first, None
        if first is not None:
            first()
        return super().save_with_records(snapshot, expected_cursor, records)


def test_expire_due_skips_a_record_another_client_is_already_expiring() -> None:
    storage, now = _SomeoneClaimsFirst(), [1_000_000]
    upstream, theirs = RecordingUpstream(), RecordingUpstream()
    session = resume_chat_session(PLAIN, session_id="s", storage=storage, clock=lambda: now[0])
    coordinator = session.confirmations_for(upstream, ttl_ms=1_000)
    due = coordinator.propose("email.send", {})
    now[0] += 5_000
    other = resume_chat_session(PLAIN, session_id="s", storage=storage, clock=lambda: now[0])

    def claim_and_die() -> None:
        theirs.statuses[due.tool_call_id] = "requires_confirmation"
        theirs.fail_next = 1
        with pytest.raises(UpstreamFailed):
            other.confirmations_for(theirs).expire(due.token)

    storage.first = claim_and_die
    assert coordinator.expire_due() == ()  # a loser: the other client is settling it
    assert upstream.calls == []
    (record,) = stored(storage).confirmations  # type: ignore[union-attr]
    assert record.status.value == "expiring"


# --------------------------------------------------------------------------- reconcile


def test_reconcile_without_a_memory_is_refused_before_anything_is_read_or_saved() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    with_claim(storage, upstream)
    before = storage.load("s")
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match="ChatMemory"):
        reconcile(session, None, upstream=upstream)  # type: ignore[arg-type]
    assert storage.load("s") == before and upstream.calls == []


def test_a_statuses_answer_that_is_not_a_mapping_is_an_invalid_memory_record() -> None:
    class ListAnswer:
        def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Any:
            return [("call", "complete")]

    storage, upstream = MemoryStorage(), RecordingUpstream()
    with_claim(storage, upstream)
    before = storage.load("s")
    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    with pytest.raises(InvalidMemoryRecord, match="must return a mapping"):
        reconcile(session, ListAnswer(), upstream=upstream)  # type: ignore[arg-type]
    assert storage.load("s") == before and upstream.calls == []


def test_a_memory_that_loads_a_validated_record_is_read_like_the_raw_record() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    with_claim(storage, upstream)
    (call,) = upstream.proposed
    upstream.statuses[call] = "complete"  # upstream acted after all: the claim completes

    class Validated:
        def load(self) -> Any:
            return validate_memory_record(RecordingChatMemory(upstream).load())

    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    (outcome,) = reconcile(session, Validated())
    assert (outcome.action, outcome.record.status.value) == ("completed", "approved")
    assert upstream.executed[call] == 0  # completed from memory's evidence: no call made


def test_a_claim_settled_while_memory_was_read_is_reported_settled_and_left_alone() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    token = with_claim(storage, upstream)
    (call,) = upstream.proposed
    operator = resume_chat_session(PLAIN, session_id="s", storage=storage)

    class SlowMemory(RecordingChatMemory):
        def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> dict[str, str]:
            # Another process settles the claim between our read of storage and our save.
            reconcile(operator, RecordingChatMemory(upstream), upstream=upstream)
            return super().tool_call_statuses(tool_call_ids)

    session = resume_chat_session(PLAIN, session_id="s", storage=storage)
    (outcome,) = reconcile(session, SlowMemory(upstream), upstream=upstream)
    assert (outcome.token, outcome.action) == (token, "settled")
    assert outcome.record.status.value == "approved"
    assert upstream.calls == [("approve", call)]  # the operator's one resume, no second


def test_the_async_reconcile_function_and_expire_run_the_same_plans() -> None:
    async def main() -> None:
        inner, now = MemoryStorage(), [1_000_000]
        upstream = AsyncRecordingUpstream()
        session = await resume_chat_session_async(
            PLAIN, session_id="s", storage=AsyncMemoryStorage(inner), clock=lambda: now[0]
        )
        coordinator = session.confirmations_for(upstream, ttl_ms=1_000)
        first = await coordinator.propose("email.send", {})
        now[0] += 500
        second = await coordinator.propose("email.send", {})
        now[0] += 600  # past the first's expiry, not the second's
        expired = await coordinator.expire(first.token)
        assert expired.status.value == "expired"
        upstream.sync.fail_next = 1
        with pytest.raises(UpstreamFailed):
            await coordinator.approve(second.token)
        (outcome,) = await reconcile_async(
            session, AsyncRecordingChatMemory(upstream), upstream=upstream
        )
        assert (outcome.action, outcome.record.status.value) == ("resumed", "approved")
        assert upstream.sync.calls == [
            ("deny", first.tool_call_id, "confirmation expired"),
            ("approve", second.tool_call_id),
        ]

    asyncio.run(main())


# --------------------------------------------------------------------------- the sweep


class _IndexFailsTheSecondTime(MemoryStorage):
    """Lists once, then fails: the sweep's closing look at the index cannot be read."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure
        self.listed = 0

    def list_processing(self, **kwargs: Any) -> Any:
        self.listed += 1
        if self.listed > 1:
            raise self.failure
        return super().list_processing(**kwargs)


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (OSError("connection reset"), StorageUnavailable),
        (StorageUnavailable("index down"), StorageUnavailable),
    ],
)
def test_a_sweep_whose_closing_index_read_fails_raises_instead_of_calling_it_settled(
    failure: Exception, expected: type[AkchatError]
) -> None:
    storage, upstream = _IndexFailsTheSecondTime(failure), RecordingUpstream()
    with_claim(storage, upstream)

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(PLAIN, RecordingChatMemory(upstream), upstream)

    with pytest.raises(expected) as raised:
        reconcile_all(storage, ports_for, older_than_ms=0, clock=A_MINUTE_LATER)
    assert raised.value is failure or isinstance(raised.value.__cause__, OSError)
    # The session itself was reconciled before the closing read failed.
    (record,) = stored(storage).confirmations  # type: ignore[union-attr]
    assert record.status.value == "approved" and storage.listed == 2


def test_an_index_that_raises_a_typed_error_first_is_raised_as_it_is() -> None:
    storage = _IndexFailsTheSecondTime(StorageUnavailable("index down"))
    storage.listed = 1  # fail on the first read
    with pytest.raises(StorageUnavailable, match="index down"):
        reconcile_all(storage, lambda sid: None, older_than_ms=0)


def test_the_async_sweep_reports_progress_after_each_session() -> None:
    async def main() -> list[tuple[str, int, int]]:
        inner, upstream = MemoryStorage(), RecordingUpstream()
        with_claim(inner, upstream)
        (call,) = upstream.proposed
        upstream.statuses[call] = "complete"  # upstream acted: completed without a call
        seen: list[tuple[str, int, int]] = []

        def progress(swept: SweptSession, done: int, total: int) -> None:
            seen.append((swept.status, done, total))

        def ports_for(session_id: str) -> AsyncSweepPorts:
            return AsyncSweepPorts(PLAIN, AsyncRecordingChatMemory(upstream))

        report = await reconcile_all_async(
            AsyncMemoryStorage(inner),
            ports_for,
            older_than_ms=0,
            progress=progress,
            clock=A_MINUTE_LATER,
        )
        assert report.ok
        return seen

    assert asyncio.run(main()) == [("settled", 1, 1)]
