"""SQLite adapter (stdlib ``sqlite3``): the embedded default.

One row per session: ``session_id TEXT PRIMARY KEY, cursor INTEGER, body TEXT``. Every write
is ``BEGIN IMMEDIATE`` (take the write lock first: a deferred read-then-write transaction
fails at once with "database is locked" under contention, busy handler or not), one
conditional statement, then ``COMMIT``. The connection runs with ``isolation_level=None`` so
Python never issues its own implicit deferred ``BEGIN``; WAL lets readers run beside the one
writer; ``synchronous=FULL`` makes an acknowledged commit survive power loss.

Safe across threads (one connection per adapter, guarded by a lock) and across processes on
one host (SQLite's file locks; WAL does not work on network filesystems).
"""

from __future__ import annotations

import os
import sqlite3
import threading

from ..errors import OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.session import SessionSnapshot
from ._cas import check_session_id, check_sql_identifier, loaded_text, prepare_save
from ._closing import Closing
from ._threaded import ThreadedAsyncStorage

__all__ = ["AsyncSQLiteStorage", "SQLiteStorage"]

DEFAULT_TABLE = "akchat_sessions"


def map_sqlite_error(exc: sqlite3.Error, *, at_commit: bool = False) -> StorageError:
    """Classify a ``sqlite3`` error raised by one of our statements.

    Before ``COMMIT`` nothing can have been applied: ``BEGIN IMMEDIATE`` timing out on the
    busy lock, a failed statement (rolled back), a closed or corrupt file are all
    ``StorageUnavailable``. A failure of ``COMMIT`` itself is ``OutcomeUnknown``.
    """
    if at_commit:
        return OutcomeUnknown(f"SQLite COMMIT failed; the save may have applied: {exc}")
    return StorageUnavailable(f"SQLite: {exc}")


class SQLiteStorage(Closing):
    """Compare-and-set storage in one SQLite table.

    ``SQLiteStorage(path=":memory:", *, table="akchat_sessions", busy_timeout=5.0)``

    ``path`` is a file path (created if missing) or ``":memory:"`` for a private in-memory
    database that lives as long as this object. ``busy_timeout`` (seconds) is how long a
    write waits for another writer before failing with ``StorageUnavailable``. The file is
    opened (and the table created if missing) on first use; if that fails, the call raises
    ``StorageUnavailable`` and the next call tries again.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = 5.0,
    ) -> None:
        self.path = os.fspath(path)
        self.table = check_sql_identifier(table)
        self.busy_timeout = float(busy_timeout)
        t = self.table
        self._create = (
            f"CREATE TABLE IF NOT EXISTS {t} (session_id TEXT PRIMARY KEY NOT NULL,"
            " cursor INTEGER NOT NULL, body TEXT NOT NULL)"
        )
        # Bytes, decoded by `loaded_text`: sqlite3's own decoding would fail non-UTF-8 bodies
        # as a (retryable) OperationalError.
        self._select = f"SELECT CAST(body AS BLOB), cursor FROM {t} WHERE session_id = ?"
        self._insert = (
            f"INSERT INTO {t} (session_id, cursor, body) VALUES (?, ?, ?)"
            " ON CONFLICT (session_id) DO NOTHING"
        )
        self._update = f"UPDATE {t} SET cursor = ?, body = ? WHERE session_id = ? AND cursor = ?"
        self._delete = f"DELETE FROM {t} WHERE session_id = ?"
        self._lock = threading.Lock()
        self._closed = False
        # Opened on first use, like the server adapters: a constructor never fails on I/O.
        self._conn: sqlite3.Connection | None = None

    # ------------------------------------------------------------------ connection
    def _connection(self) -> sqlite3.Connection:
        """The open connection, opened (again) if needed. Call with the lock held."""
        if self._closed:
            raise StorageUnavailable("SQLiteStorage is closed.")
        if self._conn is not None:
            return self._conn
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,  # the lock serialises every use
            )
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL").fetchall()
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(self._create)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise map_sqlite_error(exc) from exc
        self._conn = conn
        return conn

    def _discard_if_stuck(self, conn: sqlite3.Connection) -> None:
        """Roll back a failed write; drop the connection if even that fails."""
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        if conn.in_transaction and self.path != ":memory:":
            # Never reuse a connection stuck in a transaction: reopen on the next call. (A
            # private in-memory database would vanish with it, so that one is kept: its next
            # BEGIN fails loudly with StorageUnavailable instead.)
            conn.close()
            self._conn = None

    # ------------------------------------------------------------------ port
    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        with self._lock:
            conn = self._connection()
            try:
                rows = conn.execute(self._select, (key,)).fetchall()
            except sqlite3.Error as exc:
                raise map_sqlite_error(exc) from exc
        return None if not rows else loaded_text(key, rows[0][0], rows[0][1])

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        p = prepare_save(snapshot, expected_cursor)
        if p.expected is None:
            return self._write(self._insert, (p.session_id, p.cursor, p.text))
        return self._write(self._update, (p.cursor, p.text, p.session_id, p.expected))

    def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        self._write(self._delete, (check_session_id(session_id),))

    def _write(self, sql: str, params: tuple[object, ...]) -> bool:
        """``BEGIN IMMEDIATE``; one statement; ``COMMIT`` iff it changed one row."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                changed = conn.execute(sql, params).rowcount == 1
                if not changed:
                    conn.execute("ROLLBACK")
                    return False
            except sqlite3.Error as exc:
                self._discard_if_stuck(conn)
                raise map_sqlite_error(exc) from exc
            except BaseException:
                self._discard_if_stuck(conn)
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._discard_if_stuck(conn)
                raise map_sqlite_error(exc, at_commit=True) from exc
            return True

    # ------------------------------------------------------------------ lifecycle
    def open_connections(self) -> int:
        """1 while a connection is open, else 0 (the kit's leak check)."""
        return 0 if self._conn is None else 1

    def close(self) -> None:
        """Close the connection (rolling back nothing: no transaction outlives a call)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class AsyncSQLiteStorage(ThreadedAsyncStorage[SQLiteStorage]):
    """The asyncio twin: a :class:`SQLiteStorage` whose calls run in a worker thread.

    Takes the same arguments as :class:`SQLiteStorage`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = 5.0,
    ) -> None:
        super().__init__(SQLiteStorage(path, table=table, busy_timeout=busy_timeout))
