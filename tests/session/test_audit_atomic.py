"""The audited claim as one atomic write (ADR-0141): entry + claim, or neither.

On a store with ``SaveWithRecords`` the audit entry is created by the claim's own write, so
an entry exists iff its claim applied. These scenarios run on the in-memory store behind a
double that loses the combined write's reply (after applying it, or before): the outcome is
settled by re-reading the envelope, exactly like a plain claim's, and a decision whose write
did not apply leaves no entry anywhere. tests/storage/test_save_with_records.py runs the
session on every real server; the asyncio twin runs the same plan here.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from akchat_fsm import StorageUnavailable
from akchat_fsm.session import (
    ChatDefinition,
    audit_trail,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.audit import audit_key
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import AsyncRecordingUpstream, RecordingUpstream

DEFINITION = ChatDefinition("support")
ARGS = {"to": "a@example.com", "amount": 12.5}


class LosesTheReply:
    """The memory store, whose next ``save_with_records`` raises ``TimeoutError``: after
    applying (``applies``) or before. Every other write is counted and forwarded."""

    def __init__(self, inner: MemoryStorage, applies: bool) -> None:
        self.inner, self.applies, self.armed, self.writes = inner, applies, False, 0

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        self.writes += 1
        return self.inner.save(snapshot, expected_cursor)

    def save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        self.writes += 1
        if self.armed:
            self.armed = False
            if self.applies:
                self.inner.save_with_records(snapshot, expected, records)
            raise TimeoutError("no reply")
        return self.inner.save_with_records(snapshot, expected, records)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        self.writes += 1
        return self.inner.save_record(session_id, key, text, *args, **kw)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return self.inner.list_records(session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)


def _proposed(applies: bool) -> tuple[MemoryStorage, LosesTheReply, RecordingUpstream, str]:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    store = LosesTheReply(inner, applies)
    session = resume_chat_session(DEFINITION, session_id="s", storage=store)
    token = session.confirmations_for(upstream).propose("email.send", ARGS).token
    store.armed, store.writes = True, 0
    return inner, store, upstream, token


def _approve(store: LosesTheReply, upstream: RecordingUpstream, token: str) -> str:
    session = resume_chat_session(DEFINITION, session_id="s", storage=store)
    return str(session.confirmations_for(upstream).approve(token, decided_by="ana").status)


def test_a_combined_write_that_applied_with_no_reply_is_the_decision() -> None:
    inner, store, upstream, token = _proposed(applies=True)
    assert _approve(store, upstream, token) == "approved"
    assert [(e.principal, e.decided) for e in audit_trail(inner, "s")] == [("ana", True)]
    assert len(upstream.calls) == 1
    assert store.writes == 2  # the combined write (its reply lost), then the terminal save
    (entry,) = audit_trail(inner, "s")
    assert inner.list_records("s", "audit:") == [audit_key(token, entry.cursor)]


def test_a_combined_write_that_did_not_apply_leaves_no_entry_and_a_retry_decides() -> None:
    inner, store, upstream, token = _proposed(applies=False)
    before = inner.load("s")
    with pytest.raises(StorageUnavailable, match="not applied when read"):
        _approve(store, upstream, token)
    # neither half: the envelope as it was, and no entry names a decision that never applied
    assert inner.load("s") == before and inner.list_records("s", "audit:") == []
    assert upstream.calls == []
    assert _approve(store, upstream, token) == "approved"
    assert [(e.principal, e.decided) for e in audit_trail(inner, "s")] == [("ana", True)]


def test_the_asyncio_twin_claims_with_its_entry_in_one_write() -> None:
    async def scenario() -> tuple[int, list[tuple[str | None, bool]], int]:
        inner = MemoryStorage()
        writes = 0

        class Counting(AsyncMemoryStorage):
            async def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
                nonlocal writes
                writes += 1
                return await super().save(snapshot, expected_cursor)

            async def save_with_records(
                self, snapshot: Any, expected: int | None, records: Any
            ) -> bool:
                nonlocal writes
                writes += 1
                return await super().save_with_records(snapshot, expected, records)

            async def save_record(self, *args: Any, **kw: Any) -> bool:
                nonlocal writes
                writes += 1
                return await super().save_record(*args, **kw)

        upstream = AsyncRecordingUpstream()
        session = await resume_chat_session_async(
            DEFINITION, session_id="s", storage=Counting(inner)
        )
        coordinator = session.confirmations_for(upstream)
        token = (await coordinator.propose("email.send", ARGS)).token
        writes = 0
        await coordinator.approve(token, decided_by="ana")
        trail = [(e.principal, e.decided) for e in audit_trail(inner, "s")]
        return writes, trail, len(upstream.sync.calls)

    assert asyncio.run(scenario()) == (2, [("ana", True)], 1)
