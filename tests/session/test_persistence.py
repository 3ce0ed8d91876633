"""persist(): one CAS save; conflicts never poison the object; unknown outcomes settle."""

from __future__ import annotations

import pytest

from akchat_fsm.errors import OutcomeUnknown, SessionConflict, StorageUnavailable
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.testing.faulty import FaultyStorage
from akchat_fsm.wire.decode import decode_session_snapshot

DEFINITION = ChatDefinition("support")


def stored_cursor(storage: MemoryStorage, session_id: str = "s") -> int | None:
    raw = storage.load(session_id)
    if raw is None:
        return None
    snapshot = decode_session_snapshot(raw).snapshot
    assert snapshot is not None
    return snapshot.cursor


def test_first_save_is_create_only_and_each_save_adds_one() -> None:
    storage = MemoryStorage()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert (session.exists, session.cursor) == (False, 0)
    assert [session.persist() for _ in range(3)] == [1, 2, 3]
    assert stored_cursor(storage) == 3


def test_two_fresh_sessions_race_the_create() -> None:
    storage = MemoryStorage()
    a = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    b = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    a.persist()
    with pytest.raises(SessionConflict) as conflict:
        b.persist()
    assert conflict.value.expected_cursor is None  # it tried create-only
    assert (b.exists, b.cursor) == (True, 1)  # and already reloaded what won
    assert b.persist() == 2


def test_a_conflict_does_not_poison_the_session() -> None:
    storage = MemoryStorage()
    resume_chat_session(DEFINITION, session_id="s", storage=storage).persist()
    a = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    b = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    a.persist()
    with pytest.raises(SessionConflict) as conflict:
        b.persist()
    assert str(conflict.value) == "Session snapshot changed in another client."
    assert conflict.value.expected_cursor == 1
    assert b.persist() == 3  # re-applying the intent just works
    assert stored_cursor(storage) == 3


def test_an_unknown_outcome_that_applied_is_settled_by_rereading() -> None:
    inner = MemoryStorage()
    storage = FaultyStorage(inner)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    session.persist()
    storage.fail_next_save("unknown_after_apply")
    assert session.persist() == 2
    assert stored_cursor(inner) == 2 and session.cursor == 2
    assert [f.kind for f in storage.injected] == ["unknown_after_apply"]


def test_an_unknown_outcome_that_cannot_be_settled_is_reported_then_recovered() -> None:
    inner = MemoryStorage()
    storage = FaultyStorage(inner)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    session.persist()
    storage.fail_next_save("unknown_after_apply")
    storage.fail_next_load("unavailable")
    with pytest.raises(OutcomeUnknown):
        session.persist()
    # The write did apply; the next operation re-reads first instead of failing forever.
    assert session.persist() == 3
    assert stored_cursor(inner) == 3


def test_unavailable_changes_nothing_and_a_retry_is_safe() -> None:
    inner = MemoryStorage()
    storage = FaultyStorage(inner)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    session.persist()
    storage.fail_next_save("unavailable")
    with pytest.raises(StorageUnavailable):
        session.persist()
    assert session.cursor == 1 and stored_cursor(inner) == 1
    assert session.persist() == 2


class _Broken:
    """A third-party adapter that raises its driver's own exceptions."""

    def load(self, session_id: str) -> object:
        raise RuntimeError("driver exploded")

    def save(self, snapshot: object, expected_cursor: int | None) -> bool:
        raise RuntimeError("driver exploded")


def test_foreign_driver_errors_are_mapped_once() -> None:
    with pytest.raises(StorageUnavailable) as load_error:
        resume_chat_session(DEFINITION, session_id="s", storage=_Broken())
    assert isinstance(load_error.value.__cause__, RuntimeError)


def test_foreign_save_errors_may_have_applied() -> None:
    class SaveBreaks(MemoryStorage):
        def save(self, snapshot: object, expected_cursor: int | None) -> bool:
            raise RuntimeError("connection reset")

    storage = SaveBreaks()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    # Mapped to OutcomeUnknown, then settled by re-reading: nothing is stored, so the save
    # definitely did not apply, and that is what the caller hears.
    with pytest.raises(StorageUnavailable) as error:
        session.persist()
    assert isinstance(error.value.__cause__, OutcomeUnknown)
    assert isinstance(error.value.__cause__.__cause__, RuntimeError)


def test_every_write_is_unique_even_in_the_same_millisecond() -> None:
    storage_a, storage_b = MemoryStorage(), MemoryStorage()
    for storage in (storage_a, storage_b):
        resume_chat_session(
            DEFINITION, session_id="s", storage=storage, clock=lambda: 1_000
        ).persist()
    a, b = storage_a.load("s"), storage_b.load("s")
    assert a != b  # the per-write nonce (ADR-0062): settling by content is exact
    assert isinstance(a, str) and '"updatedAt":"1970-01-01T00:00:01.000' in a


def test_an_unknown_create_that_did_not_apply_keeps_nothing_in_memory() -> None:
    class CreateTimesOut(MemoryStorage):
        def save(self, snapshot: object, expected_cursor: int | None) -> bool:
            raise OutcomeUnknown("timed out before the server answered")

    session = resume_chat_session(DEFINITION, session_id="s", storage=CreateTimesOut())
    upstream = RecordingUpstream()
    coordinator = session.confirmations_for(upstream)
    # "Not applied when read", and every fence lost too: the create may still land, so the
    # propose denies nothing and says the outcome is unknown (ADR-0093).
    with pytest.raises(OutcomeUnknown) as error:
        coordinator.propose("email.send", {})
    assert isinstance(error.value.__cause__, StorageUnavailable)
    assert upstream.denied == []
    assert (session.exists, session.cursor, session.confirmations) == (False, 0, ())
