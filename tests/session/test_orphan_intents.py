"""No upstream call waits without its binding or an intent, whatever kills a propose (issue 22).

A propose on a store with the records capability creates an intent record (processing, so the
session is in the processing index) before upstream's ``propose_tool_call`` and deletes it once
the binding is stored. A process killed between any two of its effects leaves every call that
waits upstream either bound or covered by an intent, and ``reconcile_all`` finishes each one: the
waiting call is bound (never denied: a live proposer's save of the same binding commutes with
it, ADR-0093), the intent is deleted, and the session leaves the index. The crash is a
``BaseException`` raised instead of the k-th port call: nothing after it runs, as under SIGKILL.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.session import (
    ChatDefinition,
    reconcile_all,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.enums import ConfirmationStatus

DEFINITION = ChatDefinition("orphans")
SESSION = "orphan-1"
INTENTS = "propose-intent:"
WAITING = "requires_confirmation"
#: The propose's clock: the wall clock (the adapters stamp writes with it) when the module
#: loads. The sweep runs ten minutes on: past every intent's lease (ADR-0133, a minute), so it
#: settles the intents, and before any binding is due (TTL, an hour), so it expires nothing.
NOW = time.time_ns() // 1_000_000
TTL = 3_600_000


class Killed(BaseException):
    """The process died here: not an error any plan handles."""


class Fuse:
    """Counts port calls; the ``at``-th one kills the process instead of running."""

    def __init__(self) -> None:
        self.at: int | None = None
        self.calls: list[str] = []

    def tick(self, what: str) -> None:
        if self.at is not None and len(self.calls) == self.at:
            raise Killed(what)
        self.calls.append(what)


def fused_storage(base: type[Any], fuse: Fuse) -> type[Any]:
    methods = ("load", "save", "load_record", "save_record", "delete_record", "list_records")

    def wrap(name: str) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            fuse.tick(f"storage.{name}")
            return getattr(base, name)(self, *args, **kwargs)

        return method

    return type(f"Fused{base.__name__}", (base,), {m: wrap(m) for m in methods})


class FusedUpstream(RecordingUpstream):
    def __init__(self, fuse: Fuse) -> None:
        super().__init__()
        self.fuse = fuse

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        self.fuse.tick("upstream.propose_tool_call")
        return super().propose_tool_call(id, name, args)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.fuse.tick("upstream.deny")
        super().deny(tool_call_id, reason)


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Fuse], Any]]:
    opened: list[Any] = []

    def make(fuse: Fuse) -> Any:
        if request.param == "memory":
            store = fused_storage(MemoryStorage, fuse)()
        else:
            store = fused_storage(SQLiteStorage, fuse)(tmp_path / f"s{len(opened)}.db")
        opened.append(store)
        return store

    yield make
    for store in opened:
        if hasattr(store, "close"):
            store.close()


def _resume(storage: Any) -> Any:
    return resume_chat_session(DEFINITION, session_id=SESSION, storage=storage, clock=lambda: NOW)


def _world(make_store: Callable[[Fuse], Any]) -> tuple[Fuse, Any, FusedUpstream]:
    fuse = Fuse()
    storage = make_store(fuse)
    _resume(storage).persist()
    fuse.calls.clear()
    return fuse, storage, FusedUpstream(fuse)


def _propose(storage: Any, upstream: FusedUpstream) -> None:
    session = _resume(storage)
    session.confirmations_for(upstream, ttl_ms=TTL).propose("email.send", {"to": "a"})


def _bound(storage: Any) -> dict[str, ConfirmationStatus]:
    snapshot = decode_session_snapshot(storage.load(SESSION)).snapshot
    assert snapshot is not None
    return {b.tool_call_id: b.status for b in snapshot.confirmations}


def _waiting(upstream: RecordingUpstream) -> set[str]:
    return {i for i, status in upstream.statuses.items() if status == WAITING}


def _intents(storage: Any) -> set[str]:
    return {k.removeprefix(INTENTS) for k in storage.list_records(SESSION, INTENTS)}


def _sweep(storage: Any, upstream: RecordingUpstream) -> Any:
    memory = RecordingChatMemory(upstream)
    wall = time.time_ns() // 1_000_000  # the adapters stamp writes with it; only the cut-off
    return reconcile_all(
        storage,
        lambda sid: SweepPorts(DEFINITION, memory, upstream),
        older_than_ms=0,
        clock=lambda: wall + 600_000,
    )


def test_a_propose_records_its_intent_before_upstream_and_deletes_it_after_the_binding(
    make_store: Callable[[Fuse], Any],
) -> None:
    fuse, storage, upstream = _world(make_store)
    _propose(storage, upstream)
    assert fuse.calls == [
        "storage.load",  # the resume
        "storage.save_record",  # the intent, create-only, processing
        "upstream.propose_tool_call",
        "storage.save",  # the binding
        "storage.delete_record",  # the intent, once the binding is stored
    ]
    ((call, status),) = _bound(storage).items()
    assert status is ConfirmationStatus.PENDING and _waiting(upstream) == {call}
    assert _intents(storage) == set()
    assert storage.list_processing() == []  # a settled propose leaves nothing for the sweep


@pytest.mark.parametrize("killed_at", range(5))
def test_a_propose_killed_between_any_two_effects_orphans_nothing_and_the_sweep_finishes_it(
    make_store: Callable[[Fuse], Any], killed_at: int
) -> None:
    fuse, storage, upstream = _world(make_store)
    fuse.at = killed_at
    with pytest.raises(Killed):
        _propose(storage, upstream)
    fuse.at = None
    # The invariant: no call waits upstream without a binding or an intent.
    bound, intents = _bound(storage), _intents(storage)
    assert _waiting(upstream) <= set(bound) | intents
    if intents - set(bound):
        assert [s.session_id for s in storage.list_processing()] == [SESSION]
    report = _sweep(storage, upstream)
    assert all(s.status == "settled" for s in report.sessions), report
    # Finished: every waiting call is bound (pending, with the proposal's expiry), nothing was
    # denied, no intent is left and the session left the processing index.
    bound = _bound(storage)
    assert _waiting(upstream) <= {c for c, s in bound.items() if s is ConfirmationStatus.PENDING}
    assert upstream.denied == []
    assert _intents(storage) == set()
    assert storage.list_processing() == []


def test_an_orphan_the_sweep_bound_is_denied_once_when_it_expires(
    make_store: Callable[[Fuse], Any],
) -> None:
    fuse, storage, upstream = _world(make_store)
    fuse.at = 3  # killed after upstream created the call, before the binding's save
    with pytest.raises(Killed):
        _propose(storage, upstream)
    fuse.at = None
    (call,) = _waiting(upstream)
    report = _sweep(storage, upstream)
    ((outcome,),) = [s.outcomes for s in report.sessions]
    assert (outcome.action, outcome.tool_call_id, outcome.before) == (
        "bound",
        call,
        ConfirmationStatus.PENDING,
    )
    assert outcome.record.expires_at == NOW + TTL  # the proposal's own expiry
    session = resume_chat_session(
        DEFINITION, session_id=SESSION, storage=storage, clock=lambda: NOW + TTL + 1
    )
    (expired,) = session.confirmations_for(upstream).expire_due()
    assert expired.status is ConfirmationStatus.EXPIRED
    assert upstream.calls_for(call) == [("deny", call, "confirmation expired")]


def test_a_live_proposer_and_the_sweep_bind_the_same_call_once(
    make_store: Callable[[Fuse], Any],
) -> None:
    # The sweep runs while the proposer is between upstream's answer and its binding's save
    # (a sweep threshold too short): both bind; the proposals commute (ADR-0090), one record.
    fuse, storage, _ = _world(make_store)
    session = _resume(storage)
    swept: list[Any] = []

    class SweepsMidway(FusedUpstream):
        def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
            made = super().propose_tool_call(id, name, args)
            swept.append(_sweep(storage, self))
            return made

    midway = SweepsMidway(fuse)
    coordinator = session.confirmations_for(midway, ttl_ms=TTL)
    binding = coordinator.propose("email.send", {})
    ((outcome,),) = [s.outcomes for s in swept[0].sessions]
    assert outcome.action == "bound" and outcome.token == binding.token
    assert [b.token for b in session.confirmations] == [binding.token]
    assert _bound(storage) == {binding.tool_call_id: ConfirmationStatus.PENDING}
    assert midway.denied == [] and _intents(storage) == set()


def test_the_asyncio_propose_records_its_intent_before_upstream_too() -> None:
    inner = MemoryStorage()
    seen: list[set[str]] = []

    class Watching(RecordingUpstream):
        def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
            seen.append(_intents(inner))  # what storage holds when upstream is asked
            return super().propose_tool_call(id, name, args)

    upstream = Watching()

    async def main() -> Any:
        storage = AsyncMemoryStorage(inner)
        session = await resume_chat_session_async(
            DEFINITION, session_id=SESSION, storage=storage, clock=lambda: NOW
        )
        coordinator = session.confirmations_for(AsyncRecordingUpstream(sync=upstream))
        return await coordinator.propose("email.send", {})

    binding = asyncio.run(main())
    assert seen == [{binding.tool_call_id}]  # the intent existed before the upstream call
    assert _intents(inner) == set() and inner.list_processing() == []


class NonsenseUpstream(FusedUpstream):
    """Creates the call, then answers something that is no tool call (the propose denies it)."""

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        super().propose_tool_call(id, name, args)
        return 42


def test_a_propose_that_denied_its_call_leaves_no_intent_behind(
    make_store: Callable[[Fuse], Any],
) -> None:
    fuse, storage, _ = _world(make_store)
    upstream = NonsenseUpstream(fuse)
    with pytest.raises(ConfigError):
        _propose(storage, upstream)
    assert _waiting(upstream) == set()  # the call was denied upstream: nothing waits
    assert _intents(storage) == set()
    assert storage.list_processing() == []  # nothing left for a sweep to look at
