"""Seeded bug: a claim that ignores expiry on the reject path only (approve and expire honour it).

Only a reject of an expired record shows it: it is claimed ``rejecting`` (and would end
``rejected`` with the client's reason) instead of ``expiring``.

Shaped as the claim *at an index* (``pre: 0 <= index < len(records)``), the shape the kernel's
``claim`` should take for its contracts to be checked at the tox budget: behind
``find(records, token)`` CrossHair spends its 50 uninteresting iterations matching symbolic
tokens and never reaches this path (the same bug in the token-shaped copy is missed even at
65 s; ~2,000 iterations find it). See ADR-0110.
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
    is_expired,
)
from akchat_fsm.errors import AlreadyResolved, IllegalTransition, ResolutionInProgress
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.wire.enums import ConfirmationStatus

__all__ = [
    "CLAIM_EVENTS",
    "ConfirmationStatus",
    "IllegalTransition",
    "_expiry_respected",
    "_others_unchanged",
    "claim_at_reject_ignores_expiry",
]


def claim_at_reject_ignores_expiry(
    records: tuple[Record, ...], index: int, event: ConfirmationEvent, now_ms: int
) -> Claim:
    """
    pre: event in CLAIM_EVENTS
    pre: 0 <= index < len(records)
    raises: AlreadyResolved, ResolutionInProgress, IllegalTransition
    post: __return__.index == index
    post: _others_unchanged(records, __return__.records, index)
    post: records[index].status == ConfirmationStatus.PENDING
    post: __return__.record.status.is_processing
    post: replace(__return__.record, status=ConfirmationStatus.PENDING) == records[index]
    post: _expiry_respected(records, __return__, event, now_ms)
    """
    current = records[index]
    if current.status.is_terminal:
        raise AlreadyResolved("resolved", record=current)
    if current.status.is_processing:
        raise ResolutionInProgress("in progress", record=current)
    # The seeded bug: the clock is consulted for approve and expire, not for reject.
    expired = is_expired(current.expires_at, now_ms) and event is not ConfirmationEvent.REJECT
    target = confirmation_step(current.status, event, expired)
    return Claim((*records[:index], replace(current, status=target), *records[index + 1 :]), index)
