"""Seeded bug: retention prunes the oldest records whatever their status.

Same contracts as :func:`akchat_fsm.core.retention.prune_for_admission`; CrossHair must
refute them (a live record gets dropped).
"""

from __future__ import annotations

from akchat_fsm.core.records import Record
from akchat_fsm.core.retention import live_count

__all__ = ["live_count", "prune_drops_live"]


def prune_drops_live(
    records: tuple[Record, ...], cap: int, keep_terminal: int
) -> tuple[Record, ...]:
    """
    pre: cap >= 1
    pre: keep_terminal >= 0
    pre: live_count(records) < cap
    post: live_count(__return__) == live_count(records)
    post: all(r.status.is_terminal for r in records if r not in __return__)
    """
    excess_cap = max(0, len(records) + 1 - cap)
    return records[excess_cap:]
