"""Confirmation coordinator: limits before upstream, no ghost, outcomes, retention, reconcile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from akchat_fsm.errors import (
    AlreadyResolved,
    ConfigError,
    IllegalTransition,
    LimitExceeded,
    OutcomeUnknown,
    StorageUnavailable,
)
from akchat_fsm.session import (
    ChatDefinition,
    SessionEvent,
    SessionEventKind,
    ToolCallProposal,
    reconcile,
    resume_chat_session,
)
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.testing.faulty import FaultyStorage
from akchat_fsm.wire.session import SessionSnapshot

DEFINITION = ChatDefinition("support")


def seeded(storage: MemoryStorage, statuses: list[str]) -> None:
    """Store a session holding one binding per status (built through the real model)."""
    snapshot = SessionSnapshot.model_validate(
        {
            "sessionId": "s",
            "definitionId": "support",
            "definitionRevision": 1,
            "updatedAt": "2026-07-11T00:00:00.000Z",
            "cursor": 1,
            "confirmations": [
                {
                    "token": f"confirm-{i}",
                    "action": "email.send",
                    "input": {},
                    "toolCallId": f"call-{i}",
                    "expiresAt": 10**12,
                    "status": status,
                }
                for i, status in enumerate(statuses)
            ],
        }
    )
    assert storage.save(snapshot, None)


def test_limits_are_checked_before_upstream_is_called() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    coordinator = resume_chat_session(
        DEFINITION, session_id="s", storage=storage
    ).confirmations_for(upstream)
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(25):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(LimitExceeded):
        coordinator.propose("email.send", deep)
    with pytest.raises(ConfigError):
        coordinator.propose("not an identifier!", {})
    assert upstream.proposed == []


def test_a_thousand_live_confirmations_refuse_the_next_before_upstream() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    seeded(storage, ["pending"] * 1000)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(LimitExceeded):
        session.confirmations_for(upstream).propose("email.send", {})
    assert upstream.proposed == []


def test_retention_prunes_old_terminal_records_so_proposals_keep_working() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    seeded(storage, ["approved"] * 995 + ["pending"] * 4)
    events: list[SessionEvent] = []
    session = resume_chat_session(
        DEFINITION, session_id="s", storage=storage, observers=[events.append]
    )
    record = session.confirmations_for(upstream).propose("email.send", {})
    statuses = [str(b.status) for b in session.confirmations]
    assert statuses.count("pending") == 5  # live records are never pruned
    assert statuses.count("approved") == 256  # the newest terminal records are kept
    assert session.confirmations[-1] == record
    assert [e.kind for e in events] == [SessionEventKind.PRUNED, SessionEventKind.CONFIRMATION]


def test_a_failed_propose_leaves_no_ghost() -> None:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    storage = FaultyStorage(inner)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    session.persist()
    storage.fail_next_save("unavailable")
    with pytest.raises(StorageUnavailable):
        session.confirmations_for(upstream).propose("email.send", {})
    (call,) = upstream.proposed  # upstream created the call, but it could not be bound ...
    assert upstream.calls == [("deny", call, "proposal could not be recorded")]  # ... so denied
    assert session.confirmations == ()  # no binding exists anywhere
    assert '"confirmations":[]' in str(inner.load("s"))


def test_a_proposal_upstream_already_handled_is_born_rejected_without_deny() -> None:
    upstream = RecordingUpstream(born="complete")
    session = resume_chat_session(DEFINITION, session_id="s", storage=MemoryStorage())
    record = session.confirmations_for(upstream).propose("email.send", {})
    assert record.status == "rejected" and upstream.calls == []


def test_repeats_are_idempotent_and_other_intents_are_typed_losers() -> None:
    upstream = RecordingUpstream()
    session = resume_chat_session(DEFINITION, session_id="s", storage=MemoryStorage())
    coordinator = session.confirmations_for(upstream)
    token = coordinator.propose("email.send", {}).token
    assert coordinator.reject(token, reason="not now").status == "rejected"
    assert coordinator.reject(token).status == "rejected"  # the same answer, nothing called
    with pytest.raises(AlreadyResolved) as lost:
        coordinator.approve(token)
    assert lost.value.record.status == "rejected"
    assert upstream.calls == [("deny", f"app-{token.removeprefix('confirm-')}", "not now")]


def test_expiry_is_checked_on_every_path_against_the_injected_clock() -> None:
    now = [0]
    upstream = RecordingUpstream()
    session = resume_chat_session(
        DEFINITION, session_id="s", storage=MemoryStorage(), clock=lambda: now[0]
    )
    coordinator = session.confirmations_for(upstream, ttl_ms=10)
    early, late = (coordinator.propose("email.send", {"n": n}).token for n in (1, 2))
    with pytest.raises(IllegalTransition):
        coordinator.expire(early)  # not due yet
    now[0] = 10
    assert coordinator.reject(late, reason="no").status == "expired"  # reject too (§7.3)
    assert [r.status for r in coordinator.expire_due()] == ["expired"]
    assert all(call[0] == "deny" and call[2] == "confirmation expired" for call in upstream.calls)


def test_reconcile_settles_processing_records_from_memory() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    seeded(storage, ["approving", "rejecting", "approving", "expiring"])
    upstream.statuses.update(
        {"call-0": "complete", "call-1": "requires_confirmation", "call-2": "running"}
    )  # call-3 is not in memory at all
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    outcomes = reconcile(session, RecordingChatMemory(upstream), upstream=upstream)
    assert [(o.token, o.action, o.record.status) for o in outcomes] == [
        ("confirm-0", "completed", "approved"),
        ("confirm-1", "resumed", "rejected"),
        ("confirm-2", "completed", "approved"),
        ("confirm-3", "unknown", "expiring"),
    ]
    assert upstream.calls == [("deny", "call-1", "confirmation rejected")]


def test_reconcile_can_release_untouched_claims_back_to_pending() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    seeded(storage, ["approving"])
    upstream.statuses["call-0"] = "requires_confirmation"
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    (outcome,) = session.reconcile(RecordingChatMemory(upstream), release_untouched=True)
    assert (outcome.action, outcome.record.status) == ("released", "pending")
    assert upstream.calls == []


def test_observers_see_one_event_per_durable_transition_and_cannot_break_it() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    seen: list[tuple[str | None, str]] = []

    def explode(event: SessionEvent) -> None:
        raise RuntimeError("observer bug")

    def record(event: SessionEvent) -> None:
        assert event.record is not None
        seen.append((event.previous_status, str(event.record.status)))

    first = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    token = first.confirmations_for(upstream).propose("email.send", {}).token
    resumed = resume_chat_session(
        DEFINITION, session_id="s", storage=storage, observers=[explode, record]
    )
    assert resumed.confirmations_for(upstream).approve(token).status == "approved"
    assert seen == [("pending", "approving"), ("approving", "approved")]


def test_default_ids_are_random_not_sequence_and_time() -> None:
    """Two sessions proposing at the same instant get unrelated 128-bit tokens (docs/reference.md
    §7)."""
    upstream = RecordingUpstream()
    tokens = []
    for session_id in ("s1", "s2"):
        session = resume_chat_session(
            DEFINITION, session_id=session_id, storage=MemoryStorage(), clock=lambda: 5
        )
        coordinator = session.confirmations_for(upstream)
        tokens += [coordinator.propose("email.send", {}).token for _ in range(2)]
    suffixes = [token.removeprefix("confirm-") for token in tokens]
    assert len(set(suffixes)) == 4
    assert all(len(suffix) == 32 and int(suffix, 16) >= 0 for suffix in suffixes)
    # the tool-call id carries the same random suffix, so it is no more guessable
    assert sorted(upstream.proposed) == sorted(f"app-{suffix}" for suffix in suffixes)


def test_a_save_left_unknown_is_reported_to_observers_once_a_reload_settles_it() -> None:
    """The claim applied but its settling re-read failed: the next read settles it and the
    observers still see pending -> approving, then approving -> approved, once each."""
    inner = MemoryStorage()
    storage, upstream = FaultyStorage(inner), RecordingUpstream()
    seen: list[tuple[str | None, str]] = []

    def record(event: SessionEvent) -> None:
        assert event.record is not None
        seen.append((event.previous_status, str(event.record.status)))

    session = resume_chat_session(DEFINITION, session_id="s", storage=storage, observers=[record])
    token = session.confirmations_for(upstream).propose("email.send", {}).token
    storage.fail_next_save("unknown_after_apply")
    storage.fail_next_load("unavailable")
    with pytest.raises(OutcomeUnknown):
        session.confirmations_for(upstream).approve(token)
    assert seen == [(None, "pending")]  # not known yet: nothing reported
    session.reconcile(RecordingChatMemory(upstream), upstream=upstream)
    assert seen == [(None, "pending"), ("pending", "approving"), ("approving", "approved")]
    session.reload()  # settled: a later read reports nothing again
    assert len(seen) == 3


class _LostSave:
    """Sync storage whose armed save times out *without* applying, then whose re-read fails."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner, self.armed = inner, 0

    def load(self, session_id: str) -> object:
        if self.armed == 1:
            self.armed = 0
            raise TimeoutError("re-read timed out")
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        if self.armed == 2:
            self.armed = 1
            raise TimeoutError("send timed out")  # never reached the store
        return self.inner.save(snapshot, expected_cursor)


def test_a_save_left_unknown_that_did_not_apply_is_never_reported() -> None:
    inner = MemoryStorage()
    storage = _LostSave(inner)
    seen: list[SessionEvent] = []
    session = resume_chat_session(
        DEFINITION, session_id="s", storage=storage, observers=[seen.append]
    )
    session.persist()
    storage.armed = 2
    with pytest.raises(OutcomeUnknown):
        session.persist()
    resume_chat_session(DEFINITION, session_id="s", storage=inner).persist()  # someone else
    session.reload()  # cursor 2 is the other client's write, not ours
    assert [event.cursor for event in seen] == [1]
    assert session.cursor == 2


class _RacingUpstream(RecordingUpstream):
    """Runs ``meanwhile`` inside its first proposal: another client saves while upstream works."""

    def __init__(self, meanwhile: Any) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return super().propose_tool_call(id, name, args)


class _Contended:
    """Storage for one client: before each of its first ``rounds`` saves, another client saves."""

    def __init__(self, inner: MemoryStorage, rounds: int, other: Any) -> None:
        self.inner, self.rounds, self.other = inner, rounds, other

    def load(self, session_id: str) -> object:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        if self.rounds > 0:
            self.rounds -= 1
            self.other()
        return self.inner.save(snapshot, expected_cursor)


def test_a_propose_that_meets_concurrent_saves_rebases_without_proposing_again() -> None:
    storage = MemoryStorage()
    other = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    other.persist()
    elsewhere = RecordingUpstream()

    def propose_elsewhere() -> None:
        other.confirmations_for(elsewhere).propose("a.b", {})

    contended = _Contended(storage, rounds=6, other=propose_elsewhere)
    mine = resume_chat_session(DEFINITION, session_id="s", storage=contended)
    upstream = RecordingUpstream()
    record = mine.confirmations_for(upstream).propose("email.send", {})  # lost six races
    assert upstream.proposed == [record.tool_call_id]  # upstream was asked once
    stored = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert [b.tool_call_id for b in stored.confirmations] == [
        *elsewhere.proposed,
        record.tool_call_id,
    ]
    assert len(elsewhere.proposed) == 6 and stored.cursor == 8 and upstream.calls == []


def test_a_rebase_refused_on_the_fresh_envelope_denies_the_unbound_call_upstream() -> None:
    """Limits are re-checked on the fresh envelope; a call that cannot be bound is denied."""
    storage = MemoryStorage()
    seeded(storage, ["pending"] * 999)
    other = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    mine = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    upstream = _RacingUpstream(
        lambda: other.confirmations_for(RecordingUpstream()).propose("a.b", {})
    )
    with pytest.raises(LimitExceeded) as refused:
        mine.confirmations_for(upstream).propose("email.send", {})  # 999 live when it checked
    (call,) = upstream.proposed
    assert upstream.calls == [("deny", call, "proposal could not be recorded")]
    assert any("denied upstream" in note for note in refused.value.__notes__)
    stored = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert len(stored.confirmations) == 1000 and stored.get_by_tool_call(call) is None


@pytest.mark.parametrize(
    "answer",
    [{"id": 5, "name": "email.send"}, {"name": "email.send"}, "ok", {"id": "x", "status": "odd"}],
)
def test_an_invalid_proposal_from_upstream_is_refused_and_its_call_denied(answer: Any) -> None:
    class Nonsense(RecordingUpstream):
        def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
            super().propose_tool_call(id, name, args)
            return answer

    upstream = Nonsense()
    session = resume_chat_session(DEFINITION, session_id="s", storage=MemoryStorage())
    with pytest.raises(ConfigError, match=r"Upstream (returned an invalid|tool call does not fit)"):
        session.confirmations_for(upstream).propose("email.send", {})
    (call,) = upstream.proposed
    assert upstream.calls == [("deny", call, "proposal could not be recorded")]
    assert session.confirmations == () and not session.exists
