"""The explicit state machines (python-statemachine, strict) and the tables derived from them.

- :class:`ConfirmationLifecycle`: one confirmation binding (states = ``ConfirmationStatus``).
- :class:`SessionCursorLifecycle`: one session object's persistence (``CursorPhase``).
- :class:`TurnLeaseLifecycle`: one turn id in its session's lease (``TurnLeaseState``).
- :class:`ExecutionLifecycle`: one tool call's execution-ledger entry (``ExecutionState``).
- :class:`RunLifecycle`: one agent run's record (``RunState``).

Hot paths never instantiate these classes; they read ``CONFIRMATION_TABLE``, ``CURSOR_TABLE``,
``LEASE_TABLE``, ``EXECUTION_TABLE`` and ``RUN_TABLE`` (ADR-0010, ADR-0120).
``akchat_fsm.machines.diagrams.diagram(name, fmt)`` draws any of them (not imported here, so
``python -m akchat_fsm.machines.diagrams`` runs cleanly).
"""

from __future__ import annotations

from .confirmation import ConfirmationEvent, ConfirmationLifecycle, ConfirmationModel
from .cursor import CursorEvent, CursorModel, CursorPhase, SessionCursorLifecycle
from .execution import ExecutionEvent, ExecutionLifecycle, ExecutionModel, ExecutionState
from .lease import LeaseModel, TurnLeaseEvent, TurnLeaseLifecycle, TurnLeaseState
from .run import RunEvent, RunLifecycle, RunModel, RunState
from .tables import (
    CONFIRMATION_TABLE,
    CURSOR_TABLE,
    EXECUTION_TABLE,
    LEASE_TABLE,
    MACHINES,
    RUN_TABLE,
    MachineSpec,
    step,
)

__all__ = [
    "CONFIRMATION_TABLE",
    "CURSOR_TABLE",
    "EXECUTION_TABLE",
    "LEASE_TABLE",
    "MACHINES",
    "RUN_TABLE",
    "ConfirmationEvent",
    "ConfirmationLifecycle",
    "ConfirmationModel",
    "CursorEvent",
    "CursorModel",
    "CursorPhase",
    "ExecutionEvent",
    "ExecutionLifecycle",
    "ExecutionModel",
    "ExecutionState",
    "LeaseModel",
    "MachineSpec",
    "RunEvent",
    "RunLifecycle",
    "RunModel",
    "RunState",
    "SessionCursorLifecycle",
    "TurnLeaseEvent",
    "TurnLeaseLifecycle",
    "TurnLeaseState",
    "step",
]
