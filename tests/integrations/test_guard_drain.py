"""A guard outlives the event loops of the continuations it served (a sync bridge runs each
in its own ``asyncio.run``): draining it must never wait on what an earlier loop left."""

from __future__ import annotations

import asyncio

from akchat_fsm.integrations.ledger import AsyncToolLedger
from akchat_fsm.integrations.pydantic_ai import ExecutionGuard
from akchat_fsm.storage import MemoryStorage


def test_drain_returns_when_an_earlier_loop_left_executions_behind() -> None:
    guard = ExecutionGuard(AsyncToolLedger(MemoryStorage(), "s1"), frozenset())
    earlier = asyncio.new_event_loop()
    finished = earlier.create_future()
    finished.set_result(None)  # done, but its loop closed before its callbacks ran
    orphaned = earlier.create_future()  # its loop is gone: it can never finish
    earlier.close()
    guard._in_flight.update({finished, orphaned})

    async def drain_in_a_new_loop() -> None:
        # The bound only stops a regression from hanging the suite; it times nothing.
        await asyncio.wait_for(guard.drain(), timeout=60)

    asyncio.run(drain_in_a_new_loop())
    assert not guard._in_flight


def test_drain_still_waits_for_an_execution_of_its_own_loop() -> None:
    guard = ExecutionGuard(AsyncToolLedger(MemoryStorage(), "s1"), frozenset())
    order: list[str] = []

    async def main() -> None:
        async def body() -> str:
            await asyncio.sleep(0)
            order.append("body")
            return "done"

        task = asyncio.ensure_future(guard.execute_ungated("c1", "t", {}, body))
        await asyncio.sleep(0)  # the execution has started
        await guard.drain()
        order.append("drained")
        assert (await task).ran

    asyncio.run(main())
    assert order == ["body", "drained"]
