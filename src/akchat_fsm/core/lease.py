"""The turn-lease kernel (docs/reference.md §9): claim and release over plain values.

Legality comes from :data:`~akchat_fsm.machines.tables.LEASE_TABLE` (derived from
``TurnLeaseLifecycle``); this module adds the data: the active lease, the last 64 terminal
turns, and the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..machines.lease import TurnLeaseEvent, TurnLeaseState
from ..machines.tables import LEASE_TABLE
from ..wire.enums import TurnOutcome

__all__ = ["MAX_TERMINAL_TURNS", "Lease", "TurnLedger", "claim_turn", "release_turn", "turn_state"]

#: The envelope keeps only the last 64 terminal turns (docs/reference.md §1.1).
MAX_TERMINAL_TURNS = 64


@dataclass(frozen=True)
class Lease:
    """The active turn and when its lease ends (epoch ms)."""

    turn_id: str
    expires_at: int


@dataclass(frozen=True)
class TurnLedger:
    """The lease part of the envelope."""

    active: Lease | None
    terminal: tuple[tuple[str, TurnOutcome], ...]


def _busy(ledger: TurnLedger, now_ms: int) -> bool:
    return ledger.active is not None and ledger.active.expires_at > now_ms


def turn_state(ledger: TurnLedger, turn_id: str) -> TurnLeaseState:
    """Where ``turn_id`` stands; a terminal entry wins over a (corrupt) active one.

    post: (__return__ == TurnLeaseState.RELEASED) == any(t == turn_id for t, _ in ledger.terminal)
    """
    if any(t == turn_id for t, _ in ledger.terminal):
        return TurnLeaseState.RELEASED
    if ledger.active is not None and ledger.active.turn_id == turn_id:
        return TurnLeaseState.HELD
    return TurnLeaseState.FREE


def _bounded(new: TurnLedger, old: TurnLedger) -> bool:
    return len(new.terminal) <= max(len(old.terminal), MAX_TERMINAL_TURNS)


def claim_turn(ledger: TurnLedger, turn_id: str, lease_ms: int, now_ms: int) -> TurnLedger | None:
    """Take the lease for ``turn_id`` until ``now_ms + lease_ms``; ``None`` when refused.

    Refused when the turn is terminal (a replay) or any unexpired lease exists (busy). An
    expired lease of another turn is taken over.

    pre: lease_ms > 0
    post: __return__ is None or __return__.active == Lease(turn_id, now_ms + lease_ms)
    post: __return__ is None or __return__.terminal == ledger.terminal
    post: not _busy(ledger, now_ms) or __return__ is None
    post: all(t != turn_id for t, _ in ledger.terminal) or __return__ is None
    """
    state = turn_state(ledger, turn_id)
    if LEASE_TABLE.get((state, TurnLeaseEvent.CLAIM, _busy(ledger, now_ms))) is None:
        return None
    return TurnLedger(Lease(turn_id, now_ms + lease_ms), ledger.terminal)


def release_turn(ledger: TurnLedger, turn_id: str, outcome: TurnOutcome) -> TurnLedger | None:
    """End the lease of ``turn_id`` with ``outcome``; ``None`` (no-op) unless it holds the lease.

    post: __return__ is None or __return__.active is None
    post: __return__ is None or __return__.terminal[-1] == (turn_id, outcome)
    post: __return__ is None or _bounded(__return__, ledger)
    post: __return__ is not None or turn_state(ledger, turn_id) != TurnLeaseState.HELD
    """
    state = turn_state(ledger, turn_id)
    if LEASE_TABLE.get((state, TurnLeaseEvent.RELEASE, False)) is None:
        return None
    kept = tuple(entry for entry in ledger.terminal if entry[0] != turn_id)
    terminal = (*kept, (turn_id, outcome))[-MAX_TERMINAL_TURNS:]
    return TurnLedger(None, terminal)
