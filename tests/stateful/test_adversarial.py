"""Adversarial interleavings of the no-replay / no-false-completion guarantees, one per test.

Each test stops a client between two steps of a real plan (the ``Stepper`` runs the library's
plans one effect at a time) or drives two session objects of one process, then checks what
upstream was asked to do and what storage says. The stateful suites explore the same space at
random; these pin the named scenarios so a regression names itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from akchat_fsm.errors import (
    AkchatError,
    AlreadyResolved,
    ConfirmationError,
    OutcomeUnknown,
    ResolutionInProgress,
    StorageUnavailable,
)
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import ChatDefinition, UpstreamFailed, resume_chat_session
from akchat_fsm.session._confirm import plan_reconcile, plan_resolve
from akchat_fsm.session.effects import CallApprove, CallDeny, Emit, SaveSnapshot
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.testing.doubles import RecordingChatMemory
from akchat_fsm.testing.faulty import FaultyStorage
from akchat_fsm.wire.decode import decode_session_snapshot

from ._world import Stepper, counting_upstream, perform

DEFINITION = ChatDefinition("adversarial")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


class World:
    """One storage, one counting upstream, its memory, a clock; sessions resume from them."""

    def __init__(self) -> None:
        self.inner = MemoryStorage()
        self.storage = FaultyStorage(self.inner)
        self.upstream = counting_upstream()
        self.memory = RecordingChatMemory(self.upstream).load_only()  # the whole-record path
        self.clock = Clock()
        first = self.session()
        first.persist()
        self.token = first.confirmations_for(self.upstream, ttl_ms=500).propose("a.b", {}).token
        self.call = first.confirmations[0].tool_call_id

    def session(self) -> Any:
        return resume_chat_session(
            DEFINITION, session_id="s", storage=self.storage, clock=self.clock
        )

    def status(self) -> str:
        snapshot = decode_session_snapshot(self.inner.load("s")).snapshot
        assert snapshot is not None
        return str(snapshot.confirmations[0].status)

    def step(self, run: Stepper) -> None:
        """Perform the next effect; its typed error (e.g. an injected fault) goes to the plan."""
        try:
            value = perform(run.next, self.storage, self.upstream, self.memory)
        except AkchatError as exc:
            run.throw(exc)
        else:
            run.feed(value)

    def step_until(self, run: Stepper, kind: type | tuple[type, ...]) -> None:
        """Perform effects until the plan waits on an effect of ``kind``."""
        while not run.done and not isinstance(run.next, kind):
            self.step(run)
        assert isinstance(run.next, kind), (run.error, run.result)

    def finish(self, run: Stepper) -> None:
        while not run.done:
            self.step(run)

    def claimed(self, intent: ConfirmationEvent = ConfirmationEvent.APPROVE) -> Stepper:
        """A client whose claim is saved and whose upstream call is the next effect."""
        run = Stepper(plan_resolve(self.session()._holder, self.token, intent, reason="no"))
        self.step_until(run, (CallApprove, CallDeny))
        return run


def test_a_second_session_object_loses_to_a_live_claim_and_calls_nothing() -> None:
    world = World()
    winner = world.claimed()
    with pytest.raises(ResolutionInProgress):
        world.session().confirmations_for(world.upstream).approve(world.token)
    world.finish(winner)
    assert winner.result.status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_a_stale_loser_is_told_what_storage_says_not_what_it_last_read() -> None:
    world = World()
    winner = world.claimed()
    stale = world.session()  # reads the claim: its copy says "approving"
    world.finish(winner)
    with pytest.raises(AlreadyResolved) as lost:
        stale.confirmations_for(world.upstream).reject(world.token)
    assert lost.value.record.status == "approved"
    # The same intent as the winner's is an idempotent repeat, stale copy or not.
    assert stale.confirmations_for(world.upstream).approve(world.token).status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_a_stale_processing_copy_claims_again_once_reconcile_released_it() -> None:
    world = World()
    crashed = world.claimed()
    stale = world.session()
    crashed.crash()  # dies before its upstream call
    world.session().reconcile(world.memory, release_untouched=True)
    assert world.status() == "pending"
    assert stale.confirmations_for(world.upstream).approve(world.token).status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


@pytest.mark.parametrize("save", ["claim", "terminal"])
def test_a_retry_after_an_unsettled_unknown_outcome_never_calls_twice(save: str) -> None:
    world = World()
    session = world.session()
    coordinator = session.confirmations_for(world.upstream)
    run = Stepper(plan_resolve(session._holder, world.token, ConfirmationEvent.APPROVE))
    if save == "terminal":
        world.step_until(run, (CallApprove,))
        world.step(run)
    world.step_until(run, SaveSnapshot)
    world.storage.fail_next_save("unknown_after_apply")  # it applies; the client is not told
    world.storage.fail_next_load("unavailable")  # and the re-read that would settle it fails
    world.finish(run)
    assert isinstance(run.error, OutcomeUnknown)
    assert world.status() == ("approving" if save == "claim" else "approved")
    if save == "claim":
        with pytest.raises(ResolutionInProgress):
            coordinator.approve(world.token)  # the retry reloads first and sees its own claim
        (outcome,) = session.reconcile(world.memory, upstream=world.upstream)
        assert outcome.action == "resumed"
    assert coordinator.approve(world.token).status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


@pytest.mark.parametrize("acted", [False, True], ids=["before-acting", "after-acting"])
def test_upstream_failed_then_approve_again_never_replays(acted: bool) -> None:
    world = World()
    run = world.claimed()
    if acted:
        perform(run.next, world.storage, world.upstream, world.memory)
    run.throw(RuntimeError("upstream timed out"))
    assert isinstance(run.error, UpstreamFailed)
    coordinator = world.session().confirmations_for(world.upstream)
    with pytest.raises(ResolutionInProgress):
        coordinator.approve(world.token)
    assert world.upstream.calls_per_tool_call == ({world.call: 1} if acted else {})
    (outcome,) = world.session().reconcile(world.memory, upstream=world.upstream)
    assert outcome.action == ("completed" if acted else "resumed")
    assert world.status() == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_reconcile_racing_a_live_claimant_executes_once_and_records_the_claim() -> None:
    """ADR-0051: resume may repeat the claimed decision; upstream executes it once."""
    world = World()
    live = world.claimed()
    (outcome,) = world.session().reconcile(world.memory, upstream=world.upstream)
    assert (outcome.action, world.status()) == ("resumed", "approved")
    world.finish(live)  # the slow claimant's call arrives second: the same decision
    assert live.result.status == "approved"
    assert world.upstream.acted == {world.call: "approve"}
    assert world.upstream.proposed == [world.call]
    assert [call[0] for call in world.upstream.calls_for(world.call)] == ["approve", "approve"]


def test_reconcile_after_upstream_acted_calls_nothing_even_with_the_claimant_alive() -> None:
    world = World()
    live = world.claimed()
    world.step(live)  # upstream acted
    (outcome,) = world.session().reconcile(world.memory, upstream=world.upstream)
    assert (outcome.action, world.status()) == ("completed", "approved")
    world.finish(live)  # its terminal save finds the record already settled: no change
    assert live.result.status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_expire_due_racing_an_approve_skips_what_the_other_client_settled() -> None:
    world = World()
    sweeper = world.session()  # its copy says pending
    world.session().confirmations_for(world.upstream).approve(world.token)
    world.clock.now += 10_000  # due on the sweeper's stale copy
    assert sweeper.confirmations_for(world.upstream).expire_due() == ()
    assert world.status() == "approved"
    assert world.upstream.acted == {world.call: "approve"}
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_expire_due_racing_a_live_approve_claim_leaves_it_to_the_claimant() -> None:
    world = World()
    live = world.claimed()
    world.clock.now += 10_000
    assert world.session().confirmations_for(world.upstream).expire_due() == ()
    world.finish(live)  # claimed before expiry: the claim is finished as claimed
    assert (live.result.status, world.status()) == ("approved", "approved")
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_an_expiry_claim_and_an_approve_claim_race_one_wins() -> None:
    world = World()
    world.clock.now += 10_000
    sessions = [world.session(), world.session()]
    runs = [
        Stepper(plan_resolve(sessions[0]._holder, world.token, ConfirmationEvent.EXPIRE)),
        Stepper(plan_resolve(sessions[1]._holder, world.token, ConfirmationEvent.APPROVE)),
    ]
    for run in runs:  # both read the same pending record and try to claim it
        world.step_until(run, SaveSnapshot)
    for run in runs:
        world.finish(run)
    # The expiry claim won; the late approve re-read and got the expired record (an approve
    # after expiry resolves as expired, docs/reference.md §3.3), without calling upstream.
    assert [str(r.result.status) for r in runs] == ["expired", "expired"]
    assert world.upstream.acted == {world.call: "deny"}
    assert world.upstream.calls_per_tool_call == {world.call: 1}


@pytest.mark.parametrize("crash_before", ["upstream", "terminal-save", "emit"])
def test_a_crash_at_each_step_is_recovered_by_reconcile_without_replay(crash_before: str) -> None:
    world = World()
    session = world.session()
    session.add_observer(lambda event: None)  # so the plan also yields observer events
    run = Stepper(plan_resolve(session._holder, world.token, ConfirmationEvent.REJECT))
    world.step_until(run, CallDeny)
    if crash_before != "upstream":
        world.step(run)
        world.step_until(run, SaveSnapshot if crash_before == "terminal-save" else Emit)
        if crash_before == "emit":
            world.step(run)
    run.crash()
    expected = {"upstream": "rejecting", "terminal-save": "rejecting", "emit": "rejected"}
    assert world.status() == expected[crash_before]
    recovery = Stepper(plan_reconcile(world.session()._holder))
    world.finish(recovery)
    assert world.status() == "rejected"
    assert world.upstream.acted == {world.call: "deny"}
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_unavailable_claim_save_changes_nothing_and_the_retry_calls_once() -> None:
    world = World()
    coordinator = world.session().confirmations_for(world.upstream)
    world.storage.fail_next_save("unavailable")
    with pytest.raises(StorageUnavailable):
        coordinator.approve(world.token)
    assert (world.status(), dict(world.upstream.calls_per_tool_call)) == ("pending", {})
    assert coordinator.approve(world.token).status == "approved"
    assert world.upstream.calls_per_tool_call == {world.call: 1}


def test_a_claim_released_under_a_live_claimant_is_never_completed_by_it() -> None:
    """Misuse (release with a live claimant, ADR-0051): the claimant's terminal save must not
    complete a record that is no longer its claim, least of all another client's opposite one."""
    world = World()
    live = world.claimed(ConfirmationEvent.APPROVE)
    world.session().reconcile(world.memory, release_untouched=True)
    other = world.claimed(ConfirmationEvent.REJECT)  # re-claimed the other way, before deny
    world.step(live)  # the live claimant's approve reaches upstream and acts
    world.finish(live)
    assert isinstance(live.error, ConfirmationError), live.error
    assert live.error.record is not None and live.error.record.status == "rejecting"
    assert world.status() == "rejecting"  # not "rejected": it never recorded the other claim
    other.crash()


def test_a_claim_released_to_pending_under_a_live_claimant_is_reported_typed() -> None:
    world = World()
    live = world.claimed()
    world.session().reconcile(world.memory, release_untouched=True)
    world.finish(live)
    assert isinstance(live.error, ConfirmationError)
    assert "released by reconcile" in str(live.error)
    assert world.status() == "pending"
    assert world.upstream.calls_per_tool_call == {world.call: 1}
