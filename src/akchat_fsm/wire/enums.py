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


#: The one statement of which statuses are final (ADR-0114). It lives here, at the bottom, because
#: storage (which may import only the wire) indexes processing records by it. The lifecycle reads
#: it rather than repeating it: ``ConfirmationLifecycle`` declares each state ``final`` iff its
#: status is in this set, python-statemachine refuses the class unless that is exactly the set
#: of states its transitions never leave, and ``machines.tables`` checks the same against the
#: derived table at import. So a wrong entry here fails every import of the machines.
_TERMINAL = frozenset(
    {ConfirmationStatus.APPROVED, ConfirmationStatus.REJECTED, ConfirmationStatus.EXPIRED}
)
#: Processing is derived, not listed: a claimed status, i.e. neither the open ``pending`` (the
#: machine's initial state) nor final. ``machines.tables`` checks it equals the set of states a
#: claim moves to.
_PROCESSING = frozenset(
    s for s in ConfirmationStatus if s is not ConfirmationStatus.PENDING and s not in _TERMINAL
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
