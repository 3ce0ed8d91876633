"""``pending_changes``: one event per change of the index's fingerprint, none while it stays."""

from __future__ import annotations

import asyncio

from akchat_fsm.inbox import pending_changes


def test_an_event_only_when_the_fingerprint_changed() -> None:
    states = iter(["a", "a", "b", "b", "b", "c"])  # the first is read before any wait
    waits: list[int] = []

    async def fingerprint() -> object:
        return next(states)

    async def wait() -> None:
        waits.append(1)

    async def first_two() -> list[dict[str, str]]:
        stream = pending_changes(fingerprint, wait)
        return [await anext(stream), await anext(stream)]

    events = asyncio.run(first_two())
    assert events == [{"event": "pending", "data": "changed"}] * 2
    assert len(waits) == 5  # a, (a) b, (b) (b) c: a wait before each re-read
