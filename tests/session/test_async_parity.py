"""The asyncio twin runs the same plans: the same script, sync and async, makes the same calls.

Each flavour runs one script (propose, approve, a stale loser, an upstream failure, reconcile,
an expiry sweep) over recording storage and upstream doubles; the traces of every storage and
upstream call, the observer events and the outcomes must be identical.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from akchat_fsm.errors import AkchatError
from akchat_fsm.session import (
    ChatDefinition,
    SessionEvent,
    ToolCallProposal,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.wire.session import SessionSnapshot

DEFINITION = ChatDefinition("parity")
Trace = list[tuple[Any, ...]]


class Clock:
    def __init__(self) -> None:
        self.now = 5_000

    def __call__(self) -> int:
        return self.now


class Recorder:
    """Sync storage + upstream + memory that append every call to one trace."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.storage = MemoryStorage()
        self.fail_next = False
        self.status: dict[str, str] = {}

    def load(self, session_id: str) -> object:
        self.trace.append(("load", session_id))
        return self.storage.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        statuses = tuple(str(b.status) for b in snapshot.confirmations)
        self.trace.append(("save", expected_cursor, snapshot.cursor, statuses))
        return self.storage.save(snapshot, expected_cursor)

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        self.trace.append(("propose", id, name))
        self.status[id] = "requires_confirmation"
        return ToolCallProposal(id, name, dict(args))

    def _act(self, kind: str, tool_call_id: str, status: str) -> None:
        self.trace.append((kind, tool_call_id))
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("upstream down")
        self.status[tool_call_id] = status

    def approve(self, tool_call_id: str) -> None:
        self._act("approve", tool_call_id, "complete")

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._act("deny", tool_call_id, "error")

    def statuses(self, ids: Sequence[str]) -> dict[str, str]:
        self.trace.append(("statuses", tuple(ids)))
        return {i: self.status[i] for i in ids if i in self.status}

    def memory(self) -> dict[str, Any]:
        self.trace.append(("memory",))
        calls = [
            {"id": call, "name": "mail", "args": {}, "status": status}
            for call, status in sorted(self.status.items())
        ]
        message = {
            "id": "m-1",
            "role": "assistant",
            "content": "",
            "status": "complete",
            "createdAt": "2026-07-14T00:00:00.000Z",
            "toolCalls": calls,
        }
        return {"version": 1, "messages": [message]}


class SyncPorts:
    def __init__(self, recorder: Recorder) -> None:
        self.r = recorder
        self.load, self.save = recorder.load, recorder.save
        self.propose_tool_call = recorder.propose_tool_call
        self.approve, self.deny = recorder.approve, recorder.deny

    def memory_port(self, statuses: bool) -> Any:
        recorder = self.r

        class Memory:
            def load(self) -> dict[str, Any]:
                return recorder.memory()

        class StatusMemory:
            def tool_call_statuses(self, ids: Sequence[str]) -> dict[str, str]:
                return recorder.statuses(ids)

        return StatusMemory() if statuses else Memory()


class AsyncPorts:
    def __init__(self, recorder: Recorder) -> None:
        self.r = recorder

    async def load(self, session_id: str) -> object:
        await asyncio.sleep(0)
        return self.r.load(session_id)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        await asyncio.sleep(0)
        return self.r.save(snapshot, expected_cursor)

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return self.r.propose_tool_call(id, name, args)

    async def approve(self, tool_call_id: str) -> None:
        self.r.approve(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str) -> None:
        self.r.deny(tool_call_id, reason)

    def memory_port(self, statuses: bool) -> Any:
        recorder = self.r

        class Memory:
            async def load(self) -> dict[str, Any]:
                return recorder.memory()

        class StatusMemory:
            async def tool_call_statuses(self, ids: Sequence[str]) -> dict[str, str]:
                return recorder.statuses(ids)

        return StatusMemory() if statuses else Memory()


def _outcome(call: Any) -> Any:
    try:
        value = call()
    except AkchatError as exc:
        return type(exc).__name__
    return value


def _event(trace: Trace, event: SessionEvent) -> None:
    status = None if event.record is None else str(event.record.status)
    trace.append(("event", str(event.kind), event.cursor, event.previous_status, status))


def _explode(event: SessionEvent) -> None:
    raise RuntimeError("observer bug")  # must never change an outcome


async def _explode_async(event: SessionEvent) -> None:
    await asyncio.sleep(0)
    raise RuntimeError("observer bug")


def run_sync_script(statuses: bool) -> Trace:
    trace: Trace = []
    recorder, clock = Recorder(trace), Clock()
    ports = SyncPorts(recorder)
    ids = iter(f"id-{n}" for n in range(10))

    def resume() -> Any:
        return resume_chat_session(
            DEFINITION,
            session_id="p",
            storage=ports,
            clock=clock,
            observers=[_explode, lambda e: _event(trace, e)],
        )

    session = resume()
    coordinator = session.confirmations_for(ports, ttl_ms=1_000, create_id=lambda: next(ids))
    first = coordinator.propose("mail", {"to": "a"}).token
    second = coordinator.propose("mail", {"to": "b"}).token
    third = coordinator.propose("mail", {"to": "c"}).token
    stale = resume()
    trace.append(("result", str(coordinator.approve(first).status)))
    trace.append(("result", _outcome(lambda: stale.confirmations_for(ports).reject(first))))
    recorder.fail_next = True
    trace.append(("result", _outcome(lambda: coordinator.reject(second, reason="no"))))
    outcomes = session.reconcile(ports.memory_port(statuses), upstream=ports)
    trace.append(("result", [(o.action, str(o.record.status)) for o in outcomes]))
    clock.now += 2_000
    trace.append(("result", [str(b.token == third) for b in coordinator.expire_due()]))
    return trace


async def run_async_script(statuses: bool) -> Trace:
    trace: Trace = []
    recorder, clock = Recorder(trace), Clock()
    ports = AsyncPorts(recorder)
    ids = iter(f"id-{n}" for n in range(10))

    async def resume() -> Any:
        return await resume_chat_session_async(
            DEFINITION,
            session_id="p",
            storage=ports,
            clock=clock,
            observers=[_explode_async, lambda e: _event(trace, e)],
        )

    async def outcome(coro: Any) -> Any:
        try:
            return await coro
        except AkchatError as exc:
            return type(exc).__name__

    session = await resume()
    coordinator = session.confirmations_for(ports, ttl_ms=1_000, create_id=lambda: next(ids))
    first = (await coordinator.propose("mail", {"to": "a"})).token
    second = (await coordinator.propose("mail", {"to": "b"})).token
    third = (await coordinator.propose("mail", {"to": "c"})).token
    stale = await resume()
    trace.append(("result", str((await coordinator.approve(first)).status)))
    trace.append(("result", await outcome(stale.confirmations_for(ports).reject(first))))
    recorder.fail_next = True
    trace.append(("result", await outcome(coordinator.reject(second, reason="no"))))
    outcomes = await session.reconcile(ports.memory_port(statuses), upstream=ports)
    trace.append(("result", [(o.action, str(o.record.status)) for o in outcomes]))
    clock.now += 2_000
    trace.append(("result", [str(b.token == third) for b in await coordinator.expire_due()]))
    return trace


@pytest.mark.parametrize("statuses", [False, True], ids=["load", "tool_call_statuses"])
def test_sync_and_async_coordinators_make_the_same_calls_in_the_same_order(
    statuses: bool,
) -> None:
    sync_trace = run_sync_script(statuses)
    async_trace = asyncio.run(run_async_script(statuses))
    assert sync_trace == async_trace
    read = ("statuses", ("app-id-1",)) if statuses else ("memory",)
    assert read in sync_trace
    results = [entry[1] for entry in sync_trace if entry[0] == "result"]
    assert results == [
        "approved",
        "AlreadyResolved",
        "UpstreamFailed",
        [("resumed", "rejected")],
        ["True"],
    ]
    assert sum(1 for entry in sync_trace if entry[0] in ("approve", "deny")) == 4
    assert ("event", "confirmation", 5, "approving", "approved") in sync_trace
