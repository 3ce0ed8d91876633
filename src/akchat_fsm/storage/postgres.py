"""PostgreSQL adapter (psycopg 3, extra ``postgres``).

One row per session: ``session_id text PRIMARY KEY, cursor bigint, body text, updated_at``.
The body is ``text``, not ``jsonb``: ``load`` returns the canonical JSON byte for byte.
Each call is one autocommit statement, so no transaction (and no snapshot) outlives it:

* create: ``INSERT … ON CONFLICT (session_id) DO NOTHING RETURNING cursor``
* update: ``UPDATE … WHERE session_id = %s AND cursor = %s RETURNING cursor``

A returned row means the write committed; no row means a definite conflict. Correct under
READ COMMITTED (the loser waits for the winner, re-checks ``cursor`` and matches no row) and
under REPEATABLE READ / SERIALIZABLE (the loser gets SQLSTATE 40001, mapped to ``False``).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from ..errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.session import SessionSnapshot
from ._cas import check_session_id, check_sql_identifier, loaded_text, prepare_save
from ._closing import AsyncClosing, Closing

__all__ = ["AsyncPostgresStorage", "PostgresStorage", "map_pg_error"]

DEFAULT_TABLE = "akchat_sessions"
ISOLATIONS = {
    "read_committed": "read committed",
    "repeatable_read": "repeatable read",
    "serializable": "serializable",
}

#: Definite conflicts: the statement was rolled back because another writer won.
CONFLICT_STATES = frozenset({"40001", "40P01", "23505"})
#: The server says it does not know whether the commit happened.
UNKNOWN_STATES = frozenset({"40003", "08007"})


def map_pg_error(
    exc: BaseException, *, sent: bool, write: bool, broken: bool
) -> StorageError | None:
    """Classify a psycopg error; ``None`` means a definite conflict (``save`` → ``False``).

    ``sent``: the statement was handed to an established connection. ``broken``: the
    connection was lost with the error (no reply, or the server hung up). A reply carrying
    an error is definite for an autocommit statement (its transaction rolled back), except
    for the codes that say the commit's fate is unknown; a lost connection after sending a
    write is ``OutcomeUnknown``; a read never has an unknown outcome.
    """
    state = getattr(exc, "sqlstate", None)
    if not sent:
        return StorageUnavailable(f"PostgreSQL unreachable: {exc}")
    if write and state in CONFLICT_STATES:
        return None
    if write and (
        state in UNKNOWN_STATES
        or broken
        or state is None
        or state.startswith("08")
        or state.startswith("57P")  # admin/crash shutdown: the backend died mid-call
    ):
        return OutcomeUnknown(f"PostgreSQL write may have applied: {exc}")
    return StorageUnavailable(f"PostgreSQL: {exc}")


def _idle_and_quiet(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Is this connection safe to send on? Checked before every call, without I/O.

    An idle connection has nothing to read; if its socket is readable, the server has hung
    up (``pg_terminate_backend``, restart) or sent a fatal notice, so we reconnect *before*
    sending instead of learning it from a write whose fate would then be unknown.
    """
    if conn.closed or conn.broken or conn.info.transaction_status != TransactionStatus.IDLE:
        return False
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN)
        return not poller.poll(0)
    except (AttributeError, OSError, psycopg.Error):  # no poll() on this platform: trust it
        return True


class _Plan:
    """Everything but the I/O: validated options, SQL text, connection setup."""

    def __init__(
        self,
        conninfo: str,
        table: str,
        isolation: str,
        statement_timeout_ms: int | None,
        connect_timeout: float,
    ) -> None:
        if not isinstance(conninfo, str):
            raise ConfigError("conninfo must be a libpq connection string or URL.")
        if isolation not in ISOLATIONS:
            raise ConfigError(f"isolation must be one of {sorted(ISOLATIONS)}, got {isolation!r}.")
        if statement_timeout_ms is not None and (
            isinstance(statement_timeout_ms, bool)
            or not isinstance(statement_timeout_ms, int)
            or statement_timeout_ms < 0
        ):
            raise ConfigError("statement_timeout_ms must be a non-negative int or None.")
        self.conninfo = conninfo
        self.table = t = check_sql_identifier(table)
        self.connect_kwargs: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        self.setup = [f"SET default_transaction_isolation = '{ISOLATIONS[isolation]}'"]
        if statement_timeout_ms is not None:
            self.setup.append(f"SET statement_timeout = {statement_timeout_ms}")
        self.create = (
            f"CREATE TABLE IF NOT EXISTS {t} (session_id text PRIMARY KEY,"
            " cursor bigint NOT NULL, body text NOT NULL,"
            " updated_at timestamptz NOT NULL DEFAULT now())"
        )
        self.select = f"SELECT body, cursor FROM {t} WHERE session_id = %s"
        self.insert = (
            f"INSERT INTO {t} (session_id, cursor, body) VALUES (%s, %s, %s)"
            " ON CONFLICT (session_id) DO NOTHING RETURNING cursor"
        )
        self.update = (
            f"UPDATE {t} SET cursor = %s, body = %s, updated_at = now()"
            " WHERE session_id = %s AND cursor = %s RETURNING cursor"
        )
        self.delete = f"DELETE FROM {t} WHERE session_id = %s"

    def save_statement(self, snapshot: Any, expected_cursor: Any) -> tuple[str, tuple[Any, ...]]:
        p = prepare_save(snapshot, expected_cursor)
        if p.expected is None:
            return self.insert, (p.session_id, p.cursor, p.text)
        return self.update, (p.cursor, p.text, p.session_id, p.expected)


# Two sessions racing CREATE TABLE IF NOT EXISTS can still collide in the catalog.
_CREATE_RACE = (pg_errors.UniqueViolation, pg_errors.DuplicateTable, pg_errors.DuplicateObject)


class PostgresStorage(Closing):
    """Compare-and-set storage in one PostgreSQL table, over one autocommit connection.

    ``PostgresStorage(conninfo="", *, table="akchat_sessions", isolation="read_committed",
    statement_timeout_ms=None, connect_timeout=10.0)``

    ``conninfo`` is a libpq URL or ``key=value`` string. The connection opens on first use
    (failure: ``StorageUnavailable``), creates the table if missing, and is reopened after
    it breaks. Calls from several threads are serialised by a lock; open one adapter per
    worker for parallel writes. ``isolation`` sets ``default_transaction_isolation``.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        table: str = DEFAULT_TABLE,
        isolation: str = "read_committed",
        statement_timeout_ms: int | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self._plan = _Plan(conninfo, table, isolation, statement_timeout_ms, connect_timeout)
        self.table = self._plan.table
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False

    def _connection(self) -> psycopg.Connection[Any]:
        if self._closed:
            raise StorageUnavailable("PostgresStorage is closed.")
        if self._conn is not None:
            if _idle_and_quiet(self._conn):
                return self._conn
            self._conn.close()
            self._conn = None
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = psycopg.connect(self._plan.conninfo, **self._plan.connect_kwargs)
            # The table first: a short statement_timeout must not apply to the DDL.
            with contextlib.suppress(*_CREATE_RACE):
                conn.execute(self._plan.create)
            for statement in self._plan.setup:
                conn.execute(statement)
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            raise StorageUnavailable(f"PostgreSQL unreachable: {exc}") from exc
        self._conn = conn
        return conn

    def _run(self, sql: str, params: tuple[Any, ...], *, write: bool) -> tuple[Any, ...] | None:
        """Execute one statement; the first row, or ``None`` (no row, or a conflict)."""
        with self._lock:
            conn = self._connection()
            try:
                cur = conn.execute(sql, params)
                return cur.fetchone() if cur.description is not None else None
            except psycopg.Error as exc:
                error = map_pg_error(exc, sent=True, write=write, broken=conn.broken)
                if error is None:
                    return None
                raise error from exc
            except BaseException:
                conn.close()  # interrupted mid-protocol: never reuse
                self._conn = None
                raise

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        row = self._run(self._plan.select, (key,), write=False)
        return None if row is None else loaded_text(key, row[0], row[1])

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        sql, params = self._plan.save_statement(snapshot, expected_cursor)
        return self._run(sql, params, write=True) is not None

    def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        self._run(self._plan.delete, (check_session_id(session_id),), write=True)

    def open_connections(self) -> int:
        """1 while a connection is open, else 0 (the kit's leak check)."""
        return 0 if self._conn is None or self._conn.closed else 1

    def close(self) -> None:
        """Close the connection; later calls raise ``StorageUnavailable``."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class AsyncPostgresStorage(AsyncClosing):
    """The asyncio twin of :class:`PostgresStorage` (same arguments, ``psycopg.AsyncConnection``).

    Decisions (SQL, error mapping, health check) are shared; only the awaits differ. A task
    cancelled during ``save`` may still have committed: treat it as an unknown outcome.
    """

    def __init__(
        self,
        conninfo: str = "",
        *,
        table: str = DEFAULT_TABLE,
        isolation: str = "read_committed",
        statement_timeout_ms: int | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self._plan = _Plan(conninfo, table, isolation, statement_timeout_ms, connect_timeout)
        self.table = self._plan.table
        self._lock = asyncio.Lock()
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._closed = False

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise StorageUnavailable("AsyncPostgresStorage is closed.")
        if self._conn is not None:
            if _idle_and_quiet(self._conn):
                return self._conn
            await self._conn.close()
            self._conn = None
        conn: psycopg.AsyncConnection[Any] | None = None
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._plan.conninfo, **self._plan.connect_kwargs
            )
            with contextlib.suppress(*_CREATE_RACE):
                await conn.execute(self._plan.create)
            for statement in self._plan.setup:
                await conn.execute(statement)
        except psycopg.Error as exc:
            if conn is not None:
                await conn.close()
            raise StorageUnavailable(f"PostgreSQL unreachable: {exc}") from exc
        self._conn = conn
        return conn

    async def _run(
        self, sql: str, params: tuple[Any, ...], *, write: bool
    ) -> tuple[Any, ...] | None:
        async with self._lock:
            conn = await self._connection()
            try:
                cur = await conn.execute(sql, params)
                return await cur.fetchone() if cur.description is not None else None
            except psycopg.Error as exc:
                error = map_pg_error(exc, sent=True, write=write, broken=conn.broken)
                if error is None:
                    return None
                raise error from exc
            except BaseException:
                await conn.close()
                self._conn = None
                raise

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        row = await self._run(self._plan.select, (key,), write=False)
        return None if row is None else loaded_text(key, row[0], row[1])

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        sql, params = self._plan.save_statement(snapshot, expected_cursor)
        return await self._run(sql, params, write=True) is not None

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        await self._run(self._plan.delete, (check_session_id(session_id),), write=True)

    def open_connections(self) -> int:
        """1 while a connection is open, else 0 (the kit's leak check)."""
        return 0 if self._conn is None or self._conn.closed else 1

    async def aclose(self) -> None:
        """Close the connection; later calls raise ``StorageUnavailable``."""
        async with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
