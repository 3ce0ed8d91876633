"""Shared helpers for the storage tests: snapshots, the sync facade, the race harness.

Imported as a plain module (``tests/storage`` is on ``sys.path`` under pytest's default
import mode), so its name is unique across the test tree.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from akchat_fsm.wire.session import SessionSnapshot

T = TypeVar("T")


def snap(session_id: str, cursor: int, *, note: str = "x") -> SessionSnapshot:
    """A minimal valid v1 snapshot; ``note`` makes bodies distinguishable."""
    return SessionSnapshot(
        session_id=session_id,
        definition_id=f"def-{note}",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=(),
    )


class Client:
    """A synchronous view of one adapter instance, sync or async."""

    def __init__(self, adapter: Any, is_async: bool) -> None:
        self.adapter = adapter
        self.is_async = is_async
        self._runner = asyncio.Runner() if is_async else None
        self.closed = False

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.adapter, name)
        if self._runner is None:
            return method(*args, **kwargs)
        return self._runner.run(method(*args, **kwargs))

    def load(self, session_id: str) -> Any:
        return self._call("load", session_id)

    def save(self, snapshot: SessionSnapshot, expected: int | None) -> bool:
        result = self._call("save", snapshot, expected)
        assert isinstance(result, bool)
        return result

    def delete(self, session_id: str) -> None:
        self._call("delete", session_id)

    # The optional capabilities (records, processing index).
    def load_record(self, session_id: str, key: str) -> Any:
        return self._call("load_record", session_id, key)

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        result = self._call("save_record", session_id, key, text, expected, processing=processing)
        assert isinstance(result, bool)
        return result

    def list_records(self, session_id: str, prefix: str = "") -> Any:
        return self._call("list_records", session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        self._call("delete_record", session_id, key)

    def list_processing(self, *, written_before_ms: int | None = None, limit: int = 1000) -> Any:
        return self._call("list_processing", written_before_ms=written_before_ms, limit=limit)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._runner is None:
            self.adapter.close()
        else:
            self._runner.run(self.adapter.aclose())
            self._runner.close()


@dataclass
class Backend:
    """How to open another adapter instance on the same store, sync or async."""

    name: str
    url: str
    open_sync: Callable[[], Any]
    open_async: Callable[[], Any]
    #: Backend-specific probes for fault tests (e.g. the PostgreSQL admin URL).
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Harness:
    backend: Backend
    is_async: bool
    clients: list[Client] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return self.backend.name

    def client(self) -> Client:
        """A new adapter instance (its own connection) on the shared store."""
        opener = self.backend.open_async if self.is_async else self.backend.open_sync
        c = Client(opener(), self.is_async)
        with self._lock:
            self.clients.append(c)
        return c

    def race(self, n: int, body: Callable[[Client], T]) -> list[T]:
        """Run ``body`` in ``n`` threads, each with its own client, released by one Barrier."""
        barrier = threading.Barrier(n)
        results: list[Any] = [None] * n
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                c = self.client()
                barrier.wait(timeout=30)
                results[i] = body(c)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        if errors:
            raise errors[0]
        return results

    def close(self) -> None:
        for c in self.clients:
            c.close()


def mysql_admin(mysql_url: str) -> Any:
    """A plain autocommit PyMySQL connection to the server of ``mysql_url`` (for probes)."""
    import pymysql

    return pymysql.connect(**mysql_server_args(mysql_url), autocommit=True)


def mysql_server_args(mysql_url: str) -> dict[str, Any]:
    """Host, port, user, password and database of a ``mysql://`` test URL (no query part)."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(mysql_url)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": unquote(parts.path.lstrip("/")),
    }


def drop_mysql_tables(mysql_url: str, table: str) -> None:
    """Drop ``table`` and every table the adapter derives from it, if they exist: records,
    pending index, and the pending index's build table (left by a build cut short)."""
    conn = mysql_admin(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending,"
                f" {table}__pending_build"
            )
    finally:
        conn.close()
