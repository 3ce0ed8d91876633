"""Seeded bug: a table with one extra cell that lets a final state move (approved -> pending).

Same contracts as :func:`akchat_fsm.core.records.confirmation_step`; CrossHair must refute them.
"""

from __future__ import annotations

from types import MappingProxyType

from akchat_fsm.core.records import CLAIM_EVENTS, MATCHING_TERMINAL
from akchat_fsm.errors import IllegalTransition
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.machines.tables import CONFIRMATION_TABLE
from akchat_fsm.wire.enums import ConfirmationStatus

__all__ = ["CLAIM_EVENTS", "MATCHING_TERMINAL", "step_reopens_terminal"]

_BUGGY = MappingProxyType(
    {
        **CONFIRMATION_TABLE,
        (ConfirmationStatus.APPROVED, ConfirmationEvent.RELEASE, False): ConfirmationStatus.PENDING,
    }
)


def step_reopens_terminal(
    status: ConfirmationStatus, event: ConfirmationEvent, expired: bool
) -> ConfirmationStatus:
    """
    raises: IllegalTransition
    post: not status.is_terminal
    post: not __return__.is_terminal or MATCHING_TERMINAL.get(status) == __return__
    """
    target = _BUGGY.get((status, event, expired))
    if target is None:
        raise IllegalTransition("confirmation", str(status), str(event))
    return target
