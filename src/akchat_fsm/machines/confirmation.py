"""The confirmation lifecycle, declared once.

    pending ──approve──▶ approving ──complete──▶ approved
       │  ──reject───▶ rejecting ──complete──▶ rejected
       │  ──expire───▶ expiring  ──complete──▶ expired
       ▲                  │
       └────release───────┘   (reconciliation: upstream is known NOT to have acted)

A claim (approve / reject / expire) is what one CAS save records; only the client whose claim
was saved calls upstream, and ``complete`` is recorded by a second CAS after upstream returned.
Expiry is a guard on every claim, read from an injected clock (docs/reference.md §7.3 closed): once
``now >= expires_at`` approve and reject both claim ``expiring``, and ``expire`` is legal only
then. Nothing leaves a final state; which states are final is read from the wire's
``ConfirmationStatus.is_terminal`` (storage needs it and may import only the wire, ADR-0114).

The machine is strict (``StateMachine``): an event with no enabled transition raises and leaves
the state unchanged. Callbacks do no I/O; hot paths use the table derived from this class in
:mod:`akchat_fsm.machines.tables` instead of instantiating it.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import State, StateMachine

from ..wire.enums import ConfirmationStatus

__all__ = ["ConfirmationEvent", "ConfirmationLifecycle", "ConfirmationModel"]


class ConfirmationModel:
    """The mutable box the machine runs on; the envelope itself stays frozen."""

    def __init__(self, state: ConfirmationStatus | None = None, *, expired: bool = False) -> None:
        self.state = state
        self.expired = expired


def _state(status: ConfirmationStatus, *, initial: bool = False) -> State:
    # Final or not is the wire's one statement (``ConfirmationStatus.is_terminal``, ADR-0114),
    # not repeated here; python-statemachine refuses this class unless the final states are
    # exactly those the transitions below never leave.
    return State(initial=initial, final=status.is_terminal, value=status)


class ConfirmationLifecycle(StateMachine):
    """Lifecycle of one confirmation binding. States are :class:`ConfirmationStatus` values."""

    pending = _state(ConfirmationStatus.PENDING, initial=True)
    approving = _state(ConfirmationStatus.APPROVING)
    rejecting = _state(ConfirmationStatus.REJECTING)
    expiring = _state(ConfirmationStatus.EXPIRING)
    approved = _state(ConfirmationStatus.APPROVED)
    rejected = _state(ConfirmationStatus.REJECTED)
    expired = _state(ConfirmationStatus.EXPIRED)

    # Claims. Declaration order matters: the first transition whose guard passes wins.
    approve = pending.to(approving, unless="expired") | pending.to(expiring, cond="expired")
    reject = pending.to(rejecting, unless="expired") | pending.to(expiring, cond="expired")
    expire = pending.to(expiring, cond="expired")
    # Upstream returned successfully: record the matching final state.
    complete = approving.to(approved) | rejecting.to(rejected) | expiring.to(expired)
    # Reconciliation: upstream is known not to have acted, so the claim may be given up.
    release = approving.to(pending) | rejecting.to(pending) | expiring.to(pending)


class ConfirmationEvent(StrEnum):
    """Event names of :class:`ConfirmationLifecycle` (a ``StrEnum``: each member is its name)."""

    APPROVE = "approve"
    REJECT = "reject"
    EXPIRE = "expire"
    COMPLETE = "complete"
    RELEASE = "release"
