"""Session plans other than confirmations: resume, persist, turn lease, route decisions.

Decisions come from the core (:mod:`akchat_fsm.core.lease`) and the host flow
(:func:`~akchat_fsm.session.definition.route_target`); this module maps them onto the envelope
and through :func:`~akchat_fsm.session._state.apply` (one CAS save each).
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.lease import Lease, TurnLedger, claim_turn, release_turn
from ..errors import ConfigError, IllegalTransition, LimitExceeded
from ..wire._js import MAX_SAFE_INTEGER, is_identifier, utf16_len
from ..wire.enums import DecisionKind, TurnOutcome
from ..wire.session import ActiveTurn, Conversation, RouteDecision, SessionSnapshot, TerminalTurn
from ._state import Decision, SessionState, apply, decode_stored
from .definition import ChatDefinition, route_target
from .effects import Load, Plan
from .observers import SessionEvent, SessionEventKind

__all__ = [
    "plan_claim_turn",
    "plan_persist",
    "plan_record_decision",
    "plan_release_turn",
    "plan_resume",
]

SESSION_ID_INVALID = "Chat session identity is invalid."
TURN_CLAIM_INVALID = "Turn claim is invalid."
DECISION_INVALID = "Route decision is invalid."
MAX_DECISIONS = 1_000


def plan_resume(
    definition: ChatDefinition, session_id: str, clock: Callable[[], int]
) -> Plan[SessionState]:
    """Load and validate stored state; a fresh (unsaved, cursor 0) session when none exists."""
    # Checked before any I/O (the reference checks it after load; no valid state can be
    # stored under an invalid id, so the order is not observable except for the adapter call).
    if not is_identifier(session_id):
        raise ConfigError(SESSION_ID_INVALID)
    raw = yield Load(session_id)
    decoded = decode_stored(raw, definition, session_id)
    state = SessionState.fresh(definition, session_id, clock)
    if decoded is not None:
        state.adopt(*decoded)
    return state


def _simple_event(
    kind: SessionEventKind,
    session_id: str,
    *,
    turn_id: str | None = None,
    message_id: str | None = None,
) -> Callable[[int], SessionEvent]:
    def make(cursor: int) -> SessionEvent:
        return SessionEvent(kind, session_id, cursor, turn_id=turn_id, message_id=message_id)

    return make


def plan_persist(state: SessionState, attempts: int = 1) -> Plan[int]:
    """Save the current envelope as cursor + 1 (create-only for a new session)."""

    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[int]:
        event = _simple_event(SessionEventKind.PERSISTED, state.session_id)
        return Decision(snapshot, snapshot.cursor + 1, (event,))

    return (yield from apply(state, decide, attempts))


def _ledger(snapshot: SessionSnapshot) -> TurnLedger:
    active = snapshot.active_turn
    return TurnLedger(
        None if active is None else Lease(active.turn_id, active.expires_at),
        tuple((t.turn_id, t.outcome) for t in snapshot.terminal_turns),
    )


def _with_ledger(snapshot: SessionSnapshot, ledger: TurnLedger) -> SessionSnapshot:
    active = ledger.active
    update: dict[str, object] = {
        "active_turn": None
        if active is None
        else ActiveTurn(turn_id=active.turn_id, expires_at=active.expires_at)
    }
    if ledger.terminal != _ledger(snapshot).terminal:
        # Only a release changes the list, and it never empties it: the writer omits an
        # empty list (a copy with an explicit ``()`` would emit ``[]``).
        update["terminal_turns"] = tuple(
            TerminalTurn(turn_id=turn_id, outcome=outcome) for turn_id, outcome in ledger.terminal
        )
    return snapshot.model_copy(update=update)


def plan_claim_turn(
    state: SessionState, turn_id: str, lease_ms: int, attempts: int = 1
) -> Plan[bool]:
    """Take the turn lease (REFERENCE §9); ``False`` (nothing saved) when busy or replayed."""
    if (
        not is_identifier(turn_id)
        or isinstance(lease_ms, bool)
        or not isinstance(lease_ms, int)
        or not 0 < lease_ms <= MAX_SAFE_INTEGER
    ):
        raise ConfigError(TURN_CLAIM_INVALID)

    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[bool]:
        ledger = claim_turn(_ledger(snapshot), turn_id, lease_ms, now_ms)
        if ledger is None:
            return Decision(None, False)
        event = _simple_event(SessionEventKind.TURN, state.session_id, turn_id=turn_id)
        return Decision(_with_ledger(snapshot, ledger), True, (event,))

    return (yield from apply(state, decide, attempts))


def plan_release_turn(
    state: SessionState, turn_id: str, outcome: TurnOutcome | str, attempts: int = 1
) -> Plan[bool]:
    """End the lease of ``turn_id``; ``False`` (nothing saved) unless it holds the lease."""
    try:
        final = TurnOutcome(outcome)
    except ValueError as exc:
        raise ConfigError(TURN_CLAIM_INVALID) from exc

    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[bool]:
        ledger = release_turn(_ledger(snapshot), turn_id, final)
        if ledger is None:
            return Decision(None, False)
        event = _simple_event(SessionEventKind.TURN, state.session_id, turn_id=turn_id)
        return Decision(_with_ledger(snapshot, ledger), True, (event,))

    return (yield from apply(state, decide, attempts))


def plan_record_decision(
    state: SessionState,
    *,
    message_id: str,
    route_id: str,
    input: str = "",
    content: str = "",
    kind: DecisionKind | str = DecisionKind.DETERMINISTIC,
    attempts: int = 1,
) -> Plan[RouteDecision]:
    """Record a deterministic route decision (never the message itself) and move the flow.

    The decision is made by the host flow from the current conversation state; a route that is
    unknown, not allowed here, or refused by the flow raises :class:`IllegalTransition`.
    """
    conversation = state.definition.conversation
    if conversation is None:
        raise ConfigError(DECISION_INVALID)
    try:
        decision_kind = DecisionKind(kind)
    except ValueError as exc:
        raise ConfigError(DECISION_INVALID) from exc
    if not is_identifier(message_id) or utf16_len(input) > 16_384 or utf16_len(content) > 65_536:
        raise LimitExceeded(DECISION_INVALID, limit="decision")

    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[RouteDecision]:
        stored = snapshot.conversation
        current = stored.state if stored is not None else conversation.initial_state
        decisions = stored.decisions if stored is not None else ()
        for existing in decisions:
            if existing.message_id == message_id:
                if existing.route_id == route_id and existing.input == input:
                    return Decision(None, existing)
                raise ConfigError(DECISION_INVALID)
        if len(decisions) >= MAX_DECISIONS:
            raise LimitExceeded("Too many route decisions in this session.", limit="decisions")
        target = route_target(conversation, current, route_id)
        if target is None:
            raise IllegalTransition("conversation", current, route_id)
        decision = RouteDecision(
            message_id=message_id,
            input=input,
            route_id=route_id,
            kind=decision_kind,
            content=content,
            from_state=current,
            to_state=target,
        )
        new = snapshot.model_copy(
            update={"conversation": Conversation(state=target, decisions=(*decisions, decision))}
        )
        event = _simple_event(SessionEventKind.DECISION, state.session_id, message_id=message_id)
        return Decision(new, decision, (event,))

    return (yield from apply(state, decide, attempts))
