"""MySQL / MariaDB under real faults: CAS, records, the index, killed connections, bad shapes."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pymysql
import pytest
from storage_harness import Client, drop_mysql_tables, mysql_admin, mysql_server_args, snap

from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageUnavailable
from akchat_fsm.storage.mysql import (
    WRITE_ATTEMPTS,
    AsyncMySQLStorage,
    MySQLStorage,
    map_mysql_error,
    must_resend,
)
from akchat_fsm.storage.url import open_storage

pytestmark = pytest.mark.mysql


@pytest.fixture
def table(mysql_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    drop_mysql_tables(mysql_url, name)


@pytest.fixture
def admin(mysql_url: str) -> Iterator[Any]:
    conn = mysql_admin(mysql_url)
    yield conn
    conn.close()


def _open(mode: str, mysql_url: str, table: str, **query: Any) -> Client:
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    from akchat_fsm.storage.url import open_async_storage

    url = f"{mysql_url}?table={table}{extra}"
    adapter = open_async_storage(url) if mode == "async" else open_storage(url)
    return Client(adapter, mode == "async")


def _thread_id(c: Client) -> int:
    sync = c.adapter.sync if isinstance(c.adapter, AsyncMySQLStorage) else c.adapter
    return int(sync._conn.thread_id())


def _query(admin: Any, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with admin.cursor() as cur:
        cur.execute(sql, params or None)
        return list(cur.fetchall())


def _wait_until_blocked(admin: Any, thread: int, statement: str = "UPDATE") -> None:
    """Wait until connection ``thread`` is running ``statement`` (no sleeps of fixed lengths).

    The callers hold the lock that statement needs, so running means waiting for it. (The
    processlist, not ``innodb_trx``, which MariaDB may not list an autocommit write in yet.)
    """
    probe = (
        "SELECT 1 FROM information_schema.processlist"
        " WHERE id = %s AND command = 'Query' AND info LIKE %s"
    )
    for _ in range(2000):
        if _query(admin, probe, (thread, f"{statement}%")):
            return
        _query(admin, "SELECT SLEEP(0.005)")
    pytest.fail(f"connection {thread} never ran {statement}")


def _wait_gone(admin: Any, thread: int) -> None:
    probe = "SELECT 1 FROM information_schema.processlist WHERE id = %s"
    for _ in range(2000):
        if not _query(admin, probe, (thread,)):
            return
        _query(admin, "SELECT SLEEP(0.005)")
    pytest.fail(f"connection {thread} never went away")


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def _cursor(c: Client, sid: str) -> int:
    return int(json.loads(c.load(sid) or "")["cursor"])


# --------------------------------------------------------------------------- CAS and keys
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_cas_and_case_sensitive_ids(mysql_url: str, table: str, mode: str) -> None:
    c = _open(mode, mysql_url, table)
    try:
        assert c.save(snap("Ab", 1, note="upper"), None) is True
        assert c.save(snap("Ab", 1), None) is False  # create-only
        # utf8mb4_bin: ids differing only in case are different rows.
        assert c.save(snap("ab", 1, note="lower"), None) is True
        assert c.save(snap("Ab", 2), 1) is True
        assert c.save(snap("Ab", 2), 1) is False  # stale
        assert c.save(snap("Ab", 4), 3) is False  # future
        assert c.save(snap("zz", 2), 1) is False  # missing
        assert c.load("zz") is None
        assert _cursor(c, "Ab") == 2 and _cursor(c, "ab") == 1
        assert json.loads(c.load("ab") or "")["definitionId"] == "def-lower"
        c.delete("Ab")
        assert c.load("Ab") is None and _cursor(c, "ab") == 1
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_records_cas_prefixes_and_the_processing_index(
    mysql_url: str, table: str, mode: str
) -> None:
    c = _open(mode, mysql_url, table)
    try:
        assert c.save_record("s", "call_A.1", '{"n":1}', None, processing=True) is True
        assert c.save_record("s", "call_A.1", "{}", None) is False
        assert c.save_record("s", "call_a.1", "{}", None) is True  # keys are case-sensitive
        assert c.save_record("s", "callXA.1", "{}", None) is True  # `_` is no wildcard
        assert c.save_record("s", "call_A.1", '{"n":2}', 1, processing=True) is True
        assert c.save_record("s", "call_A.1", "{}", 1) is False
        assert c.load_record("s", "call_A.1") == (2, '{"n":2}')
        assert c.list_records("s", "call_") == ["call_A.1", "call_a.1"]
        assert c.list_records("s", "call_A") == ["call_A.1"]
        assert c.list_records("s", "no such%") == []
        assert c.save(snap("s", 1), None)
        listed = c._call("list_processing")
        assert [p.session_id for p in listed] == ["s"]
        assert c._call("list_processing", written_before_ms=listed[0].last_write_ms) == []
        assert c.save_record("s", "call_A.1", "{}", 2, processing=False)
        assert c._call("list_processing") == []
        c.delete("s")  # envelope and records in one statement
        assert c.list_records("s") == [] and c.load_record("s", "call_a.1") is None
    finally:
        c.close()


def test_unicode_bodies_round_trip_and_lone_surrogates_are_refused_before_io(
    mysql_url: str, table: str
) -> None:
    from test_lone_surrogates_stored import _snapshot

    with MySQLStorage(**_args(mysql_url), table=table) as st:
        text = '{"t":"\U0001f600 \u05e9\u05dc\u05d5\u05dd e\u0301 \\" \\\\"}'
        assert st.save_record("s", "k", text, None)
        assert st.load_record("s", "k") == (1, text)
        # A lone surrogate cannot be UTF-8: ConfigError, never a write of unknown outcome.
        with pytest.raises(ConfigError, match="UTF-8"):
            st.save_record("s", "k", '"\ud83d"', 1)
        assert st.load_record("s", "k") == (1, text)
        # An envelope holds them as \\uXXXX escapes (ADR-0080), stored and read verbatim.
        snapshot = _snapshot(1)
        assert st.save(snapshot, None)
        assert st.load("s-lone") == snapshot.to_json()


def _args(mysql_url: str) -> dict[str, Any]:
    return mysql_server_args(mysql_url)


# --------------------------------------------------------------------------- real faults
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_killed_idle_connection_is_replaced_before_sending(
    mysql_url: str, table: str, admin: Any, mode: str
) -> None:
    c = _open(mode, mysql_url, table)
    try:
        assert c.save(snap("s", 1), None)
        old = _thread_id(c)
        _query(admin, f"KILL {old}")
        _wait_gone(admin, old)
        # Noticed before anything is sent: the save runs on a new connection and commits.
        assert c.save(snap("s", 2), 1) is True
        assert _thread_id(c) != old
        assert _cursor(c, "s") == 2
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_write_killed_in_flight_is_outcome_unknown(
    mysql_url: str, table: str, admin: Any, mode: str
) -> None:
    c = _open(mode, mysql_url, table)
    holder = mysql_admin(mysql_url)
    try:
        assert c.save(snap("s", 1), None)
        _query(holder, "BEGIN")
        _query(holder, f"SELECT 1 FROM {table} WHERE session_id = 's' FOR UPDATE")
        thread = _thread_id(c)
        t, box = _in_thread(lambda: c.save(snap("s", 2), 1))
        _wait_until_blocked(admin, thread)
        _query(admin, f"KILL {thread}")
        t.join(timeout=30)
        assert not t.is_alive()
        _query(holder, "ROLLBACK")
        assert isinstance(box.get("error"), OutcomeUnknown), box
        assert isinstance(box["error"].__cause__, pymysql.err.Error)
        # Settle by re-reading: here the statement died before committing.
        assert _cursor(c, "s") == 1
        assert c.save(snap("s", 2), 1) is True
    finally:
        holder.close()
        c.close()


def test_a_save_chosen_as_a_deadlock_victim_is_resent_and_commits(
    mysql_url: str, table: str, admin: Any
) -> None:
    """A real deadlock: the holder locks the session's pending rows, the save locks the envelope
    and waits for them, then the holder asks for the envelope. InnoDB rolls back the lighter
    transaction (the save: one row changed, the holder 50), and the save re-sends it whole."""
    from akchat_fsm import ConfirmationBinding, ConfirmationStatus, SessionSnapshot

    def with_bindings(cursor: int, *statuses: str) -> SessionSnapshot:
        bindings = tuple(
            ConfirmationBinding(
                token=f"tok-{n}",
                action="pay",
                input={},
                tool_call_id=f"call-{n}",
                expires_at=9,
                status=ConfirmationStatus(status),
            )
            for n, status in enumerate(statuses, 1)
        )
        return SessionSnapshot(
            session_id="s",
            definition_id="def",
            definition_revision=1,
            updated_at="2026-11-29T00:00:00.000Z",
            cursor=cursor,
            confirmations=bindings,
        )

    with MySQLStorage(**_args(mysql_url), table=table) as st:
        assert st.save(with_bindings(1, "pending"), None)
        thread = int(st._conn.thread_id())
        holder = mysql_admin(mysql_url)
        try:
            _query(holder, "BEGIN")
            rows = ", ".join(f"('other', 'w-{n}', 'c-{n}', 'pay', 1, 1)" for n in range(50))
            _query(holder, f"INSERT INTO {table}__pending VALUES {rows}")  # its weight
            _query(holder, f"SELECT 1 FROM {table}__pending WHERE session_id = 's' FOR UPDATE")
            new = with_bindings(2, "approving", "pending")
            t, box = _in_thread(lambda: st.save(new, 1))
            _wait_until_blocked(admin, thread, "SELECT token")  # holds the envelope's row
            # Closes the cycle; the save is the victim, so this one gets the row.
            _query(holder, f"UPDATE {table} SET body = body WHERE session_id = 's'")
            _wait_until_blocked(admin, thread, "UPDATE")  # the re-sent transaction waits
            _query(holder, "ROLLBACK")
            t.join(timeout=30)
            assert not t.is_alive()
        finally:
            holder.close()
        assert box.get("result") is True, box
        assert json.loads(st.load("s") or "")["cursor"] == 2
        assert [i.token for i in st.list_pending().items] == ["tok-2"]


def test_a_read_killed_in_flight_is_storage_unavailable(
    mysql_url: str, table: str, admin: Any
) -> None:
    with MySQLStorage(**_args(mysql_url), table=table) as st:
        st.load("warm-up")
        thread = int(st._conn.thread_id())
        holder = mysql_admin(mysql_url)
        try:
            _query(holder, f"LOCK TABLES {table} WRITE")  # a plain read waits for this one
            t, box = _in_thread(lambda: st.load("s"))
            for _ in range(2000):
                state = _query(
                    admin,
                    "SELECT state FROM information_schema.processlist WHERE id = %s",
                    (thread,),
                )
                if state and "lock" in str(state[0][0]).lower():
                    break
                _query(admin, "SELECT SLEEP(0.005)")
            _query(admin, f"KILL {thread}")
            t.join(timeout=30)
            assert not t.is_alive()
        finally:
            holder.close()  # releases the table lock
        assert isinstance(box.get("error"), StorageUnavailable), box
        assert st.load("s") is None  # and the adapter reconnects


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_statement_timeout_is_storage_unavailable_and_applies_nothing(
    mysql_url: str, table: str, mode: str
) -> None:
    c = _open(mode, mysql_url, table, statement_timeout=200)
    holder = mysql_admin(mysql_url)
    try:
        assert c.save(snap("s", 1), None)
        _query(holder, "BEGIN")
        _query(holder, f"SELECT 1 FROM {table} WHERE session_id = 's' FOR UPDATE")
        with pytest.raises(StorageUnavailable) as info:
            c.save(snap("s", 2), 1)
        _query(holder, "ROLLBACK")
        assert info.value.__cause__ is not None
        assert info.value.__cause__.args[0] == 1969  # max_statement_time exceeded
        assert _cursor(c, "s") == 1
        assert c.save(snap("s", 2), 1) is True
    finally:
        holder.close()
        c.close()


def test_an_unreachable_server_is_storage_unavailable(table: str) -> None:
    with socket_closed_port() as port:
        st = MySQLStorage(database="test", port=port, table=table, connect_timeout=1)
        with pytest.raises(StorageUnavailable) as info:
            st.save(snap("s", 1), None)
        assert info.value.__cause__ is not None
        st.close()


class socket_closed_port:
    """A local TCP port nothing listens on (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        return self.port

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.mark.parametrize(
    ("code", "write", "broken", "expected"),
    [
        (1062, True, False, None),  # duplicate key on a create: the definite conflict
        (1213, True, False, StorageUnavailable),  # deadlock after WRITE_ATTEMPTS re-sends
        (1205, True, False, StorageUnavailable),  # lock wait timeout: rolled back, not a conflict
        (1969, True, False, StorageUnavailable),  # max_statement_time: rolled back
        (1792, True, False, StorageUnavailable),  # read-only server (a replica after failover)
        (2013, True, True, OutcomeUnknown),  # lost mid-write
        (2006, True, True, OutcomeUnknown),
        (1927, True, False, OutcomeUnknown),  # connection killed
        (2013, False, True, StorageUnavailable),  # a read never has an unknown outcome
        (1062, True, True, OutcomeUnknown),  # a reply on a connection lost since is not trusted
        (1146, True, False, ConfigError),  # no such table
        (1054, False, False, ConfigError),  # no such column
        (1364, True, False, ConfigError),  # a NOT NULL column of someone else's
        (1366, True, False, ConfigError),  # a column whose charset cannot hold the text
    ],
)
def test_the_error_mapping(
    code: int, write: bool, broken: bool, expected: type[Exception] | None
) -> None:
    exc = pymysql.err.OperationalError(code, "msg")
    mapped = map_mysql_error(exc, sent=True, write=write, broken=broken)
    assert (None if mapped is None else type(mapped)) is expected
    assert isinstance(map_mysql_error(exc, sent=False, write=True, broken=True), StorageUnavailable)


def test_deadlocks_are_resent_a_bounded_number_of_times() -> None:
    deadlock = pymysql.err.OperationalError(1213, "Deadlock found")
    assert must_resend(deadlock, write=True, attempt=0)
    assert not must_resend(deadlock, write=True, attempt=WRITE_ATTEMPTS - 1)
    assert not must_resend(deadlock, write=False, attempt=0)
    assert not must_resend(pymysql.err.OperationalError(1205, "timeout"), write=True, attempt=0)


# --------------------------------------------------------------------------- table shape
@pytest.mark.parametrize(
    ("ddl", "match"),
    [
        (
            "session_id VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
            " PRIMARY KEY, `cursor` BIGINT NOT NULL, body LONGTEXT NOT NULL,"
            " processing BOOLEAN NOT NULL, written_ms BIGINT NOT NULL",
            "case-insensitively",
        ),
        (
            "session_id VARCHAR(128) COLLATE utf8mb4_bin PRIMARY KEY, body LONGTEXT NOT NULL",
            "no column 'cursor'",
        ),
        (
            "session_id VARCHAR(128) COLLATE utf8mb4_bin PRIMARY KEY, `cursor` BIGINT NOT NULL,"
            " body LONGTEXT CHARACTER SET latin1 NOT NULL, processing BOOLEAN NOT NULL,"
            " written_ms BIGINT NOT NULL",
            "not utf8mb4",
        ),
        (
            "session_id VARCHAR(128) COLLATE utf8mb4_bin PRIMARY KEY, `cursor` BIGINT NOT NULL,"
            " body VARCHAR(10) NOT NULL, processing BOOLEAN NOT NULL, written_ms BIGINT NOT NULL",
            "'body' is varchar",
        ),
    ],
)
def test_a_table_of_the_wrong_shape_is_a_config_error_before_any_change(
    mysql_url: str, table: str, admin: Any, ddl: str, match: str
) -> None:
    _query(admin, f"CREATE TABLE {table} ({ddl}) DEFAULT CHARSET=utf8mb4")
    with (
        MySQLStorage(**_args(mysql_url), table=table) as st,
        pytest.raises(ConfigError, match=match),
    ):
        st.load("s")
    # Refused before any DDL: the records table was not created.
    assert not _query(admin, f"SHOW TABLES LIKE '{table}\\_\\_records'")


def test_a_myisam_table_is_refused(mysql_url: str, table: str, admin: Any) -> None:
    _query(
        admin,
        f"CREATE TABLE {table} (session_id VARCHAR(128) COLLATE utf8mb4_bin PRIMARY KEY,"
        " `cursor` BIGINT NOT NULL, body LONGTEXT NOT NULL, processing BOOLEAN NOT NULL,"
        " written_ms BIGINT NOT NULL) ENGINE=MyISAM DEFAULT CHARSET=utf8mb4",
    )
    with (
        MySQLStorage(**_args(mysql_url), table=table) as st,
        pytest.raises(ConfigError, match="InnoDB"),
    ):
        st.load("s")


def test_a_table_changed_under_a_connection_is_a_config_error(
    mysql_url: str, table: str, admin: Any
) -> None:
    with MySQLStorage(**_args(mysql_url), table=table) as st:
        assert st.save(snap("s", 1), None)
        _query(admin, f"ALTER TABLE {table} DROP COLUMN written_ms")
        with pytest.raises(ConfigError, match="does not fit") as info:
            st.save(snap("s", 2), 1)
        assert info.value.__cause__.args[0] == 1054  # type: ignore[union-attr]
        with pytest.raises(ConfigError):
            st.save(snap("t", 1), None)


# --------------------------------------------------------------------------- read-only, URLs
def test_read_only_runs_no_ddl_and_reads_without_a_records_table(
    mysql_url: str, table: str, admin: Any
) -> None:
    ro_url = f"{mysql_url}?table={table}"
    with open_storage(ro_url, read_only=True) as st, pytest.raises(ConfigError, match="never"):
        st.load("s")
    assert not _query(admin, f"SHOW TABLES LIKE '{table}%'")
    with MySQLStorage(**_args(mysql_url), table=table) as st:
        assert st.save(snap("s", 1), None)
    _query(admin, f"DROP TABLE {table}__records")
    with MySQLStorage(**_args(mysql_url), table=table, read_only=True) as ro:
        assert ro.load("s") is not None
        assert ro.list_records("s") == [] and ro.load_record("s", "k") is None
        assert ro.list_processing() == []
        with pytest.raises(ConfigError, match="read-only"):
            ro.save(snap("s", 2), 1)
        # Belt and braces: the session itself is read-only at the server.
        with pytest.raises(pymysql.err.OperationalError) as info:
            ro._conn.cursor().execute(f"DELETE FROM {table}")
        assert info.value.args[0] == 1792
    assert not _query(admin, f"SHOW TABLES LIKE '{table}\\_\\_records'")


def test_urls_configure_the_adapter() -> None:
    with open_storage(
        "mysql://bob:p%40ss@db.example:3307/app?table=x&statement_timeout=50&connect_timeout=2"
    ) as st:
        assert isinstance(st, MySQLStorage)
        connect = st._plan.connect
        assert (connect["host"], connect["port"], connect["user"]) == ("db.example", 3307, "bob")
        assert (connect["password"], connect["database"], st.table) == ("p@ss", "app", "x")
        assert st._plan.statement_timeout_ms == 50 and connect["connect_timeout"] == 2
    with open_storage("mariadb://127.0.0.1/app") as st:
        assert st._plan.connect["port"] == 3306  # type: ignore[attr-defined]
    for bad in ("mysql://h/app?nope=1", "mysql://h/", "mysql://h:port/app", "mysql://h/a?table=1x"):
        with pytest.raises(ConfigError):
            open_storage(bad)


def test_options_an_unknown_database_and_a_closed_adapter(mysql_url: str, table: str) -> None:
    args = _args(mysql_url)
    for bad in ({"statement_timeout_ms": -1}, {"statement_timeout_ms": True}, {"database": ""}):
        with pytest.raises(ConfigError):
            MySQLStorage(**{**args, **bad})  # type: ignore[arg-type]
    missing = MySQLStorage(**{**args, "database": f"no_{uuid.uuid4().hex[:12]}"}, table=table)
    with missing, pytest.raises(ConfigError, match="database not found"):
        missing.load("s")
    st = MySQLStorage(**args, table=table)
    assert st.load("s") is None and st.open_connections() == 1
    st.close()
    assert st.open_connections() == 0
    with pytest.raises(StorageUnavailable, match="closed"):
        st.load("s")
