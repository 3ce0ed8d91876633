"""The tool-execution ledger: a body runs at most once per tool call (ADR-0100).

Every test runs on each record-capable backend; the async tests drive the same plans through
the asyncio driver. Bodies count their runs in a list, so "ran once" is counted, not assumed.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from bridge_harness import RecordsBackend, crash_inside_body

from akchat_fsm.errors import AlreadyResolved, ConfigError, OutcomeUnknown
from akchat_fsm.integrations.ledger import (
    AsyncToolLedger,
    ClaimRequest,
    ExecutionState,
    ExecutionUnknown,
    LedgerEntry,
    SettleRefused,
    ToolCallMismatch,
    ToolLedger,
    decide_claim,
    ledger_key,
    plan_settle_unknown,
)
from akchat_fsm.storage.memory import MemoryStorage

SID = "s-ledger"
ARGS = {"to": "a@example.com"}


def _ledger(backend: RecordsBackend, owner: str = "p1") -> ToolLedger:
    return ToolLedger(backend.sync(), SID, owner=owner)


def test_a_body_runs_once_and_a_repeat_replays_its_recorded_result(
    records_backend: RecordsBackend,
) -> None:
    runs: list[str] = []

    def body() -> dict[str, Any]:
        runs.append("x")
        return {"sent": True, "n": len(runs)}

    first = _ledger(records_backend).execute("c1", "send", ARGS, body)
    again = _ledger(records_backend, "p2").execute("c1", "send", ARGS, body)
    assert runs == ["x"]
    assert first.ran and first.value == {"sent": True, "n": 1}
    assert not again.ran and again.value == {"sent": True, "n": 1}
    assert again.entry.state is ExecutionState.EXECUTED and again.entry.outcome == "returned"
    assert again.entry.owner == "p1"


def test_concurrent_claimants_run_the_body_exactly_once(records_backend: RecordsBackend) -> None:
    runs: list[int] = []
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def body() -> str:
        with lock:
            runs.append(1)
        return "done"

    def worker(i: int) -> None:
        ledger = _ledger(records_backend, f"p{i}")
        barrier.wait()
        try:
            execution = ledger.execute("c1", "send", ARGS, body)
            label = "ran" if execution.ran else "replayed"
        except ExecutionUnknown:
            label = "unknown"  # the winner was still running it
        with lock:
            outcomes.append(label)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 1
    assert outcomes.count("ran") == 1 and len(outcomes) == 8
    entry = _ledger(records_backend).get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTED


def test_an_unknown_outcome_is_never_rerun_and_is_listed(records_backend: RecordsBackend) -> None:
    storage = records_backend.sync()
    crash_inside_body(storage)
    runs: list[int] = []
    ledger = _ledger(records_backend)
    with pytest.raises(ExecutionUnknown) as caught:
        ledger.execute("c1", "send", ARGS, lambda: runs.append(1))
    assert runs == []
    assert isinstance(caught.value.record, LedgerEntry)
    assert caught.value.record.owner == "dead"
    assert [e.tool_call_id for e in ledger.unknown()] == ["c1"]
    assert [p.session_id for p in storage.list_processing()] == [SID]


def test_an_idempotent_tool_is_reclaimed_with_the_next_attempt(
    records_backend: RecordsBackend,
) -> None:
    crash_inside_body(records_backend.sync())
    runs: list[int] = []
    execution = _ledger(records_backend).execute(
        "c1", "send", ARGS, lambda: runs.append(1) or "again", idempotent=True
    )
    assert runs == [1] and execution.ran
    assert execution.entry.attempt == 2 and execution.entry.state is ExecutionState.EXECUTED
    assert records_backend.sync().list_processing() == []


def test_operators_settle_an_unknown_outcome_either_way(records_backend: RecordsBackend) -> None:
    crash_inside_body(records_backend.sync(), "ran")
    crash_inside_body(records_backend.sync(), "lost")
    ledger = _ledger(records_backend)
    settled = ledger.settle("ran", ran=True, result="receipt-7", operator="ops")
    assert settled.outcome == "settled" and settled.owner == "ops"
    runs: list[str] = []
    replay = ledger.execute("ran", "send", ARGS, lambda: runs.append("ran"))
    assert not replay.ran and replay.value == "receipt-7"
    released = ledger.settle("lost", ran=False)
    assert released.state is ExecutionState.RELEASED
    rerun = ledger.execute("lost", "send", ARGS, lambda: runs.append("lost") or "ok")
    assert rerun.ran and rerun.entry.attempt == 2
    assert runs == ["lost"]
    with pytest.raises(AlreadyResolved):
        ledger.settle("lost", ran=False)
    assert ledger.unknown() == ()


def test_a_raising_body_is_recorded_and_not_run_again(records_backend: RecordsBackend) -> None:
    runs: list[int] = []

    def body() -> None:
        runs.append(1)
        raise RuntimeError("smtp down")

    ledger = _ledger(records_backend)
    with pytest.raises(RuntimeError, match="smtp down"):
        ledger.execute("c1", "send", ARGS, body)
    replay = ledger.execute("c1", "send", ARGS, body)
    assert runs == [1]
    assert not replay.ran and replay.entry.outcome == "raised"
    assert replay.entry.error == "RuntimeError: smtp down"


def test_an_id_reused_for_another_call_is_refused(records_backend: RecordsBackend) -> None:
    ledger = _ledger(records_backend)
    ledger.execute("c1", "send", ARGS, lambda: 1)
    with pytest.raises(ToolCallMismatch):
        ledger.execute("c1", "send", {"to": "b@example.com"}, lambda: 2)
    with pytest.raises(ToolCallMismatch):
        ledger.execute("c1", "delete", ARGS, lambda: 3)


class _UnknownAfterApply:
    """A real store whose next record save applies and then reports an unknown outcome."""

    def __init__(self, inner: Any, *, apply: bool) -> None:
        self.inner = inner
        self.apply = apply
        self.armed = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        if self.armed:
            self.armed = False
            if self.apply:
                self.inner.save_record(*args, **kwargs)
            raise OutcomeUnknown("injected")
        return bool(self.inner.save_record(*args, **kwargs))


@pytest.mark.parametrize("applied", [True, False])
def test_an_unknown_claim_save_is_settled_by_its_nonce(
    records_backend: RecordsBackend, applied: bool
) -> None:
    storage = _UnknownAfterApply(records_backend.sync(), apply=applied)
    runs: list[int] = []
    execution = ToolLedger(storage, SID, owner="p1").execute(
        "c1", "send", ARGS, lambda: runs.append(1) or "ok"
    )
    assert runs == [1] and execution.ran
    assert execution.entry.attempt == 1 and execution.entry.state is ExecutionState.EXECUTED


def test_storage_without_records_is_a_config_error_naming_the_capability() -> None:
    class EnvelopeOnly:
        def load(self, session_id: str) -> None:
            return None

        def save(self, snapshot: Any, expected: int | None) -> bool:
            return True

    with pytest.raises(ConfigError, match="RecordStorage"):
        ToolLedger(EnvelopeOnly(), SID)


def test_an_async_body_on_the_sync_ledger_is_refused_before_any_write(
    records_backend: RecordsBackend,
) -> None:
    async def body() -> str:
        return "never"

    ledger = _ledger(records_backend)
    with pytest.raises(ConfigError, match="async"):
        ledger.execute("c1", "send", ARGS, body)
    assert ledger.entries() == ()


def test_odd_tool_call_ids_get_a_hashed_key(records_backend: RecordsBackend) -> None:
    odd = "call id with spaces/and/slashes " + "x" * 300
    assert ledger_key(odd).startswith("call:sha256:")
    assert ledger_key("toolu_01ABC-x.y:z") == "call:toolu_01ABC-x.y:z"
    ledger = _ledger(records_backend)
    ledger.execute(odd, "send", ARGS, lambda: "ok")
    entry = ledger.get(odd)
    assert entry is not None and entry.tool_call_id == odd


def test_the_claim_decision_table() -> None:
    req = ClaimRequest("c1", "send", "d", "me", "mine", 10)
    assert decide_claim(None, req).action == "run"

    def entry(state: ExecutionState, claim: str = "theirs") -> LedgerEntry:
        return LedgerEntry("c1", "send", "d", state, 1, claim, "o", 1, version=3)

    assert decide_claim(entry(ExecutionState.EXECUTED), req).action == "replay"
    assert decide_claim(entry(ExecutionState.EXECUTING), req).action == "unknown"
    own = decide_claim(entry(ExecutionState.EXECUTING, "mine"), req)
    assert own.action == "run" and own.write is None
    for stored, idempotent in (
        (entry(ExecutionState.EXECUTING), True),
        (entry(ExecutionState.RELEASED), False),
    ):
        again = decide_claim(stored, ClaimRequest("c1", "send", "d", "me", "mine", 10, idempotent))
        assert again.action == "run" and again.expected == 3
        assert again.write is not None and again.write.attempt == 2


def test_the_async_twin_runs_the_same_plans(records_backend: RecordsBackend) -> None:
    runs: list[str] = []

    async def body() -> str:
        runs.append("x")
        await asyncio.sleep(0)
        return "async-done"

    async def scenario() -> None:
        storage = records_backend.async_()
        ledgers = [AsyncToolLedger(storage, SID, owner=f"a{i}") for i in range(4)]
        results = await asyncio.gather(
            *(ledger.execute("c1", "send", ARGS, body) for ledger in ledgers),
            return_exceptions=True,
        )
        ran = [r for r in results if not isinstance(r, BaseException) and r.ran]
        assert len(ran) == 1 and ran[0].value == "async-done"
        for r in results:
            assert not isinstance(r, BaseException) or isinstance(r, ExecutionUnknown)
        replay = await ledgers[0].execute("c1", "send", ARGS, body)
        assert not replay.ran and replay.value == "async-done"
        # a sync body on the async ledger works too
        sync_runs = await ledgers[1].execute("c2", "send", ARGS, lambda: "sync-body")
        assert sync_runs.ran and sync_runs.value == "sync-body"
        assert await ledgers[2].unknown() == ()
        assert len(await ledgers[3].entries()) == 2

    asyncio.run(scenario())
    assert runs == ["x"]


def test_settle_unknown_writes_only_over_an_unknown_entry(records_backend: RecordsBackend) -> None:
    crash_inside_body(records_backend.sync(), "c1")
    ledger = _ledger(records_backend)
    settled = ledger.settle_unknown("c1", ran=True, result={"id": "r-1"}, operator="ops")
    assert settled.outcome == "settled" and settled.owner == "ops"
    assert ledger.get("c1") == settled
    # A second verdict finds nothing unknown: it writes nothing and says what the entry is.
    with pytest.raises(SettleRefused, match="no unknown outcome to settle: it is executed") as no:
        ledger.settle_unknown("c1", ran=False, operator="other")
    assert no.value.entry == settled
    assert ledger.get("c1") == settled
    with pytest.raises(SettleRefused, match="no execution is recorded") as none:
        ledger.settle_unknown("never", ran=True)
    assert none.value.entry is None


def test_settle_unknown_loses_to_a_change_after_its_read(records_backend: RecordsBackend) -> None:
    """Unlike ``settle``, a verdict never re-decides on an entry it did not read."""
    crash_inside_body(records_backend.sync(), "c1")
    storage = records_backend.sync()
    plan = plan_settle_unknown(SID, "c1", ran=False, result=None, operator="ops", now_ms=1)
    load = next(plan)  # the plan read the entry ...
    read = storage.load_record(load.session_id, load.key)
    entry = plan.send(read)  # ... wrote its audit entry first (ADR-0136) ...
    assert entry.key.startswith("audit-settle:") and entry.expected_version is None
    save = plan.send(storage.save_record(entry.session_id, entry.key, entry.text, None))
    # ... and before its write lands, another operator settles the call.
    _ledger(records_backend, owner="p2").settle("c1", ran=True, result="first", operator="p2")
    applied = storage.save_record(
        save.session_id, save.key, save.text, save.expected_version, processing=save.processing
    )
    assert applied is False
    reread = plan.send(applied)
    with pytest.raises(SettleRefused, match="changed while settling: it is now executed") as lost:
        plan.send(storage.load_record(reread.session_id, reread.key))
    assert lost.value.entry is not None and lost.value.entry.result == "first"


def test_the_async_ledger_settles_an_unknown_entry_once(records_backend: RecordsBackend) -> None:
    crash_inside_body(records_backend.sync(), "c1")

    async def scenario() -> list[object]:
        storage = records_backend.async_()
        ledgers = [AsyncToolLedger(storage, SID, owner=f"a{i}") for i in range(3)]
        return await asyncio.gather(
            *(ledger.settle_unknown("c1", ran=False) for ledger in ledgers),
            return_exceptions=True,
        )

    results = asyncio.run(scenario())
    won = [r for r in results if isinstance(r, LedgerEntry)]
    assert len(won) == 1 and won[0].state is ExecutionState.RELEASED
    assert all(isinstance(r, SettleRefused) for r in results if r not in won)


# --------------------------------------------------------------------------- bridge seams


def _pai_bridge(storage: Any, **options: Any) -> Any:
    from pai_agents import Call, Counts, build_agent

    from akchat_fsm import ChatDefinition, resume_chat_session
    from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

    session = resume_chat_session(ChatDefinition("seams"), session_id=SID, storage=storage)
    agent = build_agent([Call("send", ARGS, "c1")], Counts())
    return PydanticAIBridge(agent, session, storage, **options)


def _async_pai_bridge(storage: Any, **options: Any) -> Any:
    from pai_agents import Call, Counts, build_agent

    from akchat_fsm import ChatDefinition, resume_chat_session_async
    from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge

    async def open_() -> Any:
        return await resume_chat_session_async(
            ChatDefinition("seams"), session_id=SID, storage=storage
        )

    agent = build_agent([Call("send", ARGS, "c1")], Counts())
    return AsyncPydanticAIBridge(agent, asyncio.run(open_()), storage, **options)


def test_a_sync_bridge_ledger_is_sync_and_settles_for_real() -> None:
    """``BridgeReport`` tells operators to call ``bridge.ledger.settle``: on a sync bridge it
    must settle, not hand back a coroutine that settles nothing."""
    from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

    storage = MemoryStorage()
    crash_inside_body(storage, "c9", session_id=SID)
    bridge = _pai_bridge(storage)
    assert isinstance(bridge.ledger, ToolLedger)
    settled = bridge.ledger.settle("c9", ran=False)
    assert isinstance(settled, LedgerEntry) and settled.state is ExecutionState.RELEASED
    assert bridge.unknown_executions() == ()
    assert isinstance(
        _async_pai_bridge(AsyncMemoryStorage(MemoryStorage())).ledger, AsyncToolLedger
    )


def test_both_bridges_stamp_an_operators_verdict_with_the_injected_clock() -> None:
    from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

    storage = MemoryStorage()
    crash_inside_body(storage, "c9", session_id=SID)
    bridge = _pai_bridge(storage, clock=lambda: 4242)
    assert [e.tool_call_id for e in bridge.unknown_executions()] == ["c9"]
    assert bridge.settle_execution("c9", ran=True, result=1).finished_ms == 4242
    shared = MemoryStorage()
    crash_inside_body(shared, "c9", session_id=SID)
    twin = _async_pai_bridge(AsyncMemoryStorage(shared), clock=lambda: 4343)
    assert [e.tool_call_id for e in asyncio.run(twin.unknown_executions())] == ["c9"]
    assert asyncio.run(twin.settle_execution("c9", ran=True, result=1)).finished_ms == 4343


def test_both_bridges_record_the_operator_who_gave_a_verdict() -> None:
    """``settle_execution(..., operator=)`` names the person (the inbox's principal, the CLI's
    ``--operator``) as the entry's owner; without it, the bridge's own owner is recorded."""
    from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

    storage = MemoryStorage()
    crash_inside_body(storage, "c9", session_id=SID)
    crash_inside_body(storage, "c8", session_id=SID)
    bridge = _pai_bridge(storage)
    assert bridge.settle_execution("c9", ran=True, result=1, operator="alice").owner == "alice"
    assert bridge.settle_execution("c8", ran=False).owner == bridge.owner
    shared = MemoryStorage()
    crash_inside_body(shared, "c9", session_id=SID)
    twin = _async_pai_bridge(AsyncMemoryStorage(shared))
    settled = asyncio.run(twin.settle_execution("c9", ran=False, operator="bob"))
    assert settled.owner == "bob"


def test_a_bridge_refuses_a_storage_other_than_its_sessions() -> None:
    from pai_agents import Call, Counts, build_agent

    from akchat_fsm import ChatDefinition, resume_chat_session
    from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
    from akchat_fsm.storage.memory import MemoryStorage

    counts = Counts()
    session = resume_chat_session(ChatDefinition("seams"), session_id=SID, storage=MemoryStorage())
    with pytest.raises(ConfigError, match="storage other than its session's"):
        PydanticAIBridge(build_agent([Call("send", ARGS, "c1")], counts), session, MemoryStorage())
    assert counts.requests == 0


def test_a_sync_bridge_in_a_running_loop_is_a_config_error_naming_its_twin() -> None:
    from akchat_fsm.storage.memory import MemoryStorage

    bridge = _pai_bridge(MemoryStorage())

    async def inside() -> None:
        bridge.run("do it", run_id="r1")

    with pytest.raises(ConfigError, match="use AsyncPydanticAIBridge there"):
        asyncio.run(inside())
    assert bridge.run_record("r1") is None  # nothing ran, nothing was saved


def test_every_bridge_error_carries_its_record_and_is_not_a_confirmation_error() -> None:
    """A ``ConfirmationError`` handler reads ``err.record.status`` (docs/getting-started.md);
    a bridge error's record is a run record or ledger entry, so it is a ``BridgeError``."""
    from akchat_fsm import AkchatError
    from akchat_fsm.errors import ConfirmationError
    from akchat_fsm.integrations import (
        BridgeError,
        ExecutionClaimLost,
        RecordedToolFailure,
        RunClaimLost,
        RunInProgress,
    )
    from akchat_fsm.integrations import ExecutionUnknown as Unknown
    from akchat_fsm.integrations import SettleRefused as Refused
    from akchat_fsm.integrations.runs import decide_settle_run

    entry = LedgerEntry("c1", "send", "d", ExecutionState.EXECUTING, 1, "n", "o", 1)
    refused = Refused("changed", entry)
    assert refused.record is entry and refused.entry is entry
    for cls in (Unknown, ExecutionClaimLost, RecordedToolFailure, RunInProgress, RunClaimLost):
        assert issubclass(cls, BridgeError) and issubclass(cls, AkchatError)
        assert not issubclass(cls, ConfirmationError)
    assert issubclass(Refused, BridgeError) and not issubclass(Refused, ConfirmationError)
    with pytest.raises(BridgeError) as lost:
        decide_settle_run(None, "n", snapshot="", calls=None, output=None, now_ms=1)
    assert isinstance(lost.value, RunClaimLost) and lost.value.record is None


class _Answers:
    """A callable object standing for a port method: only its answer shows its flavour."""

    def __init__(self, method: Any) -> None:
        self.method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method(*args, **kwargs)


def _opaque_records(inner: MemoryStorage) -> Any:
    class Opaque:
        pass

    storage = Opaque()
    for name in ("load_record", "save_record", "list_records", "delete_record"):
        setattr(storage, name, _Answers(getattr(inner, name)))
    return storage


def test_the_asyncio_ledger_refuses_a_record_port_whose_answer_is_not_awaitable() -> None:
    # ADR-0121: the asyncio driver has one flavour policy; a plain answer is refused, never
    # taken for the asyncio port's result (it used to be awaited "if awaitable").
    ledger = AsyncToolLedger(_opaque_records(MemoryStorage()), "s-opaque")
    with pytest.raises(ConfigError, match=r"storage\.load_record is synchronous.*ToolLedger"):
        asyncio.run(ledger.get("c1"))


def test_the_asyncio_ledger_adapts_a_sync_storage_when_it_is_built() -> None:
    inner = MemoryStorage()
    ledger = AsyncToolLedger(inner, "s-sync")
    done = asyncio.run(ledger.execute("c1", "send", {"to": "a"}, lambda: "sent"))
    assert done.ran and done.value == "sent"
    assert ledger.storage is inner  # the host's object, as given
    assert ToolLedger(inner, "s-sync").get("c1").state is ExecutionState.EXECUTED  # type: ignore[union-attr]


class _AsksFirst(Exception):
    """A runtime's deferral: the body asks for approval instead of acting."""


def test_a_body_that_declines_releases_its_claim_and_the_next_call_runs_it(
    records_backend: RecordsBackend,
) -> None:
    ran: list[str] = []

    def asks() -> str:
        raise _AsksFirst()

    with pytest.raises(_AsksFirst):
        _ledger(records_backend).execute("c1", "send", {"to": "a"}, asks, declined=(_AsksFirst,))
    entry = _ledger(records_backend).get("c1")
    assert entry is not None and entry.state is ExecutionState.RELEASED and not entry.unknown
    assert records_backend.sync().list_processing() == []  # a released claim is not processing

    done = _ledger(records_backend, "p2").execute(
        "c1", "send", {"to": "a"}, lambda: ran.append("a") or "sent"
    )
    assert done.ran and done.value == "sent" and ran == ["a"]
    assert done.entry.state is ExecutionState.EXECUTED and done.entry.attempt == 2


class _ReleaseFails(MemoryStorage):
    """Takes the claim, then loses the connection on the release's write (it may have
    applied: the adapter says so with ``OutcomeUnknown``)."""

    writes = 0

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        self.writes += 1
        if self.writes > 1:
            raise OutcomeUnknown("connection lost mid-write")
        return super().save_record(*args, **kwargs)


def test_a_release_that_cannot_be_recorded_still_raises_the_deferral() -> None:
    """The runtime must see its own deferral (so the run pauses), not the storage failure of
    the release; the entry stays executing, an unknown execution for an operator."""
    storage = _ReleaseFails()

    def asks() -> str:
        raise _AsksFirst()

    ledger = ToolLedger(storage, "s-rel", owner="p1")
    with pytest.raises(_AsksFirst):
        ledger.execute("c1", "send", {"to": "a"}, asks, declined=(_AsksFirst,))
    entry = ledger.get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTING
