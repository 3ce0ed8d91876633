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
then. Nothing leaves a final state.

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


class ConfirmationLifecycle(StateMachine):
    """Lifecycle of one confirmation binding. States are :class:`ConfirmationStatus` values."""

    pending = State(initial=True, value=ConfirmationStatus.PENDING)
    approving = State(value=ConfirmationStatus.APPROVING)
    rejecting = State(value=ConfirmationStatus.REJECTING)
    expiring = State(value=ConfirmationStatus.EXPIRING)
    approved = State(final=True, value=ConfirmationStatus.APPROVED)
    rejected = State(final=True, value=ConfirmationStatus.REJECTED)
    expired = State(final=True, value=ConfirmationStatus.EXPIRED)

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
