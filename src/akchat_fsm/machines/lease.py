"""The turn lease (docs/reference.md §9) seen from one turn id, declared once.

    free ──claim──▶ held ──release──▶ released (final: completed | indeterminate)
      ▲               │ ──claim (own lease expired)──▶ held
      └──supersede────┘   (another turn took over this turn's expired lease)

The machine's guard is the model's boolean ``busy``: *some* turn holds a lease that has not
expired (``expiresAt > now``), this one included. A claim is refused when busy, and when the
turn is already ``released`` (a replayed turn id: nothing leaves a final state). An expired
lease is free for the taking: the new holder's claim moves the old holder from ``held`` to
``free`` (``supersede``), which is legal only when the lease is no longer busy.

The outcome of a release (``completed`` or ``indeterminate``) is data kept in the envelope's
``terminalTurns``; both outcomes are the same final state here.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import State, StateMachine

__all__ = ["LeaseModel", "TurnLeaseEvent", "TurnLeaseLifecycle", "TurnLeaseState"]


class TurnLeaseState(StrEnum):
    """Where one turn id stands in its session's lease."""

    FREE = "free"
    HELD = "held"
    RELEASED = "released"


class TurnLeaseEvent(StrEnum):
    """Events of :class:`TurnLeaseLifecycle`."""

    CLAIM = "claim"
    SUPERSEDE = "supersede"
    RELEASE = "release"


class LeaseModel:
    """The mutable box the machine runs on."""

    def __init__(self, state: TurnLeaseState | None = None, *, busy: bool = False) -> None:
        self.state = state
        self.busy = busy


class TurnLeaseLifecycle(StateMachine):
    """Lease lifecycle of one turn id. States are :class:`TurnLeaseState` values."""

    free = State(initial=True, value=TurnLeaseState.FREE)
    held = State(value=TurnLeaseState.HELD)
    released = State(final=True, value=TurnLeaseState.RELEASED)

    claim = free.to(held, unless="busy") | held.to(held, unless="busy")
    supersede = held.to(free, unless="busy")
    release = held.to(released)
