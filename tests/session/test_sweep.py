"""``reconcile_all``: the sweep over the processing index, sync and async, on every shipped
adapter (memory, SQLite, PostgreSQL, Redis: the servers are real, and skip only outside CI)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm import reconcile_all, reconcile_all_async
from akchat_fsm.errors import ConfigError, IncompatibleSession, StorageUnavailable
from akchat_fsm.session import (
    ChatDefinition,
    ToolCallProposal,
    UpstreamFailed,
    resume_chat_session,
)
from akchat_fsm.session.audit import audit_trail
from akchat_fsm.session.sweep import AsyncSweepPorts, SweepPorts, SweptSession
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.session import SessionSnapshot
from cleanup import drop_redis_prefix_at

DEFINITION = ChatDefinition("sweep-test")
FIVE_MINUTES = 5 * 60_000
DAY = 24 * 60 * 60_000


def later(minutes: int) -> Callable[[], int]:
    """A clock ``minutes`` ahead of the wall clock the adapters stamp their writes with."""
    return lambda: time.time_ns() // 1_000_000 + minutes * 60_000


# --------------------------------------------------------------------------- stores


@dataclass
class Store:
    """One backing store: a sync adapter and its asyncio twin on the same data."""

    sync: Any
    make_async: Callable[[], Any]


def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    shared = MemoryStorage()
    return Store(shared, lambda: AsyncMemoryStorage(shared))


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage

    path = tmp_path / "sweep.db"
    return Store(SQLiteStorage(path), lambda: AsyncSQLiteStorage(path))


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage

    url, table = request.getfixturevalue("pg_url"), f"sw_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
            ).fetchall():
                conn.execute(f"DROP TABLE IF EXISTS {name}")

    request.addfinalizer(drop)
    return Store(PostgresStorage(url, table=table), lambda: AsyncPostgresStorage(url, table=table))


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage

    url, prefix = request.getfixturevalue("redis_url"), f"aksw:{uuid.uuid4().hex[:12]}:"

    request.addfinalizer(lambda: drop_redis_prefix_at(url, prefix))
    return Store(RedisStorage(url, prefix=prefix), lambda: AsyncRedisStorage(url, prefix=prefix))


# Every shipped adapter has the processing index: each one is swept, none may be left out.
BACKENDS = [
    pytest.param(_memory, id="memory"),
    pytest.param(_sqlite, id="sqlite"),
    pytest.param(_postgres, id="postgres"),
    pytest.param(_redis, id="redis"),
]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = request.param(tmp_path, request)
    yield made
    made.sync.close()


# --------------------------------------------------------------------------- a crash


class ClientCrashed(BaseException):  # a simulated process death, not an error
    """The simulated death of one client process (never caught by the library)."""


class Host:
    """One host's upstream chat controller and chat memory in one object (sync ports), over
    the public recording doubles; ``clock`` is the sessions' clock (each reading advances)."""

    def __init__(self) -> None:
        self.upstream = RecordingUpstream()
        self.memory = RecordingChatMemory(self.upstream)
        # The wall clock the adapters stamp writes with: the sweep's clock (ten minutes on)
        # is past every claim's threshold; the pending record ``crashed`` adds is not due then.
        self.now_ms = time.time_ns() // 1_000_000

    def clock(self) -> int:
        self.now_ms += 250
        return self.now_ms

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self.upstream.propose_tool_call(id, name, args)

    def approve(self, tool_call_id: str) -> None:
        self.upstream.approve(tool_call_id)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.upstream.deny(tool_call_id, reason)

    def load(self) -> dict[str, Any]:
        return self.memory.load()

    @property
    def approve_calls(self) -> Counter[str]:
        return self.upstream.executed

    def tool_status(self, tool_call_id: str) -> str:
        return self.upstream.statuses.get(tool_call_id, "missing")


@dataclass
class Client:
    """One client's handle on a host's upstream, dying around its resolution call:
    ``"before"`` (after its claim was saved) or ``"after"`` (after upstream acted)."""

    host: Host
    crash: str | None = None

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self.host.propose_tool_call(id, name, args)

    def _resolve(self, act: Callable[[], None]) -> None:
        if self.crash == "before":
            raise ClientCrashed("died after its claim was saved, before calling upstream")
        act()
        if self.crash == "after":
            raise ClientCrashed("died after upstream acted, before recording the result")

    def approve(self, tool_call_id: str) -> None:
        self._resolve(lambda: self.host.approve(tool_call_id))

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._resolve(lambda: self.host.deny(tool_call_id, reason))


def crashed(storage: Any, session_id: str, crashes: tuple[str, ...]) -> Host:
    """Store ``session_id`` with one claim per crash, plus one pending record; returns the
    session's upstream (its chat memory is ``upstream.load()``).

    ``"before"``: the claimant died after its claim was saved, before calling upstream (the
    tool call stays ``requires_confirmation``); ``"after"``: it died after upstream acted.
    """
    upstream = Host()
    for n, crash in enumerate(crashes):
        session = resume_chat_session(
            DEFINITION, session_id=session_id, storage=storage, clock=upstream.clock
        )
        coordinator = session.confirmations_for(Client(upstream, crash))
        binding = coordinator.propose(f"tool.{n}", {"n": n})
        with pytest.raises(ClientCrashed):
            coordinator.approve(binding.token)
    session = resume_chat_session(
        DEFINITION, session_id=session_id, storage=storage, clock=upstream.clock
    )
    session.confirmations_for(Client(upstream), ttl_ms=DAY).propose("tool.later", {})
    return upstream


def statuses(storage: Any, session_id: str) -> list[str]:
    stored = storage.load(session_id)
    snapshot = SessionSnapshot.model_validate_json(stored)
    return [b.status.value for b in snapshot.confirmations]


def actions(swept: SweptSession) -> list[str]:
    return [o.action for o in swept.outcomes]


# --------------------------------------------------------------------------- the sweep


def test_a_sweep_settles_every_stuck_session_and_only_those(store: Store) -> None:
    hosts = {
        "s-both": crashed(store.sync, "s-both", ("before", "after")),
        "s-acted": crashed(store.sync, "s-acted", ("after",)),
        "s-clean": crashed(store.sync, "s-clean", ()),
    }
    asked: list[str] = []

    def ports_for(session_id: str) -> SweepPorts:
        asked.append(session_id)
        host = hosts[session_id]
        return SweepPorts(DEFINITION, host, host)

    report = reconcile_all(store.sync, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10))
    assert sorted(asked) == ["s-acted", "s-both"]  # the clean session is not in the index
    by_id = {s.session_id: s for s in report.sessions}
    assert actions(by_id["s-both"]) == ["resumed", "completed"]
    assert actions(by_id["s-acted"]) == ["completed"]
    assert report.counts == {"settled": 2} and report.ok and not report.truncated
    assert statuses(store.sync, "s-both") == ["approved", "approved", "pending"]
    assert statuses(store.sync, "s-acted") == ["approved", "pending"]
    # upstream received exactly one approve per tool call: the untouched one was issued once
    both = hosts["s-both"]
    assert sorted(both.approve_calls.values()) == [1, 1]
    assert all(both.tool_status(call) == "complete" for call in both.approve_calls)
    # settled sessions leave the index: a second sweep finds nothing
    again = reconcile_all(store.sync, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10))
    assert again.sessions == ()


def test_sessions_written_more_recently_than_the_threshold_are_left_alone(store: Store) -> None:
    host = crashed(store.sync, "s-young", ("before",))
    report = reconcile_all(
        store.sync,
        lambda sid: SweepPorts(DEFINITION, host, host),
        older_than_ms=FIVE_MINUTES,
        clock=later(0),  # written just now: younger than five minutes
    )
    assert report.sessions == ()
    assert statuses(store.sync, "s-young") == ["approving", "pending"]
    assert host.approve_calls == {}


def test_one_failing_session_does_not_stop_the_sweep(store: Store) -> None:
    hosts = {sid: crashed(store.sync, sid, ("after",)) for sid in ("a", "b", "c", "d", "e")}

    class BrokenMemory:
        def load(self) -> object:
            raise OSError("memory service down")

    def ports_for(session_id: str) -> SweepPorts | None:
        host = hosts[session_id]
        if session_id == "a":
            raise KeyError("no tenant for a")  # the host's own bug: typed, and the sweep goes on
        if session_id == "b":
            return SweepPorts(DEFINITION, BrokenMemory(), host)
        if session_id == "c":
            return SweepPorts(ChatDefinition("another-definition"), host, host)
        if session_id == "d":
            return None  # not this host's session
        return SweepPorts(DEFINITION, host, host)

    report = reconcile_all(store.sync, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10))
    by_id = {s.session_id: s for s in report.sessions}
    assert sorted(by_id) == ["a", "b", "c", "d", "e"]
    assert isinstance(by_id["a"].error, ConfigError)
    assert isinstance(by_id["a"].error.__cause__, KeyError)
    assert isinstance(by_id["b"].error, StorageUnavailable)
    assert isinstance(by_id["c"].error, IncompatibleSession | ConfigError)
    assert by_id["d"].skipped and by_id["d"].outcomes == ()
    assert actions(by_id["e"]) == ["completed"]
    assert report.counts == {"failed": 3, "skipped": 1, "settled": 1} and not report.ok
    assert sorted(s.session_id for s in report.failed) == ["a", "b", "c"]
    for sid in "abcd":
        assert statuses(store.sync, sid) == ["approving", "pending"], sid
    assert statuses(store.sync, "e") == ["approved", "pending"]


def test_a_tool_call_missing_from_memory_leaves_the_session_unsettled(store: Store) -> None:
    host = crashed(store.sync, "s-lost", ("before",))
    empty = Host()  # a memory that never saw the call
    report = reconcile_all(
        store.sync,
        lambda sid: SweepPorts(DEFINITION, empty, host),
        older_than_ms=FIVE_MINUTES,
        clock=later(10),
    )
    (swept,) = report.sessions
    assert swept.status == "unsettled" and actions(swept) == ["unknown"]
    assert host.approve_calls == {}
    assert [row.session_id for row in store.sync.list_processing()] == ["s-lost"]


def test_the_limit_takes_the_oldest_first_and_says_more_may_wait(store: Store) -> None:
    hosts = {}
    for sid in ("first", "second", "third"):
        hosts[sid] = crashed(store.sync, sid, ("after",))
        written = store.sync.list_processing()[-1].last_write_ms
        while time.time_ns() // 1_000_000 <= written:  # distinct write stamps, in order
            time.sleep(0.001)
    seen: list[tuple[str, int, int]] = []

    def ports_for(sid: str) -> SweepPorts:
        return SweepPorts(DEFINITION, hosts[sid], hosts[sid])

    def progress(swept: SweptSession, done: int, total: int) -> None:
        seen.append((swept.session_id, done, total))

    first = reconcile_all(
        store.sync,
        ports_for,
        older_than_ms=FIVE_MINUTES,
        limit=2,
        clock=later(10),
        progress=progress,
    )
    assert [s.session_id for s in first.sessions] == ["first", "second"] and first.truncated
    assert seen == [("first", 1, 2), ("second", 2, 2)]
    rest = reconcile_all(
        store.sync, ports_for, older_than_ms=FIVE_MINUTES, limit=2, clock=later(10)
    )
    assert [s.session_id for s in rest.sessions] == ["third"] and not rest.truncated


class AsyncHost:
    """The asyncio face of one :class:`Host` (upstream and memory)."""

    def __init__(self, inner: Host) -> None:
        self.inner = inner

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return self.inner.propose_tool_call(id, name, args)

    async def approve(self, tool_call_id: str) -> None:
        self.inner.approve(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str) -> None:
        self.inner.deny(tool_call_id, reason)

    async def load(self) -> dict[str, Any]:
        return self.inner.load()


def test_the_async_sweep_runs_the_same_plan(store: Store) -> None:
    hosts = {
        "s-both": crashed(store.sync, "s-both", ("before", "after")),
        "s-missing": crashed(store.sync, "s-missing", ("after",)),
    }

    async def ports_for(sid: str) -> AsyncSweepPorts | None:
        if sid == "s-missing":
            raise LookupError("unknown tenant")
        host = AsyncHost(hosts[sid])
        return AsyncSweepPorts(DEFINITION, host, host)

    async def sweep() -> Any:
        storage = store.make_async()
        try:
            return await reconcile_all_async(
                storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10)
            )
        finally:
            await storage.aclose()

    report = asyncio.run(sweep())
    by_id = {s.session_id: s for s in report.sessions}
    assert actions(by_id["s-both"]) == ["resumed", "completed"]
    assert isinstance(by_id["s-missing"].error, ConfigError)
    assert statuses(store.sync, "s-both") == ["approved", "approved", "pending"]
    assert sorted(hosts["s-both"].approve_calls.values()) == [1, 1]


# --------------------------------------------------------------------------- misuse


class NoIndex:
    """A third-party adapter without the optional capability (it records every call)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def load(self, session_id: str) -> None:
        self.calls.append("load")

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        self.calls.append("save")
        return False


def _never(sid: str) -> SweepPorts:
    raise AssertionError("the host was asked about a session")


def test_a_storage_without_the_index_is_refused_by_name_before_any_io() -> None:
    storage = NoIndex()
    with pytest.raises(ConfigError, match="ProcessingIndex capability \\(list_processing\\)"):
        reconcile_all(storage, _never, older_than_ms=0)
    with pytest.raises(ConfigError, match="ProcessingIndex"):
        asyncio.run(reconcile_all_async(storage, _never, older_than_ms=0))  # type: ignore[arg-type]
    assert storage.calls == []


def test_the_wrong_flavour_names_the_right_function() -> None:
    shared = MemoryStorage()
    with pytest.raises(ConfigError, match="use reconcile_all_async"):
        reconcile_all(AsyncMemoryStorage(shared), _never, older_than_ms=0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="use reconcile_all "):
        asyncio.run(reconcile_all_async(shared, _never, older_than_ms=0))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("older_than_ms", "limit"), [(-1, 10), (True, 10), (1.5, 10), (0, 0), (0, "9")]
)
def test_bad_arguments_are_config_errors(older_than_ms: Any, limit: Any) -> None:
    with pytest.raises(ConfigError):
        reconcile_all(MemoryStorage(), _never, older_than_ms=older_than_ms, limit=limit)


def test_ports_of_the_wrong_flavour_fail_that_session_only() -> None:
    storage = MemoryStorage()
    host = crashed(storage, "s-wrong", ("before",))
    report = reconcile_all(
        storage,
        lambda sid: AsyncSweepPorts(DEFINITION, AsyncHost(host), AsyncHost(host)),  # type: ignore[arg-type,return-value]
        older_than_ms=FIVE_MINUTES,
        clock=later(10),
    )
    (swept,) = report.sessions
    assert isinstance(swept.error, ConfigError)
    assert "returned AsyncSweepPorts; this sweep needs SweepPorts" in str(swept.error)
    assert statuses(storage, "s-wrong") == ["approving", "pending"] and host.approve_calls == {}
    report = reconcile_all(
        storage,
        lambda sid: {"definition": DEFINITION},
        older_than_ms=FIVE_MINUTES,
        clock=later(10),  # type: ignore[arg-type,return-value]
    )
    assert "returned dict" in str(report.sessions[0].error)


def test_an_async_ports_for_given_to_the_sync_sweep_fails_that_session_only() -> None:
    # ADR-0121: one flavour policy; the host's coroutine is closed (it never ran), refused with
    # the right function named, never taken for the session's ports.
    storage = MemoryStorage()
    host = crashed(storage, "s-async-host", ("before",))

    async def ports_for(sid: str) -> SweepPorts:  # pragma: no cover - never awaited
        return SweepPorts(DEFINITION, host, host)

    report = reconcile_all(
        storage,
        ports_for,  # type: ignore[arg-type]
        older_than_ms=FIVE_MINUTES,
        clock=later(10),
    )
    (swept,) = report.sessions
    assert isinstance(swept.error, ConfigError)
    assert "ports_for is asyncio" in str(swept.error) and "reconcile_all_async" in str(swept.error)
    assert statuses(storage, "s-async-host") == ["approving", "pending"]


def test_an_index_that_fails_to_answer_is_storage_unavailable() -> None:
    class Down(MemoryStorage):
        def list_processing(self, **kwargs: Any) -> Any:
            raise OSError("connection reset")

    with pytest.raises(StorageUnavailable, match="list_processing failed"):
        reconcile_all(Down(), _never, older_than_ms=0)


def test_a_pending_index_that_fails_to_answer_is_storage_unavailable_before_any_visit() -> None:
    class PendingDown(MemoryStorage):
        def list_pending(self, **kwargs: Any) -> Any:
            raise OSError("connection reset")

    storage = PendingDown()
    host = crashed(storage, "s-stuck", ("before",))
    with pytest.raises(StorageUnavailable, match="list_pending failed"):
        reconcile_all(storage, _never, older_than_ms=0, clock=later(10))
    assert statuses(storage, "s-stuck") == ["approving", "pending"] and host.approve_calls == {}


# --------------------------------------------------------------------------- records beside it


class ClaimantDied(BaseException):
    """Raised inside a tool body: like SIGKILL, nothing records the body's outcome."""


def unknown_execution(storage: Any, session_id: str) -> None:
    """Store ``session_id`` with a tool-execution ledger entry whose claimant died inside the
    body: a processing record beside the envelope (ADR-0100), no processing confirmation."""
    from akchat_fsm.integrations.ledger import ToolLedger

    crashed(storage, session_id, ())

    def dies() -> None:
        raise ClaimantDied

    with pytest.raises(ClaimantDied):
        ToolLedger(storage, session_id, owner="dead:1").execute("c9", "wipe", {}, dies)


def test_a_session_held_by_an_unknown_execution_is_not_reported_settled(store: Store) -> None:
    unknown_execution(store.sync, "s-ledger")
    hosts = {
        "s-ledger": Host(),
        "s-acted": crashed(store.sync, "s-acted", ("after",)),
    }

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, hosts[session_id], hosts[session_id])

    report = reconcile_all(store.sync, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10))
    by_id = {s.session_id: s for s in report.sessions}
    assert by_id["s-ledger"].outcomes == () and by_id["s-ledger"].held
    assert by_id["s-ledger"].status == "execution_unknown"
    assert by_id["s-acted"].status == "settled" and not by_id["s-acted"].held
    assert report.counts == {"execution_unknown": 1, "settled": 1}
    # nothing was re-run or released: the next sweep finds it again, still unknown
    again = reconcile_all(store.sync, ports_for, older_than_ms=FIVE_MINUTES, clock=later(10))
    assert [(s.session_id, s.status) for s in again.sessions] == [("s-ledger", "execution_unknown")]


def test_the_async_sweep_reports_the_held_session_too(store: Store) -> None:
    unknown_execution(store.sync, "s-ledger")
    host = Host()

    async def sweep() -> Any:
        storage = store.make_async()
        try:
            return await reconcile_all_async(
                storage,
                lambda sid: AsyncSweepPorts(DEFINITION, AsyncHost(host)),
                older_than_ms=FIVE_MINUTES,
                clock=later(10),
            )
        finally:
            await storage.aclose()

    report = asyncio.run(sweep())
    assert [(s.session_id, s.status) for s in report.sessions] == [
        ("s-ledger", "execution_unknown")
    ]


def test_ports_with_neither_memory_nor_bridge_fail_that_session() -> None:
    storage = MemoryStorage()
    crashed(storage, "s1", ("before",))
    report = reconcile_all(
        storage, lambda sid: SweepPorts(DEFINITION), older_than_ms=FIVE_MINUTES, clock=later(10)
    )
    [swept] = report.sessions
    assert swept.status == "failed" and "neither a memory nor a bridge" in str(swept.error)
    assert statuses(storage, "s1") == ["approving", "pending"]


# --------------------------------------------------------------------------- due confirmations
# A session whose only work is a confirmation past its expiry is in no processing index; the
# sweep finds it through the pending index and expires it through the host's upstream.


def waiting_on_expiry(storage: Any, session_id: str, due: int, fresh: int = 0) -> Host:
    """Store ``session_id`` with ``due`` pending records already past their expiry (a minute to
    live, at the wall clock) and ``fresh`` that expire in a day; nothing processing."""
    host = Host()
    session = resume_chat_session(
        DEFINITION, session_id=session_id, storage=storage, clock=host.clock
    )
    for n in range(due):
        session.confirmations_for(host, ttl_ms=60_000).propose(f"tool.due{n}", {"n": n})
    for n in range(fresh):
        session.confirmations_for(host, ttl_ms=DAY).propose(f"tool.fresh{n}", {"n": n})
    return host


def tool_calls(storage: Any, session_id: str, status: str) -> list[str]:
    snapshot = SessionSnapshot.model_validate_json(storage.load(session_id))
    return [b.tool_call_id for b in snapshot.confirmations if b.status.value == status]


def test_a_session_waiting_only_on_expiry_is_expired_by_the_sweep(store: Store) -> None:
    host = waiting_on_expiry(store.sync, "s-due", due=2, fresh=1)
    fresh = waiting_on_expiry(store.sync, "s-fresh", due=0, fresh=1)
    due_calls = tool_calls(store.sync, "s-due", "pending")[:2]
    assert store.sync.list_processing() == []  # nothing a crash left: only expiry is due
    asked: list[str] = []

    def ports_for(sid: str) -> SweepPorts:
        asked.append(sid)
        return SweepPorts(DEFINITION, upstream=host)  # no memory: an expiry needs none

    # older_than_ms does not delay an expiry: it is a time condition of its own.
    report = reconcile_all(store.sync, ports_for, older_than_ms=DAY, clock=later(10))
    [swept] = report.sessions
    assert asked == ["s-due"]  # the not-yet-due session is not visited
    assert (swept.session_id, swept.status, swept.last_write_ms) == ("s-due", "expired", None)
    assert swept.expired == tuple(due_calls) and swept.still_due == ()
    assert report.counts == {"expired": 1} and report.ok and not report.truncated
    assert report.expiring_before_ms is not None
    assert sorted(call for call, _ in host.upstream.denied) == sorted(due_calls)  # once each
    assert tool_calls(store.sync, "s-due", "expired") == due_calls
    assert len(tool_calls(store.sync, "s-due", "pending")) == 1  # the fresh one is left alone
    assert tool_calls(store.sync, "s-fresh", "expired") == [] and fresh.upstream.denied == []
    trail = audit_trail(store.sync, "s-due")
    assert {(e.tool_call_id, e.intent, e.via) for e in trail if e.decided} == {
        (call, "expire", "sweep") for call in due_calls
    }
    # Nothing is left that the sweep could finish: the next one visits nobody, denies nothing.
    assert reconcile_all(store.sync, ports_for, older_than_ms=0, clock=later(10)).sessions == ()
    assert len(host.upstream.denied) == 2 and asked == ["s-due"]


def test_the_async_sweep_expires_the_same_way(store: Store) -> None:
    host = waiting_on_expiry(store.sync, "s-due", due=1, fresh=1)
    [due_call] = tool_calls(store.sync, "s-due", "pending")[:1]

    async def ports_for(sid: str) -> AsyncSweepPorts:
        return AsyncSweepPorts(DEFINITION, upstream=AsyncHost(host))

    async def sweep() -> Any:
        storage = store.make_async()
        try:
            return await reconcile_all_async(storage, ports_for, older_than_ms=0, clock=later(10))
        finally:
            await storage.aclose()

    [swept] = asyncio.run(sweep()).sessions
    assert (swept.status, swept.expired) == ("expired", (due_call,))
    assert host.upstream.denied == [(due_call, "confirmation expired")]
    assert tool_calls(store.sync, "s-due", "expired") == [due_call]
    assert asyncio.run(sweep()).sessions == ()


def test_due_sessions_beyond_the_limit_wait_for_the_next_sweep(store: Store) -> None:
    hosts = {sid: waiting_on_expiry(store.sync, sid, due=2) for sid in ("d-1", "d-2", "d-3")}

    def ports_for(sid: str) -> SweepPorts:
        return SweepPorts(DEFINITION, upstream=hosts[sid])

    # Pages of two rows: each session's two due rows are listed, de-duplicated, once.
    first = reconcile_all(store.sync, ports_for, older_than_ms=0, limit=2, clock=later(10))
    assert [s.session_id for s in first.sessions] == ["d-1", "d-2"]  # soonest expiry first
    assert all(len(s.expired) == 2 for s in first.sessions)
    assert first.truncated and first.more_due
    second = reconcile_all(store.sync, ports_for, older_than_ms=0, limit=2, clock=later(10))
    assert [s.session_id for s in second.sessions] == ["d-3"] and not second.truncated
    assert all(len(host.upstream.denied) == 2 for host in hosts.values())


def test_a_stuck_session_with_a_due_record_is_reconciled_and_expired_in_one_visit(
    store: Store,
) -> None:
    host = crashed(store.sync, "s-both", ("before",))
    session = resume_chat_session(
        DEFINITION, session_id="s-both", storage=store.sync, clock=host.clock
    )
    due = session.confirmations_for(host, ttl_ms=60_000).propose("tool.due", {})
    asked: list[str] = []

    def ports_for(sid: str) -> SweepPorts:
        asked.append(sid)
        return SweepPorts(DEFINITION, host, host)

    [swept] = reconcile_all(store.sync, ports_for, older_than_ms=0, clock=later(10)).sessions
    assert asked == ["s-both"] and swept.last_write_ms is not None
    assert actions(swept) == ["resumed"] and swept.expired == (due.tool_call_id,)
    assert swept.status == "expired"
    assert statuses(store.sync, "s-both") == ["approved", "pending", "expired"]


def test_ports_with_nothing_to_deny_through_leave_a_due_record_pending(store: Store) -> None:
    host = waiting_on_expiry(store.sync, "s-due", due=1)
    [due_call] = tool_calls(store.sync, "s-due", "pending")
    report = reconcile_all(
        store.sync,
        lambda sid: SweepPorts(DEFINITION, memory=host),  # a memory, but no upstream
        older_than_ms=0,
        clock=later(10),
    )
    [swept] = report.sessions
    assert (swept.status, swept.still_due, swept.expired) == ("unsettled", (due_call,), ())
    skipped = reconcile_all(store.sync, lambda sid: None, older_than_ms=0, clock=later(10))
    assert [(s.status, s.still_due) for s in skipped.sessions] == [("skipped", (due_call,))]
    assert host.upstream.denied == [] and tool_calls(store.sync, "s-due", "pending") == [due_call]


class ProcessingOnly:
    """A third-party adapter with the processing index and no pending index (it spells out
    every method it forwards: a runtime-checkable protocol ignores ``__getattr__``)."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        return self.inner.save(snapshot, expected_cursor)

    def list_processing(self, **kwargs: Any) -> Any:
        return self.inner.list_processing(**kwargs)


def test_a_storage_without_the_pending_index_sweeps_as_before() -> None:
    storage = ProcessingOnly(MemoryStorage())
    host = waiting_on_expiry(storage, "s-due", due=1)
    report = reconcile_all(storage, _never, older_than_ms=0, clock=later(10))
    assert report.sessions == () and report.expiring_before_ms is None
    assert host.upstream.denied == [] and len(tool_calls(storage, "s-due", "pending")) == 1


def test_a_deny_that_fails_is_that_sessions_error_and_the_next_sweep_finishes_it(
    store: Store,
) -> None:
    host = waiting_on_expiry(store.sync, "s-due", due=1)
    [due_call] = tool_calls(store.sync, "s-due", "pending")
    host.upstream.fail_next = 1  # upstream is down for the sweep's deny
    [swept] = reconcile_all(
        store.sync, lambda sid: SweepPorts(DEFINITION, host, host), older_than_ms=0, clock=later(10)
    ).sessions
    assert swept.status == "failed" and isinstance(swept.error, UpstreamFailed)
    assert tool_calls(store.sync, "s-due", "expiring") == [due_call]  # claimed, not lost
    # Now a processing record: the next sweep's reconcile issues the deny, once, and records it.
    [swept] = reconcile_all(
        store.sync, lambda sid: SweepPorts(DEFINITION, host, host), older_than_ms=0, clock=later(10)
    ).sessions
    assert swept.status == "settled" and actions(swept) == ["resumed"]
    assert tool_calls(store.sync, "s-due", "expired") == [due_call]
    assert host.upstream.denied == [(due_call, "confirmation expired")]
