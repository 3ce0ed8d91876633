"""Seeded bug: a table whose ``reject`` ignores expiry (pending + reject, expired -> rejecting).

Only one cell differs from the real table, on the reject path: an expired record rejected by a
client is then ``rejected`` (its reason recorded) instead of ``expired``. Same contracts as
:func:`akchat_fsm.core.records.confirmation_step`; CrossHair must refute them.
"""

from __future__ import annotations

from types import MappingProxyType

from akchat_fsm.core.records import CLAIM_EVENTS, MATCHING_TERMINAL
from akchat_fsm.errors import IllegalTransition
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.machines.tables import CONFIRMATION_TABLE
from akchat_fsm.wire.enums import ConfirmationStatus

__all__ = [
    "CLAIM_EVENTS",
    "MATCHING_TERMINAL",
    "REJECT_IGNORES_EXPIRY",
    "step_reject_ignores_expiry",
]

REJECT_IGNORES_EXPIRY = MappingProxyType(
    {
        **CONFIRMATION_TABLE,
        (ConfirmationStatus.PENDING, ConfirmationEvent.REJECT, True): ConfirmationStatus.REJECTING,
    }
)


def step_reject_ignores_expiry(
    status: ConfirmationStatus, event: ConfirmationEvent, expired: bool
) -> ConfirmationStatus:
    """
    raises: IllegalTransition
    post: not status.is_terminal
    post: __return__ != status
    post: not (expired and event in CLAIM_EVENTS) or __return__ == ConfirmationStatus.EXPIRING
    post: not __return__.is_terminal or MATCHING_TERMINAL.get(status) == __return__
    post: not __return__.is_processing or status == ConfirmationStatus.PENDING
    """
    target = REJECT_IGNORES_EXPIRY.get((status, event, expired))
    if target is None:
        raise IllegalTransition("confirmation", str(status), str(event))
    return target
