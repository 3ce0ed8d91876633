"""Seeded bug: a conflicted save still advances the local cursor (REFERENCE's poisoning, inverted).

Same contracts as :func:`akchat_fsm.core.cursor.save_settled`; CrossHair must refute them.
"""

from __future__ import annotations

from akchat_fsm.core.cursor import CursorState, cursor_step
from akchat_fsm.errors import IllegalTransition
from akchat_fsm.machines.cursor import CursorEvent, CursorPhase

__all__ = ["CursorPhase", "IllegalTransition", "save_settled_counts_conflicts"]


def save_settled_counts_conflicts(state: CursorState, event: CursorEvent) -> CursorState:
    """
    pre: event in (CursorEvent.SAVED, CursorEvent.CONFLICT, CursorEvent.UNKNOWN)
    raises: IllegalTransition
    post: __return__.cursor == state.cursor + (1 if event == CursorEvent.SAVED else 0)
    """
    phase = cursor_step(state.phase, event, False)
    return CursorState(
        phase, state.cursor + 1 if event is not CursorEvent.UNKNOWN else state.cursor
    )
