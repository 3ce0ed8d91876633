"""A reconcile that runs while a proposer is alive never orphans its upstream call (ADR-0133).

An intent carries its proposer's lease (``leaseEndsAt``, on the session clock). While the lease
runs, only the proposer acts on that call (upstream's propose, the binding, a deny of a call it
cannot bind); a reconcile leaves the intent as it is (``unknown``: reported, the session stays
listed) unless the call is already bound. Once the lease has ended only a reconcile settles it,
and the proposer, if it still runs, neither calls upstream nor denies (its binding save commutes
with the sweep's). Each test steps the proposer through its ports and runs the reconcile at the
one point of the race; the kill is a ``BaseException`` (nothing after it runs, as under SIGKILL).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm import reconcile
from akchat_fsm.errors import StorageUnavailable
from akchat_fsm.session import ChatDefinition, reconcile_all, resume_chat_session
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.enums import ConfirmationStatus

DEFINITION = ChatDefinition("live-proposer")
SESSION = "live-1"
INTENTS = "propose-intent:"
WAITING = "requires_confirmation"
NOW = 1_000
#: How far the clock jumps to end a lease: an hour, long after any propose's lease.
HOUR = 3_600_000


class Killed(BaseException):
    """The proposer's process died here."""


class Clock:
    """The session clock every party reads (the proposer's and the reconcile's)."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


def steered(base: type[Any]) -> type[Any]:
    """``base`` whose next envelope save can be made to fail (before applying) or kill."""

    class Steered(base):  # type: ignore[misc, valid-type]
        next_save: str | None = None  # "refuse" (StorageUnavailable) or "kill"

        def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
            what, self.next_save = self.next_save, None
            if what == "refuse":
                raise StorageUnavailable("injected: the save failed before applying")
            if what == "kill":
                raise Killed("storage.save")
            return bool(base.save(self, snapshot, expected_cursor))

    return Steered


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "memory":
        store = steered(MemoryStorage)()
    else:
        store = steered(SQLiteStorage)(tmp_path / "s.db")
    yield store
    if hasattr(store, "close"):
        store.close()


class Midway(RecordingUpstream):
    """Runs ``before`` / ``after`` around creating the call (the race's other party)."""

    def __init__(self) -> None:
        super().__init__()
        self.before: Callable[[], None] = lambda: None
        self.after: Callable[[], None] = lambda: None

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        self.before()
        made = super().propose_tool_call(id, name, args)
        self.after()
        return made


def _resume(storage: Any, clock: Clock) -> Any:
    return resume_chat_session(DEFINITION, session_id=SESSION, storage=storage, clock=clock)


def _propose(storage: Any, upstream: RecordingUpstream, clock: Clock) -> Any:
    coordinator = _resume(storage, clock).confirmations_for(upstream, ttl_ms=600_000)
    return coordinator.propose("email.send", {"to": "a"})


def _reconcile(storage: Any, upstream: RecordingUpstream, clock: Clock) -> Any:
    return reconcile(_resume(storage, clock), RecordingChatMemory(upstream), upstream=upstream)


def _bound(storage: Any) -> dict[str, ConfirmationStatus]:
    snapshot = decode_session_snapshot(storage.load(SESSION)).snapshot
    assert snapshot is not None
    return {b.tool_call_id: b.status for b in snapshot.confirmations}


def _waiting(upstream: RecordingUpstream) -> set[str]:
    return {i for i, status in upstream.statuses.items() if status == WAITING}


def _intents(storage: Any) -> set[str]:
    return {k.removeprefix(INTENTS) for k in storage.list_records(SESSION, INTENTS)}


def _covered(storage: Any, upstream: RecordingUpstream) -> None:
    """The invariant: no call waits upstream with neither a binding nor an intent."""
    orphans = _waiting(upstream) - set(_bound(storage)) - _intents(storage)
    assert not orphans, f"upstream calls {orphans} wait with neither a binding nor an intent"


def _sweep(storage: Any, upstream: RecordingUpstream) -> Any:
    wall = time.time_ns() // 1_000_000  # the adapters stamp writes with it; only the cut-off
    return reconcile_all(
        storage,
        lambda sid: SweepPorts(DEFINITION, RecordingChatMemory(upstream), upstream),
        older_than_ms=0,
        clock=lambda: wall + 600_000,  # long after every lease (and the sessions' clock)
    )


def _fresh(storage: Any, clock: Clock) -> None:
    _resume(storage, clock).persist()


def test_a_reconcile_before_a_live_proposers_upstream_call_leaves_its_intent(
    storage: Any,
) -> None:
    # Race 1: the reconcile runs between the proposer's intent and its upstream call, while
    # memory does not know the call yet. It used to delete the intent ("upstream never created
    # it"); the proposer then created the call and died before its binding: an orphan.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)
    seen: list[Any] = []
    upstream.before = lambda: seen.append(_reconcile(storage, upstream, clock))

    def die_at_the_binding() -> None:
        storage.next_save = "kill"

    upstream.after = die_at_the_binding
    with pytest.raises(Killed):
        _propose(storage, upstream, clock)
    _covered(storage, upstream)
    (call,) = _waiting(upstream)
    assert _intents(storage) == {call}
    ((outcome,),) = seen
    assert outcome.action == "unknown"  # in flight: left as is, the session stays listed
    assert (outcome.tool_call_id, outcome.record.status) == (call, ConfirmationStatus.PENDING)
    assert [row.session_id for row in storage.list_processing()] == [SESSION]
    # Liveness: the proposer is dead; a sweep after its lease binds the call it left.
    report = _sweep(storage, upstream)
    assert [s.status for s in report.sessions] == ["settled"], report
    assert _bound(storage) == {call: ConfirmationStatus.PENDING}
    assert _intents(storage) == set() and storage.list_processing() == []
    assert upstream.denied == []


def test_a_reconcile_after_a_live_proposers_upstream_call_never_binds_what_it_denies(
    storage: Any,
) -> None:
    # Race 2: the reconcile runs once upstream created the call, before the proposer's binding
    # save, which then fails definitely. The reconcile used to bind the call (and delete the
    # intent) while the proposer denied it upstream: a pending record for a denied call, which
    # an approval would then call upstream for a second time.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)
    seen: list[Any] = []

    def reconcile_then_refuse_the_binding() -> None:
        seen.append(_reconcile(storage, upstream, clock))
        storage.next_save = "refuse"

    upstream.after = reconcile_then_refuse_the_binding
    with pytest.raises(StorageUnavailable):
        _propose(storage, upstream, clock)
    ((call, _),) = upstream.denied  # the proposer could not bind it, so it denied it
    assert _bound(storage) == {}  # ... and nothing binds the denied call
    ((outcome,),) = seen
    assert (outcome.action, outcome.tool_call_id) == ("unknown", call)  # the lease runs
    assert _waiting(upstream) == set() and _intents(storage) == set()
    assert storage.list_processing() == []


def test_a_proposer_whose_lease_ended_before_upstream_never_asks_upstream(
    storage: Any,
) -> None:
    # The intent's save outlasted the lease: a reconcile may already have found it stale and
    # deleted it, so an upstream call now could be an orphan. The propose stops before it.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)
    slow = type(storage).save_record

    def save_record_slowly(self: Any, *args: Any, **kwargs: Any) -> bool:
        done = bool(slow(self, *args, **kwargs))
        clock.now += HOUR
        return done

    type(storage).save_record = save_record_slowly
    try:
        with pytest.raises(StorageUnavailable, match="lease"):
            _propose(storage, upstream, clock)
    finally:
        type(storage).save_record = slow
    assert upstream.proposed == [] and upstream.calls == []
    assert _intents(storage) == set() and storage.list_processing() == []


def test_a_proposer_whose_lease_ended_leaves_its_unbound_call_to_the_sweep_undenied(
    storage: Any,
) -> None:
    # Past its lease a reconcile may be binding the call, so the proposer whose binding save
    # fails definitely must not deny it: it keeps the intent, and the sweep binds the call.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)

    def time_passes_then_the_binding_fails() -> None:
        clock.now += HOUR
        storage.next_save = "refuse"

    upstream.after = time_passes_then_the_binding_fails
    with pytest.raises(StorageUnavailable) as refused:
        _propose(storage, upstream, clock)
    assert any("left for reconcile" in note for note in refused.value.__notes__)
    (call,) = _waiting(upstream)
    assert upstream.denied == [] and _intents(storage) == {call}
    _covered(storage, upstream)
    report = _sweep(storage, upstream)
    assert [s.status for s in report.sessions] == ["settled"], report
    assert _bound(storage) == {call: ConfirmationStatus.PENDING}
    assert _intents(storage) == set() and upstream.denied == []


def test_a_reconcile_deletes_the_intent_of_a_call_already_bound_even_within_the_lease(
    storage: Any,
) -> None:
    # The proposer saved its binding and died before deleting its intent: nothing waits
    # unbound, so even a reconcile within the lease lets the session go.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)
    delete = type(storage).delete_record

    def die(self: Any, *args: Any) -> None:
        raise Killed("storage.delete_record")

    type(storage).delete_record = die
    try:
        with pytest.raises(Killed):
            _propose(storage, upstream, clock)
    finally:
        type(storage).delete_record = delete
    (call,) = _waiting(upstream)
    assert _intents(storage) == {call}
    assert _reconcile(storage, upstream, clock) == ()
    assert _intents(storage) == set() and storage.list_processing() == []
    assert _bound(storage) == {call: ConfirmationStatus.PENDING}


def test_an_intent_written_before_leases_is_stale_at_once(storage: Any) -> None:
    # An intent a propose of an older release left carries no lease: it is settled as before.
    clock, upstream = Clock(), Midway()
    _fresh(storage, clock)
    upstream.propose_tool_call("app-old", "email.send", {"to": "a"})  # it waits upstream
    text = json.dumps(
        {
            "version": 1,
            "token": "confirm-old",
            "toolCallId": "app-old",
            "name": "email.send",
            "input": {"to": "a"},
            "expiresAt": NOW + 600_000,
        }
    )
    assert storage.save_record(SESSION, f"{INTENTS}app-old", text, None, processing=True)
    (outcome,) = _reconcile(storage, upstream, clock)
    assert (outcome.action, outcome.tool_call_id) == ("bound", "app-old")
    assert _bound(storage) == {"app-old": ConfirmationStatus.PENDING}
    assert _intents(storage) == set() and storage.list_processing() == []
