"""Helpers shared by the core tests: a fresh session and a tiny effect executor."""

from __future__ import annotations

from akchat_fsm.core import (
    CursorEvent,
    SaveSnapshot,
    SessionState,
    Step,
    UpstreamCall,
    UpstreamToolStatus,
    new_session,
    plan_proposal,
    record_proposal,
    save_settled,
)

T0 = 1_700_000_000_000


def fresh(now_ms: int = T0, **kwargs: object) -> SessionState:
    return new_session("session-1", "support", now_ms=now_ms, **kwargs)  # type: ignore[arg-type]


def saved(step: Step) -> SessionState:
    """Adopt a step whose save storage accepted."""
    assert isinstance(step.save, SaveSnapshot)
    state = save_settled(step.state, CursorEvent.SAVED)
    assert state.snapshot == step.save.snapshot
    return state


def proposed(
    state: SessionState,
    now_ms: int = T0,
    *,
    status: UpstreamToolStatus = UpstreamToolStatus.REQUIRES_CONFIRMATION,
    suffix: str | None = None,
    ttl_ms: int = 1_000,
    keep_terminal: int = 256,
) -> tuple[SessionState, str]:
    """Propose, let upstream accept as-is, save; return the state and the token."""
    plan = plan_proposal(
        state, "email.send", {"to": "a@example.com"}, now_ms, ttl_ms=ttl_ms, suffix=suffix
    )
    call = UpstreamCall(plan.effect.tool_call_id, plan.name, plan.args, status)
    return saved(
        record_proposal(state, plan, call, now_ms, keep_terminal=keep_terminal)
    ), plan.token
