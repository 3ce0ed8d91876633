"""The edge of the pure core: the pydantic envelope plus the session's cursor phase.

Every command of the core is a function ``(SessionState, ..., now_ms, *, nonce) -> Step``. A
:class:`Step` holds the state to adopt, the save to perform and the upstream call to make once
that save applied (see :mod:`akchat_fsm.core.effects`). When a step saves, its ``state`` is the
*saving* state and its ``save`` is exactly what storage is to receive, write nonce included: the
shell performs it as given and then calls :func:`save_settled` with what storage said (``saved``
→ in sync at cursor + 1, ``conflict`` → reload required, ``unknown`` → re-read and
:func:`settle_uncertain`). Nothing here does I/O, reads a clock or draws randomness: the clock
(``now_ms``) and the write nonce are the shell's inputs (ADR-0112).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TypeVar

from ..errors import ConfigError, IllegalTransition, IncompatibleSession
from ..machines.cursor import CursorEvent, CursorPhase
from ..wire.js import MAX_SAFE_INTEGER
from ..wire.session import ConfirmationBinding, Conversation, SessionSnapshot
from . import cursor as _cursor
from .cursor import NEW_CURSOR, CursorState
from .effects import CallApprove, CallDeny, ClaimedCall, SaveSnapshot

__all__ = [
    "NONCE_LIMIT",
    "SessionState",
    "Step",
    "TokenIndex",
    "iso_ms",
    "new_session",
    "next_snapshot",
    "persist",
    "reloaded",
    "resumed",
    "save_settled",
    "settle_uncertain",
    "with_write_nonce",
]

E = TypeVar("E", bound=StrEnum)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: ``Date.prototype.toISOString`` leaves the four-digit form after year 9999.
_MAX_CLOCK_MS = 253_402_300_799_999
_MIN_CLOCK_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
#: A write nonce is below this: 12 decimal digits appended to ``updatedAt``'s milliseconds.
NONCE_LIMIT = 10**12


@dataclass(frozen=True)
class SessionState:
    """The in-memory envelope and where this object stands relative to storage.

    ``token_index`` is a memo of where each token sits in ``snapshot.confirmations`` (derived,
    never compared, never written); states that share that bindings tuple share it.
    """

    snapshot: SessionSnapshot
    cursor: CursorState
    token_index: TokenIndex = field(
        default_factory=lambda: TokenIndex(), compare=False, repr=False, kw_only=True
    )


class TokenIndex:
    """token -> position in one bindings tuple, kept by the states that hold that tuple.

    Lookups in O(1) instead of a scan of up to 1,000 bindings per use (ADR-0111). It lives and
    dies with its states: the core keeps no state between calls. It answers only for the very
    tuple it was built for (held here, so that identity cannot be reused by another tuple), so
    a state whose bindings changed never reads a stale map; it rebuilds one.
    """

    __slots__ = ("_entry",)

    def __init__(
        self,
        bindings: tuple[ConfirmationBinding, ...] | None = None,
        positions: dict[str, int] | None = None,
    ) -> None:
        self._entry = None if bindings is None or positions is None else (bindings, positions)

    def get(self, bindings: tuple[ConfirmationBinding, ...]) -> dict[str, int] | None:
        """The map built for exactly ``bindings``, if this index holds it."""
        entry = self._entry
        return entry[1] if entry is not None and entry[0] is bindings else None

    def put(self, bindings: tuple[ConfirmationBinding, ...], positions: dict[str, int]) -> None:
        """Keep ``positions`` as the map of ``bindings`` (one assignment: threads see either)."""
        self._entry = (bindings, positions)


def _index_for(state: SessionState, snapshot: SessionSnapshot) -> TokenIndex:
    """``state``'s index for a state on ``snapshot`` when it holds the same bindings tuple."""
    if snapshot.confirmations is state.snapshot.confirmations:
        return state.token_index
    return TokenIndex()


@dataclass(frozen=True)
class Step:
    """The result of one core command: what to adopt, what to save, what to call after.

    ``state``: adopt it once ``save`` is settled through :func:`save_settled` (at once when
    there is no save). ``save``: the CAS write, exactly as storage is to receive it (``None``:
    nothing to write). ``then``: the upstream call the claim saved by ``save`` allows; perform
    it only after that save applied, never without it (``Step`` refuses ``then`` without
    ``save``). ``accepted``: ``False`` when the command was a definite no-op (e.g. a refused
    turn claim); then there is nothing to perform and ``state`` is the input state.
    """

    state: SessionState
    _: KW_ONLY
    save: SaveSnapshot | None = None
    then: ClaimedCall | None = None
    accepted: bool = True

    def __post_init__(self) -> None:
        if self.save is not None and not isinstance(self.save, SaveSnapshot):
            raise ConfigError("Step.save must be a SaveSnapshot or None.")
        if self.then is not None and not isinstance(self.then, CallApprove | CallDeny):
            raise ConfigError("Step.then must be a CallApprove, a CallDeny or None.")
        if self.then is not None and self.save is None:
            # The claim protocol in one line: an upstream call runs only after the save that
            # records its claim applied, so a step cannot even say "call" without that save.
            raise IllegalTransition("step", "unsaved", "upstream call", "it needs its save")
        if not self.accepted and (self.save is not None or self.then is not None):
            raise IllegalTransition("step", "refused", "effect", "a refused step does nothing")


def coerce(kind: type[E], value: object, error: Callable[[], Exception]) -> E:
    """``value`` as a member of ``kind`` (members and their plain strings), else ``error()``."""
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            pass
    raise error()


def check_clock(now_ms: int) -> int:
    """Validate an injected clock reading (epoch ms, a safe integer within ISO years 1-9999)."""
    if type(now_ms) is not int or not _MIN_CLOCK_MS <= now_ms <= _MAX_CLOCK_MS:
        raise ConfigError("Clock reading is invalid: expected epoch milliseconds.")
    return now_ms


def iso_ms(now_ms: int) -> str:
    """``new Date(now_ms).toISOString()``: ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    moment = _EPOCH + timedelta(milliseconds=check_clock(now_ms))
    return (
        f"{moment.year:04d}-{moment.month:02d}-{moment.day:02d}T"
        f"{moment.hour:02d}:{moment.minute:02d}:{moment.second:02d}."
        f"{moment.microsecond // 1000:03d}Z"
    )


def with_write_nonce(updated_at: str, nonce: int) -> str:
    """``updatedAt`` to the millisecond, then 12 more fraction digits unique to this write.

    Every written snapshot is then unique, so an unknown outcome is settled exactly by
    re-reading, even when another client saved the same change from the same base in the same
    millisecond (ADR-0062). ``updatedAt`` is never read for any decision, and any fraction
    precision is valid on the wire (docs/wire-format.md, ``updatedAt``).
    """
    return f"{updated_at[:-1]}{nonce:012d}Z"


def check_nonce(nonce: int) -> int:
    """Validate an injected write nonce: an int in ``[0, NONCE_LIMIT)``."""
    if type(nonce) is not int or not 0 <= nonce < NONCE_LIMIT:
        raise ConfigError("Write nonce is invalid: expected an int in [0, 10**12).")
    return nonce


def next_snapshot(
    snapshot: SessionSnapshot, now_ms: int, *, nonce: int | None = None
) -> SessionSnapshot:
    """The snapshot a save writes: ``cursor + 1`` and ``updatedAt`` = ``now_ms`` as ISO ms Z.

    With a ``nonce`` (what a shell passes on every write, ADR-0112) the 12 digits of
    :func:`with_write_nonce` follow the milliseconds; without one, ``updatedAt`` has the
    reference writer's three fraction digits.
    """
    if snapshot.cursor >= MAX_SAFE_INTEGER:
        raise IllegalTransition("session_cursor", "in_sync", "save", "cursor would overflow")
    updated_at = iso_ms(now_ms)
    if nonce is not None:
        updated_at = with_write_nonce(updated_at, check_nonce(nonce))
    written = snapshot.model_copy(update={"cursor": snapshot.cursor + 1, "updated_at": updated_at})
    if not written.terminal_turns and "terminal_turns" in written.model_fields_set:
        # The reference writer omits an empty ``terminalTurns``; an explicit ``[]`` read from
        # storage (or set by a turn command) must not be written back. `model_construct` with
        # the fields set is pydantic's public way to say "not given" (no private state touched).
        written = SessionSnapshot.model_construct(
            written.model_fields_set - {"terminal_turns"}, **dict(written)
        )
    return written


def new_session(
    session_id: str,
    definition_id: str,
    definition_revision: int = 1,
    *,
    now_ms: int,
    conversation_state: str | None = None,
) -> SessionState:
    """A brand-new session: nothing stored, cursor 0, the next save is create-only."""
    conversation = (
        None if conversation_state is None else {"state": conversation_state, "decisions": []}
    )
    try:
        snapshot = SessionSnapshot.model_validate(
            {
                "sessionId": session_id,
                "definitionId": definition_id,
                "definitionRevision": definition_revision,
                "updatedAt": iso_ms(now_ms),
                "cursor": 0,
                "confirmations": [],
                **({"conversation": conversation} if conversation else {}),
            }
        )
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ConfigError("Session options are invalid.") from exc
    return SessionState(snapshot, NEW_CURSOR)


def _check_snapshot(value: object) -> None:
    if not isinstance(value, SessionSnapshot):
        raise ConfigError("Expected a decoded SessionSnapshot.")


def resumed(snapshot: SessionSnapshot) -> SessionState:
    """A session restored from storage at ``snapshot.cursor``."""
    _check_snapshot(snapshot)
    return SessionState(snapshot, CursorState(CursorPhase.IN_SYNC, snapshot.cursor))


def _saving(
    state: SessionState,
    snapshot: SessionSnapshot,
    now_ms: int,
    nonce: int | None,
    then: ClaimedCall | None = None,
    index: TokenIndex | None = None,
) -> Step:
    """The step that saves ``snapshot`` (the new in-memory envelope) with CAS, then ``then``.

    ``index``: the token index of ``snapshot``'s bindings when the caller knows it (a move
    that keeps every token at its position); else ``state``'s is carried when it applies.
    """
    saving = _cursor.begin_save(state.cursor)
    if snapshot.cursor != state.cursor.cursor:
        # A state assembled by hand (or a snapshot adopted without settling its save).
        raise IllegalTransition(
            "session_cursor",
            str(state.cursor.phase),
            "save",
            "envelope cursor is not the stored one",
        )
    saved = next_snapshot(snapshot, now_ms, nonce=nonce)
    save = SaveSnapshot(saved, state.cursor.expected_cursor)
    carried = index if index is not None else _index_for(state, saved)
    return Step(SessionState(saved, saving, token_index=carried), save=save, then=then)


def check_can_save(state: SessionState) -> None:
    """Raise :class:`IllegalTransition` unless a save may start now (checked before effects)."""
    _cursor.cursor_step(state.cursor.phase, CursorEvent.SAVE, False)


def persist(state: SessionState, now_ms: int, *, nonce: int | None = None) -> Step:
    """An explicit save of the current envelope (the reference's ``session.persist()``)."""
    return _saving(state, state.snapshot, now_ms, nonce)


def save_settled(state: SessionState, outcome: CursorEvent) -> SessionState:
    """Settle the save in flight with ``saved``, ``conflict`` or ``unknown``."""

    def refused() -> IllegalTransition:
        return IllegalTransition("session_cursor", str(state.cursor.phase), str(outcome))

    event = coerce(CursorEvent, outcome, refused)
    if event not in (CursorEvent.SAVED, CursorEvent.CONFLICT, CursorEvent.UNKNOWN):
        raise refused()
    settled = _cursor.save_settled(state.cursor, event)
    return SessionState(state.snapshot, settled, token_index=state.token_index)


def _check_same_session(state: SessionState, stored: SessionSnapshot) -> None:
    mine = state.snapshot
    if (stored.session_id, stored.definition_id, stored.definition_revision) != (
        mine.session_id,
        mine.definition_id,
        mine.definition_revision,
    ):
        raise IncompatibleSession("Stored session belongs to another session or definition.")


def reloaded(state: SessionState, stored: SessionSnapshot | None) -> SessionState:
    """Adopt what a re-read of storage found (``None``: nothing stored)."""
    if stored is None:
        return SessionState(
            state.snapshot.model_copy(update={"cursor": 0}), _cursor.reloaded(state.cursor, None)
        )
    _check_snapshot(stored)
    _check_same_session(state, stored)
    return SessionState(stored, _cursor.reloaded(state.cursor, stored.cursor))


def settle_uncertain(
    state: SessionState, attempted: SaveSnapshot, stored: SessionSnapshot | None
) -> tuple[SessionState, bool]:
    """Settle an ``uncertain`` save by what a re-read found; ``True`` if our save applied.

    It applied iff the stored record is exactly the snapshot we sent (same cursor, same
    content, including its millisecond ``updatedAt``). Either way the state is reloaded.
    """
    if state.cursor.phase is not CursorPhase.UNCERTAIN:
        raise IllegalTransition("session_cursor", str(state.cursor.phase), "settle")
    if not isinstance(attempted, SaveSnapshot):
        raise ConfigError("Expected the SaveSnapshot effect that was attempted.")
    if stored is not None:
        _check_snapshot(stored)
    applied = stored is not None and stored.to_wire() == attempted.snapshot.to_wire()
    return reloaded(state, stored), applied


def with_conversation(snapshot: SessionSnapshot, conversation: Conversation) -> SessionSnapshot:
    """``snapshot`` with ``conversation`` replaced (no validation: callers keep it valid)."""
    return snapshot.model_copy(update={"conversation": conversation})
