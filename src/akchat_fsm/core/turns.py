"""Turn-lease and route-decision commands on the envelope.

The lease decision is the kernel's (:mod:`.lease`, from the ``TurnLeaseLifecycle`` table);
this module only maps the envelope's ``activeTurn`` / ``terminalTurns`` and saves.
"""

from __future__ import annotations

from ..errors import ConfigError, IllegalTransition, LimitExceeded
from ..wire.enums import TurnOutcome
from ..wire.js import MAX_SAFE_INTEGER, is_identifier, utf16_len
from ..wire.session import (
    MAX_DECISIONS,
    ActiveTurn,
    Conversation,
    RouteDecision,
    SessionSnapshot,
    TerminalTurn,
)
from . import lease as k
from .state import SessionState, Step, _saving, check_can_save, check_clock, coerce

__all__ = ["claim_turn", "drop_decisions", "ledger", "record_decision", "release_turn"]


def ledger(snapshot: SessionSnapshot) -> k.TurnLedger:
    """The lease part of ``snapshot`` as kernel values."""
    active = snapshot.active_turn
    return k.TurnLedger(
        None if active is None else k.Lease(active.turn_id, active.expires_at),
        tuple((t.turn_id, t.outcome) for t in snapshot.terminal_turns),
    )


def _with_ledger(snapshot: SessionSnapshot, new: k.TurnLedger) -> SessionSnapshot:
    active = (
        None
        if new.active is None
        else ActiveTurn.model_construct(
            turn_id=new.active.turn_id, expires_at=new.active.expires_at
        )
    )
    terminal = tuple(
        TerminalTurn.model_construct(turn_id=turn_id, outcome=outcome)
        for turn_id, outcome in new.terminal
    )
    return snapshot.model_copy(update={"active_turn": active, "terminal_turns": terminal})


def claim_turn(
    state: SessionState, turn_id: str, lease_ms: int, now_ms: int, *, nonce: int | None = None
) -> Step:
    """Take the turn lease until ``now_ms + lease_ms`` (one save), or refuse (``accepted=False``).

    Refused, with nothing saved, when ``turn_id`` is a terminal turn (a replay) or an unexpired
    lease exists (busy); an expired lease is taken over. Bad arguments raise ``ConfigError``
    ``"Turn claim is invalid."`` (docs/reference.md §9).
    """
    check_clock(now_ms)
    if (
        not is_identifier(turn_id)
        or type(lease_ms) is not int
        or not 0 < lease_ms <= MAX_SAFE_INTEGER
        or not 0 <= now_ms + lease_ms <= MAX_SAFE_INTEGER
    ):
        raise ConfigError("Turn claim is invalid.")
    check_can_save(state)
    new = k.claim_turn(ledger(state.snapshot), turn_id, lease_ms, now_ms)
    if new is None:
        return Step(state, accepted=False)
    return _saving(state, _with_ledger(state.snapshot, new), now_ms, nonce)


def release_turn(
    state: SessionState,
    turn_id: str,
    outcome: TurnOutcome,
    now_ms: int,
    *,
    nonce: int | None = None,
) -> Step:
    """End ``turn_id``'s lease with ``outcome`` (one save); a no-op unless it holds the lease."""
    check_clock(now_ms)
    how = coerce(TurnOutcome, outcome, lambda: ConfigError("Turn release is invalid."))
    new = k.release_turn(ledger(state.snapshot), turn_id, how)
    if new is None:
        return Step(state, accepted=False)
    check_can_save(state)
    return _saving(state, _with_ledger(state.snapshot, new), now_ms, nonce)


def _conversation(state: SessionState) -> Conversation:
    conversation = state.snapshot.conversation
    if conversation is None:
        raise IllegalTransition("conversation", "absent", "record_decision", "no conversation")
    return conversation


def record_decision(
    state: SessionState, decision: RouteDecision, now_ms: int, *, nonce: int | None = None
) -> Step:
    """Cache a route decision and move the conversation to ``decision.to_state`` (one save).

    A decision for a known ``message_id`` replaces it in place (insertion order is kept, like
    the reference's ``Map``); a new one is appended. ``LimitExceeded`` at 1,000 decisions.
    """
    check_clock(now_ms)
    if not isinstance(decision, RouteDecision):
        raise ConfigError("Route decision is invalid.")
    conversation = _conversation(state)
    decisions = list(conversation.decisions)
    index = next((i for i, d in enumerate(decisions) if d.message_id == decision.message_id), -1)
    if index >= 0:
        decisions[index] = decision
    elif len(decisions) >= MAX_DECISIONS:
        raise LimitExceeded(
            f"A session caches at most {MAX_DECISIONS} route decisions.",
            limit="decisions",
            hint="Start a new session or drop old decisions.",
        )
    else:
        decisions.append(decision)
    check_can_save(state)
    updated = conversation.model_copy(
        update={"state": decision.to_state, "decisions": tuple(decisions)}
    )
    return _saving(
        state, state.snapshot.model_copy(update={"conversation": updated}), now_ms, nonce
    )


def drop_decisions(
    state: SessionState,
    message_ids: frozenset[str],
    conversation_state: str,
    now_ms: int,
    *,
    nonce: int | None = None,
) -> Step:
    """Forget the decisions of ``message_ids`` (e.g. an edited turn became agentic), one save."""
    check_clock(now_ms)
    conversation = _conversation(state)
    if not isinstance(conversation_state, str) or not 1 <= utf16_len(conversation_state) <= 128:
        raise ConfigError("Conversation state is invalid.")
    try:
        kept = tuple(d for d in conversation.decisions if d.message_id not in message_ids)
    except TypeError as exc:  # an unhashable or non-container message_ids
        raise ConfigError("Message ids are invalid.") from exc
    check_can_save(state)
    updated = conversation.model_copy(update={"state": conversation_state, "decisions": kept})
    return _saving(
        state, state.snapshot.model_copy(update={"conversation": updated}), now_ms, nonce
    )
