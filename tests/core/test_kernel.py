"""The kernel functions CrossHair checks, exercised directly on plain values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.core.cursor import NEW_CURSOR, CursorState, begin_save, reloaded, save_settled
from akchat_fsm.core.lease import Lease, TurnLedger, claim_turn, release_turn, turn_state
from akchat_fsm.core.records import (
    Reconciliation,
    Record,
    UpstreamToolStatus,
    claim,
    complete,
    is_expired,
    reconcile_decision,
    release,
)
from akchat_fsm.errors import IllegalTransition, InvalidConfirmationToken
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.machines.cursor import CursorEvent, CursorPhase
from akchat_fsm.machines.lease import TurnLeaseState
from akchat_fsm.wire.enums import ConfirmationStatus, TurnOutcome

S = ConfirmationStatus


@given(st.integers(), st.integers())
def test_expiry_boundary_counts_as_expired(expires_at: int, now: int) -> None:
    assert is_expired(expires_at, now) == (now >= expires_at)


def test_claim_changes_only_the_claimed_record() -> None:
    records = (Record("a", "x", "ca", 10, S.PENDING), Record("b", "x", "cb", 10, S.PENDING))
    won = claim(records, "b", ConfirmationEvent.REJECT, 9)
    assert won.index == 1 and won.records[0] is records[0]
    assert won.record == Record("b", "x", "cb", 10, S.REJECTING)
    with pytest.raises(InvalidConfirmationToken):
        claim(records, "zz", ConfirmationEvent.APPROVE, 0)


@pytest.mark.parametrize(
    "processing, final",
    [(S.APPROVING, S.APPROVED), (S.REJECTING, S.REJECTED), (S.EXPIRING, S.EXPIRED)],
)
def test_complete_and_release_from_each_processing_state(
    processing: ConfirmationStatus, final: ConfirmationStatus
) -> None:
    records = (Record("a", "x", "c", 0, processing),)
    assert complete(records, "a")[0].status is final
    assert release(records, "a")[0].status is S.PENDING
    with pytest.raises(IllegalTransition):
        complete(complete(records, "a"), "a")
    with pytest.raises(IllegalTransition):
        release(complete(records, "a"), "a")


@pytest.mark.parametrize("status", list(ConfirmationStatus))
@pytest.mark.parametrize("upstream", list(UpstreamToolStatus))
@pytest.mark.parametrize("release_untouched", [False, True])
def test_reconcile_decision_matrix(
    status: ConfirmationStatus, upstream: UpstreamToolStatus, release_untouched: bool
) -> None:
    if not status.is_processing:
        with pytest.raises(IllegalTransition):
            reconcile_decision(status, upstream, release_untouched)
        return
    decision = reconcile_decision(status, upstream, release_untouched)
    if upstream is not UpstreamToolStatus.REQUIRES_CONFIRMATION:
        assert decision is Reconciliation.COMPLETE
    elif release_untouched:
        assert decision is Reconciliation.RELEASE
    else:
        assert decision is Reconciliation.RESUME


def test_cursor_kernel_counts_only_successful_saves() -> None:
    saving = begin_save(NEW_CURSOR)
    assert saving == CursorState(CursorPhase.SAVING, 0)
    assert save_settled(saving, CursorEvent.SAVED) == CursorState(CursorPhase.IN_SYNC, 1)
    assert save_settled(saving, CursorEvent.CONFLICT) == CursorState(CursorPhase.CONFLICTED, 0)
    assert save_settled(saving, CursorEvent.UNKNOWN) == CursorState(CursorPhase.UNCERTAIN, 0)
    with pytest.raises(IllegalTransition):
        begin_save(saving)  # one save in flight at a time
    with pytest.raises(IllegalTransition):
        reloaded(saving, 3)  # settle the save first
    in_sync = CursorState(CursorPhase.IN_SYNC, 5)
    assert reloaded(in_sync, 7) == CursorState(CursorPhase.IN_SYNC, 7)
    assert reloaded(in_sync, None) == NEW_CURSOR  # deleted: starts over
    with pytest.raises(IllegalTransition):
        reloaded(in_sync, 4)


def test_lease_kernel() -> None:
    empty = TurnLedger(None, ())
    held = claim_turn(empty, "t", 10, 0)
    assert held == TurnLedger(Lease("t", 10), ())
    assert turn_state(held, "t") is TurnLeaseState.HELD
    assert turn_state(held, "u") is TurnLeaseState.FREE
    assert claim_turn(held, "u", 10, 9) is None  # busy
    assert claim_turn(held, "u", 10, 10) == TurnLedger(Lease("u", 20), ())  # takeover at expiry
    assert claim_turn(held, "t", 5, 10) == TurnLedger(Lease("t", 15), ())  # own renewal
    done = release_turn(held, "t", TurnOutcome.COMPLETED)
    assert done == TurnLedger(None, (("t", TurnOutcome.COMPLETED),))
    assert turn_state(done, "t") is TurnLeaseState.RELEASED
    assert claim_turn(done, "t", 10, 100) is None  # replay
    assert release_turn(empty, "t", TurnOutcome.COMPLETED) is None


def test_upstream_status_is_the_wire_enum_not_a_copy() -> None:
    from akchat_fsm.wire.memory import ToolCallStatus

    assert UpstreamToolStatus is ToolCallStatus
