"""In-memory adapter: the reference's test storage, made thread-safe.

It stores the canonical JSON text (an immutable ``str``), so no caller can reach stored
state through aliasing, and ``load`` returns exactly what ``save`` wrote. Nothing survives
the process; use it for tests and single-process demos.
"""

from __future__ import annotations

import threading

from ..wire.session import SessionSnapshot
from ._cas import cas_allows, check_session_id, prepare_save
from ._closing import AsyncClosing, Closing

__all__ = ["AsyncMemoryStorage", "MemoryStorage"]


class MemoryStorage(Closing):
    """Thread-safe compare-and-set storage in a dict guarded by one lock.

    ``MemoryStorage()`` takes no arguments. The compare and the swap run under the same
    lock, so concurrent ``save`` calls from any number of threads have exactly one winner.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[int, str]] = {}

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        with self._lock:
            row = self._rows.get(key)
        return None if row is None else row[1]

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        prepared = prepare_save(snapshot, expected_cursor)
        with self._lock:
            row = self._rows.get(prepared.session_id)
            if not cas_allows(None if row is None else row[0], prepared.expected):
                return False
            self._rows[prepared.session_id] = (prepared.cursor, prepared.text)
        return True

    def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        key = check_session_id(session_id)
        with self._lock:
            self._rows.pop(key, None)

    def open_connections(self) -> int:
        """Always 0: nothing to leak (the leak-check capability of the conformance kit)."""
        return 0

    def close(self) -> None:
        """Nothing to release; the store stays usable (it may be shared by async twins)."""


class AsyncMemoryStorage(AsyncClosing):
    """The asyncio twin: delegates to a :class:`MemoryStorage` without awaiting inside.

    ``AsyncMemoryStorage(inner=None)``; pass ``inner`` to share one store between sync and
    async code. No ``await`` happens between the compare and the swap, and the lock is held
    for a dict lookup only, so the event loop never waits on it for long.
    """

    def __init__(self, inner: MemoryStorage | None = None) -> None:
        self.sync = inner if inner is not None else MemoryStorage()

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        return self.sync.load(session_id)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        return self.sync.save(snapshot, expected_cursor)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        self.sync.delete(session_id)

    def open_connections(self) -> int:
        """Always 0: nothing to leak."""
        return 0

    async def aclose(self) -> None:
        """Nothing to release; the (possibly shared) store stays usable."""
