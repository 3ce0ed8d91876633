"""Every decision since T, across sessions (ADR-0139): ``audit_log`` over the audit index.

The entries are the ones ``audit_trail`` reads per session, in the index's order, each marked
``decided`` the same way, page by page with bounded work; a storage without the capability is
a typed error naming it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from akchat_fsm import AlreadyResolved, ConfigError
from akchat_fsm.integrations.ledger import (
    SETTLE_AUDIT_PREFIX,
    ClaimRequest,
    SettleAuditEntry,
    ToolLedger,
    args_digest,
    plan_execute,
    settle_trail,
)
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.session.audit import (
    AUDIT_PREFIX,
    AuditEntry,
    AuditPage,
    audit_log,
    audit_log_async,
    audit_trail,
)
from akchat_fsm.session.effects import LoadRecord, RunBody, SaveRecord
from akchat_fsm.storage import (
    AUDIT_KEY_PREFIX,
    AUDIT_KEY_PREFIXES,
    AsyncMemoryStorage,
    MemoryStorage,
    MissingCapability,
)
from akchat_fsm.testing.doubles import RecordingUpstream

DEFINITION = ChatDefinition("support")


def _coordinator(storage: Any, session_id: str) -> Any:
    clock = iter(range(1_000, 10**9, 1_000))
    session = resume_chat_session(
        DEFINITION, session_id=session_id, storage=storage, clock=lambda: next(clock)
    )
    return session.confirmations_for(RecordingUpstream())


def _decided_in_two_sessions(storage: MemoryStorage) -> None:
    """s-1: ana approves, bo (stale) loses; s-2: cy rejects one call, another stays pending."""
    ana = _coordinator(storage, "s-1")
    token = ana.propose("pay", {"amount": 5}).token
    bo = _coordinator(storage, "s-1")  # reads the pending call at ana's cursor
    ana.approve(token, decided_by="ana")
    with pytest.raises(AlreadyResolved):
        bo.reject(token, reason="no", decided_by="bo")
    cy = _coordinator(storage, "s-2")
    rejected = cy.propose("pay", {"amount": 7}).token
    cy.propose("pay", {"amount": 9})
    cy.reject(rejected, reason="too much", decided_by="cy")


def _walk(storage: Any, limit: int, **kwargs: Any) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    after = None
    for _ in range(50):
        page = audit_log(storage, after=after, limit=limit, **kwargs)
        assert isinstance(page, AuditPage)
        entries += page.entries
        after = page.next_after
        if after is None:
            return entries
    raise AssertionError("the walk did not end")


def test_the_entries_of_every_session_as_each_session_trail_marks_them() -> None:
    storage = MemoryStorage()
    _decided_in_two_sessions(storage)
    every = _walk(storage, 1000)
    per_session = [*audit_trail(storage, "s-1"), *audit_trail(storage, "s-2")]
    assert sorted(every, key=repr) == sorted(per_session, key=repr)
    assert [(e.session_id, e.principal, e.decided) for e in every] == [
        ("s-1", "ana", True),
        ("s-2", "cy", True),
    ]
    # The stale decider wrote no entry (it lost before writing); its refusal names nobody.
    assert all(e.principal != "bo" for e in every)


def test_pages_of_one_mark_an_entry_whose_winner_is_on_another_page() -> None:
    storage = MemoryStorage()
    ana = _coordinator(storage, "s-1")
    token = ana.propose("pay", {"amount": 5}).token
    # Two attempts at the same call: a writer that died after its entry (at the first cursor)
    # and ana, whose entry at the next cursor is the decision.
    ana.approve(token, decided_by="ana")
    key = next(k for k in storage.list_records("s-1", AUDIT_PREFIX))
    stored = storage.load_record("s-1", key)
    assert stored is not None
    fields = {**json.loads(stored[1]), "principal": "dead"}
    fields["cursor"] -= 1
    dead = key[: -len("0000000000000000")] + f"{fields['cursor']:016d}"
    assert storage.save_record("s-1", dead, json.dumps(fields), None)
    walked = _walk(storage, 1)
    marked = {e.principal: e.decided for e in walked}
    assert marked == {"ana": True, "dead": False}
    assert {(e.principal, e.decided) for e in audit_trail(storage, "s-1")} == set(marked.items())


def test_since_keeps_the_entries_the_store_wrote_from_then_on() -> None:
    storage = MemoryStorage()
    _decided_in_two_sessions(storage)
    stamps = [r.written_ms for r in storage.list_audit(limit=1000).items]
    assert _walk(storage, 10, since_ms=max(stamps) + 1) == []
    assert len(_walk(storage, 10, since_ms=min(stamps))) == 2


def test_a_storage_without_the_audit_index_is_a_typed_error_naming_it() -> None:
    class RecordsOnly:
        """A third-party adapter: envelopes and records, no audit index."""

        def __init__(self) -> None:
            self.inner = MemoryStorage()
            for name in ("load", "save", "load_record", "save_record", "list_records"):
                setattr(self, name, getattr(self.inner, name))
            self.delete_record = self.inner.delete_record

    storage = RecordsOnly()
    with pytest.raises(MissingCapability) as raised:
        audit_log(storage)
    assert raised.value.capability == "AuditIndex" and raised.value.methods == ("list_audit",)
    assert isinstance(raised.value, ConfigError) and "AuditIndex" in str(raised.value)
    # The per-session trail still works there.
    assert audit_trail(storage, "s-1") == ()


@pytest.mark.parametrize(
    "kwargs", [{"limit": 0}, {"since_ms": "yesterday"}, {"after": "not-a-cursor"}]
)
def test_bad_arguments_are_refused_before_anything_is_read(kwargs: dict[str, Any]) -> None:
    class Refuses(MemoryStorage):
        def list_audit(self, **_: Any) -> Any:
            raise AssertionError("read despite a bad argument")

    with pytest.raises(ConfigError):
        audit_log(Refuses(), **kwargs)


def test_the_asyncio_twin_reads_the_same_pages() -> None:
    storage = MemoryStorage()
    _decided_in_two_sessions(storage)

    async def walk() -> list[AuditEntry]:
        entries: list[AuditEntry] = []
        after = None
        while True:
            page = await audit_log_async(AsyncMemoryStorage(storage), after=after, limit=1)
            entries += page.entries
            if (after := page.next_after) is None:
                return entries

    assert asyncio.run(walk()) == _walk(storage, 1)


def test_the_entries_are_written_under_the_prefix_the_storage_indexes() -> None:
    assert AUDIT_PREFIX == AUDIT_KEY_PREFIX


def _settled(storage: MemoryStorage, session_id: str, call: str) -> None:
    """A claimant dies inside ``call``'s body; ana settles it (did not run)."""
    request = ClaimRequest(call, "send", args_digest({}), "dead", "nonce", 5)
    plan = plan_execute(session_id, request)
    effect = next(plan)
    while not isinstance(effect, RunBody):
        if isinstance(effect, LoadRecord):
            value: Any = storage.load_record(effect.session_id, effect.key)
        else:
            assert isinstance(effect, SaveRecord)
            value = storage.save_record(
                effect.session_id,
                effect.key,
                effect.text,
                effect.expected_version,
                processing=effect.processing,
            )
        effect = plan.send(value)
    plan.close()
    ToolLedger(storage, session_id).settle(call, ran=False, operator="ana", via="cli")


def test_the_settles_are_listed_among_the_decisions_in_index_order() -> None:
    # Issue #23: every decision, an operator's settle included, is in the cross-session audit.
    storage = MemoryStorage()
    _decided_in_two_sessions(storage)
    _settled(storage, "s-2", "c1")
    every = _walk(storage, 1)
    # Index order is (written_ms, session, key): the settle was written last, but within one
    # millisecond "audit-settle:" sorts before "audit:", so only the kinds are fixed here and
    # the order is the one every page size agrees on (below).
    assert sorted(type(e).__name__ for e in every) == [
        "AuditEntry",
        "AuditEntry",
        "SettleAuditEntry",
    ]
    assert audit_log(storage, limit=1000).entries == tuple(every)
    (settle,) = [e for e in every if isinstance(e, SettleAuditEntry)]
    assert settle == settle_trail(storage, "s-2")[0] and settle.decided
    assert (settle.session_id, settle.principal, settle.via) == ("s-2", "ana", "cli")
    assert asyncio.run(audit_log_async(AsyncMemoryStorage(storage), limit=1000)).entries == tuple(
        every
    )


def test_a_page_of_one_marks_a_settle_a_later_verdict_followed() -> None:
    # ana's release applied, then bo's verdict on the re-run: the ledger names bo's nonce, and
    # ana's applied because bo's entry (a later attempt, read off its page) follows it.
    storage = MemoryStorage()
    _settled(storage, "s-3", "c1")
    _settled(storage, "s-3", "c1")
    walked = _walk(storage, 1)
    assert len(walked) == 2 and all(isinstance(e, SettleAuditEntry) for e in walked)
    assert walked == list(settle_trail(storage, "s-3"))
    assert [e.decided for e in walked] == [True, True]


def test_the_index_covers_both_prefixes_of_the_session_layer() -> None:
    assert AUDIT_PREFIX in AUDIT_KEY_PREFIXES and SETTLE_AUDIT_PREFIX.startswith(AUDIT_KEY_PREFIXES)
