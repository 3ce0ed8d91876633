"""The persistence lifecycle of one session object (its CAS cursor), declared once.

    new ──save──▶ saving ──saved────▶ in_sync ──save──▶ saving ...
                    │  ──conflict──▶ conflicted ──reload──▶ in_sync | new
                    └──unknown────▶ uncertain  ──reload──▶ in_sync | new

``new``: nothing is stored yet, so the next save is create-only (``expected_cursor=None``).
``in_sync``: the object holds what storage holds at cursor ``n``; the next save expects ``n``.
``saving``: one save is in flight; nothing else may be saved until it settles.
``conflicted``: the save returned ``False`` (the cursor moved). Unlike the reference
(docs/reference.md §7.1) the object is *not* poisoned: it must reload, then may re-apply its intent.
``uncertain``: the save's outcome is unknown (it may have applied). The only legal move is to
re-read storage (``reload``) and settle from what is there.

``reload`` is guarded by the model's boolean ``stored``: whether the re-read found a record.
The cursor *value* is data, not state: :mod:`akchat_fsm.core.cursor` adds 1 per successful save
and refuses any reload that would move it down.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import State, StateMachine

__all__ = ["CursorEvent", "CursorModel", "CursorPhase", "SessionCursorLifecycle"]


class CursorPhase(StrEnum):
    """Where one session object stands relative to storage."""

    NEW = "new"
    IN_SYNC = "in_sync"
    SAVING = "saving"
    CONFLICTED = "conflicted"
    UNCERTAIN = "uncertain"


class CursorEvent(StrEnum):
    """Events of :class:`SessionCursorLifecycle`."""

    SAVE = "save"
    SAVED = "saved"
    CONFLICT = "conflict"
    UNKNOWN = "unknown"
    RELOAD = "reload"


class CursorModel:
    """The mutable box the machine runs on."""

    def __init__(self, state: CursorPhase | None = None, *, stored: bool = False) -> None:
        self.state = state
        self.stored = stored


class SessionCursorLifecycle(StateMachine):
    """Persistence lifecycle of one session object. States are :class:`CursorPhase` values."""

    new = State(initial=True, value=CursorPhase.NEW)
    in_sync = State(value=CursorPhase.IN_SYNC)
    saving = State(value=CursorPhase.SAVING)
    conflicted = State(value=CursorPhase.CONFLICTED)
    uncertain = State(value=CursorPhase.UNCERTAIN)

    save = new.to(saving) | in_sync.to(saving)
    saved = saving.to(in_sync)
    conflict = saving.to(conflicted)
    unknown = saving.to(uncertain)
    # Re-reading is always allowed outside a save in flight; what it finds decides the phase.
    # A conflicted object found nothing: the record was deleted, so it starts over as new.
    reload = (
        new.to(in_sync, cond="stored")
        | new.to(new, unless="stored")
        | in_sync.to(in_sync, cond="stored")
        | in_sync.to(new, unless="stored")
        | conflicted.to(in_sync, cond="stored")
        | conflicted.to(new, unless="stored")
        | uncertain.to(in_sync, cond="stored")
        | uncertain.to(new, unless="stored")
    )
