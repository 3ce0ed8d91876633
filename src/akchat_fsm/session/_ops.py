"""Session plans other than confirmations: resume, persist, turn lease, route decisions.

Decisions are the core's (:mod:`akchat_fsm.core.state`, :mod:`akchat_fsm.core.turns`) and the
host flow's (:func:`~akchat_fsm.session.definition.route_target`); each plan is one
:func:`~akchat_fsm.session._state.apply` (one CAS save, or none when the core refuses).
"""

from __future__ import annotations

from collections.abc import Callable

from .. import core
from ..errors import ConfigError, IllegalTransition, InvalidInput, LimitExceeded
from ..wire.enums import DecisionKind, TurnOutcome
from ..wire.js import is_identifier, utf16_len
from ..wire.session import Conversation, RouteDecision
from ._state import REDECIDE, Command, SessionHolder, apply, decode_stored, reload
from .definition import ChatDefinition, route_target
from .effects import Load, Plan

__all__ = [
    "plan_claim_turn",
    "plan_persist",
    "plan_record_decision",
    "plan_release_turn",
    "plan_resume",
]

SESSION_ID_INVALID = "Chat session identity is invalid."
TURN_RELEASE_INVALID = "Turn release is invalid."
DECISION_INVALID = "Route decision is invalid."


def plan_resume(
    definition: ChatDefinition, session_id: str, clock: Callable[[], int]
) -> Plan[SessionHolder]:
    """Load and validate stored state; a fresh (unsaved, cursor 0) session when none exists."""
    # Checked before any I/O (the reference checks it after load; no valid state can be
    # stored under an invalid id, so only the adapter call is saved).
    # `type()`, not `isinstance`: an object may claim to be a str through `__class__`.
    if not issubclass(type(session_id), str) or not is_identifier(session_id):
        raise ConfigError(SESSION_ID_INVALID)
    # An exact str from here on: a subclass's own __ne__, __hash__ or __str__ never runs
    # (inside storage it would pass for a storage outage, in a comparison for a bug of ours).
    session_id = str.__str__(session_id)
    raw = yield Load(session_id)
    decoded = decode_stored(raw, definition, session_id)
    holder = SessionHolder.fresh(definition, session_id, clock)
    if decoded is not None:
        snapshot, state = decoded
        if state is not None and snapshot.conversation is None:
            # The definition has a conversation the stored envelope lacks: start it at the
            # flow's initial state; it is written with the next save (docs/reference.md §1.4).
            snapshot = core.state.with_conversation(
                snapshot, Conversation(state=state, decisions=())
            )
        holder.core = core.resumed(snapshot)
        holder.conversation_state = state
    return holder


def plan_persist(holder: SessionHolder, attempts: int = 1) -> Plan[int]:
    """Save the current envelope as cursor + 1 (create-only for a new session)."""
    yield from apply(
        holder, lambda state, now, nonce: core.persist(state, now, nonce=nonce), attempts
    )
    return holder.cursor


def plan_claim_turn(
    holder: SessionHolder, turn_id: str, lease_ms: int, attempts: int | None = REDECIDE
) -> Plan[bool]:
    """Take the turn lease (docs/reference.md §9); ``False`` (nothing saved) when busy or replayed.

    A claim that meets a concurrent save re-decides on what storage holds (by default), so
    two clients racing for one turn get ``True`` and ``False``, never :class:`SessionConflict`.
    """
    return (
        yield from _from_storage(
            holder,
            lambda state, now, nonce: core.claim_turn(state, turn_id, lease_ms, now, nonce=nonce),
            attempts,
        )
    )


def plan_release_turn(
    holder: SessionHolder,
    turn_id: str,
    outcome: TurnOutcome | str,
    attempts: int | None = REDECIDE,
) -> Plan[bool]:
    """End the lease of ``turn_id``; ``False`` (nothing saved) unless it holds the lease."""
    try:
        final = TurnOutcome(outcome)
    except ValueError as exc:
        raise ConfigError(TURN_RELEASE_INVALID) from exc
    return (
        yield from _from_storage(
            holder,
            lambda state, now, nonce: core.release_turn(state, turn_id, final, now, nonce=nonce),
            attempts,
        )
    )


def _from_storage(holder: SessionHolder, command: Command, attempts: int | None) -> Plan[bool]:
    """Apply ``command``; a refusal is re-decided once on what storage holds now.

    The object's copy may be stale (another client claimed or released the turn since it last
    read), and "busy" or "does not hold the lease" must describe storage, not that copy. A
    refusal costs one more load; an accepted command needs none (its CAS save proved it fresh).
    """
    step = yield from apply(holder, command, attempts)
    if step.accepted:
        return True
    yield from reload(holder)
    step = yield from apply(holder, command, attempts)
    return step.accepted


def plan_record_decision(
    holder: SessionHolder,
    *,
    message_id: str,
    route_id: str,
    input: str = "",
    content: str = "",
    kind: DecisionKind | str = DecisionKind.DETERMINISTIC,
    attempts: int = 1,
) -> Plan[RouteDecision]:
    """Record a route decision (never the message itself) made by the host flow, and save it.

    The flow decides from the current conversation state; a route that is unknown, not
    allowed here, or refused by the flow raises :class:`IllegalTransition` (nothing saved).
    """
    conversation = holder.definition.conversation
    if conversation is None:
        raise ConfigError(DECISION_INVALID)
    try:
        decision_kind = DecisionKind(kind)
    except ValueError as exc:
        raise ConfigError(DECISION_INVALID) from exc
    if not is_identifier(message_id) or utf16_len(input) > 16_384 or utf16_len(content) > 65_536:
        raise LimitExceeded(DECISION_INVALID, limit="decision")
    made: list[RouteDecision] = []

    def command(state: core.SessionState, now_ms: int, nonce: int) -> core.Step:
        stored = state.snapshot.conversation
        current = stored.state if stored is not None else conversation.initial_state
        target = route_target(conversation, current, route_id)
        if target is None:
            raise IllegalTransition("conversation", current, route_id)
        try:
            decision = RouteDecision(
                message_id=message_id,
                input=input,
                route_id=route_id,
                kind=decision_kind,
                content=content,
                from_state=current,
                to_state=target,
            )
        except InvalidInput as exc:  # e.g. a lone surrogate, or a state over 128 characters
            raise ConfigError(DECISION_INVALID) from exc
        made.append(decision)
        return core.record_decision(state, decision, now_ms, nonce=nonce)

    yield from apply(holder, command, attempts)
    return made[-1]
