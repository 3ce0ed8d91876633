"""The envelope-level commands of the core, one behaviour per test."""

from __future__ import annotations

import re

import pytest

from akchat_fsm.core import (
    EXPIRED_REASON,
    CallApprove,
    CallDeny,
    ConfirmationEvent,
    CursorEvent,
    CursorPhase,
    ProposeUpstream,
    SaveSnapshot,
    SessionState,
    UpstreamCall,
    UpstreamToolStatus,
    by_tool_call,
    claim_resolution,
    claim_turn,
    complete_resolution,
    drop_decisions,
    find_binding,
    iso_ms,
    next_snapshot,
    persist,
    plan_proposal,
    random_suffix,
    reconcile,
    record_decision,
    record_proposal,
    release_turn,
    reloaded,
    resumed,
    save_settled,
    settle_uncertain,
)
from akchat_fsm.errors import (
    AlreadyResolved,
    ConfigError,
    IllegalTransition,
    IncompatibleSession,
    InvalidConfirmationToken,
    LimitExceeded,
    ResolutionInProgress,
)
from akchat_fsm.wire.enums import ConfirmationStatus, DecisionKind, TurnOutcome
from akchat_fsm.wire.session import RouteDecision, SessionSnapshot

from .conftest import T0, fresh, proposed, saved

APPROVE, REJECT, EXPIRE = (
    ConfirmationEvent.APPROVE,
    ConfirmationEvent.REJECT,
    ConfirmationEvent.EXPIRE,
)


# --------------------------------------------------------------------------- snapshots, cursor
def test_iso_ms_matches_javascript_to_iso_string() -> None:
    assert iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert iso_ms(T0 + 7) == "2023-11-14T22:13:20.007Z"
    assert iso_ms(-1) == "1969-12-31T23:59:59.999Z"
    assert iso_ms(253_402_300_799_999) == "9999-12-31T23:59:59.999Z"
    for bad in (253_402_300_800_000, 1.5, True):
        with pytest.raises(ConfigError):
            iso_ms(bad)  # type: ignore[arg-type]


def test_next_snapshot_bumps_cursor_and_stamps_time() -> None:
    state = fresh()
    out = next_snapshot(state.snapshot, T0 + 5)
    assert (out.cursor, out.updated_at) == (state.snapshot.cursor + 1, iso_ms(T0 + 5))
    assert SessionSnapshot.model_validate(out.to_wire()) == out


def test_first_save_is_create_only_then_expects_the_stored_cursor() -> None:
    state = fresh()
    step = persist(state, T0)
    assert (step.save, step.then) == (SaveSnapshot(step.state.snapshot, None), None)
    assert step.state.snapshot.cursor == 1
    state = saved(step)
    assert (state.cursor.phase, state.cursor.cursor) == (CursorPhase.IN_SYNC, 1)
    again = persist(state, T0 + 1)
    assert again.save == SaveSnapshot(again.state.snapshot, 1)
    assert again.state.snapshot.cursor == 2


def test_conflict_requires_reload_then_the_intent_can_be_reapplied() -> None:
    state = saved(persist(fresh(), T0))
    step = persist(state, T0 + 1)
    conflicted = save_settled(step.state, CursorEvent.CONFLICT)
    assert conflicted.cursor.phase is CursorPhase.CONFLICTED
    with pytest.raises(IllegalTransition):
        persist(conflicted, T0 + 2)
    other = next_snapshot(state.snapshot, T0 + 1)  # another client saved cursor 2
    reloaded_state = reloaded(conflicted, other)
    assert (reloaded_state.cursor.phase, reloaded_state.cursor.cursor) == (CursorPhase.IN_SYNC, 2)
    retry = persist(reloaded_state, T0 + 3).save
    assert retry is not None and retry.expected_cursor == 2


def test_reload_refuses_a_cursor_that_went_down_or_another_session() -> None:
    state = saved(persist(saved(persist(fresh(), T0)), T0 + 1))
    older = state.snapshot.model_copy(update={"cursor": 1})
    with pytest.raises(IllegalTransition):
        reloaded(state, older)
    foreign = state.snapshot.model_copy(update={"session_id": "session-2"})
    with pytest.raises(IncompatibleSession):
        reloaded(state, foreign)


def test_uncertain_save_is_settled_by_re_reading() -> None:
    state = saved(persist(fresh(), T0))
    step = persist(state, T0 + 1)
    attempt = step.save
    assert isinstance(attempt, SaveSnapshot)
    uncertain = save_settled(step.state, CursorEvent.UNKNOWN)
    with pytest.raises(IllegalTransition):
        persist(uncertain, T0 + 2)
    applied_state, applied = settle_uncertain(uncertain, attempt, attempt.snapshot)
    assert applied and applied_state.cursor.cursor == 2
    lost_state, applied = settle_uncertain(uncertain, attempt, state.snapshot)
    assert not applied and lost_state.cursor == state.cursor
    with pytest.raises(IllegalTransition):
        settle_uncertain(state, attempt, None)


def test_uncertain_create_that_never_applied_returns_to_new() -> None:
    step = persist(fresh(), T0)
    uncertain = save_settled(step.state, CursorEvent.UNKNOWN)
    assert step.save is not None
    back, applied = settle_uncertain(uncertain, step.save, None)
    assert not applied
    assert back.cursor.phase is CursorPhase.NEW and back.snapshot.cursor == 0
    create = persist(back, T0).save
    assert create is not None and create.expected_cursor is None


# --------------------------------------------------------------------------- propose
def test_default_suffix_is_random_hex_not_a_sequence() -> None:
    suffixes = {random_suffix() for _ in range(50)}
    assert len(suffixes) == 50
    assert all(re.fullmatch(r"[0-9a-f]{32}", s) for s in suffixes)


def test_propose_plans_one_upstream_effect_then_records_pending() -> None:
    state = fresh()
    plan = plan_proposal(state, "email.send", {"to": "a"}, T0, suffix="abc", ttl_ms=10)
    assert plan.effect == ProposeUpstream("app-abc", "email.send", {"to": "a"})
    assert (plan.token, plan.expires_at) == ("confirm-abc", T0 + 10)
    call = UpstreamCall(
        "call-1", "email.send", {"to": "b"}, UpstreamToolStatus.REQUIRES_CONFIRMATION
    )
    step = record_proposal(state, plan, call, T0)
    save = step.save
    assert isinstance(save, SaveSnapshot) and save.expected_cursor is None and step.then is None
    (binding,) = save.snapshot.confirmations
    # The record binds what upstream returned (id and args), not what was requested.
    assert (binding.tool_call_id, dict(binding.input), binding.status) == (
        "call-1",
        {"to": "b"},
        ConfirmationStatus.PENDING,
    )
    assert SessionSnapshot.model_validate(save.snapshot.to_wire()) == save.snapshot


@pytest.mark.parametrize(
    "status", [s for s in UpstreamToolStatus if s.value != "requires_confirmation"]
)
def test_propose_is_born_rejected_when_upstream_does_not_require_confirmation(
    status: UpstreamToolStatus,
) -> None:
    state, token = proposed(fresh(), status=status)
    binding = find_binding(state, token)
    assert binding is not None and binding.status is ConfirmationStatus.REJECTED


def test_suffix_rules() -> None:
    state = fresh()
    plan_proposal(state, "a", {}, T0, suffix="x" * 120)
    for bad in ("x" * 121, "-x", "a b", "é", ""):
        with pytest.raises(ConfigError, match="id is invalid"):
            plan_proposal(state, "a", {}, T0, suffix=bad)


def test_reused_suffix_is_refused_before_upstream() -> None:
    state, _ = proposed(fresh(), suffix="dup")
    with pytest.raises(ConfigError, match="id is invalid"):
        plan_proposal(state, "email.send", {}, T0, suffix="dup")


@pytest.mark.parametrize(
    "args",
    [
        [],
        {"k": float("nan")},
        {"k": "x" * 16_385},
        {"k": list(range(1_001))},
        {str(i): i for i in range(1_000)},
    ],
)
def test_unbounded_input_is_refused_before_upstream(args: object) -> None:
    with pytest.raises(LimitExceeded):
        plan_proposal(fresh(), "email.send", args, T0)  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", [0, -1, 2**53, 1.5])
def test_bad_ttl_or_name_is_a_config_error(ttl: object) -> None:
    with pytest.raises(ConfigError, match="options are invalid"):
        plan_proposal(fresh(), "email.send", {}, T0, ttl_ms=ttl)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="options are invalid"):
        plan_proposal(fresh(), "not an id", {}, T0)


def test_one_thousand_live_records_block_propose_before_upstream() -> None:
    state = fresh()
    bindings = tuple(
        {
            "token": f"confirm-{i}",
            "action": "a",
            "input": {},
            "toolCallId": f"app-{i}",
            "expiresAt": 0,
            "status": "pending",
        }
        for i in range(1_000)
    )
    full = resumed(
        SessionSnapshot.model_validate(
            {**state.snapshot.to_wire(), "cursor": 1, "confirmations": bindings}
        )
    )
    with pytest.raises(LimitExceeded) as info:
        plan_proposal(full, "email.send", {}, T0)
    assert info.value.limit == "confirmations"


def test_terminal_records_are_pruned_oldest_first_only_on_admission() -> None:
    state = fresh()
    tokens = []
    for i in range(3):
        state, token = proposed(state, suffix=f"s{i}", keep_terminal=1)
        tokens.append(token)
    for token in tokens[:2]:
        state = saved(claim_resolution(state, token, REJECT, T0))
        state = saved(complete_resolution(state, token, T0))
    # Two terminal records exist; nothing was pruned yet (pruning happens only on admission).
    assert [b.token for b in state.snapshot.confirmations] == tokens
    state, newest = proposed(state, suffix="s3", keep_terminal=1)
    assert [b.token for b in state.snapshot.confirmations] == [tokens[1], tokens[2], newest]


def test_an_already_bound_tool_call_is_not_recorded_twice() -> None:
    state, token = proposed(fresh(), suffix="one")
    binding = find_binding(state, token)
    assert binding is not None
    plan = plan_proposal(state, "email.send", {}, T0, suffix="two")
    call = UpstreamCall(binding.tool_call_id, "email.send", {}, UpstreamToolStatus.COMPLETE)
    step = record_proposal(state, plan, call, T0)
    assert (step.accepted, step.save, step.then, step.state) == (False, None, None, state)


# --------------------------------------------------------------------------- resolution
def test_approve_saves_the_claim_before_calling_upstream() -> None:
    state, token = proposed(fresh())
    step = claim_resolution(state, token, APPROVE, T0)
    save, call = step.save, step.then
    assert isinstance(save, SaveSnapshot) and save.expected_cursor == state.cursor.cursor
    claimed = find_binding(step.state, token)
    assert claimed is not None and claimed.status is ConfirmationStatus.APPROVING
    assert call == CallApprove(claimed.tool_call_id)
    done = saved(complete_resolution(saved(step), token, T0 + 1))
    final = find_binding(done, token)
    assert final is not None and final.status is ConfirmationStatus.APPROVED


def test_reject_sends_the_reason() -> None:
    state, token = proposed(fresh())
    step = claim_resolution(state, token, REJECT, T0, reason="no thanks")
    assert step.then == CallDeny(find_binding(state, token).tool_call_id, "no thanks")  # type: ignore[union-attr]


@pytest.mark.parametrize("event", [APPROVE, REJECT, EXPIRE])
def test_at_or_after_expiry_every_claim_expires(event: ConfirmationEvent) -> None:
    state, token = proposed(fresh(), ttl_ms=100)
    for now in (T0 + 100, T0 + 10_000):  # the boundary counts as expired
        step = claim_resolution(state, token, event, now)
        assert find_binding(step.state, token).status is ConfirmationStatus.EXPIRING  # type: ignore[union-attr]
        assert isinstance(step.then, CallDeny) and step.then.reason == EXPIRED_REASON


def test_expire_before_expiry_is_illegal() -> None:
    state, token = proposed(fresh(), ttl_ms=100)
    with pytest.raises(IllegalTransition) as info:
        claim_resolution(state, token, EXPIRE, T0 + 99)
    # h11 style: the error names the machine, the state and the refused event.
    assert (info.value.machine, info.value.state, info.value.event) == (
        "confirmation",
        "pending",
        "expire",
    )
    assert "'expire'" in str(info.value) and "'pending'" in str(info.value)


def test_losers_get_typed_errors_carrying_the_stored_binding() -> None:
    state, token = proposed(fresh())
    processing = saved(claim_resolution(state, token, APPROVE, T0))
    with pytest.raises(ResolutionInProgress) as busy:
        claim_resolution(processing, token, REJECT, T0)
    assert busy.value.record == find_binding(processing, token)
    done = saved(complete_resolution(processing, token, T0))
    with pytest.raises(AlreadyResolved) as resolved:
        claim_resolution(done, token, APPROVE, T0)
    assert resolved.value.record == find_binding(done, token)
    with pytest.raises(InvalidConfirmationToken):
        claim_resolution(done, "confirm-unknown", APPROVE, T0)
    with pytest.raises(InvalidConfirmationToken):
        claim_resolution(state, token, APPROVE, T0, session_id="session-2")


def test_complete_only_from_processing() -> None:
    state, token = proposed(fresh())
    with pytest.raises(IllegalTransition) as info:
        complete_resolution(state, token, T0)
    assert (info.value.state, info.value.event) == ("pending", "complete")
    assert "'complete'" in str(info.value) and "'pending'" in str(info.value)


def test_reconcile_upstream_acted_completes_without_upstream_call() -> None:
    state, token = proposed(fresh())
    processing = saved(claim_resolution(state, token, REJECT, T0))
    for status in (
        UpstreamToolStatus.RUNNING,
        UpstreamToolStatus.COMPLETE,
        UpstreamToolStatus.ERROR,
    ):
        step = reconcile(processing, token, status, T0)
        assert isinstance(step.save, SaveSnapshot) and step.then is None
        assert find_binding(step.state, token).status is ConfirmationStatus.REJECTED  # type: ignore[union-attr]


def test_reconcile_untouched_resumes_the_claimed_call_or_releases() -> None:
    state, token = proposed(fresh())
    processing = saved(claim_resolution(state, token, APPROVE, T0))
    untouched = UpstreamToolStatus.REQUIRES_CONFIRMATION
    resume = reconcile(processing, token, untouched, T0)
    # The unchanged claim is saved first (a fence that moves the cursor, ADR-0054), then the
    # claimed call is re-issued.
    fence, call = resume.save, resume.then
    assert isinstance(fence, SaveSnapshot)
    assert fence.expected_cursor == processing.snapshot.cursor
    assert fence.snapshot.cursor == processing.snapshot.cursor + 1
    assert fence.snapshot.confirmations == processing.snapshot.confirmations
    assert call == CallApprove(find_binding(state, token).tool_call_id)  # type: ignore[union-attr]
    assert find_binding(resume.state, token).status is ConfirmationStatus.APPROVING  # type: ignore[union-attr]
    release = reconcile(processing, token, untouched, T0, release_untouched=True)
    assert find_binding(release.state, token).status is ConfirmationStatus.PENDING  # type: ignore[union-attr]
    assert isinstance(release.save, SaveSnapshot) and release.then is None


def test_reconcile_refuses_pending_or_terminal_records() -> None:
    state, token = proposed(fresh())
    with pytest.raises(IllegalTransition):
        reconcile(state, token, UpstreamToolStatus.COMPLETE, T0)
    with pytest.raises(InvalidConfirmationToken):
        reconcile(state, "confirm-x", UpstreamToolStatus.COMPLETE, T0)


def test_by_tool_call_finds_the_binding() -> None:
    state, token = proposed(fresh())
    binding = find_binding(state, token)
    assert binding is not None and by_tool_call(state, binding.tool_call_id) == binding
    assert by_tool_call(state, "nope") is None


# --------------------------------------------------------------------------- turns, decisions
def test_turn_lease_claim_busy_takeover_replay() -> None:
    state = fresh()
    held = saved(claim_turn(state, "turn-1", 100, T0))
    assert held.snapshot.active_turn is not None
    assert (held.snapshot.active_turn.turn_id, held.snapshot.active_turn.expires_at) == (
        "turn-1",
        T0 + 100,
    )
    busy = claim_turn(held, "turn-2", 100, T0 + 99)
    assert (busy.accepted, busy.save, busy.state) == (False, None, held)
    assert not claim_turn(held, "turn-1", 100, T0 + 99).accepted
    taken = saved(claim_turn(held, "turn-2", 100, T0 + 100))  # expired lease taken over
    assert taken.snapshot.active_turn.turn_id == "turn-2"  # type: ignore[union-attr]
    assert not release_turn(taken, "turn-1", TurnOutcome.COMPLETED, T0).accepted
    released = saved(release_turn(taken, "turn-2", TurnOutcome.INDETERMINATE, T0 + 101))
    assert released.snapshot.active_turn is None
    assert [(t.turn_id, t.outcome) for t in released.snapshot.terminal_turns] == [
        ("turn-2", TurnOutcome.INDETERMINATE)
    ]
    assert not claim_turn(released, "turn-2", 100, T0 + 200).accepted  # replay


def test_terminal_turns_keep_the_last_64() -> None:
    state = fresh()
    for i in range(70):
        state = saved(claim_turn(state, f"t{i}", 10, T0 + i))
        state = saved(release_turn(state, f"t{i}", TurnOutcome.COMPLETED, T0 + i))
    assert [t.turn_id for t in state.snapshot.terminal_turns] == [f"t{i}" for i in range(6, 70)]
    assert SessionSnapshot.model_validate(state.snapshot.to_wire()) == state.snapshot


@pytest.mark.parametrize("turn_id, lease_ms", [("bad id", 1), ("t", 0), ("t", 2**53), ("t", 1.0)])
def test_bad_turn_claims_are_config_errors(turn_id: str, lease_ms: int) -> None:
    with pytest.raises(ConfigError, match=r"Turn claim is invalid\."):
        claim_turn(fresh(), turn_id, lease_ms, T0)


def _decision(message_id: str, to_state: str) -> RouteDecision:
    return RouteDecision(
        message_id=message_id,
        input="/start",
        route_id="start",
        kind=DecisionKind.DETERMINISTIC,
        content="Name?",
        from_state="idle",
        to_state=to_state,
    )


def test_decisions_replace_in_place_and_move_the_conversation() -> None:
    state = fresh(conversation_state="idle")
    state = saved(record_decision(state, _decision("m1", "a"), T0))
    state = saved(record_decision(state, _decision("m2", "b"), T0))
    state = saved(record_decision(state, _decision("m1", "c"), T0))
    conversation = state.snapshot.conversation
    assert conversation is not None and conversation.state == "c"
    assert [(d.message_id, d.to_state) for d in conversation.decisions] == [
        ("m1", "c"),
        ("m2", "b"),
    ]
    with pytest.raises(IllegalTransition):
        record_decision(fresh(), _decision("m1", "a"), T0)


def test_decision_limit_and_drop() -> None:
    state = fresh(conversation_state="idle")
    full = resumed(
        SessionSnapshot.model_validate(
            {
                **state.snapshot.to_wire(),
                "conversation": {
                    "state": "idle",
                    "decisions": [
                        _decision(f"m{i}", "a").model_dump(by_alias=True, mode="json")
                        for i in range(1_000)
                    ],
                },
            }
        )
    )
    with pytest.raises(LimitExceeded):
        record_decision(full, _decision("new", "a"), T0)
    saved(record_decision(full, _decision("m5", "z"), T0))  # replacing is not growing
    dropped = saved(drop_decisions(full, frozenset({"m1", "m2"}), "idle", T0))
    conversation = dropped.snapshot.conversation
    assert conversation is not None and len(conversation.decisions) == 998
    assert {"m1", "m2"}.isdisjoint(d.message_id for d in conversation.decisions)


def test_a_hand_assembled_state_with_a_foreign_cursor_cannot_save() -> None:
    state = saved(persist(fresh(), T0))
    skewed = SessionState(state.snapshot.model_copy(update={"cursor": 7}), state.cursor)
    with pytest.raises(IllegalTransition):
        persist(skewed, T0)


@pytest.mark.parametrize("keep", [-1, 1.0, None])
def test_keep_terminal_must_be_a_non_negative_int(keep: object) -> None:
    state = fresh()
    plan = plan_proposal(state, "email.send", {}, T0)
    call = UpstreamCall(plan.effect.tool_call_id, plan.name, plan.args, UpstreamToolStatus.COMPLETE)
    with pytest.raises(ConfigError):
        record_proposal(state, plan, call, T0, keep_terminal=keep)  # type: ignore[arg-type]


def test_writes_omit_an_empty_terminal_turns_list_like_the_reference_writer() -> None:
    from akchat_fsm import core
    from akchat_fsm.wire.session import SessionSnapshot

    state = core.new_session("s-1", "d", now_ms=1_000)
    step = core.claim_turn(state, "turn-1", 5_000, 1_000)
    assert step.save is not None
    saved = step.save.snapshot
    assert "terminalTurns" not in saved.to_wire()
    assert saved.active_turn is not None
    # An explicit [] read from storage is accepted, but not written back.
    wire = {**saved.to_wire(), "terminalTurns": []}
    read = SessionSnapshot.from_wire(wire)
    assert read.to_wire()["terminalTurns"] == []
    assert "terminalTurns" not in core.next_snapshot(read, 2_000).to_wire()
