"""The closed vocabularies of the session envelope, as ``StrEnum`` s.

Enums rather than ``Literal`` so that the pure core (checked by CrossHair, which cannot take
``typing.Literal``) and the state machines use the same values the wire does.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ConfirmationStatus", "DecisionKind", "TurnOutcome"]


class ConfirmationStatus(StrEnum):
    """Status of a confirmation binding (docs/reference.md §1.1, §3)."""

    PENDING = "pending"
    #: CAS-claimed processing states: exactly one client won the claim.
    APPROVING = "approving"
    REJECTING = "rejecting"
    EXPIRING = "expiring"
    #: Final states: entered only after the upstream call succeeded.
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"

    @property
    def is_processing(self) -> bool:
        return self in _PROCESSING

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_PROCESSING = frozenset(
    {ConfirmationStatus.APPROVING, ConfirmationStatus.REJECTING, ConfirmationStatus.EXPIRING}
)
_TERMINAL = frozenset(
    {ConfirmationStatus.APPROVED, ConfirmationStatus.REJECTED, ConfirmationStatus.EXPIRED}
)


class DecisionKind(StrEnum):
    """How a cached route decision was made. ``agentic`` turns are never cached."""

    DETERMINISTIC = "deterministic"
    REPAIRED = "repaired"
    FALLBACK = "fallback"


class TurnOutcome(StrEnum):
    """How a released turn ended (docs/reference.md §9)."""

    COMPLETED = "completed"
    INDETERMINATE = "indeterminate"
