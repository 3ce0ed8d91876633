"""The session cursor kernel: one session object's view of what storage holds.

Phases come from :class:`~akchat_fsm.machines.cursor.SessionCursorLifecycle` through the
derived :data:`~akchat_fsm.machines.tables.CURSOR_TABLE`; the cursor value is data here:
+1 per successful save, never down on a reload.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import IllegalTransition
from ..machines.cursor import CursorEvent, CursorPhase
from ..machines.tables import CURSOR_TABLE

__all__ = ["NEW_CURSOR", "CursorState", "begin_save", "cursor_step", "reloaded", "save_settled"]

MACHINE = "session_cursor"


@dataclass(frozen=True)
class CursorState:
    """Phase of the persistence lifecycle and the last cursor known to be stored.

    inv: self.cursor >= 0
    inv: self.phase != CursorPhase.NEW or self.cursor == 0
    """

    phase: CursorPhase
    cursor: int

    @property
    def expected_cursor(self) -> int | None:
        """What the next save expects: ``None`` (create-only) while nothing is stored."""
        return None if self.phase is CursorPhase.NEW else self.cursor


#: A session object with nothing stored yet (its first save is create-only).
NEW_CURSOR = CursorState(CursorPhase.NEW, 0)


def cursor_step(phase: CursorPhase, event: CursorEvent, stored: bool) -> CursorPhase:
    """One move of the cursor lifecycle, from the derived table.

    raises: IllegalTransition
    post: event != CursorEvent.SAVE or __return__ == CursorPhase.SAVING
    post: event == CursorEvent.SAVE or phase != CursorPhase.SAVING or event != CursorEvent.RELOAD
    """
    target = CURSOR_TABLE.get((phase, event, stored))
    if target is None:
        raise IllegalTransition(MACHINE, str(phase), str(event))
    return target


def begin_save(state: CursorState) -> CursorState:
    """A save is about to be sent: only from ``new`` or ``in_sync``.

    raises: IllegalTransition
    post: __return__.phase == CursorPhase.SAVING
    post: __return__.cursor == state.cursor
    """
    return CursorState(cursor_step(state.phase, CursorEvent.SAVE, False), state.cursor)


def save_settled(state: CursorState, event: CursorEvent) -> CursorState:
    """Settle the save in flight: ``saved`` (+1), ``conflict`` or ``unknown`` (unchanged).

    pre: event in (CursorEvent.SAVED, CursorEvent.CONFLICT, CursorEvent.UNKNOWN)
    raises: IllegalTransition
    post: state.phase == CursorPhase.SAVING
    post: __return__.cursor == state.cursor + (1 if event == CursorEvent.SAVED else 0)
    post: (__return__.phase == CursorPhase.IN_SYNC) == (event == CursorEvent.SAVED)
    """
    phase = cursor_step(state.phase, event, False)
    return CursorState(phase, state.cursor + 1 if event == CursorEvent.SAVED else state.cursor)


def reloaded(state: CursorState, stored_cursor: int | None) -> CursorState:
    """Storage was re-read: it holds ``stored_cursor`` (``None``: nothing stored).

    A found record may never be behind what this object already saw (that would be a cursor
    going down). Nothing found means the record was deleted (or a create never applied):
    the object starts over as ``new``.

    pre: stored_cursor is None or stored_cursor >= 0
    raises: IllegalTransition
    post: stored_cursor is None or __return__.cursor >= state.cursor
    post: (__return__.phase == CursorPhase.NEW) == (stored_cursor is None)
    """
    phase = cursor_step(state.phase, CursorEvent.RELOAD, stored_cursor is not None)
    if stored_cursor is None:
        return CursorState(phase, 0)
    if stored_cursor < state.cursor:
        raise IllegalTransition(
            MACHINE, str(state.phase), str(CursorEvent.RELOAD), "stored cursor went down"
        )
    return CursorState(phase, stored_cursor)
