"""The resolution protocol when an unknown outcome did *not* apply, or applies later.

The base suite's ``unknown`` fault always applies the write before reporting the outcome as
unknown. Real networks do two more things, and this suite adds them to the same machine:

- **lost**: the request never reached the store; the client is told "unknown" and nothing
  was written. With every client on the same clock (it only moves on a ``tick``), another
  client often makes the same change from the same base in the same millisecond, so the
  re-read finds a snapshot that differs from ours only by the write nonce;
- **late**: the request is still in flight when the client gives up and re-reads; it lands
  later, just before the next write reaches the store, and applies iff the cursor it expected
  is still current (the store's CAS decides then, as a delayed PostgreSQL or Redis request
  does). Reconciliation's saves can be late too, so a release that the host thought failed can
  land in the middle of a later resume.

Unknown-outcome faults cycle applied / lost / late (deterministic, so a failure replays). The
invariants are the base machine's: no upstream replay, no terminal status without its upstream
call, terminal records immutable, cursor +1 per applied save, no acknowledged save lost.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from akchat_fsm.errors import AkchatError, OutcomeUnknown
from akchat_fsm.session import _confirm, _ops
from akchat_fsm.session.effects import CallApprove, SaveSnapshot
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot

from ._history import RECONCILER
from ._machine import DEFINITION, Pinned, ResolutionProtocol, pinned_program
from ._world import Stepper, perform

#: How successive unknown outcomes end (the base machine only has the first).
UNKNOWN_ENDINGS = ("applied", "lost", "late")


class LateWritesProtocol(ResolutionProtocol):
    """The base machine, with lost and late-landing writes (clients and reconciliation)."""

    #: Every ``release_every``-th releasing reconciliation has its first save land late.
    release_every: ClassVar[int] = 2

    def __init__(self) -> None:
        super().__init__()
        #: Writes in flight: the snapshot, its expected cursor, and the client run that sent it
        #: (``None`` for reconciliation, which never holds a claim across steps).
        self.in_flight: list[tuple[SessionSnapshot, int | None, tuple[int, Stepper] | None]] = []
        self.unknowns = 0
        self.releases = 0
        #: Records a late write turned processing (a claim landing), since ``_recover`` began.
        self.claimed_late: set[str] = set()

    # ------------------------------------------------------------------ the network
    def _land_in_flight(self) -> None:
        """Writes still in flight land now, each applying iff its expected cursor is current."""
        flying, self.in_flight = self.in_flight, []
        for snapshot, expected, sender in flying:
            before = self.stored()
            # The model's Network: the write lands, CAS-compared now; its writer is the claimant
            # of a claim it carries, alive only while it still runs the plan that sent it.
            live = sender is not None and self.clients[sender[0]].run is sender[1]
            writer = RECONCILER if sender is None else f"c{sender[0]}"
            with self.history.acting(writer, late=True, alive=live and not sender[1].done):
                landed = self.recording.save(snapshot, expected)
            self.coverage[f"late:{'landed' if landed else 'refused'}"] += 1
            if landed:
                self.claimed_late |= _processing(self.stored()) - _processing(before)
            if landed and sender is not None:
                index, run = sender
                if self.clients[index].run is run and not run.done:
                    # The sender has not re-read yet: when it does, it finds its own write and
                    # goes on as the claimant. Reconcile must treat it as a live claimant.
                    self._note_claims(index, before)

    def _unknown(
        self, effect: SaveSnapshot, ending: str, sender: tuple[int, Stepper] | None
    ) -> OutcomeUnknown:
        self.coverage[f"fault:unknown-{ending}"] += 1
        if ending == "late":
            self.in_flight.append((effect.snapshot, effect.expected_cursor, sender))
        return OutcomeUnknown(f"injected: save outcome unknown (the write is {ending})")

    # ------------------------------------------------------------------ clients
    def _step(self, index: int, fault: str) -> None:
        client = self.clients[index]
        run = client.run
        assert run is not None
        effect = run.next
        if isinstance(effect, SaveSnapshot):
            self._land_in_flight()  # the old request arrives first
        if fault == "unknown" and isinstance(effect, SaveSnapshot):
            self.unknowns += 1
            ending = UNKNOWN_ENDINGS[self.unknowns % len(UNKNOWN_ENDINGS)]
            if ending != "applied":
                before = self.stored()
                self.coverage[f"effect:{type(effect).__name__}"] += 1
                run.throw(self._unknown(effect, ending, (index, run)))
                self._note_claims(index, before)
                self._after_step(index, client)
                return
        super()._step(index, fault)

    # ------------------------------------------------------------------ recovery
    def _recover(self) -> None:
        """Recovery while the dead clients' writes may still be in flight, then once they are in.

        A reconcile settles the records processing when it reads the session (docs/
        reconciliation.md). A dead client's claim still in flight can land after that read (at
        the reconcile's first save, which then conflicts and retries): that record became
        processing after the read, so it is not this pass's, exactly as a sweep leaves a claim
        newer than its cut-off. So the first pass may leave such records, and only those; once
        no dead write is in flight (each landed or was refused: recovery waits for the dead,
        as ``test_sigkill`` does), one more pass must settle every processing record."""
        read = _processing(self.stored())
        self.claimed_late = set()
        self._reconcile(release=False)
        left = _processing(self.stored())
        # What the first pass read processing, or saw turn processing other than by a late
        # claim, it must have settled.
        stranded = left - (self.claimed_late - read)
        assert not stranded, f"processing records survived the recovery that read them: {stranded}"
        if left:
            self.coverage["recovery:claimed-during"] += 1
        self._land_in_flight()  # every dead write is in now
        assert not self.in_flight
        self._reconcile(release=False)

    def _reconcile_run(self, release: bool) -> None:
        resume = Stepper(_ops.plan_resume(DEFINITION, self.session_id, self.clock))
        while not resume.done:
            resume.feed(perform(resume.next, self.storage, self.upstream, self.memory))
        assert resume.error is None, resume.error
        late = False
        if release:
            self.releases += 1
            late = self.releases % self.release_every == 0
        run = Stepper(
            _confirm.plan_reconcile(
                resume.result, release_untouched=release, intents=type(self).intents
            )
        )
        while not run.done:
            effect = run.next
            if isinstance(effect, SaveSnapshot):
                self._land_in_flight()
                if late:  # this save is the one left in flight
                    late = False
                    run.throw(self._unknown(effect, "late", None))
                    continue
            self._calls_upstream(effect)
            run.feed(perform(effect, self.storage, self.upstream, self.memory))
        self.finished.append(run)
        if run.error is not None:
            # The late save was settled by re-reading ("did not apply") or lost a race: the
            # host sees a typed error, exactly what a real reconcile would report.
            assert isinstance(run.error, AkchatError), run.error
            self.coverage[f"reconcile:{type(run.error).__name__}"] += 1
            return
        for outcome in run.result:
            self.coverage[f"reconcile:{outcome.action}"] += 1


def _processing(snapshot: SessionSnapshot | None) -> set[str]:
    """The tokens of the records ``snapshot`` holds processing."""
    bindings = () if snapshot is None else snapshot.confirmations
    return {b.token for b in bindings if b.status.is_processing}


def pinned_late_program(machine: type[LateWritesProtocol]) -> None:
    """A fixed program for the points only this suite has (whatever the seed of the generated
    run, which reaches them only by chance): an unknown outcome lost, one landing late while
    its cursor is still current, one landing late after its cursor moved on."""
    m = machine()
    p = Pinned(m)

    def unknown_save(c: int, ending: str) -> None:
        """Client ``c``'s next save has an unknown outcome that ends as ``ending``."""
        while UNKNOWN_ENDINGS[(m.unknowns + 1) % len(UNKNOWN_ENDINGS)] != ending:
            p.start_to(2, "persist", SaveSnapshot)
            p.step(2, "unknown")
            p.finish(2)
        p.start_to(c, "persist", SaveSnapshot)
        p.step(c, "unknown")
        p.finish(c)
        if m.in_flight:
            p.run(2, "persist")  # the next save to reach the store: the late one lands first

    try:
        m.create_session()
        m.protocol_invariants()
        with p.reaching("fault:unknown-lost"):
            unknown_save(0, "lost")
        with p.reaching("fault:unknown-late", "late:landed"):
            unknown_save(0, "late")  # client 0 is current: its write lands
        with p.reaching("fault:unknown-late", "late:refused"):
            unknown_save(1, "late")  # client 1 still holds the first state: it is refused
    finally:
        m.teardown()


#: A run must have exercised each of these, or it proves nothing about lost and late writes.
#: The generated run reaches them only by chance (it depends on the seed); the pinned
#: programs drive each one on every run, so the floor only fails when the library made a
#: point unreachable.
FLOOR = (
    "fault:unknown-lost",
    "fault:unknown-late",
    "late:landed",
    "late:refused",
    "approve:ResolutionInProgress",
    "reconcile:resumed",
)


def run_late_writes(
    make_storage: Callable[[], Any], machine: type[LateWritesProtocol] = LateWritesProtocol
) -> Counter[str]:
    coverage: Counter[str] = Counter()
    protocol = type(
        "LateWrites",
        (machine,),
        {"make_storage": staticmethod(make_storage), "coverage": coverage},
    )
    run_state_machine_as_test(protocol, settings=settings(settings()))
    pinned_program(protocol)
    pinned_late_program(protocol)
    return coverage


def test_late_writes_in_memory() -> None:
    coverage = run_late_writes(MemoryStorage)
    print("coverage:", dict(sorted(coverage.items())))  # shown with -s
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


def test_late_writes_sqlite(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        coverage = run_late_writes(lambda: store)
    finally:
        store.close()
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


class LateWritesWithIntents(LateWritesProtocol):
    """Every proposal records an intent, and reconciles run beside live proposers (ADR-0133)."""

    intents = True


def test_late_writes_with_intents_and_live_proposers_in_memory() -> None:
    coverage = run_late_writes(MemoryStorage, LateWritesWithIntents)
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


def test_a_propose_never_denies_a_call_its_late_binding_then_binds() -> None:
    m = type("LateWrites", (LateWritesProtocol,), {"make_storage": staticmethod(MemoryStorage)})()
    p = Pinned(m)
    try:
        m.create_session()
        p.run(0, "propose")  # upstream creates every third call handled: the next one waits
        while UNKNOWN_ENDINGS[(m.unknowns + 1) % len(UNKNOWN_ENDINGS)] != "late":
            p.start_to(2, "persist", SaveSnapshot)
            p.step(2, "unknown")
            p.finish(2)
        p.run(1, "reload")  # client 1 holds the stored cursor: its save would apply
        p.start_to(1, "propose", SaveSnapshot)
        p.step(1, "unknown")  # the binding's save is left in flight
        # Its re-read says "not applied". Before ADR-0093 the propose denied the call here and
        # the binding landed later: a pending record whose call was denied. Now it fences
        # first; the late binding reaches the store before the fence, the fence conflicts and
        # the fresh envelope shows the call bound, so the propose returns it and denies nothing.
        p.finish(1)
        run = m.clients[1].run
        assert run is not None and run.error is None, run.error
        assert run.result.status is ConfirmationStatus.PENDING
        assert run.result.tool_call_id not in m.deny_attempted
        p.run(2, "persist")
        p.run(0, "approve")  # the one approval calls upstream once (the checker watches)
    finally:
        m.teardown()


def test_a_claim_landing_during_recovery_is_settled_once_the_dead_writes_are_in() -> None:
    """Seed 2's counterexample, pinned: client 0 claims one record and dies before upstream;
    client 1's claim of the other is still in flight when it dies. Recovery reads one record
    processing; at its first save the dead client's claim lands, the save conflicts, and the
    retry settles the record it read. The other became processing after that read: it is the
    next pass's, and once no dead write is in flight one more pass settles it."""
    m = type("LateWrites", (LateWritesProtocol,), {"make_storage": staticmethod(MemoryStorage)})()
    p = Pinned(m)
    m.create_session()
    first, second = m.live_tokens()
    p.start_to(0, "approve", CallApprove)  # client 0 holds the first record's claim
    while UNKNOWN_ENDINGS[(m.unknowns + 1) % len(UNKNOWN_ENDINGS)] != "late":
        p.start_to(2, "persist", SaveSnapshot)
        p.step(2, "unknown")
        p.finish(2)
    p.run(1, "reload")  # client 1 holds the stored cursor: its claim would apply
    m.advance(1, "approve", 1, 0, "")  # pick 1: client 1 approves the second record
    while not isinstance(m.clients[1].run.next, SaveSnapshot):  # type: ignore[union-attr]
        p.step(1)
    p.step(1, "unknown")  # its claim is left in flight
    assert m.in_flight and m.clients[1].busy
    assert m.live_tokens() == [first, second]
    m.teardown()  # every client dies; recovery must leave nothing processing
    stored = m.stored()
    assert stored is not None
    statuses = {b.token: b.status for b in stored.confirmations}
    assert statuses[first] is statuses[second] is ConfirmationStatus.APPROVED
    assert m.coverage["recovery:claimed-during"] == 1
