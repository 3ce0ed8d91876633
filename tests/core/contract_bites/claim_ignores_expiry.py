"""Seeded bug: ``claim`` reads the clock as never expired (the expiry guard removed).

Same contracts as :func:`akchat_fsm.core.records.claim`; CrossHair must refute them.
"""

from __future__ import annotations

from dataclasses import replace

from akchat_fsm.core.records import (
    CLAIM_EVENTS,
    Claim,
    Record,
    _expiry_respected,
    _others_unchanged,
    confirmation_step,
    find,
)
from akchat_fsm.errors import (
    AlreadyResolved,
    IllegalTransition,
    InvalidConfirmationToken,
    ResolutionInProgress,
)
from akchat_fsm.machines.confirmation import ConfirmationEvent

# Names used only inside the contracts are exported so linters see them used.
__all__ = [
    "CLAIM_EVENTS",
    "IllegalTransition",
    "_expiry_respected",
    "_others_unchanged",
    "claim_ignores_expiry",
]


def claim_ignores_expiry(
    records: tuple[Record, ...], token: str, event: ConfirmationEvent, now_ms: int
) -> Claim:
    """
    pre: event in CLAIM_EVENTS
    raises: AlreadyResolved, ResolutionInProgress, InvalidConfirmationToken, IllegalTransition
    post: _others_unchanged(records, __return__.records, __return__.index)
    post: __return__.record.status.is_processing
    post: _expiry_respected(records, __return__, event, now_ms)
    """
    index = find(records, token)
    if index < 0:
        raise InvalidConfirmationToken()
    current = records[index]
    if current.status.is_terminal:
        raise AlreadyResolved("resolved", record=current)
    if current.status.is_processing:
        raise ResolutionInProgress("in progress", record=current)
    target = confirmation_step(current.status, event, event is ConfirmationEvent.EXPIRE)
    claimed = replace(current, status=target)
    return Claim((*records[:index], claimed, *records[index + 1 :]), index)
