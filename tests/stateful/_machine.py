"""The resolution-protocol state machine: several clients, one storage, one counting upstream.

Each client resumes the same session from the same storage and runs the library's real plans
one effect at a time. Rules start an operation, perform the next effect (normally, with an
unknown outcome, unavailable, or with upstream failing), crash a client between any two
steps, move the clock past expiry, and reconcile. The invariants are checked after every step,
and every step is checked against the model as it happens (``_history.py``: code -> model).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from akchat_fsm.errors import OutcomeUnknown, StorageUnavailable
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import ChatDefinition, _confirm, _ops
from akchat_fsm.session._audit import Decider
from akchat_fsm.session._state import SessionHolder
from akchat_fsm.session.effects import (
    CallApprove,
    CallDeny,
    Emit,
    Load,
    Plan,
    ProposeUpstream,
    SaveRecord,
    SaveSnapshot,
    SaveSnapshotCreatingRecords,
)
from akchat_fsm.testing.doubles import RecordingChatMemory
from akchat_fsm.testing.faulty import FaultyStorage
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot

from ._history import RECONCILER, ModelChecker
from ._world import (
    RecordingStorage,
    Stepper,
    UpstreamBoom,
    born_handled,
    counting_upstream,
    perform,
)

CLIENTS = 3
#: What a step's ``fault`` draw (0-9) means for the effect the client is waiting on: most
#: steps succeed, each fault only where it fits, and 9 is always a crash.
FAULTS: dict[str, tuple[str, ...]] = {
    "save": ("ok",) * 6 + ("unknown", "unknown", "unavailable", "crash"),
    "load": ("ok",) * 7 + ("unavailable", "unavailable", "crash"),
    "upstream": ("ok",) * 5 + ("upstream",) * 2 + ("upstream-acted",) * 2 + ("crash",),
    "other": ("ok",) * 9 + ("crash",),
}


#: What happens around the client's step: usually nothing; sometimes time passes or the host
#: reconciles.
WORLD = ("",) * 6 + ("tick", "tick", "reconcile")


def fault_for(effect: object, draw: int) -> str:
    if isinstance(effect, SaveSnapshot | SaveSnapshotCreatingRecords):
        return FAULTS["save"][draw]
    if isinstance(effect, Load):
        return FAULTS["load"][draw]
    if isinstance(effect, CallApprove | CallDeny):
        return FAULTS["upstream"][draw]
    return FAULTS["other"][draw]


def _save_through(storage: Any, effect: SaveSnapshot | SaveSnapshotCreatingRecords) -> bool:
    """Send an envelope save effect to ``storage`` (with its records: ADR-0141)."""
    if isinstance(effect, SaveSnapshotCreatingRecords):
        save = effect.save
        return bool(storage.save_with_records(save.snapshot, save.expected_cursor, effect.records))
    return bool(storage.save(effect.snapshot, effect.expected_cursor))


TTL_MS = 150
#: A proposer's intent lease in machine time (a few ticks), when proposals record intents.
LEASE_MS = 100
INTENT_PREFIX = "propose-intent:"
DEFINITION = ChatDefinition("stateful")
# Resolutions are weighted up: they are what the invariants are about.
OPS = ("approve",) * 4 + ("reject",) * 2 + ("expire", "propose", "persist", "turn", "reload")
INTENTS = {
    "approve": ConfirmationEvent.APPROVE,
    "reject": ConfirmationEvent.REJECT,
    "expire": ConfirmationEvent.EXPIRE,
}
#: How a resolution plan is built; the "bite" tests swap in deliberately broken ones.
ResolvePlan = Callable[[SessionHolder, str, ConfirmationEvent], Plan[Any]]
EXPECTED_CALL = {
    ConfirmationStatus.APPROVED: "approve",
    ConfirmationStatus.REJECTED: "deny",
    ConfirmationStatus.EXPIRED: "deny",
}


def correct_resolve(holder: SessionHolder, token: str, intent: ConfirmationEvent) -> Plan[Any]:
    return _confirm.plan_resolve(holder, token, intent, reason="no")


def mixed_versions_resolve(
    holder: SessionHolder, token: str, intent: ConfirmationEvent
) -> Plan[Any]:
    """Audited resolutions by processes of two versions on one store (ADR-0141): approvals by
    the combined write (entry and claim at once), the other decisions by ADR-0132's protocol
    (the entry, then the claim); the decider is named ``new`` or ``old``."""
    holder.atomic_records = intent is ConfirmationEvent.APPROVE
    decider = Decider("new" if holder.atomic_records else "old")
    return _confirm.plan_resolve(holder, token, intent, reason="no", audit=decider)


class _Client:
    def __init__(self) -> None:
        self.holder: SessionHolder | None = None
        self.run: Stepper | None = None
        self.op = ""
        self.created: str | None = None  # the tool call upstream created for this propose
        self.lease_ends_at: int | None = None  # this propose's intent lease, once recorded

    @property
    def busy(self) -> bool:
        return self.run is not None and not self.run.done


class ResolutionProtocol(RuleBasedStateMachine):
    """Subclasses set ``make_storage`` (a factory of the real adapter under test)."""

    make_storage: ClassVar[Callable[[], Any]]
    resolve_plan: ClassVar[ResolvePlan] = staticmethod(correct_resolve)
    #: What a whole run exercised (a validity floor: a run without races proves nothing).
    coverage: ClassVar[Counter[str]] = Counter()
    #: Check every step against the model (``_history.ModelChecker``) as it happens.
    check_history: ClassVar[bool] = True
    #: Every proposal records an intent (a store with records, issue 22), every reconcile
    #: settles them, and it runs with proposers alive: their leases decide (ADR-0133).
    intents: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.session_id = f"sf-{uuid.uuid4().hex[:20]}"
        self.recording = RecordingStorage(type(self).make_storage())
        self.storage = FaultyStorage(self.recording)
        self.upstream = counting_upstream()
        self.memory = RecordingChatMemory(self.upstream)
        self.now = 1_000
        self.clients = [_Client() for _ in range(CLIENTS)]
        self.terminal_seen: dict[str, ConfirmationStatus] = {}
        self.holds: dict[int, set[str]] = {i: set() for i in range(CLIENTS)}
        self.last_cursor = 0
        self.finished: list[Stepper] = []
        self.deny_attempted: set[str] = set()
        self._snapshot: SessionSnapshot | None = None
        self.history = ModelChecker(self.upstream)
        if self.check_history:
            self.recording.observer = self.history.saved

    # ------------------------------------------------------------------ helpers
    def clock(self) -> int:
        return self.now

    def stored(self) -> SessionSnapshot | None:
        raw = self.recording.inner.load(self.session_id)
        if raw is None:
            return None
        result = decode_session_snapshot(raw)
        assert result.snapshot is not None, result.diagnostic
        return result.snapshot

    def live_tokens(self) -> list[str]:
        snapshot = self.stored()
        bindings = () if snapshot is None else snapshot.confirmations
        return [b.token for b in bindings if not b.status.is_terminal]

    def tokens(self) -> list[str]:
        snapshot = self.stored()
        return [] if snapshot is None else [b.token for b in snapshot.confirmations]

    def _plan(self, client: _Client, op: str, pick: int) -> Plan[Any]:
        holder = client.holder
        assert holder is not None
        if op in INTENTS:
            # Mostly a live (pending or processing) record: that is where the races are.
            stored = self.stored()
            bindings = () if stored is None else stored.confirmations
            live = [b.token for b in bindings if not b.status.is_terminal]
            tokens = (live if live and pick < 6 else [b.token for b in bindings]) or ["confirm-0"]
            return type(self).resolve_plan(holder, tokens[pick % len(tokens)], INTENTS[op])
        if op == "propose":
            return self._propose(holder, pick)
        if op == "persist":
            return _ops.plan_persist(holder)
        if op == "turn":
            return _ops.plan_claim_turn(holder, f"turn-{pick % 4}", 30)
        from akchat_fsm.session._state import reload

        return reload(holder)

    def _propose(self, holder: SessionHolder, n: int) -> Plan[Any]:
        return _confirm.plan_propose(
            holder,
            "email.send",
            {"n": n},
            ttl_ms=TTL_MS,
            intent=type(self).intents,
            lease_ms=LEASE_MS,
        )

    def _calls_upstream(self, effect: object) -> None:
        """The acting process is about to call upstream: the model must allow it."""
        if self.check_history and isinstance(effect, CallApprove | CallDeny):
            self.history.upstream_call(effect)

    def _drain_emits(self, run: Stepper) -> None:
        while isinstance(run.next, Emit):
            run.feed(None)

    def _after_step(self, index: int, client: _Client) -> None:
        run = client.run
        assert run is not None
        self._drain_emits(run)
        if run.done:
            if client.op == "resume" and run.error is None:
                client.holder = run.result
            if run.error is not None and client.op == "resume":
                client.holder = None
            self.holds[index].clear()
            self.history.gone(f"c{index}")
            self.finished.append(run)
            outcome = "ok" if run.error is None else type(run.error).__name__
            self.coverage[f"{client.op}:{outcome}"] += 1
            if client.op == "propose":
                self.proposal_never_orphaned(client.created, run)
            client.created = client.lease_ends_at = None

    def _note_claims(self, index: int, before: SessionSnapshot | None) -> None:
        after = self.stored()
        if after is None:
            return
        old = {} if before is None else {b.token: b.status for b in before.confirmations}
        for binding in after.confirmations:
            if (
                binding.status.is_processing
                and old.get(binding.token) is ConfirmationStatus.PENDING
            ):
                self.holds[index].add(binding.token)

    def _runnable(self, index: int) -> _Client:
        return self.clients[index % CLIENTS]

    # ------------------------------------------------------------------ rules
    @initialize()
    def create_session(self) -> None:
        holder = SessionHolder.fresh(DEFINITION, self.session_id, self.clock)
        # Start with two pending confirmations, so resolutions race from the first step.
        plans = [_ops.plan_persist(holder)] + [self._propose(holder, n) for n in (1, 2)]
        for plan in plans:
            run = Stepper(plan)
            while not run.done:
                run.feed(perform(run.next, self.storage, self.upstream, self.memory))
            assert run.error is None, run.error
        for client in self.clients:  # every client starts resumed from that stored state
            resume = Stepper(_ops.plan_resume(DEFINITION, self.session_id, self.clock))
            resume.feed(perform(resume.next, self.storage, self.upstream, self.memory))
            client.holder = resume.result

    @rule(
        c=st.integers(0, CLIENTS - 1),
        op=st.sampled_from(OPS),
        pick=st.integers(0, 7),
        draw=st.integers(0, 9),
        world=st.sampled_from(WORLD),
    )
    def advance(self, c: int, op: str, pick: int, draw: int, world: str) -> None:
        """Client ``c`` takes one step: an idle client starts ``op`` (a dead one first resumes
        from storage); a busy one performs its next effect, perhaps with ``fault``.

        One rule for everything (``world`` may first move the clock or reconcile), so
        Hypothesis' swarm testing can never disable progress by switching a rule off.
        ``unknown``: the save applies but the client is told the outcome is unknown (through
        the kit's ``FaultyStorage``). ``unavailable``: the storage call fails before applying.
        ``upstream`` / ``upstream-acted``: upstream raises before / after acting. ``crash``:
        the client dies between two steps and must resume from storage to come back.
        """
        if world == "tick":  # the clock moves (past expiry, often: TTL is 150 ms)
            self.now += 10 * (pick + 1)
            self._leases_end()
        elif world == "reconcile" and not any(self.holds.values()):
            # Recovery, only when no live client holds a claim (the documented precondition for
            # releases). Proposers may be alive: with intents, their leases decide (ADR-0133).
            self._reconcile(release=pick % 2 == 1)
        client = self.clients[c]
        fault = fault_for(client.run.next if client.busy and client.run else None, draw)
        if fault == "crash":  # the client dies here, between two steps (or while idle)
            self._crash(c)
            return
        with self.history.acting(f"c{c}"):
            if client.busy:
                self._step(c, fault)
                return
            if client.holder is None:
                client.op = "resume"
                client.run = Stepper(_ops.plan_resume(DEFINITION, self.session_id, self.clock))
            else:
                client.op = op
                client.run = Stepper(self._plan(client, op, pick))
            self._after_step(c, client)

    def _leases_end(self) -> None:
        """The lease's one assumption (ADR-0133): a proposer's upstream request (the propose,
        or a deny of a call it cannot bind), sent within its lease, arrives within it. A
        request still waiting here when the clock reaches the lease's end never arrives: its
        client dies before sending it."""
        for index, client in enumerate(self.clients):
            run = client.run
            if (
                client.op == "propose"
                and client.lease_ends_at is not None
                and client.busy
                and run is not None
                and isinstance(run.next, ProposeUpstream | CallDeny)
                and self.now >= client.lease_ends_at
            ):
                self.coverage[f"lease-ended-before:{type(run.next).__name__}"] += 1
                self._crash(index)

    def _step(self, index: int, fault: str) -> None:
        """A busy client performs its next effect, perhaps with a fault that fits the effect.

        ``unknown``: the save applies but the client is told the outcome is unknown (through
        the kit's ``FaultyStorage``). ``unavailable``: the storage call fails before applying.
        ``upstream`` / ``upstream-acted``: upstream raises before / after acting.
        """
        client = self.clients[index]
        run = client.run
        assert run is not None
        effect = run.next
        before = self.stored()
        self.coverage[f"effect:{type(effect).__name__}"] += 1
        if isinstance(effect, ProposeUpstream):
            client.created = effect.tool_call_id
        if isinstance(effect, SaveRecord) and effect.key.startswith(INTENT_PREFIX):
            client.lease_ends_at = json.loads(effect.text)["leaseEndsAt"]
        if isinstance(effect, CallDeny):
            self.deny_attempted.add(effect.tool_call_id)
        self._calls_upstream(effect)
        if fault == "unknown" and isinstance(effect, SaveSnapshot | SaveSnapshotCreatingRecords):
            self.coverage["fault:unknown"] += 1
            self.storage.fail_next_save("unknown_after_apply")
            with pytest.raises(OutcomeUnknown) as unknown:
                _save_through(self.storage, effect)
            run.throw(unknown.value)
        elif fault == "unavailable" and isinstance(
            effect, SaveSnapshot | SaveSnapshotCreatingRecords | Load
        ):
            self.coverage["fault:unavailable"] += 1
            with pytest.raises(StorageUnavailable) as unavailable:
                if not isinstance(effect, Load):
                    self.storage.fail_next_save("unavailable")
                    _save_through(self.storage, effect)
                else:
                    self.storage.fail_next_load("unavailable")
                    self.storage.load(effect.session_id)
            run.throw(unavailable.value)
        elif fault.startswith("upstream") and isinstance(effect, CallApprove | CallDeny):
            self.coverage[f"fault:{fault}"] += 1
            if fault == "upstream-acted":
                perform(effect, self.storage, self.upstream, self.memory)
            run.throw(UpstreamBoom("upstream failed"))
        else:
            run.feed(perform(effect, self.storage, self.upstream, self.memory))
        self._note_claims(index, before)
        self._after_step(index, client)

    def _crash(self, c: int) -> None:
        client = self.clients[c]
        if client.run is not None and not client.run.done:
            self.coverage[f"crash-before:{type(client.run.next).__name__}"] += 1
            client.run.crash()
        client.run, client.holder = None, None
        self.holds[c].clear()
        self.history.gone(f"c{c}")

    def _reconcile(self, release: bool) -> None:
        with self.history.acting(RECONCILER):
            self._reconcile_run(release)
        self.history.gone(RECONCILER)

    def _reconcile_run(self, release: bool) -> None:
        holder_run = Stepper(_ops.plan_resume(DEFINITION, self.session_id, self.clock))
        while not holder_run.done:
            holder_run.feed(perform(holder_run.next, self.storage, self.upstream, self.memory))
        assert holder_run.error is None, holder_run.error
        run = Stepper(
            _confirm.plan_reconcile(
                holder_run.result, release_untouched=release, intents=type(self).intents
            )
        )
        while not run.done:
            self._calls_upstream(run.next)
            run.feed(perform(run.next, self.storage, self.upstream, self.memory))
        assert run.error is None, run.error
        self.finished.append(run)
        for outcome in run.result:
            self.coverage[f"reconcile:{outcome.action}"] += 1

    # ------------------------------------------------------------------ invariants
    @invariant()
    def protocol_invariants(self) -> None:
        """All five properties, after every step (storage is decoded once per step)."""
        self._snapshot = self.stored()
        self.upstream_called_at_most_once_per_tool_call()
        self.terminal_only_after_upstream_succeeded()
        self.terminal_records_never_change()
        self.cursor_moves_up_by_one_per_applied_save()
        self.no_acknowledged_save_lost()
        if type(self).intents:  # only here: test_suites_bite expects each mutant's own symptom
            self.no_pending_record_for_a_call_upstream_settled()
            self.no_waiting_call_without_binding_or_intent()

    def intents_stored(self) -> set[str]:
        inner = self.recording.inner
        keys = inner.list_records(self.session_id, INTENT_PREFIX)
        return {key.removeprefix(INTENT_PREFIX) for key in keys}

    def no_waiting_call_without_binding_or_intent(self) -> None:
        """Issue 22: whatever kills a proposer, and whenever a reconcile runs beside a live one,
        every call waiting upstream is bound in the stored session or covered by an intent."""
        snapshot = self._snapshot
        bound = set() if snapshot is None else {b.tool_call_id for b in snapshot.confirmations}
        waiting = {
            call
            for call, status in self.upstream.statuses.items()
            if status == "requires_confirmation"
        }
        orphans = waiting - bound - self.intents_stored()
        assert not orphans, f"upstream calls wait with neither binding nor intent: {orphans}"

    def no_pending_record_for_a_call_upstream_settled(self) -> None:
        """A ``pending`` record's call is untouched upstream: else an approval would call
        upstream a second time (a sweep binding a call its live proposer denied)."""
        snapshot = self._snapshot
        for binding in () if snapshot is None else snapshot.confirmations:
            if binding.status is ConfirmationStatus.PENDING:
                acted = self.upstream.acted.get(binding.tool_call_id)
                assert acted is None, f"{binding.token} is pending but upstream did {acted!r}"

    def proposal_never_orphaned(self, created: str | None, run: Stepper) -> None:
        """A finished propose whose call upstream created left it bound, or denied it upstream
        because it definitely could not be bound; only an unknown outcome (the binding may be
        stored), a crash, or (with intents) a lease that ended before the deny (the intent
        stays, ADR-0133) may leave it to reconciliation and the host."""
        if created is None or isinstance(run.error, OutcomeUnknown):
            return
        stored = self.stored()
        bound = stored is not None and any(b.tool_call_id == created for b in stored.confirmations)
        # Left with its intent, or a call nothing waits for (born handled: a sweep after the
        # lease deleted its intent) once the lease ended before a deny.
        denied = not bound and created in self.deny_attempted
        left = not (bound or denied) and type(self).intents
        left = left and (
            created in self.intents_stored()
            or self.upstream.statuses.get(created) != "requires_confirmation"
        )
        self.coverage[f"proposal:{'bound' if bound else 'denied' if denied else 'left'}"] += 1
        assert bound or denied or left, (
            f"upstream call {created} orphaned by a propose that ended with {run.error!r}"
        )

    def upstream_called_at_most_once_per_tool_call(self) -> None:
        over = {call: n for call, n in self.upstream.calls_per_tool_call.items() if n > 1}
        assert not over, f"upstream replayed: {over}"

    def terminal_only_after_upstream_succeeded(self) -> None:
        snapshot = self._snapshot
        for binding in () if snapshot is None else snapshot.confirmations:
            if not binding.status.is_terminal or born_handled(self.upstream, binding.tool_call_id):
                continue
            acted = self.upstream.acted.get(binding.tool_call_id)
            assert acted == EXPECTED_CALL[binding.status], (
                f"{binding.token} is {binding.status} but upstream did {acted!r}"
            )

    def terminal_records_never_change(self) -> None:
        snapshot = self._snapshot
        for binding in () if snapshot is None else snapshot.confirmations:
            seen = self.terminal_seen.get(binding.token)
            if seen is not None:
                assert binding.status is seen, f"{binding.token}: {seen} became {binding.status}"
            elif binding.status.is_terminal:
                self.terminal_seen[binding.token] = binding.status

    def cursor_moves_up_by_one_per_applied_save(self) -> None:
        snapshot = self._snapshot
        applied = self.recording.applied
        cursor = 0 if snapshot is None else snapshot.cursor
        assert sorted(applied) == list(range(1, len(applied) + 1)), sorted(applied)
        assert cursor == len(applied) >= self.last_cursor
        self.last_cursor = cursor
        if self.check_history:  # the model state follows what is stored
            assert self.history.state.cursor == cursor, (self.history.state.cursor, cursor)

    def no_acknowledged_save_lost(self) -> None:
        runs = [c.run for c in self.clients if c.run is not None] + self.finished
        for run in runs:
            for acked in run.acked_saves:
                assert self.recording.applied.get(acked.cursor) == acked.to_wire()
        if self.recording.applied:
            snapshot = self._snapshot
            assert snapshot is not None
            assert snapshot.to_wire() == self.recording.applied[max(self.recording.applied)]

    def _recover(self) -> None:
        """The recovery after every client is gone: it must leave nothing processing."""
        self._reconcile(release=False)

    def teardown(self) -> None:
        # After every client is gone, one recovery settles every processing record, and the
        # invariants still hold: nothing executed twice, nothing claims what did not happen.
        try:
            if self.stored() is None or self.history.failure is not None:
                return  # (a refused history step is the failure Hypothesis reports)
            for c in range(CLIENTS):
                self._crash(c)
            if type(self).intents:
                self.now += LEASE_MS  # every proposer is dead: a sweep after their leases
            self._recover()
            self._snapshot = snapshot = self.stored()
            assert snapshot is not None
            stuck = [b.token for b in snapshot.confirmations if b.status.is_processing]
            assert not stuck, f"processing records survived recovery: {stuck}"
            self.upstream_called_at_most_once_per_tool_call()
            self.terminal_only_after_upstream_succeeded()
            self.terminal_records_never_change()
            self.cursor_moves_up_by_one_per_applied_save()
            if type(self).intents:  # liveness: every dead proposer's intent is settled
                self.no_pending_record_for_a_call_upstream_settled()
                self.no_waiting_call_without_binding_or_intent()
                left = self.intents_stored()
                assert not left, f"intents survived recovery after their leases: {left}"
        finally:
            close = getattr(self.recording.inner, "close", None)
            if close is not None and getattr(type(self), "close_each", False):
                close()


# --------------------------------------------------------------------------- pinned program


def _draw(effect: object, fault: str) -> int:
    """The ``advance`` draw that means ``fault`` for ``effect`` (the tables are in FAULTS)."""
    for draw in range(10):
        if fault_for(effect, draw) == fault:
            return draw
    raise AssertionError(f"{fault!r} cannot happen to {type(effect).__name__}")


class Pinned:
    """Drives a machine through its own rule, checking the invariants after every step as
    Hypothesis would, so a fixed program can reach named points whatever the seed."""

    def __init__(self, machine: ResolutionProtocol) -> None:
        self.m = machine

    def step(self, c: int, fault: str = "ok", op: str = "reload", world: str = "") -> None:
        client = self.m.clients[c]
        effect = client.run.next if client.busy and client.run is not None else None
        self.m.advance(c, op, 0, _draw(effect, fault), world)
        self.m.protocol_invariants()

    def start_to(self, c: int, op: str, kind: type | tuple[type, ...], world: str = "") -> None:
        """Idle client ``c`` starts ``op`` (its first live token, for a resolution) and steps
        with no fault until its next effect is a ``kind``: it must get there."""
        assert not self.m.clients[c].busy, f"client {c} is still busy"
        self.step(c, op=op, world=world)
        while self.m.clients[c].busy and not isinstance(self.m.clients[c].run.next, kind):  # type: ignore[union-attr]
            self.step(c)
        assert self.m.clients[c].busy, f"client {c}'s {op} ended before a {kind}"

    def finish(self, c: int) -> None:
        while self.m.clients[c].busy:
            self.step(c)

    def run(self, c: int, op: str, world: str = "") -> None:
        assert not self.m.clients[c].busy, f"client {c} is still busy"
        self.step(c, op=op, world=world)
        self.finish(c)

    @contextlib.contextmanager
    def reaching(self, *points: str) -> Iterator[None]:
        """The block must exercise each of ``points`` (coverage keys)."""
        before = {point: self.m.coverage[point] for point in points}
        yield
        missed = [point for point in points if self.m.coverage[point] == before[point]]
        assert not missed, f"the pinned program never reached {missed}"


def pinned_program(machine: type[ResolutionProtocol]) -> None:
    """A fixed program that drives every point of the suites' floors on every run (the
    generated run reaches them only by chance, depending on the seed): each fault waits for
    the effect it is meant for, so the program follows the plans rather than counting their
    steps. Should the library make a point unreachable, the program stops short of it (an
    assertion here) or the floor misses it. Unknown outcomes come last: a subclass may make
    them lost or late."""
    m = machine()
    p = Pinned(m)
    try:
        m.create_session()
        m.protocol_invariants()
        # a live claim: a second client loses with ResolutionInProgress; the claimant's
        # upstream call succeeds
        p.start_to(0, "approve", CallApprove)
        with p.reaching("approve:ResolutionInProgress"):
            p.run(1, "approve")
        with p.reaching("effect:CallApprove", "approve:ok"):
            p.finish(0)
        # a rejection whose upstream call fails before acting; recovery resumes it
        p.start_to(0, "reject", CallDeny)
        with p.reaching("effect:CallDeny", "fault:upstream"):
            p.step(0, "upstream")
        p.finish(0)
        with p.reaching("reconcile:resumed"):
            p.step(1, world="reconcile", op="persist")
        p.finish(1)
        # a proposal bound; one whose binding save is refused (so upstream is told to deny)
        with p.reaching("proposal:bound"):
            p.run(2, "propose")
        p.start_to(2, "propose", SaveSnapshot)
        with p.reaching("fault:unavailable", "proposal:denied"):
            p.step(2, "unavailable")
            p.finish(2)
        # an approval whose upstream call fails after acting; recovery completes it
        for _ in range(3):  # upstream creates every third call already handled (born rejected)
            if m.live_tokens():
                break
            p.run(2, "propose")
        p.start_to(1, "approve", CallApprove)
        with p.reaching("fault:upstream-acted"):
            p.step(1, "upstream-acted")
        p.finish(1)
        with p.reaching("reconcile:completed"):
            p.step(0, world="reconcile", op="persist")
        p.finish(0)
        if type(m).intents:
            # a proposer killed after upstream created its call, before the binding's save: a
            # reconcile within its lease leaves the intent (unknown); past the lease it binds
            # the waiting call (ADR-0133). Upstream creates every third call already handled
            # (nothing to bind then), so up to three proposers die.
            for _ in range(3):
                p.start_to(2, "propose", SaveSnapshot)
                p.step(2, "crash")
                p.run(2, "reload")  # the dead client resumes from storage
                with p.reaching("reconcile:unknown"):
                    p.run(1, "persist", world="reconcile")
                m.now += LEASE_MS
                bound = m.coverage["reconcile:bound"]
                p.run(1, "persist", world="reconcile")
                if m.coverage["reconcile:bound"] > bound:
                    break
            else:
                raise AssertionError("the pinned program never reached ['reconcile:bound']")
        # a client dies with a plan in flight; a save's outcome is unknown (how that ends is
        # the subclass's: the floor checks it)
        p.start_to(0, "persist", SaveSnapshot)
        with p.reaching("crash-before:SaveSnapshot"):
            p.step(0, "crash")
        p.run(0, "reload")  # the dead client resumes from storage
        p.start_to(0, "persist", SaveSnapshot)
        p.step(0, "unknown")
        p.finish(0)
    finally:
        m.teardown()
