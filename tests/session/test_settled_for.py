"""Which stored final state answers a repeated resolution (derived from the lifecycle table)."""

from __future__ import annotations

import pytest

from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session._confirm import settled_for
from akchat_fsm.wire.enums import ConfirmationStatus

E, S = ConfirmationEvent, ConfirmationStatus
ANSWERS = {
    E.APPROVE: {S.APPROVED, S.EXPIRED},
    E.REJECT: {S.REJECTED, S.EXPIRED},
    E.EXPIRE: {S.EXPIRED},
}


@pytest.mark.parametrize("intent", list(ANSWERS))
@pytest.mark.parametrize("status", list(ConfirmationStatus))
def test_a_repeat_is_answered_only_by_the_state_its_claim_reaches(
    intent: ConfirmationEvent, status: ConfirmationStatus
) -> None:
    assert settled_for(intent, status) is (status in ANSWERS[intent])
