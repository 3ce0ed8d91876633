"""The shipped adapters pass the kit, through its pytest form (one test per check).

PostgreSQL and Redis run against the real servers with a fresh table / key prefix. Their
spawn-process racers run in the deep profile only (each costs ~10 s of process start-up on
two cores); SQLite races processes on every run.

``error_mapping`` gets real driver faults: a second connection holds the write lock in
bursts (SQLite ``BEGIN IMMEDIATE``; PostgreSQL ``LOCK TABLE ... IN EXCLUSIVE MODE`` on the
test's own table) while the faulty adapter runs with a tiny busy / statement timeout. Redis
is left out: the equivalent (``CLIENT PAUSE WRITE``) would pause every client of the shared
server.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.storage.url import open_async_storage
from akchat_fsm.testing import check_session_storage
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance
from cleanup import drop_pg_tables, drop_redis_prefix_at, sql_tables


class _LockBursts:
    """Hold a write lock for 0.3 s out of every 0.35 s, from the first ``start()`` on."""

    def __init__(self, hold_once: Callable[[threading.Event, threading.Event], None]) -> None:
        self._hold_once = hold_once
        self._stop = threading.Event()
        self._held = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the bursts; return once the lock is held (so the first calls do fail)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
            self._held.wait(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._hold_once(self._stop, self._held)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _sqlite_bursts(path: Path) -> _LockBursts:
    def hold(stop: threading.Event, held: threading.Event) -> None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=10)
        try:
            conn.execute("BEGIN IMMEDIATE")
            held.set()
            stop.wait(0.3)
            conn.execute("COMMIT")
        finally:
            conn.close()

    return _LockBursts(hold)


def _pg_bursts(pg_url: str, table: str) -> _LockBursts:
    import psycopg

    def hold(stop: threading.Event, held: threading.Event) -> None:
        with psycopg.connect(pg_url) as conn:
            try:
                conn.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
            except psycopg.errors.UndefinedTable:
                return  # not created yet
            held.set()
            stop.wait(0.3)

    return _LockBursts(hold)


_RECORD_CHECKS = frozenset({"records_cas", "records_isolation", "record_cas_race"})
_PENDING_CHECKS = frozenset({"pending_index", "pending_index_filters", "pending_index_pages"})


def _not_provided(module: str, *names: str) -> frozenset[str]:
    """The capability checks an adapter class does not provide (no test is generated).

    Derived from the classes themselves, so the checks appear as soon as an adapter gains
    the capability; a skip would fail CI (AKCHAT_REQUIRE_SERVERS=1 counts every skip).
    """
    try:
        found = importlib.import_module(f"akchat_fsm.storage.{module}")
    except ImportError:
        return frozenset()  # the server tests skip (or fail in CI) on their own
    missing: set[str] = set()
    for name in names:
        cls = getattr(found, name)
        if not callable(getattr(cls, "save_record", None)):
            missing |= _RECORD_CHECKS
        if not callable(getattr(cls, "list_processing", None)):
            missing.add("processing_index")
        if not callable(getattr(cls, "list_pending", None)):
            missing |= _PENDING_CHECKS
        if not callable(getattr(cls, "list_audit", None)):
            missing.add("audit_index")
        if not callable(getattr(cls, "save_with_records", None)):
            missing.add("save_with_records")
    return frozenset(missing)


def _faulty(bursts: _LockBursts, make: Callable[[], Any]) -> Callable[[], Any]:
    def factory() -> Any:
        bursts.start()
        return make()

    return factory


class TestMemoryConformance(SessionStorageConformance):
    # An in-process store: no other process sees it, and it has no driver to fail.
    skip_checks = frozenset({"processes", "error_mapping"})

    @pytest.fixture
    def storage_factory(self) -> Callable[[], Any]:
        store = MemoryStorage()  # one store; every instance the kit opens is a view of it
        return lambda: store

    @pytest.fixture
    def async_storage_factory(self) -> Callable[[], Any]:
        store = MemoryStorage()
        return lambda: AsyncMemoryStorage(store)


class TestSQLiteConformance(SessionStorageConformance):
    processes = True
    skip_checks = _not_provided("sqlite", "SQLiteStorage", "AsyncSQLiteStorage")

    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'kit.db'}"  # a URL: picklable for spawn racers

    @pytest.fixture
    def faulty_storage_factory(self, tmp_path: Path) -> Iterator[Callable[[], Any]]:
        path = tmp_path / "kit.db"
        SQLiteStorage(path).close()  # the table exists before the lock bursts start
        bursts = _sqlite_bursts(path)
        yield _faulty(bursts, lambda: SQLiteStorage(path, busy_timeout=0.01))
        bursts.stop()

    @pytest.fixture
    def async_storage_factory(self, tmp_path: Path) -> Callable[[], Any]:
        url = f"sqlite:///{tmp_path / 'kit-async.db'}"
        return lambda: open_async_storage(url)


@pytest.fixture
def pg_table(pg_url: str) -> Iterator[str]:
    table = f"kit_{uuid.uuid4().hex[:12]}"
    yield table
    drop_pg_tables(pg_url, table)


@pytest.fixture
def pg_kit_url(pg_url: str, pg_table: str) -> str:
    return f"{pg_url}?table={pg_table}"


@pytest.fixture
def redis_kit_url(redis_url: str) -> Iterator[str]:

    prefix = f"kit:{uuid.uuid4().hex[:12]}:"
    yield f"{redis_url}?prefix={prefix}"
    drop_redis_prefix_at(redis_url, prefix)


@pytest.mark.postgres
class TestPostgresConformance(SessionStorageConformance):
    skip_checks = frozenset({"processes"}) | _not_provided(  # processes: see the deep test
        "postgres", "PostgresStorage", "AsyncPostgresStorage"
    )

    @pytest.fixture
    def storage_factory(self, pg_kit_url: str) -> str:
        return pg_kit_url

    @pytest.fixture
    def faulty_storage_factory(self, pg_url: str, pg_table: str) -> Iterator[Callable[[], Any]]:
        from akchat_fsm.storage.postgres import PostgresStorage

        with PostgresStorage(pg_url, table=pg_table) as first:
            first.load("warm-up")  # connects, which creates the table the bursts lock
        bursts = _pg_bursts(pg_url, pg_table)
        yield _faulty(
            bursts, lambda: PostgresStorage(pg_url, table=pg_table, statement_timeout_ms=20)
        )
        bursts.stop()

    @pytest.fixture
    def async_storage_factory(self, pg_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(pg_kit_url)


@pytest.mark.postgres
class TestPostgresSerializableConformance(TestPostgresConformance):
    """SERIALIZABLE turns waits into 40001 errors: re-sent, so answers stay linearizable."""

    @pytest.fixture
    def storage_factory(self, pg_kit_url: str) -> str:
        return f"{pg_kit_url}&isolation=serializable"

    @pytest.fixture
    def async_storage_factory(self, pg_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(f"{pg_kit_url}&isolation=serializable")


@pytest.mark.redis
class TestRedisConformance(SessionStorageConformance):
    skip_checks = frozenset({"processes", "error_mapping"}) | _not_provided(  # see the docstring
        "redis", "RedisStorage", "AsyncRedisStorage"
    )

    @pytest.fixture
    def storage_factory(self, redis_kit_url: str) -> str:
        return redis_kit_url

    @pytest.fixture
    def async_storage_factory(self, redis_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(redis_kit_url)


@pytest.mark.deep
@pytest.mark.parametrize(
    "server",
    [
        pytest.param("pg_kit_url", marks=pytest.mark.postgres),
        pytest.param("redis_kit_url", marks=pytest.mark.redis),
        pytest.param("mysql_kit_url", marks=pytest.mark.mysql),
    ],
)
def test_processes_deep(server: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(server)
    report = check_session_storage(url, only=["processes"], processes=True)
    assert report.ok, str(report)


def _mysql_connect(mysql_url: str) -> Any:
    import pymysql
    from pymysql.constants import CLIENT

    parts = urlsplit(mysql_url)
    args = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
        "database": parts.path.lstrip("/"),
    }
    return pymysql.connect(
        host=args["host"],
        port=args["port"],
        user=args["user"],
        password=args["password"],
        database=args["database"],
        autocommit=True,
        client_flag=CLIENT.FOUND_ROWS,
    )


def _mysql_bursts(mysql_url: str, table: str) -> _LockBursts:
    import pymysql

    def hold(stop: threading.Event, held: threading.Event) -> None:
        conn = _mysql_connect(mysql_url)
        try:
            with conn.cursor() as cur:
                try:
                    # READ: the other sessions still read, but every write waits for it.
                    cur.execute(f"LOCK TABLES {table} READ")
                except pymysql.err.ProgrammingError:
                    return  # not created yet
                held.set()
                stop.wait(0.3)
                cur.execute("UNLOCK TABLES")
        finally:
            conn.close()

    return _LockBursts(hold)


@pytest.fixture
def mysql_table(mysql_url: str) -> Iterator[str]:
    table = f"kit_{uuid.uuid4().hex[:12]}"
    yield table
    conn = _mysql_connect(mysql_url)
    try:
        conn.cursor().execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")
    finally:
        conn.close()


@pytest.fixture
def mysql_kit_url(mysql_url: str, mysql_table: str) -> str:
    return f"{mysql_url}?table={mysql_table}"


@pytest.mark.mysql
class TestMySQLConformance(SessionStorageConformance):
    skip_checks = frozenset({"processes"}) | _not_provided(  # processes: see the deep test
        "mysql", "MySQLStorage", "AsyncMySQLStorage"
    )

    @pytest.fixture
    def storage_factory(self, mysql_kit_url: str) -> str:
        return mysql_kit_url

    @pytest.fixture
    def faulty_storage_factory(
        self, mysql_url: str, mysql_table: str
    ) -> Iterator[Callable[[], Any]]:
        from akchat_fsm.storage.url import open_storage

        with open_storage(f"{mysql_url}?table={mysql_table}") as first:
            first.load("warm-up")  # connects, which creates the table the bursts lock
        bursts = _mysql_bursts(mysql_url, mysql_table)
        # max_statement_time (MariaDB) interrupts a write waiting for the table lock.
        url = f"{mysql_url}?table={mysql_table}&statement_timeout=20"
        yield _faulty(bursts, lambda: open_storage(url))
        bursts.stop()

    @pytest.fixture
    def async_storage_factory(self, mysql_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(mysql_kit_url)
