"""Observer events: one per durable transition, delivered after the save that made it durable.

Observers are plain callables (sync or ``async``) passed to ``resume_chat_session``. They are
fire-and-forget: an observer that raises is logged and ignored, and can never change the
outcome of the operation that produced the event (docs/reference.md §3.6, gap §7.13 closed: resumed
sessions take observers too).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from ..wire.session import ConfirmationBinding

__all__ = ["Observer", "SessionEvent", "SessionEventKind"]

log = logging.getLogger("akchat_fsm.session")


class SessionEventKind(StrEnum):
    """What kind of durable transition a :class:`SessionEvent` reports."""

    #: An explicit ``persist()`` (including the create-only first save).
    PERSISTED = "persisted"
    #: A confirmation binding was created or changed status.
    CONFIRMATION = "confirmation"
    #: The turn lease was claimed or released.
    TURN = "turn"
    #: A route decision was recorded.
    DECISION = "decision"
    #: Terminal records were pruned by the retention rule (reported with the save that did it).
    PRUNED = "pruned"


@dataclass(frozen=True)
class SessionEvent:
    """One durable transition of one session.

    ``cursor`` is the stored cursor the transition was saved at. For confirmation events
    ``record`` is the binding after the transition and ``previous_status`` its status before
    (``None`` when the binding was created).
    """

    kind: SessionEventKind
    session_id: str
    cursor: int
    record: ConfirmationBinding | None = None
    previous_status: str | None = None
    turn_id: str | None = None
    message_id: str | None = None


Observer = Callable[[SessionEvent], object | Awaitable[object]]
