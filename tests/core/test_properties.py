"""Property tests of the core: random command sequences never break its invariants.

One client drives the pure core through a tiny executor that plays storage (with conflicts and
unknown outcomes drawn by Hypothesis) and upstream (idempotent approve/deny, failures drawn).
Cross-client races against real storage live in tests/stateful; here the point is that from
*any* reachable envelope every command keeps the invariants:

- a terminal record never changes (until pruned);
- every successful save writes cursor + 1, and the cursor never goes down;
- an upstream approve/deny is performed only while storage holds the matching claim;
- a record is final in storage only after upstream acted on it (or it was born rejected);
- every saved snapshot is a valid envelope within its limits;
- retention never drops a live record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from akchat_fsm.core import (
    CallApprove,
    CallDeny,
    ConfirmationEvent,
    CursorEvent,
    CursorPhase,
    ProposeUpstream,
    SaveSnapshot,
    SessionState,
    Step,
    UpstreamCall,
    UpstreamToolStatus,
    claim_resolution,
    claim_turn,
    complete_resolution,
    persist,
    plan_proposal,
    reconcile,
    record_proposal,
    release_turn,
    reloaded,
    save_settled,
    settle_uncertain,
)
from akchat_fsm.core.records import Record
from akchat_fsm.core.retention import live_count, prune_for_admission
from akchat_fsm.errors import (
    ConfirmationError,
    IllegalTransition,
    InvalidConfirmationToken,
)
from akchat_fsm.wire.enums import ConfirmationStatus, TurnOutcome
from akchat_fsm.wire.session import SessionSnapshot

from .conftest import T0, fresh

PROCESSING_CALL = {
    ConfirmationStatus.APPROVING: CallApprove,
    ConfirmationStatus.REJECTING: CallDeny,
    ConfirmationStatus.EXPIRING: CallDeny,
}
UNTOUCHED = UpstreamToolStatus.REQUIRES_CONFIRMATION


# --------------------------------------------------------------------------- retention kernel
statuses = st.sampled_from(list(ConfirmationStatus))


@given(
    st.lists(statuses, max_size=30),
    st.integers(1, 32),
    st.integers(0, 8),
)
def test_retention_keeps_every_live_record_and_makes_room(
    kinds: list[ConfirmationStatus], cap: int, keep_terminal: int
) -> None:
    records = tuple(Record(f"t{i}", "a", f"c{i}", 0, s) for i, s in enumerate(kinds))
    assume(live_count(records) < cap)
    kept = prune_for_admission(records, cap, keep_terminal)
    live = [r for r in records if not r.status.is_terminal]
    assert [r for r in kept if not r.status.is_terminal] == live
    assert list(kept) == [r for r in records if r in kept]  # order kept
    assert len(kept) + 1 <= cap
    terminal_kept = [r for r in kept if r.status.is_terminal]
    terminal_all = [r for r in records if r.status.is_terminal]
    assert terminal_kept == terminal_all[len(terminal_all) - len(terminal_kept) :]  # newest kept
    if len(records) + 1 <= cap and len(terminal_all) <= keep_terminal:
        assert kept == records  # pruned only when needed


# --------------------------------------------------------------------------- command sequences
@dataclass
class Upstream:
    status: dict[str, UpstreamToolStatus] = field(default_factory=dict)
    born: dict[str, UpstreamToolStatus] = field(default_factory=dict)


class CoreSequences(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state: SessionState = fresh()
        self.stored: SessionSnapshot | None = None
        self.now = T0
        self.upstream = Upstream()
        self.terminal: dict[str, object] = {}
        self.keep_terminal = 2

    # ------------------------------------------------------------------ executor
    def _save(self, effect: SaveSnapshot, outcome: str, applied: bool) -> bool:
        expected = None if self.stored is None else self.stored.cursor
        if outcome == "conflict" or effect.expected_cursor != expected:
            self.state = save_settled(self.state, CursorEvent.CONFLICT)
            self.state = reloaded(self.state, self.stored)
            return False
        assert effect.snapshot.cursor == (expected or 0) + 1  # cursor + 1 per save
        assert SessionSnapshot.model_validate(effect.snapshot.to_wire()) == effect.snapshot
        assert len(effect.snapshot.confirmations) <= 1_000
        if outcome == "unknown":
            if applied:
                self.stored = effect.snapshot
            self.state = save_settled(self.state, CursorEvent.UNKNOWN)
            self.state, was_applied = settle_uncertain(self.state, effect, self.stored)
            assert was_applied == applied
            return False  # the intent is settled by re-reading; the step stops here
        self.stored = effect.snapshot
        self.state = save_settled(self.state, CursorEvent.SAVED)
        assert self.state.snapshot == self.stored
        return True

    def _claim_is_durable(self, tool_call_id: str, kind: type) -> bool:
        assert self.stored is not None
        for binding in self.stored.confirmations:
            if binding.tool_call_id == tool_call_id:
                return PROCESSING_CALL.get(binding.status) is kind
        return False

    def run(
        self, step: Step, outcome: str = "saved", applied: bool = False, fail: bool = False
    ) -> None:
        if step.save is None:
            assert step.then is None and (step.state == self.state or step.accepted)
            return
        self.state = step.state
        if not self._save(step.save, outcome, applied):
            return
        effect = step.then
        if effect is not None:
            # No upstream effect without a claim that storage holds.
            assert self._claim_is_durable(effect.tool_call_id, type(effect))
            if fail:
                return
            if self.upstream.status[effect.tool_call_id] is UNTOUCHED:
                self.upstream.status[effect.tool_call_id] = (
                    UpstreamToolStatus.RUNNING
                    if isinstance(effect, CallApprove)
                    else UpstreamToolStatus.ERROR
                )

    def tokens(self) -> list[str]:
        return [b.token for b in self.state.snapshot.confirmations]

    # ------------------------------------------------------------------ rules
    outcomes = st.sampled_from(["saved", "saved", "saved", "conflict", "unknown"])

    @rule(dt=st.integers(0, 2_000))
    def tick(self, dt: int) -> None:
        self.now += dt

    @rule(
        born=st.sampled_from([UNTOUCHED, UNTOUCHED, UNTOUCHED, UpstreamToolStatus.COMPLETE]),
        ttl=st.integers(1, 3_000),
        outcome=outcomes,
        applied=st.booleans(),
    )
    def propose(self, born: UpstreamToolStatus, ttl: int, outcome: str, applied: bool) -> None:
        plan = plan_proposal(self.state, "email.send", {"n": 1}, self.now, ttl_ms=ttl)
        assert isinstance(plan.effect, ProposeUpstream)
        self.upstream.status.setdefault(plan.effect.tool_call_id, born)
        self.upstream.born.setdefault(plan.effect.tool_call_id, born)
        call = UpstreamCall(plan.effect.tool_call_id, plan.name, plan.args, born)
        self.run(
            record_proposal(self.state, plan, call, self.now, keep_terminal=self.keep_terminal),
            outcome,
            applied,
        )

    @precondition(lambda self: bool(self.state.snapshot.confirmations))
    @rule(
        data=st.data(),
        event=st.sampled_from(
            [ConfirmationEvent.APPROVE, ConfirmationEvent.REJECT, ConfirmationEvent.EXPIRE]
        ),
        outcome=outcomes,
        applied=st.booleans(),
        fail=st.booleans(),
    )
    def claim(
        self, data: st.DataObject, event: ConfirmationEvent, outcome: str, applied: bool, fail: bool
    ) -> None:
        token = data.draw(st.sampled_from(self.tokens()))
        try:
            step = claim_resolution(self.state, token, event, self.now, reason="no")
        except (ConfirmationError, IllegalTransition):
            return
        before = next(b for b in self.state.snapshot.confirmations if b.token == token)
        after = next(b for b in step.state.snapshot.confirmations if b.token == token)
        # Expiry rule: at or after expiresAt the only legal claim is expiry, on every path.
        assert (after.status is ConfirmationStatus.EXPIRING) == (
            event is ConfirmationEvent.EXPIRE or self.now >= before.expires_at
        )
        self.run(step, outcome, applied, fail)

    @precondition(lambda self: bool(self.state.snapshot.confirmations))
    @rule(data=st.data(), outcome=outcomes, applied=st.booleans())
    def complete(self, data: st.DataObject, outcome: str, applied: bool) -> None:
        token = data.draw(st.sampled_from(self.tokens()))
        binding = next(b for b in self.state.snapshot.confirmations if b.token == token)
        # The shell completes only after upstream returned for this claim.
        assume(self.upstream.status[binding.tool_call_id] is not UNTOUCHED)
        try:
            step = complete_resolution(self.state, token, self.now)
        except IllegalTransition:
            return
        self.run(step, outcome, applied)

    @precondition(lambda self: bool(self.state.snapshot.confirmations))
    @rule(
        data=st.data(),
        release=st.booleans(),
        outcome=outcomes,
        applied=st.booleans(),
        fail=st.booleans(),
    )
    def reconcile(
        self, data: st.DataObject, release: bool, outcome: str, applied: bool, fail: bool
    ) -> None:
        token = data.draw(st.sampled_from(self.tokens()))
        binding = next(b for b in self.state.snapshot.confirmations if b.token == token)
        upstream = self.upstream.status[binding.tool_call_id]
        try:
            step = reconcile(self.state, token, upstream, self.now, release_untouched=release)
        except (IllegalTransition, InvalidConfirmationToken):
            return
        self.run(step, outcome, applied, fail)

    @rule(
        turn=st.sampled_from(["t1", "t2", "t3"]),
        lease=st.integers(1, 3_000),
        outcome=outcomes,
        applied=st.booleans(),
    )
    def claim_turn(self, turn: str, lease: int, outcome: str, applied: bool) -> None:
        self.run(claim_turn(self.state, turn, lease, self.now), outcome, applied)

    @rule(
        turn=st.sampled_from(["t1", "t2", "t3"]),
        how=st.sampled_from(list(TurnOutcome)),
        outcome=outcomes,
    )
    def release_turn(self, turn: str, how: TurnOutcome, outcome: str) -> None:
        self.run(release_turn(self.state, turn, how, self.now), outcome)

    @rule(outcome=outcomes, applied=st.booleans())
    def persist(self, outcome: str, applied: bool) -> None:
        self.run(persist(self.state, self.now), outcome, applied)

    # ------------------------------------------------------------------ invariants
    @invariant()
    def in_sync_with_storage(self) -> None:
        phase = self.state.cursor.phase
        assert phase in (CursorPhase.NEW, CursorPhase.IN_SYNC)
        if self.stored is None:
            assert phase is CursorPhase.NEW
        else:
            assert self.state.snapshot == self.stored
            assert self.state.cursor.cursor == self.stored.cursor

    @invariant()
    def terminal_records_never_change(self) -> None:
        if self.stored is None:
            return
        for binding in self.stored.confirmations:
            if binding.token in self.terminal:
                assert binding == self.terminal[binding.token]
            elif binding.status.is_terminal:
                self.terminal[binding.token] = binding

    @invariant()
    def no_false_completion(self) -> None:
        if self.stored is None:
            return
        for binding in self.stored.confirmations:
            if binding.status.is_terminal:
                acted = self.upstream.status[binding.tool_call_id] is not UNTOUCHED
                born_rejected = self.upstream.born[binding.tool_call_id] is not UNTOUCHED
                assert acted or born_rejected

    @invariant()
    def the_cap_is_respected(self) -> None:
        assert len(self.state.snapshot.confirmations) <= 1_000


test_core_sequences = CoreSequences.TestCase


@given(st.lists(st.sampled_from(["saved", "conflict", "unknown"]), max_size=20), st.data())
def test_cursor_never_goes_down_over_saves_and_reloads(
    outcomes: list[str], data: st.DataObject
) -> None:
    state = fresh()
    stored: SessionSnapshot | None = None
    last = 0
    for outcome in outcomes:
        step = persist(state, T0)
        effect = step.save
        assert isinstance(effect, SaveSnapshot)
        if outcome == "saved":
            state, stored = save_settled(step.state, CursorEvent.SAVED), effect.snapshot
        elif outcome == "conflict":
            state = reloaded(save_settled(step.state, CursorEvent.CONFLICT), stored)
        else:
            if data.draw(st.booleans()):
                stored = effect.snapshot
            state, _ = settle_uncertain(
                save_settled(step.state, CursorEvent.UNKNOWN), effect, stored
            )
        assert state.cursor.cursor >= last
        assert state.cursor.cursor == (0 if stored is None else stored.cursor)
        last = state.cursor.cursor
