"""PostgreSQL adapter (psycopg 3, extra ``postgres``).

One row per session: ``session_id text PRIMARY KEY, cursor bigint, body text, updated_at``.
The body is ``text``, not ``jsonb``: ``load`` returns the canonical JSON byte for byte.
Each call is one autocommit statement, so no transaction (and no snapshot) outlives it:

* create: ``INSERT … ON CONFLICT (session_id) DO NOTHING RETURNING cursor``
* update: ``UPDATE … WHERE session_id = %s AND cursor = %s RETURNING cursor``

A returned row means the write committed; no row means a definite conflict. Correct under
READ COMMITTED (the loser waits for the winner, re-checks ``cursor`` and matches no row) and
under REPEATABLE READ / SERIALIZABLE, where a statement can fail with SQLSTATE 40001 (or a
deadlock, 40P01) without the compared cursor having moved: SSI refuses on read/write
dependencies, not only on a lost row. Its transaction rolled back, so nothing applied; the
adapter sends the same conditional statement again, which then answers from committed state
(``False`` only if the cursor really moved). After ``WRITE_ATTEMPTS`` such refusals the call
is ``StorageUnavailable`` — never a conflict it cannot vouch for, never a delete reported done.

Records live in ``<table>__records`` (primary key ``(session_id, key)``, same statements with
``version`` for ``cursor``). The processing index is the ``processing``/``written_ms`` columns
of both tables, set by the same statement as the state they describe, with a partial index on
the processing rows. The pending index is ``<table>__pending``, its rows replaced by the
envelope's own CAS statement (ADR-0029). ``delete`` is the one call that is a transaction: it
locks the envelope's row, then removes the envelope, records and pending rows in one statement,
whose snapshot (taken after the lock) sees the rows of a save it waited for. Tables created
before are upgraded in place on connect (ADR-0085, ADR-0029).

Text travels as UTF-8 (ADR-0086): a connection whose client encoding is neither UTF-8 nor
``SQL_ASCII`` is switched to UTF-8 on connect, a database whose encoding cannot store every
JSON text is refused then with ``ConfigError``, and an encoding error on any later call (the
server's ``22P05``/``22021``, or psycopg's ``UnicodeError``) is a ``ConfigError`` too: it is a
property of the stored data or the database, so the same call fails again.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
from typing import Any, NamedTuple

import psycopg
from psycopg import errors as pg_errors
from psycopg.pq import TransactionStatus

from ..errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.session import SessionSnapshot
from ._audit_index import make_audit_page
from ._cas import (
    DEFAULT_TABLE,
    PreparedSave,
    check_limit,
    check_session_id,
    check_sql_identifier,
    derived_identifier,
    loaded_text,
    prepare_save_with_records,
    processing_statuses,
    record_prefix_matches_nothing,
)
from ._closing import AsyncClosing, Closing
from ._pending import check_token, make_page
from ._read_only import read_only_refusal
from ._sql import (
    AUDIT_INDEX_MARK,
    AUDIT_WHERE_POSTGRES,
    PENDING_COLUMNS,
    PENDING_INDEXES,
    AuditStatements,
    PendingStatements,
    SqlStatements,
    audit_refs,
    found_session,
    pending_items,
)
from .port import (
    AuditRefPage,
    CreatedRecords,
    PendingOrder,
    PendingPage,
    ProcessingSession,
    StoredRecord,
)

__all__ = ["AsyncPostgresStorage", "PostgresStorage", "map_pg_error"]

ISOLATIONS = {
    "read_committed": "read committed",
    "repeatable_read": "repeatable read",
    "serializable": "serializable",
}

#: Definite conflicts: a create found the row already there (unique violation).
CONFLICT_STATES = frozenset({"23505"})
#: Rolled back for a reason that does not say the compared value moved (serialization
#: failure, deadlock): nothing applied, so the same conditional statement is sent again.
RESEND_STATES = frozenset({"40001", "40P01"})
#: How many times one call sends its statement before giving up with ``StorageUnavailable``.
WRITE_ATTEMPTS = 8
#: The server says it does not know whether the commit happened.
UNKNOWN_STATES = frozenset({"40003", "08007"})
#: Text the server cannot convert between the database and the connection encodings
#: (untranslatable character, invalid byte sequence): the same call fails again.
ENCODING_STATES = frozenset({"22P05", "22021"})
#: Database encodings that store every JSON text: UTF-8, and ``SQL_ASCII`` (raw bytes, which
#: psycopg writes as UTF-8 and ``loaded_text`` decodes strictly, ADR-0083).
SERVER_ENCODINGS = frozenset({"UTF8", "SQL_ASCII"})
#: A reply saying the statement does not fit the table (class 42: undefined column or table,
#: datatype mismatch, undefined operator, insufficient privilege) or that a row cannot be
#: written without a value we never send (23502, a NOT NULL column of someone else's): the
#: table is not the shape this adapter expects, so the same call fails again.
SCHEMA_STATE_CLASS = "42"
SCHEMA_STATES = frozenset({"23502"})
SCHEMA_HINT = (
    "Point table= at a table akchat-fsm created (or a new name), or give it the expected "
    "columns: session_id text PRIMARY KEY, cursor bigint NOT NULL, body text NOT NULL, "
    "updated_at timestamptz NOT NULL DEFAULT now() (see docs/adapters.md)."
)
ENCODING_HINT = (
    "Store sessions in a database created with ENCODING 'UTF8'; repair or delete a row whose "
    "text cannot be read."
)


def map_pg_error(
    exc: BaseException, *, sent: bool, write: bool, broken: bool
) -> StorageError | ConfigError | None:
    """Classify a psycopg error; ``None`` means a definite conflict (``save`` → ``False``).

    ``sent``: the statement was handed to an established connection. ``broken``: the
    connection was lost with the error (no reply, or the server hung up). A reply carrying
    an error is definite for an autocommit statement (its transaction rolled back), except
    for the codes that say the commit's fate is unknown; a lost connection after sending a
    write is ``OutcomeUnknown``; a read never has an unknown outcome. A reply refusing the
    text's encoding is ``ConfigError`` (never retryable), for reads and writes alike.
    """
    state = getattr(exc, "sqlstate", None)
    if not sent:
        return StorageUnavailable(f"PostgreSQL unreachable: {exc}")
    if state in ENCODING_STATES and not broken:
        return ConfigError(f"PostgreSQL cannot convert the text: {exc}", hint=ENCODING_HINT)
    if is_schema_state(state) and not broken:
        return ConfigError(f"PostgreSQL table does not fit akchat-fsm: {exc}", hint=SCHEMA_HINT)
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


def is_schema_state(state: str | None) -> bool:
    """Whether SQLSTATE ``state`` says the table's shape is wrong (never transient)."""
    return state is not None and (state.startswith(SCHEMA_STATE_CLASS) or state in SCHEMA_STATES)


#: The columns this adapter reads and writes, with the types ``format_type`` may name for
#: each; ``processing`` and ``written_ms`` are added to a 0.1.0 sessions table on connect.
_TEXT = ("text", "character varying")
_EXPECTED_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "sessions": {
        "session_id": _TEXT,
        "cursor": ("bigint",),
        "body": _TEXT,
        "updated_at": ("timestamp with time zone", "timestamp without time zone"),
    },
    "records": {
        "session_id": _TEXT,
        "key": _TEXT,
        "version": ("bigint",),
        "body": _TEXT,
        "processing": ("boolean",),
        "written_ms": ("bigint",),
    },
}
_ADDED_ON_UPGRADE = {"processing": ("boolean",), "written_ms": ("bigint",)}


def schema_problem(
    table: str, kind: str, columns: dict[str, str], *, upgradable: bool
) -> ConfigError | None:
    """A ``ConfigError`` naming the first column of ``table`` that does not fit, else ``None``.

    ``columns`` maps each column of the existing table to its ``format_type``; an empty map
    means the table does not exist (it is created). ``upgradable``: the upgrade columns may
    be missing (a 0.1.0 sessions table), but if present they must have their types.
    """
    if not columns:
        return None
    expected = dict(_EXPECTED_COLUMNS[kind])
    optional = set(_ADDED_ON_UPGRADE) if upgradable else set()
    if kind == "sessions":
        expected.update(_ADDED_ON_UPGRADE)
    for name, types in expected.items():
        found = columns.get(name)
        if found is None:
            if name in optional:
                continue
            return ConfigError(
                f"PostgreSQL table {table!r} has no column {name!r} (expected {types[0]}): "
                "it is not an akchat-fsm table.",
                hint=SCHEMA_HINT,
            )
        if not found.startswith(types):
            return ConfigError(
                f"PostgreSQL table {table!r} column {name!r} is {found}, expected {types[0]}.",
                hint=SCHEMA_HINT,
            )
    return None


def map_codec_error(exc: UnicodeError) -> ConfigError:
    """psycopg could not encode a parameter or decode a result in the connection's encoding.

    Raised on the client before anything is sent, or after the whole reply arrived, so the
    call's outcome is definite (a write did not apply) and the connection stays usable.
    """
    return ConfigError(
        f"PostgreSQL connection encoding cannot carry the text: {exc}", hint=ENCODING_HINT
    )


def encoding_setup(server_encoding: str | None, client_encoding: str) -> list[str]:
    """The statements that make a fresh connection carry any JSON text; ``ConfigError`` if none can.

    ``server_encoding`` is the server's ``server_encoding`` parameter and ``client_encoding``
    psycopg's Python codec for the connection. psycopg writes text as UTF-8 under ``utf-8`` and
    ``ascii`` (``SQL_ASCII``, read back as bytes); any other client encoding (``LATIN1`` set
    by ``PGCLIENTENCODING``, say) cannot encode most text, so it is switched to UTF-8.
    """
    if server_encoding not in SERVER_ENCODINGS:
        raise ConfigError(
            f"The PostgreSQL database's encoding is {server_encoding}, which cannot store "
            "every JSON text (emoji, most scripts).",
            hint=ENCODING_HINT,
        )
    if client_encoding in ("utf-8", "ascii"):
        return []
    return ["SET client_encoding = 'UTF8'"]


def connect_error(exc: psycopg.Error) -> StorageUnavailable | ConfigError:
    """A failure while connecting or preparing the table: retryable unless it is the table's
    shape (the catalog or the DDL said class 42), which fails the same way every time."""
    if is_schema_state(getattr(exc, "sqlstate", None)):
        return ConfigError(f"PostgreSQL table does not fit akchat-fsm: {exc}", hint=SCHEMA_HINT)
    return StorageUnavailable(f"PostgreSQL unreachable: {exc}")


def must_resend(exc: BaseException, *, write: bool, attempt: int) -> bool:
    """Whether a write refused by ``exc`` is sent again (nothing applied; attempts remain)."""
    state = getattr(exc, "sqlstate", None)
    return write and state in RESEND_STATES and attempt + 1 < WRITE_ATTEMPTS


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


class Layout(NamedTuple):
    """What a connection found: a records table, the index columns on the sessions one, the
    pending table and the audit index."""

    records: bool
    indexed: bool
    pending: bool = False
    audit: bool = False


class _Plan(SqlStatements):
    """Everything but the I/O: validated options, SQL text, connection setup."""

    def __init__(
        self,
        conninfo: str,
        table: str,
        isolation: str,
        statement_timeout_ms: int | None,
        connect_timeout: float,
        read_only: bool = False,
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
        self.read_only = bool(read_only)
        if self.read_only:
            # Belt and braces: the server refuses any write this session might send.
            self.setup.append("SET default_transaction_read_only = on")
        if statement_timeout_ms is not None:
            self.setup.append(f"SET statement_timeout = {statement_timeout_ms}")
        self.records = r = derived_identifier(t, "__records")
        self.pending = p = derived_identifier(t, "__pending")
        self.audit_index = derived_identifier(r, f"_{AUDIT_INDEX_MARK}")
        self.create = _schema(t, r, p, self.audit_index)
        # What a read-only connection looks for: the pending table and the audit index.
        self.has_pending = "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL"
        self.audit_sql = AuditStatements(
            r,
            "%s",
            when="written_ms",
            where=AUDIT_WHERE,
            sid='session_id COLLATE "C"',
            row_values=True,
        )
        self.pending_sql = PendingStatements(p, "%s", row_values=True)
        self.columns = (
            "SELECT a.attrelid = to_regclass(%s), a.attname, format_type(a.atttypid, a.atttypmod)"
            " FROM pg_attribute a WHERE a.attrelid IN (to_regclass(%s), to_regclass(%s))"
            " AND a.attnum > 0 AND NOT a.attisdropped"
        )
        self.select = f"SELECT body, cursor FROM {t} WHERE session_id = %s"
        self.insert = _with_pending(
            p,
            f"INSERT INTO {t} (session_id, cursor, body, processing, written_ms)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id) DO NOTHING"
            " RETURNING session_id, cursor",
        )
        self.update = _with_pending(
            p,
            f"UPDATE {t} SET cursor = %s, body = %s, updated_at = now(), processing = %s,"
            " written_ms = %s WHERE session_id = %s AND cursor = %s RETURNING session_id, cursor",
        )
        # ADR-0141: the same CAS statement, plus the create-only records, inserted from the
        # CAS's own row (none when it matched nothing) with no ON CONFLICT: a key already
        # there is a unique violation (23505) that aborts the whole statement, envelope and
        # pending rows included: the definite conflict.
        self.insert_with_records = _with_records(r, self.insert)
        self.update_with_records = _with_records(r, self.update)
        self.delete = (
            f"WITH records AS (DELETE FROM {r} WHERE session_id = %s),"
            f" pending AS (DELETE FROM {p} WHERE session_id = %s)"
            f" DELETE FROM {t} WHERE session_id = %s"
        )
        # Sent first, in the delete's transaction: it waits for a save in flight, so the
        # delete's own snapshot (READ COMMITTED: taken after) sees the rows that save wrote.
        self.lock_session = f"SELECT 1 FROM {t} WHERE session_id = %s FOR UPDATE"
        self.select_record = f"SELECT version, body FROM {r} WHERE session_id = %s AND key = %s"
        self.insert_record = (
            f"INSERT INTO {r} (session_id, key, version, body, processing, written_ms)"
            " VALUES (%s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (session_id, key) DO NOTHING RETURNING version"
        )
        self.update_record = (
            f"UPDATE {r} SET version = %s, body = %s, processing = %s, written_ms = %s"
            " WHERE session_id = %s AND key = %s AND version = %s RETURNING version"
        )
        self.list_records = f"SELECT key FROM {r} WHERE session_id = %s AND left(key, %s) = %s"
        self.delete_record = f"DELETE FROM {r} WHERE session_id = %s AND key = %s"
        # Only processing rows are visited (the partial indexes); a listed session's last
        # write is the newest of its envelope's and its records' (primary-key lookups).
        self.list_processing = (
            "SELECT session_id, last FROM (SELECT p.session_id, GREATEST("
            f" (SELECT s.written_ms FROM {t} s WHERE s.session_id = p.session_id),"
            f" (SELECT max(x.written_ms) FROM {r} x WHERE x.session_id = p.session_id), 0)"
            f" AS last FROM (SELECT session_id FROM {t} WHERE processing"
            f" UNION SELECT session_id FROM {r} WHERE processing) p) q"
            " WHERE %s::bigint IS NULL OR last < %s::bigint"
            ' ORDER BY last, session_id COLLATE "C" LIMIT %s'
        )

    def columns_params(self) -> tuple[str, str, str]:
        return self.table, self.table, self.records

    def save_with_records_statement(
        self, snapshot: Any, expected_cursor: Any, records: Any
    ) -> tuple[str, tuple[Any, ...]]:
        """The one statement of a ``save_with_records`` and its parameters."""
        p, created = prepare_save_with_records(snapshot, expected_cursor, records)
        sql, params = self.prepared_statement(p)
        sql = self.insert_with_records if p.expected is None else self.update_with_records
        keys, texts = [r.key for r in created], [r.text for r in created]
        return sql, (*params, p.written_ms, keys, texts)

    def pending_params(self, p: PreparedSave) -> tuple[Any, ...]:
        """The save's pending rows as arrays: the tokens it keeps, then the columns to upsert."""
        tokens = [row.token for row in p.pending]
        return (
            tokens,
            p.written_ms,
            tokens,
            [row.tool_call_id for row in p.pending],
            [row.action for row in p.pending],
            [row.expires_at_ms for row in p.pending],
        )

    def has_pending_params(self) -> tuple[str, str]:
        return self.pending, self.audit_index

    def read_only_layout(self, layout: Layout, found: Any) -> Layout:
        """``layout`` with what ``has_pending`` found (a read-only connection)."""
        pending, audit = found if found else (False, False)
        return layout._replace(pending=bool(pending), audit=bool(audit))

    def check_audit(self, layout: Layout) -> None:
        """A read-only adapter cannot add the audit index to an older store."""
        if self.read_only and layout.records and not layout.audit:
            raise ConfigError(
                f"PostgreSQL table {self.table!r} predates the audit index and a read-only "
                "adapter does not upgrade it.",
                hint="Open it once without read_only (any host, or a writing verb).",
            )

    def check_pending(self, layout: Layout) -> None:
        """A read-only adapter cannot add the pending index to an older store."""
        if self.read_only and not layout.pending:
            raise ConfigError(
                f"PostgreSQL table {self.table!r} predates the pending index and a read-only "
                "adapter does not upgrade it.",
                hint="Open it once without read_only (any host, or a writing verb).",
            )

    def layout(self, rows: list[tuple[Any, ...]]) -> Layout:
        """The existing tables' columns (``rows`` from ``columns``), checked before any change.

        ``ConfigError`` names the first column that does not fit; a read-only plan also
        refuses a missing sessions table (it never creates one).
        """
        found: dict[bool, dict[str, str]] = {True: {}, False: {}}
        for is_sessions, name, kind in rows:
            found[bool(is_sessions)][column_text(name, "A column name")] = column_text(
                kind, "A column type"
            )
        problem = schema_problem(
            self.table, "sessions", found[True], upgradable=True
        ) or schema_problem(self.records, "records", found[False], upgradable=False)
        if problem is None and self.read_only and not found[True]:
            problem = ConfigError(
                f"PostgreSQL has no table {self.table!r} (a read-only adapter never creates one).",
                hint=SCHEMA_HINT,
            )
        if problem is not None:
            raise problem
        return Layout(bool(found[False]), set(_ADDED_ON_UPGRADE) <= set(found[True]))

    def refuse_if_read_only(self, what: str) -> None:
        if self.read_only:
            raise read_only_refusal("PostgreSQL storage", what)

    def answer_without_records(self, layout: Layout) -> bool:
        """A read of the records table that has the empty answer: a read-only adapter found
        no records table (a 0.1.0 store), so there are none."""
        return self.read_only and not layout.records

    def check_index(self, layout: Layout) -> None:
        """A read-only adapter cannot add the processing index to a 0.1.0 table."""
        if self.read_only and not (layout.records and layout.indexed):
            raise ConfigError(
                f"PostgreSQL table {self.table!r} predates the processing index (0.1.0) and a "
                "read-only adapter does not upgrade it.",
                hint="Open it once without read_only (any host, or a writing verb).",
            )

    def delete_statement(self, session_id: Any) -> tuple[str, tuple[Any, ...]]:
        sid = check_session_id(session_id)
        return self.delete, (sid, sid, sid)

    def list_records_statement(
        self, session_id: Any, prefix: Any
    ) -> tuple[str, tuple[Any, ...]] | None:
        """The query, or ``None`` when no key can match (the answer is ``[]``)."""
        sid = check_session_id(session_id)
        if record_prefix_matches_nothing(prefix):
            return None
        return self.list_records, (sid, len(prefix), prefix)

    def list_processing_statement(
        self, written_before_ms: Any, limit: Any
    ) -> tuple[str, tuple[Any, ...]]:
        count, before = check_limit(limit, written_before_ms)
        return self.list_processing, (before, before, count)


def _with_pending(p: str, envelope: str) -> str:
    """The envelope's CAS statement ``envelope`` (``RETURNING session_id, cursor``), with the
    session's pending rows replaced by the same statement iff it wrote (ADR-0029).

    Rows of tokens no longer pending go; the others are upserted, so a token already pending
    keeps its ``pending_since_ms`` and a new one takes this write's clock: ``carry_since``'s
    rule, decided by the row that is there under the envelope's row lock, not by a snapshot.
    The two touch disjoint rows (by token), as one statement must.
    """
    return (
        f"WITH s AS ({envelope}),"
        f" gone AS (DELETE FROM {p} WHERE session_id IN (SELECT session_id FROM s)"
        " AND token <> ALL(%s::text[])),"
        f" kept AS (INSERT INTO {p} ({PENDING_COLUMNS})"
        " SELECT s.session_id, x.token, x.tool_call_id, x.action, x.expires_at_ms, %s::bigint"
        " FROM s, unnest(%s::text[], %s::text[], %s::text[], %s::bigint[])"
        " AS x (token, tool_call_id, action, expires_at_ms)"
        " ON CONFLICT (session_id, token) DO UPDATE SET tool_call_id = EXCLUDED.tool_call_id,"
        " action = EXCLUDED.action, expires_at_ms = EXCLUDED.expires_at_ms)"
        " SELECT cursor FROM s"
    )


def _with_records(r: str, with_pending: str) -> str:
    """A :func:`_with_pending` statement that also inserts the create-only records from its
    CAS row ``s`` (ADR-0141); their parameters come last: written_ms, keys, texts."""
    tail = " SELECT cursor FROM s"
    assert with_pending.endswith(tail)
    return (
        with_pending[: -len(tail)]
        + f", created AS (INSERT INTO {r} (session_id, key, version, body, processing,"
        " written_ms) SELECT s.session_id, x.key, 1, x.body, false, %s::bigint"
        " FROM s, unnest(%s::text[], %s::text[]) AS x (key, body))" + tail
    )


#: The audit index's predicate (ADR-0139), in the index and verbatim in its query.
AUDIT_WHERE = AUDIT_WHERE_POSTGRES


def _schema(t: str, r: str, p: str, audit: str) -> str:
    """One ``DO`` block that creates the tables and indexes, or upgrades a 0.1.0 table.

    One statement, so the sync and async adapters run the same thing. It reads the catalog
    first and takes no lock when everything exists; otherwise it locks the sessions table
    (concurrent first connections queue, and each re-checks), adds the columns, and backfills
    the flag of envelopes holding a processing confirmation, stamped with their ``updated_at``
    (ADR-0085). An envelope that is not valid JSON is left alone, never an upgrade failure.
    """
    index_t, index_r = derived_identifier(t, "__processing"), derived_identifier(r, "_processing")
    statuses = ", ".join(f"'{s}'" for s in processing_statuses())
    rough = " OR ".join(f'body LIKE \'%"status":"{s}"%\'' for s in processing_statuses())
    has_column = (
        "EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('{t}')"
        " AND attname = '{c}' AND NOT attisdropped)"
    )
    return f"""DO $akchat$
DECLARE
  rec record;
BEGIN
  IF to_regclass('{r}') IS NULL OR to_regclass('{index_t}') IS NULL
     OR to_regclass('{index_r}') IS NULL OR NOT {has_column.format(t=t, c="written_ms")}
     OR to_regclass('{p}') IS NULL OR to_regclass('{audit}') IS NULL THEN
    CREATE TABLE IF NOT EXISTS {t} (session_id text PRIMARY KEY, cursor bigint NOT NULL,
      body text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(),
      processing boolean NOT NULL DEFAULT false, written_ms bigint NOT NULL DEFAULT 0);
    LOCK TABLE {t} IN ACCESS EXCLUSIVE MODE;
    IF NOT {has_column.format(t=t, c="processing")} THEN
      ALTER TABLE {t} ADD COLUMN processing boolean NOT NULL DEFAULT false;
      ALTER TABLE {t} ADD COLUMN IF NOT EXISTS written_ms bigint NOT NULL DEFAULT 0;
      FOR rec IN SELECT session_id, body FROM {t} WHERE {rough} LOOP
        BEGIN
          IF EXISTS (SELECT 1 FROM jsonb_array_elements(rec.body::jsonb -> 'confirmations') c
                     WHERE c ->> 'status' IN ({statuses})) THEN
            UPDATE {t} SET processing = true,
              written_ms = (extract(epoch FROM updated_at) * 1000)::bigint
              WHERE session_id = rec.session_id;
          END IF;
        EXCEPTION WHEN others THEN NULL;
        END;
      END LOOP;
    END IF;
    ALTER TABLE {t} ADD COLUMN IF NOT EXISTS written_ms bigint NOT NULL DEFAULT 0;
    CREATE TABLE IF NOT EXISTS {r} (session_id text NOT NULL, key text COLLATE "C" NOT NULL,
      version bigint NOT NULL, body text NOT NULL, processing boolean NOT NULL DEFAULT false,
      written_ms bigint NOT NULL DEFAULT 0, PRIMARY KEY (session_id, key));
    CREATE INDEX IF NOT EXISTS {index_t} ON {t} (written_ms) WHERE processing;
    CREATE INDEX IF NOT EXISTS {index_r} ON {r} (session_id) WHERE processing;
    CREATE INDEX IF NOT EXISTS {audit} ON {r} (written_ms, session_id COLLATE "C", key)
      WHERE {AUDIT_WHERE};
    IF to_regclass('{p}') IS NULL THEN
{_pending_schema(t, p)}
    END IF;
  END IF;
END
$akchat$"""


def _pending_schema(t: str, p: str) -> str:
    """The pending table, its indexes, and the one backfill of the envelopes already stored.

    Run once, with the table (its existence is the marker), under the sessions table's lock.
    A binding's ``since`` is its envelope's last write (``written_ms``, else ``updated_at``):
    it was pending then. An envelope that is not valid JSON, or a binding that is not
    well-formed, is skipped, never an upgrade failure. Ids are ``COLLATE "C"``: pages sort
    them by code point, as every adapter does.
    """
    ids = 'text COLLATE "C" NOT NULL'
    indexes = "\n".join(
        f"      CREATE INDEX {derived_identifier(p, suffix)} ON {p} ({columns});"
        for suffix, columns in PENDING_INDEXES.items()
    )
    typed = " AND ".join(
        f"jsonb_typeof(c -> '{name}') = '{kind}'"
        for name, kind in (
            ("token", "string"),
            ("toolCallId", "string"),
            ("action", "string"),
            ("expiresAt", "number"),
        )
    )
    return f"""      CREATE TABLE {p} (session_id {ids}, token {ids}, tool_call_id {ids},
        action {ids}, expires_at_ms bigint NOT NULL, pending_since_ms bigint NOT NULL,
        PRIMARY KEY (session_id, token));
{indexes}
      FOR rec IN SELECT session_id, body, written_ms, updated_at FROM {t}
                 WHERE body LIKE '%"status":"pending"%' LOOP
        BEGIN
          INSERT INTO {p} ({PENDING_COLUMNS})
            SELECT rec.session_id, c ->> 'token', c ->> 'toolCallId', c ->> 'action',
              (c ->> 'expiresAt')::bigint, CASE WHEN rec.written_ms > 0 THEN rec.written_ms
              ELSE (extract(epoch FROM rec.updated_at) * 1000)::bigint END
            FROM jsonb_array_elements(rec.body::jsonb -> 'confirmations') c
            WHERE jsonb_typeof(c) = 'object' AND c ->> 'status' = 'pending' AND {typed}
            ON CONFLICT DO NOTHING;
        EXCEPTION WHEN others THEN NULL;
        END;
      END LOOP;"""


def column_text(value: object, what: str) -> str:
    """A ``text`` column as ``str``: psycopg returns bytes under ``SQL_ASCII`` (strict UTF-8)."""
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{what} is not UTF-8 text (byte {exc.start}).", hint=ENCODING_HINT
            ) from exc
    return str(value)


def stored_record(row: tuple[Any, ...]) -> StoredRecord:
    """``(version, text)`` of a record row."""
    return int(row[0]), column_text(row[1], "A stored record")


def listed_keys(rows: list[tuple[Any, ...]]) -> list[str]:
    return sorted(column_text(row[0], "A stored record key") for row in rows)


def listed_sessions(rows: list[tuple[Any, ...]]) -> list[ProcessingSession]:
    return [ProcessingSession(column_text(sid, "A stored session id"), int(ms)) for sid, ms in rows]


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
        read_only: bool = False,
    ) -> None:
        self._plan = _Plan(
            conninfo, table, isolation, statement_timeout_ms, connect_timeout, read_only
        )
        self.table = self._plan.table
        self.read_only = self._plan.read_only
        self._layout = Layout(records=False, indexed=False)
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
            # The shape first: the upgrade's DDL and backfill assume our column types.
            layout = self._plan.layout(
                conn.execute(self._plan.columns, self._plan.columns_params()).fetchall()
            )
            if not self._plan.read_only:
                # The table first: a short statement_timeout must not apply to the DDL.
                with contextlib.suppress(*_CREATE_RACE):
                    conn.execute(self._plan.create)
                layout = Layout(records=True, indexed=True, pending=True, audit=True)
            else:
                found = conn.execute(
                    self._plan.has_pending, self._plan.has_pending_params()
                ).fetchone()
                layout = self._plan.read_only_layout(layout, found)
            info = conn.info
            setup = encoding_setup(info.parameter_status("server_encoding"), info.encoding)
            for statement in self._plan.setup + setup:
                conn.execute(statement)
        except psycopg.Error as exc:
            if conn is not None:
                conn.close()
            raise connect_error(exc) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        self._conn, self._layout = conn, layout
        return conn

    def _run(
        self,
        sql: str,
        params: tuple[Any, ...],
        *,
        write: bool,
        every: bool = False,
        records: bool = False,
        index: bool = False,
        pending: bool = False,
        audit: bool = False,
        locking: str | None = None,
    ) -> Any:
        """Execute one statement; the first row, or ``None`` (no row, or a conflict).

        ``every``: the list of all rows instead (a read). ``records``/``index``/``pending``:
        the read needs the records table / the processing / the pending index, which a
        read-only adapter may lack. ``locking``: a statement taking the same parameters run
        first, in one transaction with it (a delete's row lock).
        """
        if write:
            self._plan.refuse_if_read_only("a write")
        with self._lock:
            conn = self._connection()
            if index:
                self._plan.check_index(self._layout)
            if pending:
                self._plan.check_pending(self._layout)
            if audit:
                self._plan.check_audit(self._layout)
            if (records or audit) and self._plan.answer_without_records(self._layout):
                return [] if every else None
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    if locking is None:
                        cur = conn.execute(sql, params)
                    else:
                        with conn.transaction():
                            conn.execute(locking, params[:1])
                            cur = conn.execute(sql, params)
                    if every:
                        return cur.fetchall()
                    return cur.fetchone() if cur.description is not None else None
                except psycopg.Error as exc:
                    if must_resend(exc, write=write, attempt=attempt):
                        continue
                    error = map_pg_error(exc, sent=True, write=write, broken=conn.broken)
                    if error is None:
                        return None
                    raise error from exc
                except UnicodeError as exc:
                    raise map_codec_error(exc) from exc
                except BaseException:
                    conn.close()  # interrupted mid-protocol: never reuse
                    self._conn = None
                    raise
            raise AssertionError("unreachable: the last attempt returns or raises")

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
        """Forget ``session_id``, its records and pending rows; a missing one is no error."""
        sql, params = self._plan.delete_statement(session_id)
        self._run(sql, params, write=True, locking=self._plan.lock_session)

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one statement, all or nothing
        (``SaveWithRecords``): a key already there aborts it (a definite ``False``)."""
        sql, params = self._plan.save_with_records_statement(snapshot, expected_cursor, records)
        return self._run(sql, params, write=True) is not None

    # ------------------------------------------------------------------ records capability
    def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        row = self._run(
            self._plan.select_record,
            self._plan.record_key(session_id, key),
            write=False,
            records=True,
        )
        return None if row is None else stored_record(row)

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
        statement = self._plan.save_record_statement(
            session_id, key, text, expected_version, processing
        )
        return self._run(*statement, write=True) is not None

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        statement = self._plan.list_records_statement(session_id, prefix)
        rows = (
            []
            if statement is None
            else self._run(*statement, write=False, every=True, records=True)
        )
        return listed_keys(rows)

    def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        self._run(self._plan.delete_record, self._plan.record_key(session_id, key), write=True)

    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        statement = self._plan.list_processing_statement(written_before_ms, limit)
        rows = self._run(*statement, write=False, every=True, index=True)
        return listed_sessions(rows)

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
        query, sql, params = self._plan.pending_sql.list_statement(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        rows = self._run(sql, params, write=False, every=True, pending=True)
        return make_page(query, pending_items(rows))

    def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        params = (check_token(token),)
        return found_session(
            self._run(self._plan.pending_sql.find_token, params, write=False, pending=True)
        )

    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query, sql, params = self._plan.audit_sql.list_statement(
            since_ms=since_ms, after=after, limit=limit
        )
        rows = self._run(sql, params, write=False, every=True, audit=True)
        return make_audit_page(query, audit_refs(rows))

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
        read_only: bool = False,
    ) -> None:
        self._plan = _Plan(
            conninfo, table, isolation, statement_timeout_ms, connect_timeout, read_only
        )
        self.table = self._plan.table
        self.read_only = self._plan.read_only
        self._layout = Layout(records=False, indexed=False)
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
            columns = await conn.execute(self._plan.columns, self._plan.columns_params())
            layout = self._plan.layout(await columns.fetchall())
            if not self._plan.read_only:
                with contextlib.suppress(*_CREATE_RACE):
                    await conn.execute(self._plan.create)
                layout = Layout(records=True, indexed=True, pending=True, audit=True)
            else:
                cur = await conn.execute(self._plan.has_pending, self._plan.has_pending_params())
                layout = self._plan.read_only_layout(layout, await cur.fetchone())
            info = conn.info
            setup = encoding_setup(info.parameter_status("server_encoding"), info.encoding)
            for statement in self._plan.setup + setup:
                await conn.execute(statement)
        except psycopg.Error as exc:
            if conn is not None:
                await conn.close()
            raise connect_error(exc) from exc
        except BaseException:
            if conn is not None:
                await conn.close()
            raise
        self._conn, self._layout = conn, layout
        return conn

    async def _run(
        self,
        sql: str,
        params: tuple[Any, ...],
        *,
        write: bool,
        every: bool = False,
        records: bool = False,
        index: bool = False,
        pending: bool = False,
        audit: bool = False,
        locking: str | None = None,
    ) -> Any:
        if write:
            self._plan.refuse_if_read_only("a write")
        async with self._lock:
            conn = await self._connection()
            if index:
                self._plan.check_index(self._layout)
            if pending:
                self._plan.check_pending(self._layout)
            if audit:
                self._plan.check_audit(self._layout)
            if (records or audit) and self._plan.answer_without_records(self._layout):
                return [] if every else None
            for attempt in range(WRITE_ATTEMPTS):
                try:
                    if locking is None:
                        cur = await conn.execute(sql, params)
                    else:
                        async with conn.transaction():
                            await conn.execute(locking, params[:1])
                            cur = await conn.execute(sql, params)
                    if every:
                        return await cur.fetchall()
                    return await cur.fetchone() if cur.description is not None else None
                except psycopg.Error as exc:
                    if must_resend(exc, write=write, attempt=attempt):
                        continue
                    error = map_pg_error(exc, sent=True, write=write, broken=conn.broken)
                    if error is None:
                        return None
                    raise error from exc
                except UnicodeError as exc:
                    raise map_codec_error(exc) from exc
                except BaseException:
                    await conn.close()
                    self._conn = None
                    raise
            raise AssertionError("unreachable: the last attempt returns or raises")

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
        """Forget ``session_id``, its records and pending rows; a missing one is no error."""
        sql, params = self._plan.delete_statement(session_id)
        await self._run(sql, params, write=True, locking=self._plan.lock_session)

    async def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one statement, all or nothing
        (``SaveWithRecords``): a key already there aborts it (a definite ``False``)."""
        sql, params = self._plan.save_with_records_statement(snapshot, expected_cursor, records)
        return await self._run(sql, params, write=True) is not None

    # ------------------------------------------------------------------ records capability
    async def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        params = self._plan.record_key(session_id, key)
        row = await self._run(self._plan.select_record, params, write=False, records=True)
        return None if row is None else stored_record(row)

    async def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        statement = self._plan.save_record_statement(
            session_id, key, text, expected_version, processing
        )
        return await self._run(*statement, write=True) is not None

    async def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        statement = self._plan.list_records_statement(session_id, prefix)
        rows = (
            []
            if statement is None
            else await self._run(*statement, write=False, every=True, records=True)
        )
        return listed_keys(rows)

    async def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        params = self._plan.record_key(session_id, key)
        await self._run(self._plan.delete_record, params, write=True)

    async def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        statement = self._plan.list_processing_statement(written_before_ms, limit)
        rows = await self._run(*statement, write=False, every=True, index=True)
        return listed_sessions(rows)

    async def list_pending(
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
        query, sql, params = self._plan.pending_sql.list_statement(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        rows = await self._run(sql, params, write=False, every=True, pending=True)
        return make_page(query, pending_items(rows))

    async def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        params = (check_token(token),)
        return found_session(
            await self._run(self._plan.pending_sql.find_token, params, write=False, pending=True)
        )

    async def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query, sql, params = self._plan.audit_sql.list_statement(
            since_ms=since_ms, after=after, limit=limit
        )
        rows = await self._run(sql, params, write=False, every=True, audit=True)
        return make_audit_page(query, audit_refs(rows))

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
