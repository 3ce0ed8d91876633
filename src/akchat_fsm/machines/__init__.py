"""The explicit state machines (python-statemachine, strict) and the tables derived from them.

- :class:`ConfirmationLifecycle`: one confirmation binding (states = ``ConfirmationStatus``).
- :class:`SessionCursorLifecycle`: one session object's persistence (``CursorPhase``).
- :class:`TurnLeaseLifecycle`: one turn id in its session's lease (``TurnLeaseState``).

Hot paths never instantiate these classes; they read ``CONFIRMATION_TABLE``, ``CURSOR_TABLE``
and ``LEASE_TABLE`` (ADR-0010). ``akchat_fsm.machines.diagrams.diagram(name, fmt)`` draws
any of them (not imported here, so ``python -m akchat_fsm.machines.diagrams`` runs cleanly).
"""

from __future__ import annotations

from .confirmation import ConfirmationEvent, ConfirmationLifecycle, ConfirmationModel
from .cursor import CursorEvent, CursorModel, CursorPhase, SessionCursorLifecycle
from .lease import LeaseModel, TurnLeaseEvent, TurnLeaseLifecycle, TurnLeaseState
from .tables import CONFIRMATION_TABLE, CURSOR_TABLE, LEASE_TABLE, MACHINES, MachineSpec, step

__all__ = [
    "CONFIRMATION_TABLE",
    "CURSOR_TABLE",
    "LEASE_TABLE",
    "MACHINES",
    "ConfirmationEvent",
    "ConfirmationLifecycle",
    "ConfirmationModel",
    "CursorEvent",
    "CursorModel",
    "CursorPhase",
    "LeaseModel",
    "MachineSpec",
    "SessionCursorLifecycle",
    "TurnLeaseEvent",
    "TurnLeaseLifecycle",
    "TurnLeaseState",
    "step",
]
