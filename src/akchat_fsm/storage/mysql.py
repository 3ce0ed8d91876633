"""MySQL / MariaDB adapter (PyMySQL, extra ``mysql``; ADR-0028).

One InnoDB row per session: ``session_id, cursor, body, processing, written_ms``; records
beside it in ``<table>__records`` (primary key ``(session_id, key)``). Ids and keys are
``utf8mb4_bin`` (case-sensitive, byte order), bodies ``LONGTEXT`` utf8mb4, returned verbatim.
Each call is one autocommit statement (an envelope ``save`` excepted: one short transaction
with its pending rows, ADR-0029), so no transaction outlives it:

* create: ``INSERT …``; a duplicate key (1062) is the definite conflict
* update: ``UPDATE … WHERE session_id = %s AND cursor = %s``; the connection sets
  ``CLIENT.FOUND_ROWS``, so the affected-row count is the matched-row count: 1 is a commit,
  0 a definite conflict

InnoDB's ``UPDATE`` reads the latest committed row under its row lock whatever the isolation
level, so a loser waits for the winner and then matches nothing. A deadlock (1213) rolls the
statement's transaction back, so nothing applied and the same conditional statement is sent
again (``WRITE_ATTEMPTS`` times, then ``StorageUnavailable``). A lock wait timeout (1205) or
a statement timeout (MariaDB ``max_statement_time``, 1969) rolls the statement back too:
``StorageUnavailable``, never a conflict. A connection lost after a write was sent (2006,
2013, 1927 killed) is ``OutcomeUnknown``. A statement that does not fit the table (1146 no
table, 1054 no column, 1364 a NOT NULL column we never fill, 1366/1406 a column that cannot
hold the text) is ``ConfigError``: it fails the same way again.

``delete`` removes a session's envelope, records and pending rows in one multi-table
``DELETE``. The processing index is the ``processing``/``written_ms`` columns of both tables,
written by the same statement as the state they describe (ADR-0085), with an index on
``processing``. The pending index is ``<table>__pending``: a ``save`` is ``BEGIN``, the
conditional statement, then (if it matched, under the envelope's row lock) the session's
pending rows replaced, ``COMMIT``; a deadlock re-sends the whole transaction. A store written
before it gets the table from its first writer, filled under another name and renamed only
when whole (DDL autocommits here, so the table's existence is the backfill's marker).
"""

from __future__ import annotations

import contextlib
import select
import threading
from collections.abc import Callable
from typing import Any

import pymysql  # type: ignore[import-untyped]
from pymysql.constants import CLIENT  # type: ignore[import-untyped]

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
    now_ms,
    prepare_save,
    prepare_save_with_records,
    record_prefix_matches_nothing,
)
from ._closing import Closing
from ._pending import carry_since, check_token, make_page
from ._read_only import read_only_refusal
from ._sql import (
    AUDIT_INDEX_MARK,
    AUDIT_WHERE_MYSQL,
    PENDING_COLUMNS,
    PENDING_INDEXES,
    AuditStatements,
    PendingStatements,
    SqlStatements,
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

__all__ = ["AsyncMySQLStorage", "MySQLStorage", "map_mysql_error"]


#: A create found the row already there (duplicate key): the definite conflict.
CONFLICT_CODES = frozenset({1062})
#: Rolled back without saying the compared value moved (deadlock; MariaDB's "record has
#: changed since last read"): nothing applied, so the same statement is sent again.
RESEND_CODES = frozenset({1213, 1020})
#: How many times one call sends its statement before giving up with ``StorageUnavailable``.
WRITE_ATTEMPTS = 8
#: How long a writer connecting to a store without the pending index waits for another
#: connection that is building it (a backfill reads every envelope once).
BUILD_LOCK_WAIT_S = 60
#: The connection is gone: server gone away, lost during the query, killed, shut down,
#: disconnected for inactivity (MySQL 8), a packet out of order.
LOST_CODES = frozenset({2006, 2013, 2055, 1927, 1053, 4031, 2014})
#: The statement does not fit the table (no such table / column, a NOT NULL column we never
#: fill, a column whose charset or width cannot hold the text, a privilege it lacks).
SCHEMA_CODES = frozenset({1146, 1054, 1364, 1366, 1406, 1142, 1143})
SCHEMA_HINT = (
    "Point table= at a table akchat-fsm created (or a new name), or give it the expected "
    "InnoDB columns: session_id VARCHAR(128) utf8mb4_bin PRIMARY KEY, `cursor` BIGINT NOT "
    "NULL, body LONGTEXT utf8mb4 NOT NULL, processing BOOLEAN, written_ms BIGINT (see "
    "docs/adapters.md)."
)

#: What each column of an existing table must be (``information_schema`` data types).
_IDS = ("varchar", "char")
_BODY = ("longtext", "mediumtext")
_EXPECTED: dict[str, dict[str, tuple[str, ...]]] = {
    "sessions": {
        "session_id": _IDS,
        "cursor": ("bigint",),
        "body": _BODY,
        "processing": ("tinyint",),
        "written_ms": ("bigint",),
    },
    "records": {
        "session_id": _IDS,
        "key": _IDS,
        "version": ("bigint",),
        "body": _BODY,
        "processing": ("tinyint",),
        "written_ms": ("bigint",),
    },
}
#: Columns compared as keys: a case-insensitive collation would alias ``A`` and ``a``.
_KEY_COLUMNS = frozenset({"session_id", "key"})


#: The generated column of the records table that the audit index is on (ADR-0139).
AUDIT_COLUMN = f"{AUDIT_INDEX_MARK}_ms"
#: ER_DUP_FIELDNAME: another writer added the audit column first.
_DUPLICATE_COLUMN = 1060


def map_mysql_error(
    exc: BaseException, *, sent: bool, write: bool, broken: bool
) -> StorageError | ConfigError | None:
    """Classify a PyMySQL error; ``None`` means a definite conflict (``save`` → ``False``).

    ``sent``: the statement was handed to an open connection. ``broken``: the connection
    was lost with the error. A reply carrying an error is definite for an autocommit
    statement (it was rolled back); a lost connection after sending a write is
    ``OutcomeUnknown``; a read never has an unknown outcome.
    """
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if not sent:
        return StorageUnavailable(f"MySQL unreachable: {exc}")
    lost = broken or code in LOST_CODES
    if code in SCHEMA_CODES and not lost:
        return ConfigError(f"MySQL table does not fit akchat-fsm: {exc}", hint=SCHEMA_HINT)
    if write and code in CONFLICT_CODES and not lost:
        return None
    if write and (lost or code is None or code == 0):
        return OutcomeUnknown(f"MySQL write may have applied: {exc}")
    return StorageUnavailable(f"MySQL: {exc}")


def must_resend(exc: BaseException, *, write: bool, attempt: int) -> bool:
    """Whether a write refused by ``exc`` is sent again (nothing applied; attempts remain)."""
    code = exc.args[0] if exc.args else None
    return write and code in RESEND_CODES and attempt + 1 < WRITE_ATTEMPTS


def connect_error(exc: BaseException) -> StorageUnavailable | ConfigError:
    """A failure while connecting or preparing the tables: retryable unless it is a shape."""
    code = exc.args[0] if exc.args else None
    if code in SCHEMA_CODES:
        return ConfigError(f"MySQL table does not fit akchat-fsm: {exc}", hint=SCHEMA_HINT)
    if code == 1049:  # unknown database: the same URL fails again
        return ConfigError(f"MySQL database not found: {exc}", hint="Create it, or fix the URL.")
    return StorageUnavailable(f"MySQL unreachable: {exc}")


def schema_problem(table: str, kind: str, columns: dict[str, tuple[str, str]]) -> str | None:
    """What is wrong with an existing table (``columns``: name -> (type, collation)), or None."""
    for name, types in _EXPECTED[kind].items():
        found = columns.get(name)
        if found is None:
            return f"MySQL table {table!r} has no column {name!r}: it is not an akchat-fsm table."
        kind_found, collation = found
        if kind_found not in types:
            return f"MySQL table {table!r} column {name!r} is {kind_found}, expected {types[0]}."
        if name in _KEY_COLUMNS and not collation.endswith("_bin"):
            return (
                f"MySQL table {table!r} column {name!r} has collation {collation}, which "
                "compares case-insensitively: ids differing in case would collide."
            )
        if name == "body" and not collation.startswith("utf8mb4"):
            return f"MySQL table {table!r} column 'body' is {collation}, not utf8mb4."
    return None


def _idle_and_quiet(conn: Any) -> bool:
    """Is this connection safe to send on? Checked before every call, without a round trip.

    An idle connection has nothing to read; if its socket is readable, the server hung up
    (``KILL``, restart, ``wait_timeout``), so we reconnect *before* sending instead of
    learning it from a write whose fate would then be unknown.
    """
    if not conn.open:
        return False
    sock = getattr(conn, "_sock", None)
    if sock is None:
        return False
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll() on this platform: trust it
        return True


class _Plan(SqlStatements):
    """Everything but the I/O: validated options, SQL text, connection setup."""

    def __init__(
        self,
        connect: dict[str, Any],
        table: str,
        statement_timeout_ms: int | None,
        read_only: bool,
    ) -> None:
        if statement_timeout_ms is not None and (
            isinstance(statement_timeout_ms, bool)
            or not isinstance(statement_timeout_ms, int)
            or statement_timeout_ms < 0
        ):
            raise ConfigError("statement_timeout_ms must be a non-negative int or None.")
        if not isinstance(connect.get("database"), str) or not connect["database"]:
            raise ConfigError(
                "MySQLStorage needs a database name.",
                hint="Pass database=…, or a URL mysql://user@host:3306/dbname.",
            )
        self.connect = connect
        self.statement_timeout_ms = statement_timeout_ms
        self.read_only = bool(read_only)
        self.table = t = check_sql_identifier(table)
        self.records = r = derived_identifier(t, "__records")
        self.pending = p = derived_identifier(t, "__pending")
        ids = "VARCHAR({n}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
        body = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
        tail = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        # The audit index (ADR-0139): MySQL has no partial index, so a generated column holds
        # the record's instant for the keys `audit_indexed` admits (NULL otherwise) and is
        # indexed. InnoDB updates it in the record's own INSERT; adding it to an existing table
        # (one ALTER, atomic) indexes the entries already there. A dev store's decisions-only
        # `audit_ms` column (before settles were indexed) is left in place, unused.
        audit_column = (
            f"{AUDIT_COLUMN} BIGINT AS (IF({AUDIT_WHERE_MYSQL}, written_ms, NULL)) VIRTUAL"
        )
        audit_key = f"KEY {AUDIT_INDEX_MARK}_idx ({AUDIT_COLUMN}, session_id, `key`)"
        self.add_audit = f"ALTER TABLE {r} ADD COLUMN {audit_column}, ADD {audit_key}"
        self.audit_sql = AuditStatements(
            r, "%s", when=AUDIT_COLUMN, where="", key="`key`", row_values=False
        )
        self.create = [
            f"CREATE TABLE IF NOT EXISTS {t} (session_id {ids.format(n=128)},"
            f" `cursor` BIGINT NOT NULL, body {body},"
            " processing BOOLEAN NOT NULL DEFAULT FALSE, written_ms BIGINT NOT NULL DEFAULT 0,"
            " PRIMARY KEY (session_id), KEY processing_idx (processing, written_ms))" + tail,
            f"CREATE TABLE IF NOT EXISTS {r} (session_id {ids.format(n=128)},"
            f" `key` {ids.format(n=200)}, version BIGINT NOT NULL, body {body},"
            " processing BOOLEAN NOT NULL DEFAULT FALSE, written_ms BIGINT NOT NULL DEFAULT 0,"
            f" {audit_column}, PRIMARY KEY (session_id, `key`),"
            f" KEY processing_idx (processing, session_id), {audit_key})" + tail,
        ]
        keys = "".join(
            f", KEY pending{suffix} ({columns})" for suffix, columns in PENDING_INDEXES.items()
        )
        id128 = ids.format(n=128)
        # The pending table is built under another name, filled, then renamed (ADR-0029): DDL
        # autocommits here, so only RENAME (atomic) may make it appear, and its existence is
        # then the marker that the backfill committed. A build cut short (the process died,
        # the backfill failed) leaves only the build table, which the next writer starts over.
        # Builders queue on a named lock, so none drops a build another is filling.
        self.build = b = derived_identifier(t, "__pending_build")
        self.lock_build = (
            "SELECT GET_LOCK(CONCAT('akchat-fsm:', MD5(CONCAT(DATABASE(), '.', %s))), %s)"
        )
        self.unlock_build = (
            "SELECT RELEASE_LOCK(CONCAT('akchat-fsm:', MD5(CONCAT(DATABASE(), '.', %s))))"
        )
        self.drop_build = f"DROP TABLE IF EXISTS {b}"
        self.create_build = (
            f"CREATE TABLE {b} (session_id {id128}, token {id128},"
            f" tool_call_id {id128}, action {id128}, expires_at_ms BIGINT NOT NULL,"
            f" pending_since_ms BIGINT NOT NULL, PRIMARY KEY (session_id, token){keys})" + tail
        )
        self.publish_build = f"RENAME TABLE {b} TO {p}"
        # The pending bindings of the envelopes already stored, `since` their last write; its
        # locking reads (REPEATABLE READ) see the latest envelopes. IGNORE: a body listing one
        # token twice keeps its first binding. A body that is not JSON, or a binding that is
        # not well-formed, is skipped.
        field = "{name} {kind} PATH '$.{path}' NULL ON EMPTY NULL ON ERROR"
        columns = ", ".join(
            field.format(name=name, kind=kind, path=path)
            for name, kind, path in (
                ("token", "VARCHAR(128)", "token"),
                ("tool_call_id", "VARCHAR(128)", "toolCallId"),
                ("action", "VARCHAR(128)", "action"),
                ("expires_at_ms", "BIGINT", "expiresAt"),
                ("status", "VARCHAR(16)", "status"),
            )
        )
        self.backfill_pending = (
            f"INSERT IGNORE INTO {b} ({PENDING_COLUMNS}) SELECT s.session_id, c.token,"
            " c.tool_call_id, c.action, c.expires_at_ms,"
            " IF(s.written_ms > 0, s.written_ms, %s)"
            f" FROM {t} s, JSON_TABLE(IF(JSON_VALID(s.body), s.body, '{{}}'),"
            f" '$.confirmations[*]' COLUMNS ({columns})) c"
            " WHERE s.body LIKE '%%\"status\":\"pending\"%%' AND c.status = 'pending'"
            " AND c.token IS NOT NULL AND c.tool_call_id IS NOT NULL AND c.action IS NOT NULL"
            " AND c.expires_at_ms IS NOT NULL"
        )
        self.pending_sql = PendingStatements(p, "%s", row_values=False)
        self.select_since = (
            f"SELECT token, pending_since_ms FROM {p} WHERE session_id = %s FOR UPDATE"
        )
        self.delete_pending = f"DELETE FROM {p} WHERE session_id = %s"
        self.insert_pending = f"INSERT INTO {p} ({PENDING_COLUMNS}) VALUES "
        self.columns = (
            "SELECT BINARY c.table_name = %s, c.column_name, c.data_type,"
            " COALESCE(c.collation_name, ''), t.engine FROM information_schema.columns c"
            " JOIN information_schema.tables t ON t.table_schema = c.table_schema"
            " AND t.table_name = c.table_name"
            " WHERE c.table_schema = DATABASE() AND BINARY c.table_name IN (%s, %s)"
        )
        self.has_pending = (
            "SELECT COUNT(*) FROM information_schema.tables"
            " WHERE table_schema = DATABASE() AND BINARY table_name = %s"
        )
        self.select = f"SELECT body, `cursor` FROM {t} WHERE session_id = %s"
        self.insert = (
            f"INSERT INTO {t} (session_id, `cursor`, body, processing, written_ms)"
            " VALUES (%s, %s, %s, %s, %s)"
        )
        self.update = (
            f"UPDATE {t} SET `cursor` = %s, body = %s, processing = %s, written_ms = %s"
            " WHERE session_id = %s AND `cursor` = %s"
        )
        # One statement for the three tables: a reader never sees the envelope without its
        # records; its locking reads wait for a save in flight and then see its pending rows.
        self.delete = (
            f"DELETE s, x, y FROM (SELECT 1 AS one) d LEFT JOIN {t} s ON s.session_id = %s"
            f" LEFT JOIN {r} x ON x.session_id = %s LEFT JOIN {p} y ON y.session_id = %s"
        )
        self.select_record = f"SELECT version, body FROM {r} WHERE session_id = %s AND `key` = %s"
        #: Plain INSERT, never IGNORE or ON DUPLICATE: a held key must raise 1062, which is
        #: how ``save_with_records`` refuses the whole transaction (all or nothing).
        self.insert_records_into = (
            f"INSERT INTO {r} (session_id, `key`, version, body, processing, written_ms) VALUES "
        )
        self.insert_record = self.insert_records_into + "(%s, %s, %s, %s, %s, %s)"
        self.update_record = (
            f"UPDATE {r} SET version = %s, body = %s, processing = %s, written_ms = %s"
            " WHERE session_id = %s AND `key` = %s AND version = %s"
        )
        self.list_records = f"SELECT `key` FROM {r} WHERE session_id = %s AND LEFT(`key`, %s) = %s"
        self.delete_record = f"DELETE FROM {r} WHERE session_id = %s AND `key` = %s"
        # A listed session's last write is the newest of its envelope's and its records'.
        last = (
            "GREATEST(COALESCE((SELECT s.written_ms FROM {t} s WHERE s.session_id = p.session_id),"
            " 0), COALESCE((SELECT MAX(x.written_ms) FROM {r} x WHERE x.session_id ="
            " p.session_id), 0))"
        )
        self.list_processing = (
            f"SELECT session_id, last FROM (SELECT p.session_id, {last.format(t=t, r=r)} AS last"
            f" FROM (SELECT session_id FROM {t} WHERE processing"
            f" UNION SELECT session_id FROM {r} WHERE processing) p) q"
            " WHERE %s IS NULL OR last < %s ORDER BY last, session_id LIMIT %s"
        )
        # A read-only adapter that found no records table: only envelopes can be processing.
        self.list_processing_sessions_only = (
            f"SELECT session_id, written_ms FROM {t} WHERE processing"
            " AND (%s IS NULL OR written_ms < %s) ORDER BY written_ms, session_id LIMIT %s"
        )

    def setup(self, server_info: str) -> list[str]:
        """Session settings: strict mode (an over-long value is an error, never truncated),
        no engine substitution, REPEATABLE READ, and the read-only / timeout options."""
        statements = [
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'",
            "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ",
        ]
        if self.read_only:
            # Belt and braces: the server refuses any write (and DDL) this session might send.
            statements.append("SET SESSION TRANSACTION READ ONLY")
        return statements + self.timeout(server_info, self.statement_timeout_ms)

    def timeout(self, server_info: str, ms: int | None) -> list[str]:
        """The statement that bounds each statement of the session to ``ms`` (0: unbounded;
        ``None``: none, the server's own setting stays)."""
        if ms is None:
            return []
        if "mariadb" in server_info.lower():
            return [f"SET SESSION max_statement_time = {ms / 1000:.3f}"]
        # MySQL bounds SELECTs only; writes are bounded by innodb_lock_wait_timeout.
        return [f"SET SESSION max_execution_time = {ms}"]

    def build_timeouts(self, server_info: str) -> tuple[list[str], list[str]]:
        """What lifts the statement timeout for the pending index's build, and what puts it
        back. The backfill reads every envelope in one statement, which grows with the store:
        a timeout sized for one call would fail it at every open of a large store, and the
        store would never get its index. The build is bounded instead by its lock wait
        (``BUILD_LOCK_WAIT_S``) and runs once per store."""
        if self.statement_timeout_ms is None:
            return [], []
        return self.timeout(server_info, 0), self.timeout(server_info, self.statement_timeout_ms)

    def columns_params(self) -> tuple[str, str, str]:
        return self.table, self.table, self.records

    def layout(self, rows: list[tuple[Any, ...]]) -> bool:
        """Check the existing tables (``rows`` from ``columns``); whether records exist."""
        found: dict[bool, dict[str, tuple[str, str]]] = {True: {}, False: {}}
        engines: dict[bool, str] = {}
        for is_sessions, name, kind, collation, engine in rows:
            side = bool(is_sessions)
            found[side][_text(name)] = (_text(kind).lower(), _text(collation).lower())
            engines[side] = _text(engine or "")
        problem = None
        for side, table, kind in ((True, self.table, "sessions"), (False, self.records, "records")):
            if found[side]:
                problem = problem or schema_problem(table, kind, found[side])
                if problem is None and engines[side].lower() != "innodb":
                    problem = f"MySQL table {table!r} uses {engines[side]}, not InnoDB."
        if problem is None and self.read_only and not found[True]:
            problem = f"MySQL has no table {self.table!r} (a read-only adapter never creates one)."
        if problem is not None:
            raise ConfigError(problem, hint=SCHEMA_HINT)
        return bool(found[False])

    def audit_present(self, rows: list[tuple[Any, ...]]) -> bool:
        """Whether the records table (``rows`` from ``columns``) has the audit column."""
        return any(
            not is_sessions and _text(name) == AUDIT_COLUMN for is_sessions, name, *_ in rows
        )

    def check_audit(self, records: bool, present: bool) -> None:
        """A read-only adapter cannot add the audit index to an older store."""
        if records and not present:
            raise ConfigError(
                f"MySQL table {self.records!r} predates the audit index and a read-only "
                "adapter does not upgrade it.",
                hint="Open it once without read_only (any host, or a writing verb).",
            )

    def refuse_if_read_only(self, what: str) -> None:
        if self.read_only:
            raise read_only_refusal("MySQL storage", what)

    def check_pending(self, present: bool) -> None:
        """A read-only adapter cannot add the pending index to an older store."""
        if not present:
            raise ConfigError(
                f"MySQL table {self.table!r} predates the pending index and a read-only "
                "adapter does not upgrade it.",
                hint="Open it once without read_only (any host, or a writing verb).",
            )

    def replace_pending(self, cur: Any, p: PreparedSave) -> None:
        """Replace the session's pending rows, inside the transaction of its envelope's save
        (which holds the envelope's row lock, so the rows read here are the latest)."""
        previous: dict[str, int] = {}
        if p.pending:
            cur.execute(self.select_since, (p.session_id,))
            previous = {_text(token): int(since) for token, since in cur.fetchall()}
        cur.execute(self.delete_pending, (p.session_id,))
        if p.pending:
            rows = pending_params(carry_since(p.session_id, p.pending, previous, p.written_ms))
            marks = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(rows))
            cur.execute(self.insert_pending + marks, [v for row in rows for v in row])


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


class MySQLStorage(Closing):
    """Compare-and-set storage in one InnoDB table, over one autocommit PyMySQL connection.

    ``MySQLStorage(*, database, host="127.0.0.1", port=3306, user="root", password="",
    table="akchat_sessions", statement_timeout_ms=None, connect_timeout=10.0,
    read_only=False)``

    The connection opens on first use (failure: ``StorageUnavailable``), creates both tables
    if missing (after checking the shape of any that exist: ``ConfigError`` names the first
    column that does not fit), and is reopened after it breaks. Calls from several threads are
    serialised by a lock; open one adapter per worker for parallel writes.
    ``statement_timeout_ms`` is MariaDB's ``max_statement_time`` (MySQL: ``max_execution_time``,
    which bounds reads only). ``read_only=True`` runs no DDL, sets the session read-only and
    refuses writes before any I/O; a missing sessions table is a ``ConfigError``.
    """

    def __init__(
        self,
        *,
        database: str,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        table: str = DEFAULT_TABLE,
        statement_timeout_ms: int | None = None,
        connect_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        connect = {
            "host": host,
            "port": int(port),
            "user": user,
            "password": password,
            "database": database,
            "charset": "utf8mb4",
            "autocommit": True,
            # The affected-row count of an UPDATE is then the rows matched, not changed.
            "client_flag": CLIENT.FOUND_ROWS,
            "connect_timeout": max(1, round(connect_timeout)),
        }
        self._plan = _Plan(connect, table, statement_timeout_ms, read_only)
        self.table = self._plan.table
        self.read_only = self._plan.read_only
        self._records = False
        self._pending = False
        self._audit = False
        self._lock = threading.Lock()
        self._conn: Any = None
        self._closed = False

    def _connection(self) -> Any:
        if self._closed:
            raise StorageUnavailable("MySQLStorage is closed.")
        if self._conn is not None:
            if _idle_and_quiet(self._conn):
                return self._conn
            self._drop()
        conn: Any = None
        try:
            conn = pymysql.connect(**self._plan.connect)
            with conn.cursor() as cur:
                for statement in self._plan.setup(conn.get_server_info()):
                    cur.execute(statement)
                cur.execute(self._plan.columns, self._plan.columns_params())
                found = list(cur.fetchall())
                records = self._plan.layout(found)
                audit = self._plan.audit_present(found)
                cur.execute(self._plan.has_pending, (self._plan.pending,))
                pending = bool(cur.fetchone()[0])
                if not self._plan.read_only:
                    for statement in self._plan.create:
                        cur.execute(statement)
                    if records and not audit:
                        _add_audit_index(cur, self._plan, conn.get_server_info())
                    records = audit = True
                    if not pending:
                        _add_pending_index(cur, self._plan, conn.get_server_info())
                        pending = True
        except pymysql.err.Error as exc:
            _close_quietly(conn)
            raise connect_error(exc) from exc
        except BaseException:
            _close_quietly(conn)
            raise
        self._conn, self._records, self._pending = conn, records, pending
        self._audit = audit
        return conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        _close_quietly(conn)

    def _run(
        self,
        sql: str,
        params: tuple[Any, ...],
        *,
        write: bool,
        every: bool = False,
        records: bool = False,
        without_records: str | None = None,
        pending: bool = False,
        audit: bool = False,
    ) -> Any:
        """Execute one statement: the rows (``every``), the first row, or the affected count.

        A write answers its affected-row count (``None`` for a definite conflict reported as
        an error, the duplicate key of a create). ``records``: a read of the records table,
        answered empty when a read-only adapter found none; ``without_records``: the
        statement sent instead in that case. ``pending``: a read of the pending table, which a
        read-only adapter of an older store lacks (``ConfigError``).
        """
        if write:
            self._plan.refuse_if_read_only("a write")
        with self._lock:
            conn = self._connection()
            if pending:
                self._plan.check_pending(self._pending)
            if audit:
                self._plan.check_audit(self._records, self._audit)
            if not self._records:
                if records or audit:
                    return [] if every else None
                sql = without_records or sql

            def statement(cur: Any) -> Any:
                count = cur.execute(sql, params)
                if write:
                    return count
                rows = cur.fetchall()
                return list(rows) if every else (rows[0] if rows else None)

            return self._send(conn, statement, write=write, transaction=False)

    def _send(
        self, conn: Any, body: Callable[[Any], Any], *, write: bool, transaction: bool
    ) -> Any:
        """``body(cursor)``'s answer, sent again while a deadlock rolls it back (nothing
        applied) and attempts remain; ``None`` for a definite conflict reported as an error.

        ``transaction``: ``body`` opens one, which a failed statement may leave open, so it
        is rolled back, and the connection dropped if even that fails (the server rolls a
        dropped one back) or if the text could not be encoded part-way through.
        """
        for attempt in range(WRITE_ATTEMPTS):
            try:
                with conn.cursor() as cur:
                    return body(cur)
            except pymysql.err.Error as exc:
                broken = not conn.open or (transaction and _rollback_failed(conn))
                if must_resend(exc, write=write, attempt=attempt) and not broken:
                    continue
                if broken:
                    self._drop()
                error = map_mysql_error(exc, sent=True, write=write, broken=broken)
                if error is None:
                    return None
                raise error from exc
            except UnicodeError as exc:
                if transaction:
                    self._drop()
                raise ConfigError(f"MySQL cannot carry the text: {exc}", hint=SCHEMA_HINT) from exc
            except BaseException:
                self._drop()  # interrupted mid-protocol (or mid-transaction): never reuse
                raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        row = self._run(self._plan.select, (key,), write=False)
        return None if row is None else loaded_text(key, row[0], row[1])

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        p = prepare_save(snapshot, expected_cursor)
        sql, params = self._plan.prepared_statement(p)
        self._plan.refuse_if_read_only("a write")

        def cas_then_pending(cur: Any) -> bool:
            # One transaction: the envelope's CAS, then its pending rows (ADR-0029).
            cur.execute("BEGIN")
            if not cur.execute(sql, params):
                cur.execute("ROLLBACK")
                return False
            self._plan.replace_pending(cur, p)
            cur.execute("COMMIT")
            return True

        with self._lock:
            conn = self._connection()
            return bool(self._send(conn, cas_then_pending, write=True, transaction=True))

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one transaction, all or nothing
        (``SaveWithRecords``)."""
        # The envelope's CAS, then one plain INSERT of the records, whose duplicate key (1062,
        # a key already there) rolls it all back: the definite False; then the pending rows.
        # A deadlock re-sends the whole transaction.
        p, created = prepare_save_with_records(snapshot, expected_cursor, records)
        sql, params = self._plan.prepared_statement(p)
        self._plan.refuse_if_read_only("a write")
        marks = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(created))
        insert = self._plan.insert_records_into + marks
        values = [
            v
            for r in created
            for v in (r.session_id, r.key, r.version, r.text, False, p.written_ms)
        ]

        def cas_records_pending(cur: Any) -> bool:
            cur.execute("BEGIN")
            if not cur.execute(sql, params):
                cur.execute("ROLLBACK")
                return False
            cur.execute(insert, values)  # 1062 on a key already there: rolled back by _send
            self._plan.replace_pending(cur, p)
            cur.execute("COMMIT")
            return True

        with self._lock:
            conn = self._connection()
            if not self._records:  # pragma: no cover - a writing adapter always has the table
                raise StorageUnavailable("MySQL storage has no records table.")
            return bool(self._send(conn, cas_records_pending, write=True, transaction=True))

    def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records (one transaction); a missing one is no error."""
        sid = check_session_id(session_id)
        self._run(self._plan.delete, (sid, sid, sid), write=True)

    # ------------------------------------------------------------------ records capability
    def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        params = self._plan.record_key(session_id, key)
        row = self._run(self._plan.select_record, params, write=False, records=True)
        return None if row is None else (int(row[0]), _text(row[1]))

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
        return bool(self._run(*statement, write=True))

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        sid = check_session_id(session_id)
        if record_prefix_matches_nothing(prefix):
            return []
        params = (sid, len(prefix), prefix)
        rows = self._run(self._plan.list_records, params, write=False, every=True, records=True)
        return sorted(_text(row[0]) for row in rows)

    def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        self._run(self._plan.delete_record, self._plan.record_key(session_id, key), write=True)

    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        count, before = check_limit(limit, written_before_ms)
        rows = self._run(
            self._plan.list_processing,
            (before, before, count),
            write=False,
            every=True,
            without_records=self._plan.list_processing_sessions_only,
        )
        return [ProcessingSession(_text(sid), int(ms)) for sid, ms in rows]

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
        sql, params = self._plan.pending_sql.find_token, (check_token(token),)
        return found_session(self._run(sql, params, write=False, pending=True))

    # ------------------------------------------------------------------ audit index
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
        return 0 if self._conn is None or not self._conn.open else 1

    def close(self) -> None:
        """Close the connection (after a call in flight; no transaction outlives a call)."""
        with self._lock:
            self._closed = True
            self._drop()


def _add_pending_index(cur: Any, plan: _Plan, server_info: str) -> None:
    """Build, fill and publish the pending table of a store written before it (ADR-0029).

    Under the build lock, re-checked: a writer that queued behind another's build finds the
    table there. Any failure leaves no pending table; the caller closes the connection, which
    releases the lock, and the next writer to connect builds it again from the start. The
    build runs without ``statement_timeout_ms`` (:meth:`_Plan.build_timeouts` says why),
    which is set again before the connection serves its first call.
    """
    unbounded, bounded = plan.build_timeouts(server_info)
    for statement in unbounded:
        cur.execute(statement)
    _build_pending_index(cur, plan)
    for statement in bounded:
        cur.execute(statement)


def _add_audit_index(cur: Any, plan: _Plan, server_info: str) -> None:
    """Add the audit column and its index to a records table written before it (ADR-0139).

    One ``ALTER TABLE``, atomic: it indexes the entries already stored. A writer that lost
    the race to another finds the column there (error 1060) and goes on. Run without
    ``statement_timeout_ms``, as the pending build is.
    """
    unbounded, bounded = plan.build_timeouts(server_info)
    for statement in unbounded:
        cur.execute(statement)
    try:
        cur.execute(plan.add_audit)
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != _DUPLICATE_COLUMN:
            raise
    for statement in bounded:
        cur.execute(statement)


def _build_pending_index(cur: Any, plan: _Plan) -> None:
    cur.execute(plan.lock_build, (plan.pending, BUILD_LOCK_WAIT_S))
    if cur.fetchone()[0] != 1:
        raise StorageUnavailable(
            f"MySQL: another connection is still adding the pending index of {plan.table!r}"
            f" (waited {BUILD_LOCK_WAIT_S} s); try again."
        )
    cur.execute(plan.has_pending, (plan.pending,))
    if not cur.fetchone()[0]:
        cur.execute(plan.drop_build)  # what a build cut short left, if anything
        cur.execute(plan.create_build)
        cur.execute(plan.backfill_pending, (now_ms(),))
        cur.execute(plan.publish_build)
    cur.execute(plan.unlock_build, (plan.pending,))


def _rollback_failed(conn: Any) -> bool:
    """After a failed statement of the save's transaction: roll the rest back; ``True`` if even
    that failed (the connection is not reused; the server rolls back a dropped one)."""
    try:
        conn.rollback()
    except pymysql.err.Error:
        return True
    return False


def _close_quietly(conn: Any) -> None:
    if conn is not None:
        with contextlib.suppress(Exception):
            conn.close()


class AsyncMySQLStorage(ThreadedAsyncStorage[MySQLStorage]):
    """The asyncio twin: a :class:`MySQLStorage` whose calls run in a worker thread.

    Takes the same arguments. A task cancelled during ``save`` may still have committed:
    treat it as an unknown outcome (see ``_threaded``).
    """

    def __init__(
        self,
        *,
        database: str,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        table: str = DEFAULT_TABLE,
        statement_timeout_ms: int | None = None,
        connect_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        super().__init__(
            MySQLStorage(
                database=database,
                host=host,
                port=port,
                user=user,
                password=password,
                table=table,
                statement_timeout_ms=statement_timeout_ms,
                connect_timeout=connect_timeout,
                read_only=read_only,
            )
        )
        self.table = self.sync.table
        self.read_only = self.sync.read_only
