"""A propose whose binding save was "not applied when read" fences it before denying (ADR-0093).

On a server a save whose answer was lost may still be in flight when the re-read finds the
cursor unchanged, and land later. A propose that denied its upstream call on that re-read left a
``pending`` record for a call upstream had denied, and an approval then called upstream a second
time. These tests drive that interleaving on real SQLite, one write at a time: the lost save
lands either before the fence (the call is bound: nothing is denied) or after it (refused by
CAS: the call is denied, and can never be bound later).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from akchat_fsm.errors import OutcomeUnknown, StorageUnavailable
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot

FLOW = ChatDefinition("fence")
SESSION = "fence-1"


class InFlight(SQLiteStorage):
    """SQLite whose answer to the held save is lost while the request is still travelling.

    ``hold``: how many of the next saves are held (each raises OutcomeUnknown, nothing written).
    ``land_first``: held writes arrive just before the next save reaches the store (as a
    delayed request does); otherwise they stay in flight until :meth:`land`.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.hold = 0
        self.land_first = False
        self.in_flight: list[tuple[SessionSnapshot, int | None]] = []
        self.landed: list[bool] = []
        self.saves: list[tuple[int, tuple[str, ...]]] = []

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        if self.land_first:
            self.land()
        self.saves.append((snapshot.cursor, tuple(str(b.status) for b in snapshot.confirmations)))
        if self.hold:
            self.hold -= 1
            self.in_flight.append((snapshot, expected_cursor))
            raise OutcomeUnknown("timed out; the request is still in flight")
        return super().save(snapshot, expected_cursor)

    def land(self) -> list[bool]:
        flying, self.in_flight = self.in_flight, []
        landed = [super(InFlight, self).save(s, e) for s, e in flying]
        self.landed += landed
        return landed

    def stored(self) -> SessionSnapshot:
        snapshot = decode_session_snapshot(self.load(SESSION)).snapshot
        assert snapshot is not None
        return snapshot


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[InFlight]:
    store = InFlight(tmp_path / "sessions.db")
    try:
        resume_chat_session(FLOW, session_id=SESSION, storage=store, clock=lambda: 1_000).persist()
        store.saves.clear()
        yield store
    finally:
        store.close()


def _coordinator(storage: InFlight, upstream: RecordingUpstream) -> object:
    session = resume_chat_session(FLOW, session_id=SESSION, storage=storage, clock=lambda: 1_000)
    return session.confirmations_for(upstream)


def test_a_binding_that_lands_before_the_fence_is_returned_and_never_denied(
    storage: InFlight,
) -> None:
    upstream = RecordingUpstream()
    coordinator = _coordinator(storage, upstream)
    storage.hold, storage.land_first = 1, True
    # 1. the binding's save (cursor 2) is lost in flight; 2. the re-read finds cursor 1: "not
    # applied when read"; 3. the fence (cursor 2 again) is sent, the binding lands just before
    # it and the fence conflicts; 4. the fresh envelope holds the binding: the call is bound.
    binding = coordinator.propose("email.send", {})  # type: ignore[attr-defined]
    assert storage.landed == [True]
    assert binding.status is ConfirmationStatus.PENDING
    assert storage.saves == [(2, ("pending",)), (2, ())]  # the binding, then the fence
    assert upstream.denied == []
    stored = storage.stored()
    assert (stored.cursor, [b.token for b in stored.confirmations]) == (2, [binding.token])
    # The one approval calls upstream once: there was no deny before it.
    approved = coordinator.approve(binding.token)  # type: ignore[attr-defined]
    assert approved.status is ConfirmationStatus.APPROVED
    assert upstream.calls_per_tool_call[binding.tool_call_id] == 1


def test_a_binding_still_in_flight_after_the_fence_can_never_land(storage: InFlight) -> None:
    upstream = RecordingUpstream()
    coordinator = _coordinator(storage, upstream)
    storage.hold = 1
    with pytest.raises(StorageUnavailable) as error:
        coordinator.propose("email.send", {})  # type: ignore[attr-defined]
    # The fence (cursor 2, the envelope unchanged) applied, then the call was denied.
    assert storage.saves == [(2, ("pending",)), (2, ())]
    ((denied, _),) = upstream.denied
    assert any("was denied upstream" in note for note in error.value.__notes__)
    # The lost binding arrives now: it expects cursor 1, which the fence moved past.
    assert storage.land() == [False]
    stored = storage.stored()
    assert (stored.cursor, stored.confirmations) == (2, ())
    assert upstream.calls_per_tool_call[denied] == 1


def test_a_fence_that_stays_in_flight_denies_nothing(storage: InFlight) -> None:
    upstream = RecordingUpstream()
    coordinator = _coordinator(storage, upstream)
    storage.hold = 4  # the binding and every fence (3) are lost: any of them may still land
    with pytest.raises(OutcomeUnknown) as error:
        coordinator.propose("email.send", {})  # type: ignore[attr-defined]
    assert isinstance(error.value.__cause__, StorageUnavailable)
    assert upstream.denied == []  # the binding may still land: never deny a call that may be bound
    assert storage.land() == [True, False, False, False]  # the binding landed: the call is bound
    assert [b.status for b in storage.stored().confirmations] == [ConfirmationStatus.PENDING]
