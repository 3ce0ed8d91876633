"""Seeded bug: a turn claim that ignores an unexpired lease (two turns at once).

Same contracts as :func:`akchat_fsm.core.lease.claim_turn`; CrossHair must refute them.
"""

from __future__ import annotations

from akchat_fsm.core.lease import Lease, TurnLedger, _busy, turn_state
from akchat_fsm.machines.lease import TurnLeaseEvent
from akchat_fsm.machines.tables import LEASE_TABLE

__all__ = ["_busy", "claim_ignores_busy"]


def claim_ignores_busy(
    ledger: TurnLedger, turn_id: str, lease_ms: int, now_ms: int
) -> TurnLedger | None:
    """
    pre: lease_ms > 0
    post: not _busy(ledger, now_ms) or __return__ is None
    """
    state = turn_state(ledger, turn_id)
    if LEASE_TABLE.get((state, TurnLeaseEvent.CLAIM, False)) is None:
        return None
    return TurnLedger(Lease(turn_id, now_ms + lease_ms), ledger.terminal)
