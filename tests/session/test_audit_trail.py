"""Who decided (ADR-0132): an entry before every claim, the highest cursor is the decision.

Each scenario runs on the in-memory store (the records capability); the SQL and Redis
adapters run the same plans (tests/storage and the stateful suites). Every refused or lost
decision is checked to name nobody as the decider.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from akchat_fsm import AlreadyResolved, ConfigError, StorageUnavailable, arguments_digest
from akchat_fsm.session import (
    ChatDefinition,
    audit_trail,
    audit_trail_async,
    reconcile,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.audit import audit_key
from akchat_fsm.session.session import keeps_records
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)

DEFINITION = ChatDefinition("support")
ARGS = {"to": "a@example.com", "amount": 12.5}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def _open(storage: object, clock: Clock, upstream: RecordingUpstream | None = None) -> object:
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage, clock=clock)
    return session.confirmations_for(upstream or RecordingUpstream())


def _stored_cursor(storage: MemoryStorage) -> int:
    stored = storage.load("s")
    assert stored is not None
    return int(json.loads(stored[0] if isinstance(stored, tuple) else stored)["cursor"])


def _proposed() -> tuple[MemoryStorage, Clock, RecordingUpstream, object, str]:
    storage, clock, upstream = MemoryStorage(), Clock(), RecordingUpstream()
    coordinator = _open(storage, clock, upstream)
    token = coordinator.propose("email.send", ARGS).token  # type: ignore[attr-defined]
    return storage, clock, upstream, coordinator, token


def test_an_approval_names_its_principal_before_its_claim() -> None:
    storage, clock, upstream, coordinator, token = _proposed()
    before = _stored_cursor(storage)
    clock.now = 2_000
    coordinator.approve(token, decided_by="ana@example.com", via="inbox")  # type: ignore[attr-defined]
    (entry,) = audit_trail(storage, "s")
    assert (entry.token, entry.intent, entry.claims, entry.cursor) == (
        token,
        "approve",
        "approving",
        before,
    )
    assert (entry.principal, entry.via, entry.at_ms, entry.decided) == (
        "ana@example.com",
        "inbox",
        2_000,
        True,
    )
    assert entry.args_digest == arguments_digest(ARGS)
    assert entry.action == "email.send" and entry.reason is None
    assert upstream.calls == [("approve", entry.tool_call_id)]


def test_a_rejection_keeps_its_reason_and_a_refused_decision_writes_no_entry() -> None:
    storage, _, _, coordinator, token = _proposed()
    coordinator.reject(token, reason="wrong amount", decided_by="bo")  # type: ignore[attr-defined]
    with pytest.raises(AlreadyResolved):
        coordinator.approve(token, decided_by="cy")  # type: ignore[attr-defined]
    (entry,) = audit_trail(storage, "s")
    assert (entry.principal, entry.intent, entry.reason, entry.decided) == (
        "bo",
        "reject",
        "wrong amount",
        True,
    )


def test_a_stale_decider_loses_to_the_claim_and_is_named_nowhere() -> None:
    storage, clock, upstream, ana, token = _proposed()
    bo = _open(storage, clock, upstream)  # read the pending call at the same cursor as ana
    ana.approve(token, decided_by="ana")  # type: ignore[attr-defined]
    with pytest.raises(AlreadyResolved):
        bo.reject(token, reason="no", decided_by="bo")  # type: ignore[attr-defined]
    trail = audit_trail(storage, "s")
    assert [(e.principal, e.decided) for e in trail] == [("ana", True)]


def test_an_entry_whose_writer_died_before_its_claim_is_fenced_and_never_the_decision() -> None:
    storage, _clock, upstream, coordinator, token = _proposed()
    dead_at = _stored_cursor(storage)
    # mallory wrote her entry at this cursor and died before sending her claim
    mallory = {
        "v": 1, "token": token, "toolCallId": "x", "action": "email.send", "cursor": dead_at,
        "intent": "approve", "claims": "approving", "principal": "mallory", "via": "api",
        "reason": None, "argsDigest": arguments_digest(ARGS), "at": 1_000,
    }  # fmt: skip
    assert storage.save_record("s", audit_key(token, dead_at), json.dumps(mallory), None)
    coordinator.reject(token, reason="no", decided_by="bo")  # type: ignore[attr-defined]
    trail = audit_trail(storage, "s")
    assert [(e.principal, e.cursor, e.decided) for e in trail] == [
        ("mallory", dead_at, False),
        ("bo", dead_at + 1, True),  # the fence moved the cursor; bo claimed at the next one
    ]
    # mallory's claim, were she to send it now, expects a cursor that is gone
    assert _stored_cursor(storage) == dead_at + 3  # fence, claim, completion
    assert upstream.calls == [("deny", trail[1].tool_call_id, "no")]


def test_a_claimant_killed_after_its_claim_is_still_the_decision_and_a_release_unnames_it() -> None:
    storage, clock, upstream, coordinator, token = _proposed()
    upstream.fail_next = 1  # the claim is saved, then upstream fails: left processing
    with pytest.raises(Exception, match="Upstream failed"):
        coordinator.approve(token, decided_by="ana")  # type: ignore[attr-defined]
    assert [(e.principal, e.decided) for e in audit_trail(storage, "s")] == [("ana", True)]
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage, clock=clock)
    released = reconcile(
        session, RecordingChatMemory(upstream), upstream=upstream, release_untouched=True
    )
    assert [o.action for o in released] == ["released"]
    assert [(e.principal, e.decided) for e in audit_trail(storage, "s")] == [("ana", False)]
    _open(storage, clock, upstream).approve(token, decided_by="bo")  # type: ignore[attr-defined]
    assert [(e.principal, e.decided) for e in audit_trail(storage, "s")] == [
        ("ana", False),
        ("bo", True),
    ]


def test_the_sweep_expires_as_itself_and_a_trail_filters_by_call_and_time() -> None:
    storage, clock, _upstream, coordinator, token = _proposed()
    other = coordinator.propose("email.send", {"to": "b"}).token  # type: ignore[attr-defined]
    clock.now = 1_500
    coordinator.approve(other, decided_by="ana")  # type: ignore[attr-defined]
    clock.now = 10**9
    (expired,) = coordinator.expire_due()  # type: ignore[attr-defined]
    assert expired.token == token
    (entry,) = audit_trail(storage, "s", token=token)
    assert (entry.principal, entry.via, entry.intent, entry.claims, entry.decided) == (
        None,
        "sweep",
        "expire",
        "expiring",
        True,
    )
    assert [e.principal for e in audit_trail(storage, "s", since_ms=10**9)] == [None]
    assert [e.token for e in audit_trail(storage, "s", since_ms=0)] == sorted([token, other])


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"decided_by": ""}, "decided_by"),
        ({"decided_by": "a" * 257}, "decided_by"),
        ({"decided_by": "ana\u202e"}, "decided_by"),
        ({"decided_by": "ana\n"}, "decided_by"),
        ({"decided_by": 7}, "decided_by"),
        ({"via": "email"}, "via"),
    ],
)
def test_a_bad_decider_is_refused_before_anything_is_read_or_written(
    options: dict[str, object], match: str
) -> None:
    storage, _, upstream, coordinator, token = _proposed()
    before = storage.load("s")
    with pytest.raises(ConfigError, match=match):
        coordinator.approve(token, **options)  # type: ignore[attr-defined]
    assert storage.load("s") == before
    assert audit_trail(storage, "s") == ()
    assert upstream.calls == []


class EnvelopeOnly:
    """A third-party adapter with the envelope's compare-and-set and nothing else."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner

    def load(self, session_id: str) -> object:
        return self.inner.load(session_id)

    def save(self, snapshot: object, expected_cursor: int | None) -> bool:
        return self.inner.save(snapshot, expected_cursor)  # type: ignore[arg-type]


def test_a_store_without_records_decides_but_says_it_keeps_no_trail() -> None:
    inner = MemoryStorage()
    storage = EnvelopeOnly(inner)
    coordinator = _open(storage, Clock())
    token = coordinator.propose("email.send", ARGS).token  # type: ignore[attr-defined]
    assert coordinator.approve(token, decided_by="ana").status == "approved"  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="no records capability"):
        audit_trail(storage, "s")
    assert inner.list_records("s", "audit:") == []


def test_the_asyncio_twin_writes_and_reads_the_same_trail() -> None:
    async def scenario() -> None:
        storage = AsyncMemoryStorage()
        session = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
        coordinator = session.confirmations_for(AsyncRecordingUpstream())
        token = (await coordinator.propose("email.send", ARGS)).token
        await coordinator.reject(token, reason="no", decided_by="ana", via="cli")
        (entry,) = await audit_trail_async(storage, "s")
        assert (entry.principal, entry.via, entry.reason, entry.decided) == (
            "ana",
            "cli",
            "no",
            True,
        )
        assert entry.to_json()["principal"] == "ana"

    asyncio.run(scenario())


class AuditWriteFails:
    """The session's storage, whose next audit-entry write raises: after applying it (a
    timed-out reply) or before (refused); the library cannot tell the two apart."""

    def __init__(self, inner: MemoryStorage, applies: bool) -> None:
        self.inner, self.applies, self.armed = inner, applies, True

    # Spelled out, not forwarded by __getattr__: from Python 3.12 a runtime-checkable
    # protocol's isinstance looks methods up statically, so forwarding would hide the records
    # capability and no entry would be written at all.
    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        return self.inner.save(snapshot, expected_cursor)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return self.inner.list_records(session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        if self.armed and key.startswith("audit:"):
            self.armed = False
            if self.applies:
                self.inner.save_record(session_id, key, text, *args, **kw)
            raise TimeoutError("no reply")
        return self.inner.save_record(session_id, key, text, *args, **kw)


def test_an_audit_write_that_applied_with_no_reply_is_settled_by_reading_it_back() -> None:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    storage = AuditWriteFails(inner, applies=True)
    assert keeps_records(storage)
    coordinator = _open(storage, Clock(), upstream)
    token = coordinator.propose("email.send", ARGS).token  # type: ignore[attr-defined]
    assert coordinator.approve(token, decided_by="ana").status == "approved"  # type: ignore[attr-defined]
    assert [(e.principal, e.decided) for e in audit_trail(inner, "s")] == [("ana", True)]
    assert len(upstream.calls) == 1


def test_an_audit_write_that_did_not_apply_sends_no_claim_and_a_retry_decides() -> None:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    storage = AuditWriteFails(inner, applies=False)
    coordinator = _open(storage, Clock(), upstream)
    token = coordinator.propose("email.send", ARGS).token  # type: ignore[attr-defined]
    before = inner.load("s")
    with pytest.raises(StorageUnavailable, match="audit entry"):
        coordinator.approve(token, decided_by="ana")  # type: ignore[attr-defined]
    assert inner.load("s") == before and upstream.calls == []
    assert coordinator.approve(token, decided_by="ana").status == "approved"  # type: ignore[attr-defined]
    assert [(e.principal, e.decided) for e in audit_trail(inner, "s")] == [("ana", True)]


@pytest.mark.parametrize(
    "bad",
    [{"principal": 7}, {"reason": ["no"]}, {"argsDigest": None}, {"cursor": "3"}, {"v": 2}],
)
def test_an_unreadable_entry_is_skipped_never_raised(bad: dict[str, object]) -> None:
    storage, _, _, coordinator, token = _proposed()
    coordinator.approve(token, decided_by="ana")  # type: ignore[attr-defined]
    (good,) = audit_trail(storage, "s")
    forged = {**good.to_json(), "v": 1, "nonce": 1, "at": 1, **bad}
    assert storage.save_record("s", audit_key(token, good.cursor + 10), json.dumps(forged), None)
    assert audit_trail(storage, "s") == (good,)
