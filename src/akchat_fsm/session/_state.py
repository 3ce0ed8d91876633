"""Shell orchestration shared by every plan: decode what storage holds, save by CAS, settle.

:class:`SessionState` is what one session object knows: the last durable snapshot (or the
unsaved fresh one) and whether anything is stored yet. Plans update it only at durable points
(a save that returned ``True``, a settled unknown outcome, a reload), so a plan that fails at
any step leaves the session exactly as storage last confirmed it: rollback in memory is free.

:func:`apply` is the one loop every mutation goes through: decide on the current snapshot
(the decision is a pure function passed in), save it with CAS, and on a conflict reload and
decide again, up to ``attempts`` times. The session object is therefore never left stale: after
a :class:`SessionConflict` it already holds the fresh state and the intent can be re-applied.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic, TypeVar

from ..errors import (
    CONVERSATION_HINT,
    AkchatError,
    ConfigError,
    IncompatibleSession,
    OutcomeUnknown,
    SessionConflict,
    StorageError,
)
from ..wire.decode import INVALID, decode_session_snapshot
from ..wire.session import Conversation, SessionSnapshot
from .definition import ChatDefinition, replay_conversation
from .effects import Emit, Load, Plan, Save
from .observers import SessionEvent

__all__ = ["SNAPSHOT_INCOMPATIBLE", "Decision", "SessionState", "apply", "decode_stored"]

T = TypeVar("T")

SNAPSHOT_INCOMPATIBLE = "Session snapshot is incompatible with this chat definition."


def _decode(raw: object) -> SessionSnapshot:
    """The stored value as a snapshot, or ConfigError with the reference diagnostic text."""
    if isinstance(raw, SessionSnapshot):
        return raw
    result = decode_session_snapshot(raw)
    if result.snapshot is None:
        message = result.diagnostic.message if result.diagnostic else INVALID.message
        raise ConfigError(message, hint=CONVERSATION_HINT)
    return result.snapshot


def decode_stored(
    raw: object, definition: ChatDefinition, session_id: str
) -> tuple[SessionSnapshot, str | None] | None:
    """Decode, identity-check and replay a stored value; ``None`` when nothing is stored.

    Rejections, in the reference's order (REFERENCE §1.4): undecodable → ``ConfigError`` with
    the diagnostic's message; foreign session, other definition or other revision →
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


def iso_now(now_ms: int, nonce: int) -> str:
    """``updatedAt`` for a write: the clock to the millisecond, then a per-write nonce.

    The extra fraction digits make every written snapshot unique, so an unknown outcome can be
    settled exactly by re-reading (ADR-0062). ``updatedAt`` is never read for any decision
    and any fraction precision is valid on the wire (REFERENCE §1.3).
    """
    seconds, millis = divmod(now_ms, 1000)
    stamp = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{stamp}.{millis:03d}{nonce:012d}Z"


def _default_nonce() -> int:
    return secrets.randbelow(10**12)


@dataclass
class SessionState:
    """What one session object knows about its stored envelope (mutated at durable points)."""

    definition: ChatDefinition
    session_id: str
    snapshot: SessionSnapshot
    exists: bool
    conversation_state: str | None
    clock: Callable[[], int]
    nonce: Callable[[], int] = field(default=_default_nonce)

    @property
    def cursor(self) -> int:
        return self.snapshot.cursor

    @classmethod
    def fresh(
        cls, definition: ChatDefinition, session_id: str, clock: Callable[[], int]
    ) -> SessionState:
        conversation = definition.conversation
        state = conversation.initial_state if conversation is not None else None
        fields: dict[str, object] = {
            "session_id": session_id,
            "definition_id": definition.id,
            "definition_revision": definition.revision,
            "updated_at": iso_now(clock(), 0),
            "cursor": 0,
            "confirmations": (),
        }
        if state is not None:
            # Present iff the definition has a conversation (REFERENCE §1.1, write side).
            fields["conversation"] = Conversation(state=state, decisions=())
        snapshot = SessionSnapshot.model_validate(fields)
        return cls(definition, session_id, snapshot, False, state, clock)

    def adopt(self, snapshot: SessionSnapshot, conversation_state: str | None) -> None:
        self.snapshot = snapshot
        self.exists = True
        self.conversation_state = conversation_state


@dataclass(frozen=True)
class Decision(Generic[T]):
    """What a pure decision returns: the snapshot to save (``None``: nothing to save),
    the value for the caller and the observer events the save makes durable."""

    snapshot: SessionSnapshot | None
    value: T
    events: tuple[Callable[[int], SessionEvent], ...] = ()


def reload(state: SessionState) -> Plan[None]:
    """Re-read storage into ``state`` (validating it exactly like resume)."""
    raw = yield Load(state.session_id)
    decoded = decode_stored(raw, state.definition, state.session_id)
    if decoded is None:
        # The record vanished (deleted by the host): back to "nothing stored".
        fresh = SessionState.fresh(state.definition, state.session_id, state.clock)
        state.snapshot, state.exists = fresh.snapshot, False
        state.conversation_state = fresh.conversation_state
        return
    state.adopt(*decoded)


def _save(state: SessionState, proposed: SessionSnapshot) -> Plan[SessionSnapshot | None]:
    """One CAS save of ``proposed`` at cursor + 1; the saved snapshot, or ``None`` on conflict.

    On conflict or a settled "not applied" the state is reloaded. An unknown outcome is settled
    by re-reading: the stored snapshot equals ours (nonce included) iff our write applied. If
    the re-read itself fails the outcome stays unknown and :class:`OutcomeUnknown` propagates.
    """
    expected = state.cursor if state.exists else None
    target = proposed.model_copy(
        update={"cursor": state.cursor + 1, "updated_at": iso_now(state.clock(), state.nonce())}
    )
    try:
        saved = yield Save(target, expected)
    except OutcomeUnknown as unknown:
        try:
            raw = yield Load(state.session_id)
            decoded = decode_stored(raw, state.definition, state.session_id)
        except StorageError as exc:
            raise OutcomeUnknown(
                "save outcome unknown and the re-read to settle it failed"
            ) from exc
        except AkchatError as exc:  # pragma: no cover - storage returned foreign state
            raise unknown from exc
        if decoded is not None and decoded[0].to_wire() == target.to_wire():
            state.adopt(*decoded)
            return target
        if decoded is not None:
            state.adopt(*decoded)
        return None
    if saved is True:
        state.adopt(target, _conversation_state(state, target))
        return target
    yield from reload(state)
    return None


def _conversation_state(state: SessionState, snapshot: SessionSnapshot) -> str | None:
    conversation = snapshot.conversation
    return conversation.state if conversation is not None else state.conversation_state


def apply(
    state: SessionState, decide: Callable[[SessionSnapshot, int], Decision[T]], attempts: int
) -> Plan[T]:
    """Decide on the current snapshot, CAS-save, and on conflict reload and decide again.

    ``decide(snapshot, now_ms)`` is pure and raises typed errors to refuse. After ``attempts``
    conflicts :class:`SessionConflict` is raised; ``state`` already holds the fresh envelope.
    """
    expected = state.cursor if state.exists else None
    for _ in range(max(1, attempts)):
        expected = state.cursor if state.exists else None
        decision = decide(state.snapshot, state.clock())
        if decision.snapshot is None:
            return decision.value
        saved = yield from _save(state, decision.snapshot)
        if saved is not None:
            for make_event in decision.events:
                yield Emit(make_event(saved.cursor))
            return decision.value
    raise SessionConflict(session_id=state.session_id, expected_cursor=expected)
