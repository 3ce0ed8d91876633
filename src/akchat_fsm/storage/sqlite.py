"""SQLite adapter (stdlib ``sqlite3``): the embedded default.

One row per session: ``session_id TEXT PRIMARY KEY, cursor INTEGER, body TEXT, processing,
written_ms``; records beside it in ``<table>__records`` (primary key ``(session_id, key)``).
Every write is ``BEGIN IMMEDIATE`` (take the write lock first: a deferred read-then-write
transaction fails at once with "database is locked" under contention, busy handler or not),
one conditional statement (two for ``delete``), then ``COMMIT``. The processing index is the
``processing``/``written_ms`` columns of both tables, written by the same statement as the
state they describe, with a partial index on the processing rows (ADR-0085). The pending index
is ``<table>__pending``, whose rows an envelope save replaces inside its own transaction
(ADR-0029).

The connection runs with ``isolation_level=None`` so Python never issues its own implicit
deferred ``BEGIN``; WAL lets readers run beside the one writer; ``synchronous=FULL`` makes an
acknowledged commit survive power loss.

Safe across threads (one connection per adapter, guarded by a lock) and across processes on
one host (SQLite's file locks; WAL does not work on network filesystems).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any, NamedTuple
from urllib.parse import quote

from ..errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.session import SessionSnapshot
from ._audit_index import make_audit_page
from ._cas import (
    DEFAULT_TABLE,
    PreparedSave,
    check_limit,
    check_record_key,
    check_session_id,
    check_sql_identifier,
    loaded_text,
    now_ms,
    prepare_save,
    prepare_save_with_records,
    prepare_stored_record,
    processing_statuses,
    record_prefix_matches_nothing,
)
from ._closing import Closing
from ._pending import carry_since, check_token, make_page
from ._read_only import read_only_refusal
from ._sql import (
    AUDIT_INDEX_MARK,
    AUDIT_WHERE_SQLITE,
    PENDING_COLUMNS,
    PENDING_INDEXES,
    AuditStatements,
    PendingStatements,
    audit_refs,
    found_session,
    pending_items,
    pending_params,
)
from ._threaded import ThreadedAsyncStorage
from .port import (
    AuditRefPage,
    CreatedRecords,
    PendingOrder,
    PendingPage,
    ProcessingSession,
    StoredRecord,
)

__all__ = ["AsyncSQLiteStorage", "SQLiteStorage"]


SCHEMA_HINT = (
    "Point table= at a table akchat-fsm created (or a new name), or give it the expected "
    "columns: session_id TEXT PRIMARY KEY, cursor INTEGER NOT NULL, body TEXT NOT NULL "
    "(see docs/adapters.md)."
)
#: SQLite's messages for a statement that does not fit the table (it has no SQLSTATE).
_SCHEMA_MESSAGES = ("no such table", "no such column", "has no column named")
#: The columns this adapter needs in each table; ``processing``/``written_ms`` are added to a
#: 0.1.0 sessions table by the upgrade, so only a records table must already have them.
_SESSION_COLUMNS = ("session_id", "cursor", "body")
_RECORD_COLUMNS = ("session_id", "key", "version", "body", "processing", "written_ms")
_INDEX_COLUMNS = frozenset({"processing", "written_ms"})


def map_sqlite_error(exc: sqlite3.Error, *, at_commit: bool = False) -> StorageError | ConfigError:
    """Classify a ``sqlite3`` error raised by one of our statements.

    Before ``COMMIT`` nothing can have been applied: ``BEGIN IMMEDIATE`` timing out on the
    busy lock, a failed statement (rolled back), a closed or corrupt file are all
    ``StorageUnavailable``; a statement that does not fit the table (a column or table that
    is not there) is ``ConfigError``, since it fails the same way again. A failure of
    ``COMMIT`` itself is ``OutcomeUnknown``.
    """
    if at_commit:
        return OutcomeUnknown(f"SQLite COMMIT failed; the save may have applied: {exc}")
    if isinstance(exc, sqlite3.OperationalError) and any(m in str(exc) for m in _SCHEMA_MESSAGES):
        return ConfigError(f"SQLite table does not fit akchat-fsm: {exc}", hint=SCHEMA_HINT)
    return StorageUnavailable(f"SQLite: {exc}")


def read_only_uri(path: str) -> str:
    """The URI of ``path`` opened with ``mode=ro``: SQLite then never creates or writes it."""
    return f"file:{quote(os.path.abspath(path))}?mode=ro"


class _Layout(NamedTuple):
    """The columns of the sessions, records and pending tables as found (empty: no table),
    and whether the audit index is there."""

    sessions: frozenset[str]
    records: frozenset[str]
    pending: frozenset[str] = frozenset()
    audit: bool = False

    @property
    def indexed(self) -> bool:
        """Both tables carry the processing index (neither is a 0.1.0 leftover)."""
        return self.sessions >= _INDEX_COLUMNS and bool(self.records)


def _pause() -> None:
    """One short wait between attempts to switch a file to WAL (a seam for the tests)."""
    time.sleep(0.005)


def enable_wal(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """``PRAGMA journal_mode=WAL``, waiting up to ``busy_timeout`` for other connections.

    Switching a rollback-journal file to WAL needs the exclusive lock, and while another
    connection holds a write lock SQLite answers "database is locked" at once, without its busy
    handler (measured). Several processes opening a file created elsewhere (or upgrading a
    0.1.0 table) race exactly there, so the pragma is retried until the deadline; the mode is
    persistent, so once any connection switched the file the pragma is a no-op read.
    """
    deadline = time.monotonic() + busy_timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        _pause()


class SQLiteStorage(Closing):
    """Compare-and-set storage in one SQLite table.

    ``SQLiteStorage(path=":memory:", *, table="akchat_sessions", busy_timeout=5.0)``

    ``path`` is a file path (created if missing) or ``":memory:"`` for a private in-memory
    database that lives as long as this object. ``busy_timeout`` (seconds) is how long a
    write waits for another writer before failing with ``StorageUnavailable``. The file is
    opened (and the table created if missing) on first use; if that fails, the call raises
    ``StorageUnavailable`` and the next call tries again. A table without the columns this
    adapter needs is a ``ConfigError`` naming the column, found before anything is changed.

    ``read_only=True`` opens the file with ``mode=ro`` and runs no DDL, no pragma that writes
    and no upgrade: the file stays byte for byte as it was. A missing file or table is a
    ``ConfigError``; a missing records table reads as no records; a write is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = 5.0,
        read_only: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.table = check_sql_identifier(table)
        self.busy_timeout = float(busy_timeout)
        self.read_only = bool(read_only)
        self._layout = _Layout(frozenset(), frozenset())
        t = self.table
        self._schema = _Schema(t)
        # Bytes, decoded by `loaded_text`: sqlite3's own decoding would fail non-UTF-8 bodies
        # as a (retryable) OperationalError.
        self._select = f"SELECT CAST(body AS BLOB), cursor FROM {t} WHERE session_id = ?"
        self._insert = (
            f"INSERT INTO {t} (session_id, cursor, body, processing, written_ms)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (session_id) DO NOTHING"
        )
        self._update = (
            f"UPDATE {t} SET cursor = ?, body = ?, processing = ?, written_ms = ?"
            " WHERE session_id = ? AND cursor = ?"
        )
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
            if self.read_only and self.path != ":memory:":
                if not os.path.exists(self.path):
                    raise ConfigError(
                        f"No SQLite file at {self.path} (a read-only adapter never creates one).",
                        hint=SCHEMA_HINT,
                    )
                conn = sqlite3.connect(
                    read_only_uri(self.path),
                    uri=True,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            else:
                conn = sqlite3.connect(
                    self.path,
                    timeout=self.busy_timeout,
                    isolation_level=None,
                    check_same_thread=False,  # the lock serialises every use
                )
            layout = self._schema.layout(conn)
            self._schema.check(layout, read_only=self.read_only)
            if not self.read_only:
                if self.path != ":memory:":
                    enable_wal(conn, self.busy_timeout)
                conn.execute("PRAGMA synchronous=FULL")
                self._schema.ensure(conn)
                layout = self._schema.layout(conn)
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise map_sqlite_error(exc) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        self._conn, self._layout = conn, layout
        return conn

    def _refuse_if_read_only(self, what: str) -> None:
        if self.read_only:
            raise read_only_refusal("SQLiteStorage", what)

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
        flag = int(p.processing)
        if p.expected is None:
            create = (p.session_id, p.cursor, p.text, flag, p.written_ms)
            return self._write(self._insert, create, pending=p)
        update = (p.cursor, p.text, flag, p.written_ms, p.session_id, p.expected)
        return self._write(self._update, update, pending=p)

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one transaction, all or nothing
        (``SaveWithRecords``)."""
        # The envelope's CAS, then one INSERT … DO NOTHING per record: any that changes no row
        # (the key exists) rolls everything back, and the answer is False.
        p, created = prepare_save_with_records(snapshot, expected_cursor, records)
        flag = int(p.processing)
        inserts = tuple(
            (
                self._schema.insert_record,
                (r.session_id, r.key, r.version, r.text, 0, r.written_ms),
            )
            for r in created
        )
        if p.expected is None:
            create = (p.session_id, p.cursor, p.text, flag, p.written_ms)
            return self._write(self._insert, create, pending=p, creates=inserts)
        update = (p.cursor, p.text, flag, p.written_ms, p.session_id, p.expected)
        return self._write(self._update, update, pending=p, creates=inserts)

    def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records (one transaction); a missing one is no error."""
        key = (check_session_id(session_id),)
        self._write(
            self._delete,
            key,
            (self._schema.delete_records, key),
            (self._schema.delete_pending, key),
        )

    def _write(
        self,
        sql: str,
        params: tuple[object, ...],
        *more: tuple[str, tuple[object, ...]],
        pending: PreparedSave | None = None,
        creates: tuple[tuple[str, tuple[object, ...]], ...] = (),
    ) -> bool:
        """``BEGIN IMMEDIATE``; one statement; ``COMMIT`` iff it changed one row.

        ``more`` statements run after the first in the same transaction, whatever it changed
        (``delete``: the session's records go with its envelope). ``pending``: an envelope
        save, whose pending rows are replaced in the same transaction once it changed a row.
        ``creates``: statements that must each change one row too (a record's create-only
        insert), else the whole transaction rolls back (``save_with_records``).
        """
        self._refuse_if_read_only("a write")
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                changed = conn.execute(sql, params).rowcount == 1
                for extra_sql, extra_params in more:
                    changed = conn.execute(extra_sql, extra_params).rowcount > 0 or changed
                for create_sql, create_params in creates if changed else ():
                    changed = conn.execute(create_sql, create_params).rowcount == 1
                    if not changed:
                        break
                if not changed:
                    conn.execute("ROLLBACK")
                    return False
                if pending is not None:
                    self._schema.replace_pending(conn, pending)
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

    def _read(
        self,
        sql: str,
        params: tuple[object, ...],
        *,
        records: bool = False,
        index: bool = False,
        pending: bool = False,
        audit: bool = False,
    ) -> list[Any]:
        """Rows of one query. ``records``: it reads the records table, which a read-only
        adapter may find missing (no records); ``index``/``pending``: it needs the processing
        / pending index, which a read-only adapter cannot add to an older table
        (``ConfigError``); ``audit``: it needs the audit index (a store without records has no
        entries: the empty answer)."""
        with self._lock:
            conn = self._connection()
            if (records or audit) and not self._layout.records:
                return []
            missing = (
                (index and not self._layout.indexed and "processing")
                or (pending and not self._layout.pending and "pending")
                or (audit and not self._layout.audit and "audit")
            )
            if missing:
                raise ConfigError(
                    f"SQLite table {self.table!r} predates the {missing} index and a "
                    "read-only adapter does not upgrade it.",
                    hint="Open it once without read_only (any host, or a writing verb).",
                )
            try:
                return conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise map_sqlite_error(exc) from exc

    # ------------------------------------------------------------------ records capability
    def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        rows = self._read(
            self._schema.select_record,
            (check_session_id(session_id), check_record_key(key)),
            records=True,
        )
        return None if not rows else (int(rows[0][0]), str(rows[0][1]))

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        p = prepare_stored_record(session_id, key, text, expected_version, processing)
        flag = int(p.processing)
        if p.expected is None:
            create = (p.session_id, p.key, p.version, p.text, flag, p.written_ms)
            return self._write(self._schema.insert_record, create)
        update = (p.version, p.text, flag, p.written_ms, p.session_id, p.key, p.expected)
        return self._write(self._schema.update_record, update)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        sid = check_session_id(session_id)
        if record_prefix_matches_nothing(prefix):
            return []
        rows = self._read(self._schema.list_records, (sid, len(prefix), prefix), records=True)
        return sorted(str(row[0]) for row in rows)

    def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        self._write(
            self._schema.delete_record, (check_session_id(session_id), check_record_key(key))
        )

    # ------------------------------------------------------------------ processing index
    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        count, before = check_limit(limit, written_before_ms)
        rows = self._read(self._schema.list_processing, (before, before, count), index=True)
        return [ProcessingSession(str(sid), int(ms)) for sid, ms in rows]

    # ------------------------------------------------------------------ pending index
    def list_pending(
        self,
        *,
        action: str | None = None,
        session_id: str | None = None,
        expiring_before_ms: int | None = None,
        pending_before_ms: int | None = None,
        order: PendingOrder = "expiry",
        after: str | None = None,
        limit: int = 50,
    ) -> PendingPage:
        """One page of the pending bindings across sessions (see the port's ``PendingIndex``)."""
        query, sql, params = self._schema.pending_sql.list_statement(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        rows = self._read(sql, params, pending=True)
        return make_page(query, pending_items(rows))

    def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        rows = self._read(self._schema.pending_sql.find_token, (check_token(token),), pending=True)
        return found_session(rows[0] if rows else None)

    # ------------------------------------------------------------------ audit index
    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query, sql, params = self._schema.audit_sql.list_statement(
            since_ms=since_ms, after=after, limit=limit
        )
        return make_audit_page(query, audit_refs(self._read(sql, params, audit=True)))

    # ------------------------------------------------------------------ lifecycle
    def open_connections(self) -> int:
        """1 while a connection is open, else 0 (the kit's leak check)."""
        return 0 if self._conn is None else 1

    def close(self) -> None:
        """Close the connection (after a call in flight; no transaction outlives a call)."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _binding_field(name: str) -> str:
    """A field of the binding ``c`` of ``json_each``, read through the body ``s.body`` (which
    is valid JSON there; a text element's ``value`` is not JSON text)."""
    return f"json_extract(s.body, c.fullkey || '.{name}')"


class _Schema:
    """The SQL of the records table and the processing index, and the in-place upgrade.

    Tables written by 0.1.0 lack ``processing``/``written_ms``: :meth:`ensure` adds them under
    the write lock (so concurrent first connections upgrade once) and backfills the flag of
    envelopes already holding a processing confirmation, stamped with the upgrade time
    (ADR-0085). A store without the pending table gets it, filled from the envelopes' pending
    bindings, in the same transaction (ADR-0029). An up-to-date schema costs two catalog reads
    and takes no lock.
    """

    def __init__(self, table: str) -> None:
        t, r, p = table, f"{table}__records", f"{table}__pending"
        self.table, self.records, self.pending = t, r, p
        # The audit index (ADR-0139): the records `audit_indexed` admits, a partial index on the
        # records table, so the record's own INSERT writes it; building it on an existing
        # table (the upgrade) indexes the entries already there.
        self.audit_index = f"{r}_{AUDIT_INDEX_MARK}"
        audit_where = AUDIT_WHERE_SQLITE
        self.indexes = (
            f"{t}__processing",
            f"{r}_processing",
            *(f"{p}{suffix}" for suffix in PENDING_INDEXES),
            self.audit_index,
        )
        self.create = (
            f"CREATE TABLE IF NOT EXISTS {t} (session_id TEXT PRIMARY KEY NOT NULL,"
            " cursor INTEGER NOT NULL, body TEXT NOT NULL,"
            " processing INTEGER NOT NULL DEFAULT 0, written_ms INTEGER NOT NULL DEFAULT 0)",
            f"CREATE TABLE IF NOT EXISTS {r} (session_id TEXT NOT NULL, key TEXT NOT NULL,"
            " version INTEGER NOT NULL, body TEXT NOT NULL,"
            " processing INTEGER NOT NULL DEFAULT 0, written_ms INTEGER NOT NULL DEFAULT 0,"
            " PRIMARY KEY (session_id, key))",
            f"CREATE INDEX IF NOT EXISTS {self.indexes[0]} ON {t} (written_ms)"
            " WHERE processing = 1",
            f"CREATE INDEX IF NOT EXISTS {self.indexes[1]} ON {r} (session_id)"
            " WHERE processing = 1",
            f"CREATE TABLE IF NOT EXISTS {p} (session_id TEXT NOT NULL, token TEXT NOT NULL,"
            " tool_call_id TEXT NOT NULL, action TEXT NOT NULL, expires_at_ms INTEGER NOT NULL,"
            " pending_since_ms INTEGER NOT NULL, PRIMARY KEY (session_id, token))",
            *(
                f"CREATE INDEX IF NOT EXISTS {p}{suffix} ON {p} ({columns})"
                for suffix, columns in PENDING_INDEXES.items()
            ),
            f"CREATE INDEX IF NOT EXISTS {self.audit_index} ON {r}"
            f" (written_ms, session_id, key) WHERE {audit_where}",
        )
        self.audit_sql = AuditStatements(
            r, "?", when="written_ms", where=audit_where, row_values=True
        )
        # The pending rows of envelopes written before the pending index (ADR-0029), once:
        # with the table. A binding's `since` is its envelope's last write when known (it was
        # pending then), else the upgrade's instant. Anything but a well-formed pending binding
        # is skipped, never an upgrade failure.
        field = _binding_field
        self.backfill_pending = (
            f"INSERT OR IGNORE INTO {p} ({PENDING_COLUMNS}) SELECT s.session_id,"
            f" {field('token')}, {field('toolCallId')}, {field('action')},"
            f" {field('expiresAt')}, CASE WHEN s.written_ms > 0 THEN s.written_ms ELSE ? END"
            f" FROM {t} s, json_each(CASE WHEN NOT json_valid(s.body) THEN '[]'"
            " WHEN json_type(s.body, '$.confirmations') = 'array' THEN s.body ELSE '[]' END,"
            " '$.confirmations') c"
            " WHERE s.body LIKE '%\"status\":\"pending\"%' AND c.type = 'object'"
            f" AND {field('status')} = 'pending'"
            + "".join(
                f" AND json_type(s.body, c.fullkey || '.{name}') = '{kind}'"
                for name, kind in (
                    ("token", "text"),
                    ("toolCallId", "text"),
                    ("action", "text"),
                    ("expiresAt", "integer"),
                )
            )
        )
        self.pending_sql = PendingStatements(p, "?", row_values=True)
        self.select_since = f"SELECT token, pending_since_ms FROM {p} WHERE session_id = ?"
        self.insert_pending = f"INSERT INTO {p} ({PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
        self.delete_pending = f"DELETE FROM {p} WHERE session_id = ?"
        statuses = ", ".join(f"'{s}'" for s in processing_statuses())
        rough = " OR ".join(f'body LIKE \'%"status":"{s}"%\'' for s in processing_statuses())
        # LIKE finds the candidates cheaply; the JSON check confirms each (a tool input may
        # hold the same characters). Invalid JSON is left alone, never an upgrade failure.
        self.backfill = (
            f"UPDATE {t} SET processing = 1, written_ms = ? WHERE ({rough}) AND CASE"
            " WHEN json_valid(body) THEN EXISTS (SELECT 1 FROM json_each(body, '$.confirmations')"
            f" c WHERE json_extract(body, c.fullkey || '.status') IN ({statuses})) ELSE 0 END"
        )
        self.select_record = f"SELECT version, body FROM {r} WHERE session_id = ? AND key = ?"
        self.insert_record = (
            f"INSERT INTO {r} (session_id, key, version, body, processing, written_ms)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (session_id, key) DO NOTHING"
        )
        self.update_record = (
            f"UPDATE {r} SET version = ?, body = ?, processing = ?, written_ms = ?"
            " WHERE session_id = ? AND key = ? AND version = ?"
        )
        self.list_records = f"SELECT key FROM {r} WHERE session_id = ? AND substr(key, 1, ?) = ?"
        self.delete_record = f"DELETE FROM {r} WHERE session_id = ? AND key = ?"
        self.delete_records = f"DELETE FROM {r} WHERE session_id = ?"
        # Only processing rows are visited (the partial indexes); a listed session's last
        # write is the newest of its envelope's and its records' (primary-key lookups).
        self.list_processing = (
            "SELECT session_id, last FROM (SELECT p.session_id AS session_id, max("
            f" coalesce((SELECT s.written_ms FROM {t} s WHERE s.session_id = p.session_id), 0),"
            f" coalesce((SELECT max(x.written_ms) FROM {r} x WHERE x.session_id = p.session_id),"
            f" 0)) AS last FROM (SELECT session_id FROM {t} WHERE processing = 1"
            f" UNION SELECT session_id FROM {r} WHERE processing = 1) p)"
            " WHERE ? IS NULL OR last < ? ORDER BY last, session_id LIMIT ?"
        )

    def layout(self, conn: sqlite3.Connection) -> _Layout:
        """The columns of the tables as they are (three catalog reads, no lock, no write)."""

        def columns(table: str) -> frozenset[str]:
            return frozenset(str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})"))

        audit = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (self.audit_index,)
        ).fetchall()
        return _Layout(
            columns(self.table), columns(self.records), columns(self.pending), bool(audit)
        )

    def replace_pending(self, conn: sqlite3.Connection, p: PreparedSave) -> None:
        """Replace the session's pending rows, inside the transaction of its envelope's save."""
        previous: dict[str, int] = {}
        if p.pending:
            rows = conn.execute(self.select_since, (p.session_id,)).fetchall()
            previous = {str(token): int(since) for token, since in rows}
        conn.execute(self.delete_pending, (p.session_id,))
        if p.pending:
            items = carry_since(p.session_id, p.pending, previous, p.written_ms)
            conn.executemany(self.insert_pending, pending_params(items))

    def check(self, layout: _Layout, *, read_only: bool) -> None:
        """``ConfigError`` naming the first needed column a table lacks, before any change.

        A missing sessions table is created by a writing adapter; for a read-only one it is
        an error. A records table, if present, must be complete: the upgrade never alters it.
        """
        if not layout.sessions:
            if read_only:
                raise ConfigError(
                    f"SQLite has no table {self.table!r} (a read-only adapter never creates one).",
                    hint=SCHEMA_HINT,
                )
            return
        for table, found, needed in (
            (self.table, layout.sessions, _SESSION_COLUMNS),
            (self.records, layout.records, _RECORD_COLUMNS if layout.records else ()),
        ):
            for column in needed:
                if column not in found:
                    raise ConfigError(
                        f"SQLite table {table!r} has no column {column!r}: it is not an "
                        "akchat-fsm table.",
                        hint=SCHEMA_HINT,
                    )

    def _current(self, conn: sqlite3.Connection) -> bool:
        columns = {row[1] for row in conn.execute(f"PRAGMA table_info({self.table})")}
        names = (self.records, self.pending, *self.indexes)
        marks = ", ".join("?" for _ in names)
        found = conn.execute(
            f"SELECT count(*) FROM sqlite_master WHERE name IN ({marks})", names
        ).fetchone()
        return {"processing", "written_ms"} <= columns and found == (len(names),)

    def ensure(self, conn: sqlite3.Connection) -> None:
        """Create or upgrade the tables and indexes; a no-op on an up-to-date database."""
        if self._current(conn):
            return
        conn.execute("BEGIN IMMEDIATE")
        try:
            old = {row[1] for row in conn.execute(f"PRAGMA table_info({self.table})")}
            for statement in self.create[:1]:
                conn.execute(statement)
            if old and "processing" not in old:
                conn.execute(
                    f"ALTER TABLE {self.table} ADD COLUMN processing INTEGER NOT NULL DEFAULT 0"
                )
            if old and "written_ms" not in old:
                conn.execute(
                    f"ALTER TABLE {self.table} ADD COLUMN written_ms INTEGER NOT NULL DEFAULT 0"
                )
            if old and "processing" not in old:
                conn.execute(self.backfill, (now_ms(),))
            backfill = (
                bool(old)
                and not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.pending,)
                ).fetchall()
            )
            for statement in self.create[1:]:
                conn.execute(statement)
            if backfill:
                conn.execute(self.backfill_pending, (now_ms(),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


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
        read_only: bool = False,
    ) -> None:
        super().__init__(
            SQLiteStorage(path, table=table, busy_timeout=busy_timeout, read_only=read_only)
        )
