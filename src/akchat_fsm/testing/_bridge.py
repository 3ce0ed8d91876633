"""Run the (synchronous) checks against an asyncio adapter.

One event loop runs in a background thread; every call is a coroutine submitted to it. The
checks' racer threads submit at the same moment, so the adapter's coroutines interleave at
their awaits just as concurrent tasks would. The checks stay written once.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ._kit import maybe_await

T = TypeVar("T")


class EventLoopThread:
    """An event loop in a daemon thread; ``run(coro)`` blocks until the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


#: Optional methods the bridge forwards when the async adapter has them.
_OPTIONAL = (
    "delete",
    "open_connections",
    "load_record",
    "save_record",
    "list_records",
    "delete_record",
    "list_processing",
    "list_pending",
    "list_audit",
    "find_token",
    "save_with_records",
)


class AsyncBridge:
    """A synchronous face over an async adapter: load/save, close, and every optional
    method it has (delete, open_connections, records, the processing and pending indexes)."""

    def __init__(self, loop: EventLoopThread, factory: Callable[[], Any]) -> None:
        self._loop = loop

        async def make() -> Any:
            return await maybe_await(factory())

        self.inner = loop.run(make())
        for name in _OPTIONAL:
            if callable(getattr(self.inner, name, None)):
                setattr(self, name, self._forward(name))

    def _forward(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(maybe_await(method(*args, **kwargs)))

        return call

    def load(self, session_id: str) -> Any:
        return self._loop.run(maybe_await(self.inner.load(session_id)))

    def save(self, snapshot: Any, expected_cursor: int | None) -> Any:
        return self._loop.run(maybe_await(self.inner.save(snapshot, expected_cursor)))

    def close(self) -> None:
        inner = self.inner
        for name in ("aclose", "close"):
            method = getattr(inner, name, None)
            if callable(method):
                self._loop.run(maybe_await(method()))
                return
        if hasattr(inner, "__aexit__"):
            self._loop.run(inner.__aexit__(None, None, None))
