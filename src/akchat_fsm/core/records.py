"""The confirmation kernel: pure functions over tuples of frozen :class:`Record` s.

No pydantic, no ``Literal``, no state-machine instances: CrossHair checks the PEP 316
contracts in these docstrings (``scripts/check_contracts.py``). Every move is looked up in
:data:`~akchat_fsm.machines.tables.CONFIRMATION_TABLE`, derived from ``ConfirmationLifecycle``.
The edge adapters in :mod:`akchat_fsm.core.confirmations` map the pydantic envelope to and from
these records; a record's JSON ``input`` stays at the edge (it never changes after propose).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from ..errors import (
    AlreadyResolved,
    IllegalTransition,
    InvalidConfirmationToken,
    ResolutionInProgress,
)
from ..machines.confirmation import ConfirmationEvent
from ..machines.tables import CONFIRMATION_FACTS, CONFIRMATION_TABLE
from ..wire.enums import ConfirmationStatus
from ..wire.memory import ToolCallStatus

#: Status of the upstream tool call (docs/reference.md §5.2), read by reconciliation. The wire's
#: enum is the one source of truth; this name is kept for the core's callers.
UpstreamToolStatus = ToolCallStatus

__all__ = [
    "CLAIM_EVENTS",
    "EXPIRED_REASON",
    "MATCHING_TERMINAL",
    "RECONCILED_REJECT_REASON",
    "Claim",
    "Reconciliation",
    "Record",
    "UpstreamAction",
    "UpstreamToolStatus",
    "born_status",
    "claim",
    "claim_at",
    "complete",
    "complete_at",
    "confirmation_step",
    "deny_reason",
    "find",
    "is_expired",
    "reconcile_decision",
    "release",
    "release_at",
    "upstream_call",
]

MACHINE = "confirmation"
#: The claims (the events a ``pending`` record accepts), read off the table (ADR-0114).
CLAIM_EVENTS = CONFIRMATION_FACTS.claim_events
#: The only way into each final state: from its own processing state (read off the table).
MATCHING_TERMINAL = CONFIRMATION_FACTS.matching_terminal
#: The deny reason of an expiry, as the reference sends it.
EXPIRED_REASON = "confirmation expired"
#: The deny reason when reconciliation re-issues a ``rejecting`` claim (the reviewer's own
#: reason is not stored, so it cannot be sent again).
RECONCILED_REJECT_REASON = "confirmation rejected"


@dataclass(frozen=True)
class Record:
    """One confirmation binding as the kernel sees it (no JSON ``input``)."""

    token: str
    action: str
    tool_call_id: str
    expires_at: int
    status: ConfirmationStatus


@dataclass(frozen=True)
class Claim:
    """A won claim: the new record list and the index of the claimed record."""

    records: tuple[Record, ...]
    index: int

    @property
    def record(self) -> Record:
        return self.records[self.index]


class UpstreamAction(StrEnum):
    """The upstream call a durable claim allows."""

    APPROVE = "approve"
    DENY = "deny"


class Reconciliation(StrEnum):
    """What reconciling a processing record decides."""

    #: Upstream acted: record the claim's matching final state (no upstream call).
    COMPLETE = "complete"
    #: Upstream has not acted: issue the claimed call again, then complete. Safe with a live
    #: claimant because upstream approve/deny are no-ops once the call left
    #: ``requires_confirmation``, so the two calls execute the tool at most once.
    RESUME = "resume"
    #: Upstream has not acted and the host asserts no claimant is alive: back to ``pending``.
    RELEASE = "release"


def is_expired(expires_at: int, now_ms: int) -> bool:
    """Expiry rule: the boundary ``now == expires_at`` is already expired.

    post: __return__ == (now_ms >= expires_at)
    """
    return now_ms >= expires_at


def confirmation_step(
    status: ConfirmationStatus, event: ConfirmationEvent, expired: bool
) -> ConfirmationStatus:
    """One move of the confirmation lifecycle, from the derived table.

    raises: IllegalTransition
    post: not status.is_terminal
    post: __return__ != status
    post: not (expired and event in CLAIM_EVENTS) or __return__ == ConfirmationStatus.EXPIRING
    post: not __return__.is_terminal or MATCHING_TERMINAL.get(status) == __return__
    post: not __return__.is_processing or status == ConfirmationStatus.PENDING
    """
    target = CONFIRMATION_TABLE.get((status, event, expired))
    if target is None:
        raise IllegalTransition(MACHINE, str(status), str(event))
    return target


def find(records: tuple[Record, ...], token: str) -> int:
    """Index of the record holding ``token``, or -1.

    post: __return__ == -1 or records[__return__].token == token
    post: __return__ != -1 or all(r.token != token for r in records)
    """
    for index, record in enumerate(records):
        if record.token == token:
            return index
    return -1


def _others_unchanged(before: tuple[Record, ...], after: tuple[Record, ...], index: int) -> bool:
    return len(before) == len(after) and all(
        a == b for i, (a, b) in enumerate(zip(before, after, strict=True)) if i != index
    )


def _expiry_respected(
    before: tuple[Record, ...], won: Claim, event: ConfirmationEvent, now_ms: int
) -> bool:
    expiring = won.record.status is ConfirmationStatus.EXPIRING
    return expiring == (event is ConfirmationEvent.EXPIRE or now_ms >= before[won.index].expires_at)


def claim_at(
    records: tuple[Record, ...], index: int, event: ConfirmationEvent, now_ms: int
) -> Claim:
    """Claim the resolution of the record at ``index`` (approve, reject or expire) at ``now_ms``.

    The loser outcomes are typed: a terminal record raises ``AlreadyResolved``, a processing
    record ``ResolutionInProgress``; ``expire`` before ``expires_at`` is an ``IllegalTransition``.
    After expiry every claim is ``expiring``. Shaped by index so that CrossHair's count-based
    budget reaches the expiry paths (ADR-0110); every other record is returned unchanged, so
    an adapter may decide on the one record and splice it back (ADR-0111).

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
        raise AlreadyResolved("Action confirmation was already resolved.", record=current)
    if current.status.is_processing:
        raise ResolutionInProgress(
            "Action confirmation is being resolved by another client.", record=current
        )
    target = confirmation_step(current.status, event, is_expired(current.expires_at, now_ms))
    claimed = replace(current, status=target)
    return Claim((*records[:index], claimed, *records[index + 1 :]), index)


def claim(records: tuple[Record, ...], token: str, event: ConfirmationEvent, now_ms: int) -> Claim:
    """Claim the resolution of ``token``: :func:`claim_at` the record holding it.

    An unknown token raises ``InvalidConfirmationToken``; the other outcomes are
    :func:`claim_at` 's.

    pre: event in CLAIM_EVENTS
    raises: AlreadyResolved, ResolutionInProgress, InvalidConfirmationToken, IllegalTransition
    post: __return__.record.token == token
    post: _others_unchanged(records, __return__.records, __return__.index)
    post: _expiry_respected(records, __return__, event, now_ms)
    """
    index = find(records, token)
    if index < 0:
        raise InvalidConfirmationToken()
    return claim_at(records, index, event, now_ms)


def _settle_at(
    records: tuple[Record, ...], index: int, event: ConfirmationEvent
) -> tuple[Record, ...]:
    current = records[index]
    # Settling ignores the clock: a claim already taken is finished (or given up) as claimed.
    target = confirmation_step(current.status, event, False)
    return (*records[:index], replace(current, status=target), *records[index + 1 :])


def _index_of(records: tuple[Record, ...], token: str) -> int:
    index = find(records, token)
    if index < 0:
        raise InvalidConfirmationToken()
    return index


def _moved(
    before: tuple[Record, ...], after: tuple[Record, ...], token: str, status: ConfirmationStatus
) -> bool:
    index = find(before, token)
    return after[index] == replace(before[index], status=status)


def _completed_at(before: tuple[Record, ...], after: tuple[Record, ...], index: int) -> bool:
    return after[index] == replace(before[index], status=MATCHING_TERMINAL[before[index].status])


def _completed(before: tuple[Record, ...], after: tuple[Record, ...], token: str) -> bool:
    return _moved(before, after, token, MATCHING_TERMINAL[before[find(before, token)].status])


def complete_at(records: tuple[Record, ...], index: int) -> tuple[Record, ...]:
    """Record that upstream returned for the claim at ``index``: the matching final state.

    pre: 0 <= index < len(records)
    raises: IllegalTransition
    post: len(__return__) == len(records)
    post: records[index].status.is_processing
    post: _completed_at(records, __return__, index)
    post: _others_unchanged(records, __return__, index)
    """
    return _settle_at(records, index, ConfirmationEvent.COMPLETE)


def release_at(records: tuple[Record, ...], index: int) -> tuple[Record, ...]:
    """Give up the claim at ``index`` (upstream known not to have acted): back to ``pending``.

    pre: 0 <= index < len(records)
    raises: IllegalTransition
    post: records[index].status.is_processing
    post: __return__[index] == replace(records[index], status=ConfirmationStatus.PENDING)
    post: _others_unchanged(records, __return__, index)
    """
    return _settle_at(records, index, ConfirmationEvent.RELEASE)


def complete(records: tuple[Record, ...], token: str) -> tuple[Record, ...]:
    """Record that upstream returned for the claim on ``token``: the matching final state.

    raises: InvalidConfirmationToken, IllegalTransition
    post: len(__return__) == len(records)
    post: records[find(records, token)].status.is_processing
    post: _completed(records, __return__, token)
    post: _others_unchanged(records, __return__, find(records, token))
    """
    return complete_at(records, _index_of(records, token))


def release(records: tuple[Record, ...], token: str) -> tuple[Record, ...]:
    """Give up the claim on ``token`` (upstream known not to have acted): back to ``pending``.

    raises: InvalidConfirmationToken, IllegalTransition
    post: records[find(records, token)].status.is_processing
    post: _moved(records, __return__, token, ConfirmationStatus.PENDING)
    post: _others_unchanged(records, __return__, find(records, token))
    """
    return release_at(records, _index_of(records, token))


UNTOUCHED = UpstreamToolStatus.REQUIRES_CONFIRMATION


def upstream_call(claimed: Record) -> UpstreamAction:
    """The one upstream call allowed by ``claimed``: only a processing record allows one.

    The claim an approve takes before expiry (``approving``) allows approve; every other claim
    (``rejecting``, ``expiring``) allows deny; both read off the table. Anything else (no claim,
    or a claim already settled) allows nothing: ``IllegalTransition``.

    raises: IllegalTransition
    post: claimed.status.is_processing
    post: (__return__ == UpstreamAction.APPROVE) == (claimed.status == ConfirmationStatus.APPROVING)
    """
    if not claimed.status.is_processing:
        raise IllegalTransition(MACHINE, str(claimed.status), "call upstream", "no claim held")
    if claimed.status == CONFIRMATION_FACTS.approving:
        return UpstreamAction.APPROVE
    return UpstreamAction.DENY


def deny_reason(claimed: Record, reason: str | None) -> str | None:
    """The reason a deny for ``claimed`` carries: an expiry's own, otherwise the caller's.

    post: (__return__ == EXPIRED_REASON) or (__return__ == reason)
    post: claimed.status != ConfirmationStatus.EXPIRING or __return__ == EXPIRED_REASON
    """
    return EXPIRED_REASON if claimed.status == CONFIRMATION_FACTS.expiring else reason


def born_status(upstream: UpstreamToolStatus) -> ConfirmationStatus:
    """The status a proposed record is born with, from what upstream's propose returned.

    A call that requires confirmation is born ``pending``; any other is born ``rejected``,
    with no deny (docs/reference.md §3.2): upstream did not wait for us.

    post: (__return__ == ConfirmationStatus.PENDING) == (upstream == UNTOUCHED)
    post: __return__ == ConfirmationStatus.PENDING or __return__.is_terminal
    """
    if upstream == UNTOUCHED:
        return ConfirmationStatus.PENDING
    return ConfirmationStatus.REJECTED


def reconcile_decision(
    status: ConfirmationStatus, upstream: UpstreamToolStatus, release_untouched: bool
) -> Reconciliation:
    """Decide how to settle a processing record from the upstream tool-call status.

    ``requires_confirmation`` means upstream has not acted: resume the claim (default) or,
    when the host asserts the claimant is gone, release it. Any other status means the call
    left ``requires_confirmation``, i.e. upstream acted: complete the claim.

    raises: IllegalTransition
    post: status.is_processing
    post: (__return__ == Reconciliation.COMPLETE) == (upstream != UNTOUCHED)
    post: __return__ != Reconciliation.RELEASE or release_untouched
    """
    if not status.is_processing:
        raise IllegalTransition(MACHINE, str(status), "reconcile", "only a processing record")
    if upstream != UpstreamToolStatus.REQUIRES_CONFIRMATION:
        return Reconciliation.COMPLETE
    return Reconciliation.RELEASE if release_untouched else Reconciliation.RESUME
