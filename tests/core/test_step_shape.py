"""A Step says "save, then this upstream call" by its shape, and the core writes the nonce.

ADR-0112: the write nonce is an input of every command that saves, so the ``SaveSnapshot`` a
step carries is exactly what storage is to receive; ``Step`` refuses an upstream call without
the save that records its claim.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from akchat_fsm.core import (
    CallApprove,
    CallDeny,
    ConfirmationEvent,
    SaveSnapshot,
    SessionState,
    Step,
    UpstreamCall,
    UpstreamToolStatus,
    claim_resolution,
    claim_turn,
    complete_resolution,
    drop_decisions,
    iso_ms,
    next_snapshot,
    persist,
    plan_proposal,
    reconcile,
    record_decision,
    record_proposal,
    release_turn,
)
from akchat_fsm.core.state import NONCE_LIMIT, with_write_nonce
from akchat_fsm.errors import ConfigError, IllegalTransition
from akchat_fsm.wire.enums import DecisionKind, TurnOutcome
from akchat_fsm.wire.session import RouteDecision, SessionSnapshot

from .conftest import T0, fresh, proposed, saved

NONCE = 123_456_789


def test_an_upstream_call_without_its_save_is_refused() -> None:
    state = fresh()
    with pytest.raises(IllegalTransition) as info:
        Step(state, then=CallApprove("app-1"))
    assert (info.value.machine, info.value.event) == ("step", "upstream call")
    with pytest.raises(IllegalTransition):
        Step(state, then=CallDeny("app-1", "no"))


def test_a_refused_step_carries_nothing_to_perform() -> None:
    state = fresh()
    save = persist(state, T0).save
    with pytest.raises(IllegalTransition):
        Step(state, save=save, accepted=False)
    assert Step(state, accepted=False).save is None


def test_the_old_positional_effects_tuple_is_refused_loudly() -> None:
    state = fresh()
    save = persist(state, T0).save
    with pytest.raises(TypeError):
        Step(state, (save,))  # type: ignore[misc]
    with pytest.raises(ConfigError):
        Step(state, save=(save,))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Step(state, save=save, then=save)  # type: ignore[arg-type]


def test_a_claim_step_is_save_then_call() -> None:
    state, token = proposed(fresh())
    step = claim_resolution(state, token, ConfirmationEvent.APPROVE, T0, nonce=NONCE)
    assert isinstance(step.save, SaveSnapshot) and isinstance(step.then, CallApprove)
    assert step.save.snapshot is step.state.snapshot  # the state to adopt is what is written


# --------------------------------------------------------------------------- the write nonce
def test_next_snapshot_writes_the_nonce_after_the_millisecond() -> None:
    snapshot = fresh().snapshot
    plain = next_snapshot(snapshot, T0 + 7)
    assert plain.updated_at == iso_ms(T0 + 7)  # the reference writer's three digits
    nonced = next_snapshot(snapshot, T0 + 7, nonce=NONCE)
    assert nonced.updated_at == iso_ms(T0 + 7)[:-1] + "000123456789Z"
    assert nonced.updated_at == with_write_nonce(iso_ms(T0 + 7), NONCE)
    assert SessionSnapshot.model_validate(nonced.to_wire()) == nonced
    assert next_snapshot(snapshot, T0, nonce=NONCE_LIMIT - 1).updated_at.endswith("999999999999Z")
    assert next_snapshot(snapshot, T0, nonce=0).updated_at == iso_ms(T0)[:-1] + "0" * 12 + "Z"


@pytest.mark.parametrize("bad", [-1, NONCE_LIMIT, True, 1.0, "1", object()])
def test_an_invalid_nonce_is_a_config_error_before_any_effect(bad: Any) -> None:
    with pytest.raises(ConfigError):
        persist(fresh(), T0, nonce=bad)


UNTOUCHED = UpstreamToolStatus.REQUIRES_CONFIRMATION


def _pending() -> tuple[SessionState, str]:
    return proposed(saved(persist(fresh(), T0)))


def _processing(event: ConfirmationEvent = ConfirmationEvent.APPROVE) -> tuple[SessionState, str]:
    state, token = _pending()
    return saved(claim_resolution(state, token, event, T0)), token


def _held() -> SessionState:
    return saved(claim_turn(fresh(), "turn-1", 1_000, T0))


def _record_proposal(nonce: int) -> Step:
    state = fresh()
    plan = plan_proposal(state, "email.send", {}, T0, suffix="one")
    call = UpstreamCall(plan.effect.tool_call_id, plan.name, plan.args, UNTOUCHED)
    return record_proposal(state, plan, call, T0, nonce=nonce)


def _talking() -> SessionState:
    return fresh(conversation_state="idle")


def _decision() -> RouteDecision:
    return RouteDecision(
        message_id="m1",
        input="/start",
        route_id="start",
        kind=DecisionKind.DETERMINISTIC,
        content="",
        from_state="idle",
        to_state="collecting",
    )


COMMANDS: dict[str, Callable[[int], Step]] = {
    "persist": lambda n: persist(fresh(), T0, nonce=n),
    "claim": lambda n: claim_resolution(*_pending(), ConfirmationEvent.REJECT, T0, nonce=n),
    "complete": lambda n: complete_resolution(*_processing(), T0, nonce=n),
    "reconcile-complete": lambda n: reconcile(
        *_processing(), UpstreamToolStatus.COMPLETE, T0, nonce=n
    ),
    "reconcile-resume": lambda n: reconcile(*_processing(), UNTOUCHED, T0, nonce=n),
    "reconcile-release": lambda n: reconcile(
        *_processing(), UNTOUCHED, T0, release_untouched=True, nonce=n
    ),
    "record-proposal": lambda n: _record_proposal(n),
    "record-decision": lambda n: record_decision(_talking(), _decision(), T0, nonce=n),
    "drop-decisions": lambda n: drop_decisions(_talking(), frozenset({"m1"}), "idle", T0, nonce=n),
    "claim-turn": lambda n: claim_turn(fresh(), "turn-1", 1_000, T0, nonce=n),
    "release-turn": lambda n: release_turn(_held(), "turn-1", TurnOutcome.COMPLETED, T0, nonce=n),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_saving_command_writes_the_nonce_it_was_given(command: str) -> None:
    step = COMMANDS[command](NONCE)
    assert step.save is not None
    assert step.save.snapshot.updated_at == with_write_nonce(iso_ms(T0), NONCE)
    assert step.state.snapshot is step.save.snapshot
    other = COMMANDS[command](NONCE + 1)
    assert other.save is not None and other.save.snapshot != step.save.snapshot
