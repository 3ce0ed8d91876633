"""Shell orchestration shared by every plan: decode what storage holds, save by CAS, settle.

:class:`SessionHolder` is what one session object knows: the core's
:class:`~akchat_fsm.core.SessionState` (envelope + cursor phase) plus the definition, the
replayed conversation state and the clock. Plans replace ``holder.core`` only at durable
points (a save that returned ``True``, a settled unknown outcome, a reload), so a plan that
fails at any step leaves the session exactly as storage last confirmed it: rollback in memory
is free.

:func:`apply` is the one loop every mutation goes through: draw the clock and a write nonce,
ask the core for a step on the current state, perform the step's ``save`` exactly as the core
built it (CAS), and on a conflict reload and ask again, up to ``attempts`` times. The session
object is never left stale or stuck: after a :class:`SessionConflict` it already holds the
fresh state, and any later operation first reloads a state the core would refuse to save from
(conflicted or uncertain).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from .. import core
from ..core.effects import SaveSnapshot
from ..core.state import NONCE_LIMIT
from ..errors import (
    CONVERSATION_HINT,
    ConfigError,
    IncompatibleSession,
    OutcomeUnknown,
    SessionConflict,
    StorageError,
    StorageUnavailable,
)
from ..machines.cursor import CursorEvent, CursorPhase
from ..wire.decode import INVALID, decode_session_snapshot
from ..wire.session import SessionSnapshot
from .definition import ChatDefinition, replay_conversation
from .effects import Emit, Load, Plan, SaveSnapshotCreatingRecords
from .observers import SessionEvent, SessionEventKind

__all__ = [
    "MAX_STALLS",
    "NOT_APPLIED_WHEN_READ",
    "REDECIDE",
    "SNAPSHOT_INCOMPATIBLE",
    "SessionHolder",
    "apply",
    "decode_stored",
    "not_applied_when_read",
    "reload",
]

SNAPSHOT_INCOMPATIBLE = "Session snapshot is incompatible with this chat definition."
#: An unknown save outcome settled by a re-read that found the stored cursor unchanged.
NOT_APPLIED_WHEN_READ = (
    "save outcome unknown; a re-read found the stored cursor unchanged, so it had not applied "
    "when read; a retry is safe: compare-and-set lets at most one of the two writes apply"
)


class _NotAppliedWhenRead(StorageUnavailable):
    """:data:`NOT_APPLIED_WHEN_READ`, told apart from other unavailability by the plans that
    must fence a save that may still land (ADR-0093); users see a StorageUnavailable."""


def not_applied_when_read(error: BaseException) -> bool:
    """Whether ``error`` settled an unknown save as "not applied when read" (it may land)."""
    return isinstance(error, _NotAppliedWhenRead)


#: A core command with its arguments bound: ``(state, now_ms, nonce) -> Step``.
Command = Callable[[core.SessionState, int, int], core.Step]


def _decode(raw: object) -> SessionSnapshot:
    """The stored value as a snapshot, or ConfigError with the reference diagnostic text."""
    result = decode_session_snapshot(raw)
    if result.snapshot is None:
        message = result.diagnostic.message if result.diagnostic else INVALID.message
        raise ConfigError(message, hint=CONVERSATION_HINT)
    return result.snapshot


def decode_stored(
    raw: object, definition: ChatDefinition, session_id: str
) -> tuple[SessionSnapshot, str | None] | None:
    """Decode, identity-check and replay a stored value; ``None`` when nothing is stored.

    Rejections, in the reference's order (docs/reference.md §1.4): undecodable → ``ConfigError``
    with the diagnostic's message; foreign session, other definition or other revision →
    :class:`IncompatibleSession`; conversation that does not replay → the same class with the
    conversation message. Returns the snapshot and the replayed conversation state.
    """
    if raw is None:
        return None
    snapshot = _decode(raw)
    if (
        snapshot.session_id != session_id
        or snapshot.definition_id != definition.id
        or snapshot.definition_revision != definition.revision
    ):
        raise IncompatibleSession(SNAPSHOT_INCOMPATIBLE)
    state, _ = replay_conversation(definition, snapshot.conversation)
    return snapshot, state


def _default_nonce() -> int:
    # The core writes it into ``updatedAt`` (core.state.with_write_nonce, ADR-0062/0112).
    return secrets.randbelow(NONCE_LIMIT)


@dataclass
class SessionHolder:
    """What one session object knows about its stored envelope (replaced at durable points)."""

    definition: ChatDefinition
    session_id: str
    core: core.SessionState
    conversation_state: str | None
    clock: Callable[[], int]
    nonce: Callable[[], int] = field(default=_default_nonce)
    #: Whether anyone listens: observer events are only computed when someone does.
    observed: bool = True
    #: The store writes an envelope save and create-only records as one atomic write
    #: (``SaveWithRecords``, ADR-0141): the audited claim then writes its entry inside it.
    atomic_records: bool = False
    #: A save whose outcome stayed unknown (its settling re-read failed): the envelope before
    #: it and the save sent. The next reload settles it and, if it applied, emits its events.
    unsettled: tuple[SessionSnapshot, SaveSnapshot] | None = None

    @property
    def snapshot(self) -> SessionSnapshot:
        return self.core.snapshot

    @property
    def cursor(self) -> int:
        return self.core.cursor.cursor

    @property
    def exists(self) -> bool:
        return self.core.cursor.phase is not CursorPhase.NEW

    @property
    def needs_reload(self) -> bool:
        return self.core.cursor.phase not in (CursorPhase.NEW, CursorPhase.IN_SYNC)

    @classmethod
    def fresh(
        cls, definition: ChatDefinition, session_id: str, clock: Callable[[], int]
    ) -> SessionHolder:
        conversation = definition.conversation
        state = conversation.initial_state if conversation is not None else None
        fresh = core.new_session(
            session_id,
            definition.id,
            definition.revision,
            now_ms=clock(),
            conversation_state=state,
        )
        return cls(definition, session_id, fresh, state, clock)

    def forget_unsaved(self) -> None:
        """Nothing is stored: hold the fresh envelope again (the cursor phase is the core's)."""
        fresh = SessionHolder.fresh(self.definition, self.session_id, self.clock)
        self.core = replace(self.core, snapshot=fresh.snapshot)
        self.conversation_state = fresh.conversation_state

    def adopt_stored(self, stored: tuple[SessionSnapshot, str | None] | None) -> None:
        """Adopt what a re-read found (through the core, which refuses a cursor going down)."""
        if stored is None:
            self.core = core.reloaded(self.core, None)
            self.forget_unsaved()
            return
        self.core = core.reloaded(self.core, stored[0])
        self.conversation_state = stored[1]


def reload(holder: SessionHolder) -> Plan[None]:
    """Re-read storage into ``holder`` (validated exactly like resume).

    If an earlier save's outcome was left unknown, this read settles it by the core's rule
    (stored is exactly what was sent); when it applied, its observer events are delivered now,
    so observers still see one event per durable transition.
    """
    raw = yield Load(holder.session_id)
    stored = decode_stored(raw, holder.definition, holder.session_id)
    unsettled, holder.unsettled = holder.unsettled, None
    applied = False
    if unsettled is not None and holder.core.cursor.phase is CursorPhase.UNCERTAIN:
        _, applied = core.settle_uncertain(
            holder.core, unsettled[1], None if stored is None else stored[0]
        )
    holder.adopt_stored(stored)
    if applied and unsettled is not None and holder.observed:
        before, attempted = unsettled
        for event in events_between(holder.session_id, before, attempted.snapshot):
            yield Emit(event)


def _save(
    holder: SessionHolder,
    step: core.Step,
    save: SaveSnapshot,
    records: tuple[tuple[str, str], ...] = (),
) -> Plan[bool]:
    """Perform the step's CAS save; ``True`` iff it applied (settled by re-reading if unknown).

    ``records``: create-only records written by the same atomic write (a store with
    ``SaveWithRecords``, ADR-0141); they applied iff the envelope did, so the envelope's
    re-read settles an unknown outcome of both, and a refusal (``False``) wrote neither.
    ``save`` is sent exactly as the core built it. On a conflict ``holder`` is reloaded and
    ``False`` returned. An unknown outcome is settled by re-reading: our exact snapshot stored
    → applied; another client's at that cursor → a conflict; the stored cursor unchanged →
    :class:`StorageUnavailable` (not applied when re-read; ADR-0066 says why a retry is safe).
    If the re-read fails, :class:`OutcomeUnknown` propagates and ``holder`` stays *uncertain*
    (the next operation reloads first).
    """
    try:
        saved = yield (save if not records else SaveSnapshotCreatingRecords(save, records))
    except OutcomeUnknown as unknown:
        holder.core = core.save_settled(step.state, CursorEvent.UNKNOWN)
        try:
            raw = yield Load(holder.session_id)
        except StorageError as exc:
            raise OutcomeUnknown("save outcome unknown; the re-read to settle it failed") from exc
        stored = decode_stored(raw, holder.definition, holder.session_id)
        expected = save.expected_cursor
        holder.core, applied = core.settle_uncertain(
            holder.core, save, None if stored is None else stored[0]
        )
        if stored is not None:
            holder.conversation_state = stored[1]
        else:  # nothing stored: forget the attempted content, start over as new
            holder.forget_unsaved()
        if applied:
            return True
        if (stored[0].cursor if stored is not None else None) == expected:
            # Not applied when read. On a server the request may still be in flight and land
            # later, so the message promises no more than that; a retry is still safe: both
            # writes expect this cursor, so CAS lets at most one of them apply (ADR-0066).
            raise _NotAppliedWhenRead(NOT_APPLIED_WHEN_READ) from unknown
        return False  # another client's write won that cursor: a conflict
    if saved is True:
        holder.core = core.save_settled(step.state, CursorEvent.SAVED)
        conversation = save.snapshot.conversation
        if conversation is not None:
            holder.conversation_state = conversation.state
        return True
    holder.core = core.save_settled(step.state, CursorEvent.CONFLICT)
    yield from reload(holder)
    return False


def events_between(
    session_id: str, before: SessionSnapshot, after: SessionSnapshot
) -> tuple[SessionEvent, ...]:
    """One observer event per durable transition a save made (by comparing the envelopes)."""
    cursor = after.cursor
    events: list[SessionEvent] = []
    old = {b.token: b for b in before.confirmations}
    new_tokens = {b.token for b in after.confirmations}
    if any(token not in new_tokens for token in old):
        events.append(SessionEvent(SessionEventKind.PRUNED, session_id, cursor))
    for binding in after.confirmations:
        previous = old.get(binding.token)
        if previous is None or previous.status is not binding.status:
            events.append(
                SessionEvent(
                    SessionEventKind.CONFIRMATION,
                    session_id,
                    cursor,
                    record=binding,
                    previous_status=None if previous is None else str(previous.status),
                )
            )
    if (before.active_turn, before.terminal_turns) != (after.active_turn, after.terminal_turns):
        if after.active_turn is not None:
            turn_id: str | None = after.active_turn.turn_id
        else:
            turn_id = after.terminal_turns[-1].turn_id if after.terminal_turns else None
        events.append(SessionEvent(SessionEventKind.TURN, session_id, cursor, turn_id=turn_id))
    if before.conversation != after.conversation:
        decisions = after.conversation.decisions if after.conversation else ()
        events.append(
            SessionEvent(
                SessionEventKind.DECISION,
                session_id,
                cursor,
                message_id=decisions[-1].message_id if decisions else None,
            )
        )
    if not events:
        events.append(SessionEvent(SessionEventKind.PERSISTED, session_id, cursor))
    return tuple(events)


#: ``attempts`` for an operation whose answer can be recomputed from what storage holds: it
#: re-decides after every conflict, for as long as each conflict shows another client's progress.
REDECIDE: None = None
#: Conflicts in a row that showed no progress (storage said "conflict" but its cursor did not
#: move past the one we expected) before :class:`SessionConflict`: only a broken adapter, or a
#: session deleted meanwhile, does that, and re-deciding forever would then never end.
MAX_STALLS = 3


def save_step(
    holder: SessionHolder, step: core.Step, records: tuple[tuple[str, str], ...] = ()
) -> Plan[bool]:
    """Perform a decided step's save: ``True`` iff it applied (its observer events emitted);
    ``False`` on a conflict (``holder`` reloaded). An unknown outcome is remembered, so the
    next reload settles it, and raised. ``records``: created by the same atomic write
    (``SaveWithRecords``; ``False`` then also when a key exists)."""
    save = step.save
    assert save is not None, "callers pass only a step that saves"
    before = holder.snapshot
    try:
        saved = yield from _save(holder, step, save, records)
    except OutcomeUnknown:
        holder.unsettled = (before, save)
        raise
    if saved and holder.observed:
        for event in events_between(holder.session_id, before, holder.snapshot):
            yield Emit(event)
    return saved


def apply(holder: SessionHolder, command: Command, attempts: int | None = 1) -> Plan[core.Step]:
    """Run a core command and perform its save; on conflict reload and run it again.

    Returns the step whose ``save`` applied (its ``then``, the upstream call a claim allows, is
    the caller's to perform: :func:`~akchat_fsm.session._confirm.perform_then`), or the step
    that saved nothing (``accepted`` false or no ``save``).
    After ``attempts`` conflicts :class:`SessionConflict` is raised; ``holder`` is fresh.
    With ``attempts=REDECIDE`` (``None``) the command re-decides on the fresh state after every
    conflict: each conflict means another client's save applied, so this ends (lock-free) as
    soon as this client's save lands or the command refuses on what storage holds now.
    """
    if holder.needs_reload:
        yield from reload(holder)
    expected = holder.cursor if holder.exists else None
    tries = stalls = 0
    while attempts is None or tries < max(1, attempts):
        tries += 1
        expected = holder.cursor if holder.exists else None
        # Each attempt is a new write, so it gets its own nonce (ADR-0062).
        step = command(holder.core, holder.clock(), holder.nonce())
        if step.save is None:  # a refused step (``accepted`` false) never has one
            return step
        if (yield from save_step(holder, step)):
            return replace(step, state=holder.core)
        moved = holder.exists and (expected is None or holder.cursor > expected)
        stalls = 0 if moved else stalls + 1
        if stalls >= MAX_STALLS:
            break
    raise SessionConflict(session_id=holder.session_id, expected_cursor=expected)
