"""Terminal-record retention: long-lived sessions never hit the 1,000-confirmation wall.

Rule (ADR-0013): records are only ever pruned when a new record is admitted, and only terminal
ones (``approved`` / ``rejected`` / ``expired``), oldest first (array order is insertion order).
Before admitting, terminal records beyond the newest ``keep_terminal`` are dropped, and then
more of the oldest terminal records while the list plus the new record would exceed ``cap``.
Live records (``pending`` and the processing states) are never pruned: if ``cap`` live
records exist, admission fails with ``LimitExceeded`` before any upstream call.
"""

from __future__ import annotations

from .records import Record

__all__ = ["KEEP_TERMINAL", "MAX_CONFIRMATIONS", "live_count", "prune_for_admission"]

#: The envelope's bound on ``confirmations`` (docs/reference.md §1.1).
MAX_CONFIRMATIONS = 1_000
#: Default number of terminal records kept for late ``AlreadyResolved`` answers and auditing.
KEEP_TERMINAL = 256


def live_count(records: tuple[Record, ...]) -> int:
    """Number of live (pending or processing) records.

    post: 0 <= __return__ <= len(records)
    """
    return sum(1 for r in records if not r.status.is_terminal)


def _is_subsequence(part: tuple[Record, ...], whole: tuple[Record, ...]) -> bool:
    it = iter(whole)
    return all(any(p is w or p == w for w in it) for p in part)


def _pruning_needed(records: tuple[Record, ...], cap: int, keep_terminal: int) -> bool:
    # Only when the new record would not fit, or too many terminal records are kept.
    return len(records) + 1 > cap or len(records) - live_count(records) > keep_terminal


def prune_for_admission(
    records: tuple[Record, ...], cap: int, keep_terminal: int
) -> tuple[Record, ...]:
    """The records to keep so that one more record fits, pruning only old terminal records.

    Callers check ``live_count(records) < cap`` first; when it fails no pruning can help.

    pre: cap >= 1
    pre: keep_terminal >= 0
    pre: live_count(records) < cap
    post: live_count(__return__) == live_count(records)
    post: len(__return__) + 1 <= cap or len(__return__) == len(records)
    post: len(__return__) + 1 <= cap or len(records) + 1 <= cap
    post: _is_subsequence(__return__, records)
    post: all(r.status.is_terminal for r in records if r not in __return__)
    post: len(__return__) == len(records) or _pruning_needed(records, cap, keep_terminal)
    """
    terminal_total = len(records) - live_count(records)
    # How many terminal records must go: the excess over keep_terminal, or more if the cap
    # still would not leave room for the new record.
    excess_keep = max(0, terminal_total - keep_terminal)
    excess_cap = max(0, len(records) + 1 - cap)
    to_drop = min(terminal_total, max(excess_keep, excess_cap))
    if to_drop == 0:
        return records
    kept: list[Record] = []
    for record in records:
        if to_drop > 0 and record.status.is_terminal:
            to_drop -= 1
            continue
        kept.append(record)
    return tuple(kept)
