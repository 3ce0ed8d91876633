"""The pending index on the SQL adapters: what the shared contract tests cannot see (ADR-0029).

- each page is one indexed read: the database's own plan names the pending table's index;
- the rows change only with a committed envelope save: a ``COMMIT`` that fails leaves both;
- a store written before the pending index gets its rows once, when a writer opens it; a
  read-only adapter changes nothing and refuses to list until then, and lists afterwards.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm import ConfigError, ConfirmationBinding, ConfirmationStatus, SessionSnapshot
from akchat_fsm.errors import OutcomeUnknown
from akchat_fsm.storage import SQLiteStorage, open_storage


def binding(n: int, status: str = "pending", *, action: str = "pay") -> ConfirmationBinding:
    return ConfirmationBinding(
        token=f"tok-{n}",
        action=action,
        input={"n": n},
        tool_call_id=f"call-{n}",
        expires_at=10_000 + n,
        status=ConfirmationStatus(status),
    )


def snap(sid: str, cursor: int, *bindings: ConfirmationBinding) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=sid,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=bindings,
    )


def tokens(storage: object, **kwargs: object) -> list[str]:
    page = storage.list_pending(limit=1000, **kwargs)  # type: ignore[attr-defined]
    return [item.token for item in page.items]


# --------------------------------------------------------------------------- SQLite
def _sqlite_plan(path: Path, sql: str, params: tuple[object, ...]) -> str:
    with sqlite3.connect(path) as conn:
        return " | ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


@pytest.mark.parametrize(
    ("kwargs", "index"),
    [
        ({}, "akchat_sessions__pending_expiry"),
        ({"order": "newest"}, "akchat_sessions__pending_newest"),
        ({"action": "pay"}, "akchat_sessions__pending_action_expiry"),
        ({"action": "pay", "order": "newest"}, "akchat_sessions__pending_action_newest"),
        ({"expiring_before_ms": 10_100}, "akchat_sessions__pending_expiry"),
    ],
)
def test_sqlite_pages_read_one_index(tmp_path: Path, kwargs: dict[str, object], index: str) -> None:
    path = tmp_path / "plan.db"
    with SQLiteStorage(path) as storage:
        assert storage.save(snap("s-0", 0, binding(0)), None)  # creates the tables
        with sqlite3.connect(path) as raw:  # rows straight into the table: the plan is the point
            raw.executemany(
                "INSERT INTO akchat_sessions__pending VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (f"s-{n // 2}", f"tok-{n}", f"call-{n}", "pay" if n % 2 else "ship", n, n)
                    for n in range(1, 2001)
                ],
            )
        first = storage.list_pending(limit=5, **kwargs)  # type: ignore[arg-type]
        assert first.next_after is not None
        # The SQL the adapter sends for the second page, asked of SQLite's planner.
        calls: list[tuple[str, tuple[object, ...]]] = []
        assert storage._conn is not None
        storage._conn.set_trace_callback(lambda sql: calls.append((sql, ())))
        storage.list_pending(limit=5, after=first.next_after, **kwargs)  # type: ignore[arg-type]
        storage._conn.set_trace_callback(None)
    sent = [sql for sql, _ in calls if "__pending" in sql]
    assert len(sent) == 1, sent  # one read per page
    plan = _sqlite_plan(path, sent[0], ())
    assert f"USING INDEX {index}" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort: the index is the order


def test_sqlite_find_token_reads_the_token_index(tmp_path: Path) -> None:
    path = tmp_path / "token.db"
    with SQLiteStorage(path) as storage:
        for s in range(50):
            assert storage.save(snap(f"s-{s}", 0, binding(s)), None)
        assert storage.find_token("tok-7") == "s-7"
    plan = _sqlite_plan(
        path,
        "SELECT session_id FROM akchat_sessions__pending WHERE token = ? ORDER BY session_id"
        " LIMIT 1",
        ("tok-7",),
    )
    assert "USING COVERING INDEX akchat_sessions__pending_token" in plan, plan


def test_sqlite_a_failed_commit_leaves_the_rows_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "fk.db"
    with SQLiteStorage(path) as storage:
        assert storage.save(snap("s-1", 0, binding(1)), None)
        # A host's schema extension whose deferred reference dangles: checked at COMMIT, so
        # exactly the COMMIT of a save that writes a pending row fails.
        side = sqlite3.connect(path, isolation_level=None)
        side.executescript(
            """
            CREATE TABLE audit_parent (id INTEGER PRIMARY KEY);
            CREATE TABLE audit_log (parent INTEGER
                REFERENCES audit_parent (id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TRIGGER audit_pending AFTER INSERT ON akchat_sessions__pending
                BEGIN INSERT INTO audit_log (parent) VALUES (-1); END;
            """
        )
        side.close()
        assert storage._conn is not None
        storage._conn.execute("PRAGMA foreign_keys = ON")
        with pytest.raises(OutcomeUnknown):
            storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
        # Rolled back whole: the envelope is at cursor 0 and its one pending row is listed.
        stored = storage.load("s-1")
        assert stored is not None and '"cursor":0' in stored
        assert tokens(storage) == ["tok-1"]
        storage._conn.execute("PRAGMA foreign_keys = OFF")
        assert storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
        assert tokens(storage) == ["tok-2"]


def _sqlite_before_the_index(path: Path) -> None:
    """A store as the adapter wrote it before the pending index: no pending table."""
    with SQLiteStorage(path) as storage:
        assert storage.save(snap("s-1", 0, binding(1), binding(2, "approving")), None)
        assert storage.save(snap("s-2", 0, binding(3), binding(4, action="ship")), None)
        assert storage.save(snap("s-3", 0, binding(5, "rejected")), None)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE akchat_sessions__pending")  # its indexes go with it
        # A row written by another tool, which the backfill must skip, not fail on.
        conn.execute(
            "INSERT INTO akchat_sessions (session_id, cursor, body) VALUES (?, 0, ?)",
            ("s-bad", '{"cursor":0,"confirmations":["status\\":\\"pending"]}'),
        )


def test_sqlite_a_store_without_the_index_is_backfilled_once(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _sqlite_before_the_index(path)
    with SQLiteStorage(path) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-4") == "s-2"
        since = {i.token: i.pending_since_ms for i in storage.list_pending().items}
        assert min(since.values()) > 1_700_000_000_000  # the envelopes' last writes
    # Once: the table is the marker, so a later writer never backfills again (a row a host
    # removed by hand stays removed; every later save keeps the table right by itself).
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM akchat_sessions__pending WHERE token = 'tok-1'")
    with SQLiteStorage(path) as storage:
        assert tokens(storage) == ["tok-3", "tok-4"]


def test_sqlite_read_only_neither_upgrades_nor_lists_an_old_store(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _sqlite_before_the_index(path)
    before = path.read_bytes()
    with open_storage(f"sqlite:///{path}", read_only=True) as storage:
        with pytest.raises(ConfigError, match="predates the pending index"):
            storage.list_pending()  # type: ignore[attr-defined]
        with pytest.raises(ConfigError, match="predates the pending index"):
            storage.find_token("tok-1")  # type: ignore[attr-defined]
    assert path.read_bytes() == before
    with SQLiteStorage(path) as storage:  # a writer upgrades it
        storage.load("s-1")
    with open_storage(f"sqlite:///{path}", read_only=True) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-3") == "s-2"  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- PostgreSQL
@pytest.fixture
def pg_table(pg_url: str) -> Iterator[str]:
    import psycopg

    table = f"t_{uuid.uuid4().hex[:12]}"
    yield table
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


def _pg(pg_url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description is not None else []


@pytest.fixture(scope="module")
def pg_plan_table(pg_url: str) -> Iterator[str]:
    """20,000 rows in 10,000 sessions, written straight into the table (the plan is the point
    here, and a planner only prefers an index over a scan on a table this big); read only."""
    from akchat_fsm.storage import PostgresStorage

    table = f"t_{uuid.uuid4().hex[:12]}"
    with PostgresStorage(pg_url, table=table) as storage:
        assert storage.save(snap("s-0", 0, binding(0)), None)  # creates the tables
    _pg(
        pg_url,
        f"INSERT INTO {table}__pending SELECT 's-' || (n / 2), 'tok-' || n, 'call-' || n,"
        " CASE WHEN n % 2 = 0 THEN 'pay' ELSE 'ship' END, 10000 + n % 5000, 1700000000000 + n"
        " FROM generate_series(1, 20000) n",
    )
    _pg(pg_url, f"ANALYZE {table}__pending")
    yield table
    _pg(pg_url, f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("kwargs", "suffix", "sorted_by_index"),
    [
        ({}, "_expiry", True),
        ({"order": "newest"}, "_newest", True),
        ({"action": "pay"}, "_action_expiry", True),
        ({"action": "pay", "order": "newest"}, "_action_newest", True),
        ({"expiring_before_ms": 10_100}, "_expiry", True),
        ({"session_id": "s-7"}, "_pkey", False),  # one session's rows, sorted (at most 1,000)
    ],
)
def test_postgres_pages_read_one_index(
    pg_url: str, pg_plan_table: str, kwargs: dict[str, object], suffix: str, sorted_by_index: bool
) -> None:
    from akchat_fsm.storage import PostgresStorage

    pg_table = pg_plan_table
    with PostgresStorage(pg_url, table=pg_table) as storage:
        first = storage.list_pending(limit=1, **kwargs)  # type: ignore[arg-type]
        assert first.next_after is not None
        _, sql, params = storage._plan.pending_sql.list_statement(
            limit=50, after=first.next_after, **kwargs
        )
    plan = "\n".join(str(row[0]) for row in _pg(pg_url, f"EXPLAIN {sql}", params))
    assert f"{pg_table}__pending{suffix}" in plan, plan
    assert "Seq Scan" not in plan, plan
    assert ("Sort" not in plan) == sorted_by_index, plan


@pytest.mark.postgres
def test_postgres_find_token_reads_the_token_index(pg_url: str, pg_table: str) -> None:
    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=pg_table) as storage:
        assert storage.save(snap("s-0", 0, binding(0)), None)
        _pg(
            pg_url,
            f"INSERT INTO {pg_table}__pending SELECT 's-' || n, 'tok-' || n, 'call-' || n, 'pay',"
            " n, n FROM generate_series(1, 20000) n",
        )
        _pg(pg_url, f"ANALYZE {pg_table}__pending")
        assert storage.find_token("tok-77") == "s-77"
        sql = storage._plan.pending_sql.find_token
    plan = "\n".join(str(row[0]) for row in _pg(pg_url, f"EXPLAIN {sql}", ("tok-77",)))
    assert f"{pg_table}__pending_token" in plan and "Seq Scan" not in plan, plan


@pytest.mark.postgres
@pytest.mark.parametrize("when", ["statement", "commit"])
def test_postgres_a_failed_save_changes_neither(pg_url: str, pg_table: str, when: str) -> None:
    from akchat_fsm.errors import StorageError
    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=pg_table) as storage:
        assert storage.save(snap("s-1", 0, binding(1)), None)
        # A host's trigger on the pending table refuses the new row: in the statement, or
        # (a deferred constraint trigger) at the COMMIT of the statement's transaction.
        deferred = "DEFERRABLE INITIALLY DEFERRED" if when == "commit" else ""
        _pg(
            pg_url,
            f"CREATE FUNCTION {pg_table}_refuse() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'refused by the host'; END $$;"
            f" CREATE CONSTRAINT TRIGGER {pg_table}_refuse AFTER INSERT ON {pg_table}__pending"
            f" {deferred} FOR EACH ROW EXECUTE FUNCTION {pg_table}_refuse()",
        )
        try:
            with pytest.raises(StorageError):
                storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
            stored = storage.load("s-1")
            assert stored is not None and '"cursor":0' in stored
            assert tokens(storage) == ["tok-1"]
        finally:
            _pg(pg_url, f"DROP FUNCTION {pg_table}_refuse() CASCADE")
        assert storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
        assert tokens(storage) == ["tok-2"]


def _pg_before_the_index(pg_url: str, table: str) -> None:
    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=table) as storage:
        _write_old_sessions(storage)
    _pg(pg_url, f"DROP TABLE {table}__pending")
    _pg(
        pg_url,
        f"INSERT INTO {table} (session_id, cursor, body) VALUES"
        """ ('s-bad', 0, '{"cursor":0,"confirmations":"\\"status\\":\\"pending\\""}'),"""
        """ ('s-torn', 0, '{"cursor":0, "status":"pending"')""",
    )


def _write_old_sessions(storage: object) -> None:
    save = storage.save  # type: ignore[attr-defined]
    assert save(snap("s-1", 0, binding(1), binding(2, "approving")), None)
    assert save(snap("s-2", 0, binding(3), binding(4, action="ship")), None)
    assert save(snap("s-3", 0, binding(5, "rejected")), None)


@pytest.mark.postgres
def test_postgres_a_store_without_the_index_is_backfilled_once(pg_url: str, pg_table: str) -> None:
    from akchat_fsm.storage import PostgresStorage

    _pg_before_the_index(pg_url, pg_table)
    with PostgresStorage(pg_url, table=pg_table) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-4") == "s-2"
        since = {i.token: i.pending_since_ms for i in storage.list_pending().items}
        assert min(since.values()) > 1_700_000_000_000
    _pg(pg_url, f"DELETE FROM {pg_table}__pending WHERE token = 'tok-1'")
    with PostgresStorage(pg_url, table=pg_table) as storage:
        assert tokens(storage) == ["tok-3", "tok-4"]


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_postgres_read_only_neither_upgrades_nor_lists_an_old_store(
    pg_url: str, pg_table: str, mode: str
) -> None:
    from storage_harness import Client

    from akchat_fsm.storage import open_async_storage

    def opened(**kwargs: bool) -> Client:
        url = f"{pg_url}?table={pg_table}"
        if mode == "async":
            return Client(open_async_storage(url, **kwargs), True)
        return Client(open_storage(url, **kwargs), False)

    _pg_before_the_index(pg_url, pg_table)
    c = opened(read_only=True)
    try:
        with pytest.raises(ConfigError, match="predates the pending index"):
            c._call("list_pending")
        with pytest.raises(ConfigError, match="predates the pending index"):
            c._call("find_token", "tok-1")
    finally:
        c.close()
    assert _pg(pg_url, "SELECT to_regclass(%s)", (f"{pg_table}__pending",)) == [(None,)]
    c = opened()  # a writer upgrades it
    try:
        c.load("s-1")
    finally:
        c.close()
    c = opened(read_only=True)
    try:
        page = c._call("list_pending")
        assert [i.token for i in page.items] == ["tok-1", "tok-3", "tok-4"]
        assert c._call("find_token", "tok-3") == "s-2"
    finally:
        c.close()


# --------------------------------------------------------------------------- MySQL / MariaDB
@pytest.fixture
def my_table(mysql_url: str) -> Iterator[str]:
    from storage_harness import drop_mysql_tables

    table = f"t_{uuid.uuid4().hex[:12]}"
    yield table
    drop_mysql_tables(mysql_url, table)


def _my(mysql_url: str, sql: str, params: tuple[object, ...] | None = None) -> list[Any]:
    from storage_harness import mysql_admin

    conn = mysql_admin(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    finally:
        conn.close()


_DIGITS = "(" + " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10)) + ")"


def _my_storage(mysql_url: str, table: str, **kwargs: object) -> Any:
    return open_storage(f"{mysql_url}?table={table}", **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def my_plan_table(mysql_url: str) -> Iterator[str]:
    """The PostgreSQL plan table's 20,000 rows, in MariaDB; read only."""
    from storage_harness import drop_mysql_tables

    table = f"t_{uuid.uuid4().hex[:12]}"
    with _my_storage(mysql_url, table) as storage:
        assert storage.save(snap("s-0", 0, binding(0)), None)  # creates the tables
    _my(
        mysql_url,
        f"INSERT INTO {table}__pending SELECT CONCAT('s-', n DIV 2), CONCAT('tok-', n),"
        " CONCAT('call-', n), IF(n % 2 = 0, 'pay', 'ship'), 10000 + n % 5000,"
        f" 1700000000000 + n FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d"
        f" + 10000 * f.d AS n FROM {_DIGITS} a, {_DIGITS} b, {_DIGITS} c, {_DIGITS} e,"
        " (SELECT 0 AS d UNION ALL SELECT 1) f) g WHERE n > 0",
    )
    _my(mysql_url, f"ANALYZE TABLE {table}__pending")
    yield table
    drop_mysql_tables(mysql_url, table)


@pytest.mark.mysql
@pytest.mark.parametrize(
    ("kwargs", "key", "sorted_by_index"),
    [
        ({}, "pending_expiry", True),
        ({"order": "newest"}, "pending_newest", True),
        ({"action": "pay"}, "pending_action_expiry", True),
        ({"action": "pay", "order": "newest"}, "pending_action_newest", True),
        ({"session_id": "s-7"}, "PRIMARY", False),  # one session's rows, sorted
    ],
)
def test_mysql_pages_read_one_index(
    mysql_url: str, my_plan_table: str, kwargs: dict[str, object], key: str, sorted_by_index: bool
) -> None:
    with _my_storage(mysql_url, my_plan_table) as storage:
        first = storage.list_pending(limit=1, **kwargs)
        assert first.next_after is not None
        _, sql, params = storage._plan.pending_sql.list_statement(
            limit=50, after=first.next_after, **kwargs
        )
    plan = _my(mysql_url, f"EXPLAIN {sql}", params)
    assert len(plan) == 1, plan  # one table read
    assert plan[0][5] == key, plan
    assert plan[0][3] in ("range", "ref", "index"), plan  # never ALL (a full scan)
    assert ("filesort" not in str(plan[0][9])) == sorted_by_index, plan


@pytest.mark.mysql
def test_mysql_a_failed_save_changes_neither(mysql_url: str, my_table: str) -> None:
    from akchat_fsm.errors import StorageError

    with _my_storage(mysql_url, my_table) as storage:
        assert storage.save(snap("s-1", 0, binding(1)), None)
        # A host's trigger refuses the new pending row, after the envelope's UPDATE matched.
        _my(
            mysql_url,
            f"CREATE TRIGGER {my_table}_refuse BEFORE INSERT ON {my_table}__pending FOR EACH ROW"
            " SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by the host'",
        )
        with pytest.raises(StorageError):
            storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
        stored = storage.load("s-1")
        assert stored is not None and '"cursor":0' in stored
        assert tokens(storage) == ["tok-1"]
        _my(mysql_url, f"DROP TRIGGER {my_table}_refuse")
        assert storage.save(snap("s-1", 1, binding(1, "approving"), binding(2)), 0)
        assert tokens(storage) == ["tok-2"]


def _my_before_the_index(mysql_url: str, table: str) -> None:
    with _my_storage(mysql_url, table) as storage:
        _write_old_sessions(storage)
    _my(mysql_url, f"DROP TABLE {table}__pending")
    _my(
        mysql_url,
        f"INSERT INTO {table} (session_id, `cursor`, body) VALUES (%s, 0, %s), (%s, 0, %s)",
        (
            "s-bad",
            '{"cursor":0,"confirmations":["\\"status\\":\\"pending\\""]}',
            "s-torn",
            '{"cursor":0, "status":"pending"',
        ),
    )


@pytest.mark.mysql
def test_mysql_a_store_without_the_index_is_backfilled_once(mysql_url: str, my_table: str) -> None:
    _my_before_the_index(mysql_url, my_table)
    with _my_storage(mysql_url, my_table) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-4") == "s-2"
        since = {i.token: i.pending_since_ms for i in storage.list_pending().items}
        assert min(since.values()) > 1_700_000_000_000
    _my(mysql_url, f"DELETE FROM {my_table}__pending WHERE token = 'tok-1'")
    with _my_storage(mysql_url, my_table) as storage:
        assert tokens(storage) == ["tok-3", "tok-4"]


def _cut_a_build_short(mysql_url: str, table: str) -> None:
    """A first writer dies mid-backfill: its connection is killed while the backfill waits for
    a session row another transaction holds. Leaves ``<table>__pending_build``, no index."""
    import threading

    from storage_harness import mysql_admin

    from akchat_fsm.errors import StorageUnavailable

    _my_before_the_index(mysql_url, table)
    holder = mysql_admin(mysql_url)
    box: dict[str, BaseException] = {}

    def first_writer() -> None:
        try:
            with _my_storage(mysql_url, table) as storage:
                storage.load("s-1")  # connects: creates the index and backfills it
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=first_writer)
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT 1 FROM {table} WHERE session_id = 's-1' FOR UPDATE")
        thread.start()
        probe = (
            "SELECT id FROM information_schema.processlist WHERE command = 'Query' AND info LIKE %s"
        )
        for _ in range(2000):
            backfill = _my(mysql_url, probe, (f"INSERT IGNORE INTO {table}__pending%",))
            if backfill:
                break
            _my(mysql_url, "SELECT SLEEP(0.005)")
        else:
            pytest.fail("the backfill never waited for the held session row")
        _my(mysql_url, f"KILL {int(backfill[0][0])}")
        thread.join(timeout=60)
        assert not thread.is_alive()
    finally:
        holder.rollback()
        holder.close()
    assert isinstance(box.get("error"), StorageUnavailable), box


@pytest.mark.mysql
def test_mysql_a_backfill_cut_short_runs_again_at_the_next_open(
    mysql_url: str, my_table: str
) -> None:
    """The process dies mid-backfill (here: its connection is killed while the backfill waits
    for a session row another transaction holds). DDL autocommits on MySQL, so only a marker
    written after the rows tells a later writer the index is whole; it backfills again."""
    _cut_a_build_short(mysql_url, my_table)
    tables = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
    assert _my(mysql_url, f"{tables} AND table_name = %s", (f"{my_table}__pending",)) == []
    with _my_storage(mysql_url, my_table) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-4") == "s-2"
    assert _my(mysql_url, f"{tables} AND table_name LIKE %s", (f"{my_table}__pending_%",)) == []
    with _my_storage(mysql_url, my_table, read_only=True) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]


@pytest.mark.mysql
def test_mysql_the_backfill_is_not_bounded_by_the_statement_timeout(
    mysql_url: str, my_table: str
) -> None:
    """The backfill reads every envelope in one statement, so on a large store it outlasts a
    timeout sized for one call, and failed at every open: the store never got its index. Here
    it is made to outlast the timeout for sure (it waits for a session row another transaction
    holds, until it has run ten timeouts long); it still completes. Every call after the build
    is bounded again (a save waiting for the same row is cut off)."""
    import threading

    from storage_harness import mysql_admin

    from akchat_fsm.errors import StorageUnavailable

    timeout_ms = 50
    _my_before_the_index(mysql_url, my_table)
    url = f"{mysql_url}?table={my_table}&statement_timeout={timeout_ms}"
    holder = mysql_admin(mysql_url)
    box: dict[str, Any] = {}

    def first_writer() -> None:
        try:
            storage = open_storage(url)
            box["storage"] = storage
            storage.load("s-1")  # connects: creates the index and backfills it
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=first_writer)
    probe = (
        "SELECT time_ms FROM information_schema.processlist"
        " WHERE command = 'Query' AND info LIKE %s"
    )
    try:
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT 1 FROM {my_table} WHERE session_id = 's-1' FOR UPDATE")
        thread.start()
        for _ in range(4000):  # until the backfill has waited ten timeouts, or has failed
            running = _my(mysql_url, probe, (f"INSERT IGNORE INTO {my_table}__pending%",))
            if (running and running[0][0] >= 10 * timeout_ms) or not thread.is_alive():
                break
            _my(mysql_url, "SELECT SLEEP(0.005)")
        else:
            pytest.fail("the backfill neither outlasted the timeout nor failed")
        holder.rollback()  # the row is free: the backfill goes on
        thread.join(timeout=60)
        assert not thread.is_alive()
        assert "error" not in box, box
        storage = box["storage"]
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        with holder.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"SELECT 1 FROM {my_table} WHERE session_id = 's-1' FOR UPDATE")
        with pytest.raises(StorageUnavailable) as cut:
            storage.delete("s-1")
        assert cut.value.__cause__ is not None and cut.value.__cause__.args[0] == 1969
    finally:
        holder.rollback()
        holder.close()
        if "storage" in box:
            box["storage"].close()


@pytest.mark.mysql
def test_the_harness_drops_what_a_build_cut_short_left(mysql_url: str) -> None:
    """A build cut short leaves ``<table>__pending_build``; a suite that only dropped the
    tables of a whole store left it behind on the shared server after every such test."""
    from storage_harness import drop_mysql_tables

    table = f"t_{uuid.uuid4().hex[:12]}"
    try:
        _cut_a_build_short(mysql_url, table)
        names = (
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = DATABASE() AND LEFT(table_name, %s) = %s"
        )
        assert (f"{table}__pending_build",) in _my(mysql_url, names, (len(table), table))
    finally:
        drop_mysql_tables(mysql_url, table)
    assert _my(mysql_url, names, (len(table), table)) == []


@pytest.mark.mysql
def test_mysql_read_only_neither_upgrades_nor_lists_an_old_store(
    mysql_url: str, my_table: str
) -> None:
    _my_before_the_index(mysql_url, my_table)
    with _my_storage(mysql_url, my_table, read_only=True) as storage:
        with pytest.raises(ConfigError, match="predates the pending index"):
            storage.list_pending()
        with pytest.raises(ConfigError, match="predates the pending index"):
            storage.find_token("tok-1")
    assert _my(mysql_url, "SHOW TABLES LIKE %s", (f"{my_table}__pending",)) == []
    with _my_storage(mysql_url, my_table) as storage:  # a writer upgrades it
        storage.load("s-1")
    with _my_storage(mysql_url, my_table, read_only=True) as storage:
        assert tokens(storage) == ["tok-1", "tok-3", "tok-4"]
        assert storage.find_token("tok-3") == "s-2"


@pytest.mark.postgres
@pytest.mark.parametrize("isolation", ["read_committed", "serializable"])
def test_postgres_a_delete_racing_a_save_leaves_no_pending_row(
    pg_url: str, pg_table: str, isolation: str
) -> None:
    """A save in flight when ``delete`` starts: the delete waits for it, then removes the rows
    it wrote too (a statement's snapshot predates them, so a one-statement delete would not)."""
    import threading

    import psycopg

    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=pg_table, isolation=isolation) as storage:
        assert storage.save(snap("s-1", 0, binding(1)), None)
        # The save in flight, spelled out: the envelope's row is locked and a new pending row
        # written, uncommitted, exactly as the adapter's save statement leaves them.
        writer = psycopg.connect(pg_url)
        writer.execute(f"UPDATE {pg_table} SET cursor = 1 WHERE session_id = 's-1'")
        writer.execute(
            f"INSERT INTO {pg_table}__pending VALUES ('s-1', 'tok-2', 'call-2', 'pay', 1, 1)"
        )
        storage.load("s-1")  # connected: its backend pid is known
        assert storage._conn is not None
        pid = storage._conn.info.backend_pid
        box: dict[str, BaseException] = {}

        def delete() -> None:
            try:
                storage.delete("s-1")
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=delete)
        thread.start()
        try:
            for _ in range(2000):
                waiting = _pg(
                    pg_url, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                )
                if waiting == [("Lock",)]:
                    break
                _pg(pg_url, "SELECT pg_sleep(0.005)")
            else:
                pytest.fail("the delete never waited for the save in flight")
        finally:
            writer.commit()
            writer.close()
            thread.join(timeout=60)
        assert not thread.is_alive()
        assert "error" not in box, box
        assert storage.load("s-1") is None
        assert tokens(storage) == []
        assert _pg(pg_url, f"SELECT count(*) FROM {pg_table}__pending") == [(0,)]


@pytest.mark.mysql
def test_mysql_find_token_reads_the_token_index(mysql_url: str, my_plan_table: str) -> None:
    with _my_storage(mysql_url, my_plan_table) as storage:
        assert storage.find_token("tok-77") == "s-38"
        sql = storage._plan.pending_sql.find_token
    plan = _my(mysql_url, f"EXPLAIN {sql}", ("tok-77",))
    assert len(plan) == 1 and plan[0][5] == "pending_token", plan
    assert plan[0][3] == "ref" and "filesort" not in str(plan[0][9]), plan
