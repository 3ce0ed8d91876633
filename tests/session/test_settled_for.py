"""Which stored final state answers a repeated resolution (derived from the lifecycle table).

Through the public API: a repeat whose claim would reach the stored final state returns that
record and calls upstream nothing; any other final state is :class:`AlreadyResolved`.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from akchat_fsm import AlreadyResolved, ChatDefinition, MemoryStorage, resume_chat_session
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import ConfirmationCoordinator
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.enums import ConfirmationStatus

E, S = ConfirmationEvent, ConfirmationStatus
ANSWERS = {
    E.APPROVE: {S.APPROVED, S.EXPIRED},
    E.REJECT: {S.REJECTED, S.EXPIRED},
    E.EXPIRE: {S.EXPIRED},
}
FINAL = (S.APPROVED, S.REJECTED, S.EXPIRED)
T0, TTL = 1_700_000_000_000, 1_000


def _resolved(
    final: ConfirmationStatus,
) -> tuple[ConfirmationCoordinator, RecordingUpstream, str]:
    now = [T0]
    session = resume_chat_session(
        ChatDefinition("repeats"), session_id="s", storage=MemoryStorage(), clock=lambda: now[0]
    )
    upstream = RecordingUpstream()
    coordinator = session.confirmations_for(upstream, ttl_ms=TTL)
    token = coordinator.propose("email.send", {}).token
    if final is S.APPROVED:
        coordinator.approve(token)
    elif final is S.REJECTED:
        coordinator.reject(token, reason="no")
    else:
        now[0] += 2 * TTL
        coordinator.expire(token)
    return coordinator, upstream, token


def _repeat(
    coordinator: ConfirmationCoordinator, intent: ConfirmationEvent
) -> Callable[[str], object]:
    return {
        E.APPROVE: coordinator.approve,
        E.REJECT: lambda token: coordinator.reject(token, reason="again"),
        E.EXPIRE: coordinator.expire,
    }[intent]


@pytest.mark.parametrize("intent", list(ANSWERS))
@pytest.mark.parametrize("final", FINAL)
def test_a_repeat_is_answered_only_by_the_state_its_claim_reaches(
    intent: ConfirmationEvent, final: ConfirmationStatus
) -> None:
    coordinator, upstream, token = _resolved(final)
    calls = list(upstream.calls)
    if final in ANSWERS[intent]:
        answer = _repeat(coordinator, intent)(token)
        assert getattr(answer, "status", None) is final
    else:
        with pytest.raises(AlreadyResolved) as refused:
            _repeat(coordinator, intent)(token)
        assert refused.value.record is not None and refused.value.record.status is final
    assert upstream.calls == calls  # a repeat never calls upstream again
