"""Bad input never raises anything but akchat-fsm's typed errors (and never acts)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm import core
from akchat_fsm.core import (
    ConfirmationEvent,
    SessionState,
    Step,
    UpstreamCall,
    UpstreamToolStatus,
)
from akchat_fsm.errors import AkchatError

from .conftest import T0, fresh, proposed

garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=200),
    st.binary(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.sampled_from(["approve", "reject", "expire", "complete", "saved", "conflict", "completed"]),
    st.sampled_from(["confirm-x", "app-x", "t1", "x" * 200, "", "a b", "\U0001f600"]),
    st.integers(min_value=2**53 - 5, max_value=2**53 + 5),
)


def _base() -> tuple[SessionState, str]:
    state, token = proposed(fresh(conversation_state="idle"))
    return state, token


STATE, TOKEN = _base()
PLAN = core.plan_proposal(STATE, "email.send", {}, T0, suffix="plan")


def _commands() -> dict[str, Callable[[Any, Any, Any], object]]:
    s = STATE
    return {
        "plan_proposal": lambda a, b, c: core.plan_proposal(s, a, b, T0, ttl_ms=c),
        "plan_suffix": lambda a, b, c: core.plan_proposal(s, "email.send", {}, a, suffix=b),
        "record_proposal": lambda a, b, c: core.record_proposal(
            s, PLAN, UpstreamCall(a, b, c, UpstreamToolStatus.REQUIRES_CONFIRMATION), T0
        ),
        "record_status": lambda a, b, c: core.record_proposal(
            s, PLAN, UpstreamCall("call-9", "email.send", {}, a), T0
        ),
        "clock": lambda a, b, c: core.claim_resolution(s, TOKEN, ConfirmationEvent.APPROVE, a),
        "claim_resolution": lambda a, b, c: core.claim_resolution(s, a, b, T0, reason=c),
        "claim_reason": lambda a, b, c: core.claim_resolution(
            s, TOKEN, ConfirmationEvent.REJECT, T0, session_id=a, reason=b
        ),
        "complete_resolution": lambda a, b, c: core.complete_resolution(s, a, T0),
        "reconcile": lambda a, b, c: core.reconcile(s, a, b, T0, release_untouched=c),
        "claim_turn": lambda a, b, c: core.claim_turn(s, a, b, T0),
        "release_turn": lambda a, b, c: core.release_turn(s, a, b, T0),
        "record_decision": lambda a, b, c: core.record_decision(s, a, T0),
        "drop_decisions": lambda a, b, c: core.drop_decisions(s, a, b, T0),
        "persist": lambda a, b, c: core.persist(s, a),
        "nonce": lambda a, b, c: core.persist(s, T0, nonce=a),
        "save_settled": lambda a, b, c: core.save_settled(core.persist(s, T0).state, a),
        "reloaded": lambda a, b, c: core.reloaded(s, a),
        "resumed": lambda a, b, c: core.resumed(a),
        "new_session": lambda a, b, c: core.new_session(a, b, now_ms=T0, conversation_state=c),
        "iso_ms": lambda a, b, c: core.iso_ms(a),
    }


COMMANDS = _commands()


@given(st.sampled_from(sorted(COMMANDS)), garbage, garbage, garbage)
def test_garbage_raises_only_typed_errors(name: str, a: object, b: object, c: object) -> None:
    try:
        out = COMMANDS[name](a, b, c)
    except AkchatError:
        return
    if isinstance(out, Step) and out.save is not None:
        # Accepted garbage must still produce a valid envelope in every save.
        snapshot = out.save.snapshot
        assert type(snapshot).model_validate(snapshot.to_wire()) == snapshot
