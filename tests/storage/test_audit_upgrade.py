"""The audit index per adapter (ADR-0139): one indexed range read a page, and the one backfill
of a store written before the index (the 0.2.0 builds that wrote audit entries without it).

The SQL adapters' index is over the records table itself (a partial index, or an indexed
generated column on MySQL/MariaDB): dropping it gives a store as those builds left it, and
the next writer to connect builds it, which indexes the entries already stored, with the
instant they were written. Redis keeps a sorted set written by the record script; a store
without it is backfilled once by the first writable ``list_audit``. A read-only adapter never
upgrades and refuses to answer from an index it knows to be missing.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm import ConfigError
from akchat_fsm.storage import SQLiteStorage, open_storage
from cleanup import drop_redis_prefix

TEXT = '{"v":1}'
KEYS = ("audit:t1:0000000000000001", "audit:t1:0000000000000002", "audit:t2:0000000000000001")


def _write(storage: Any) -> list[tuple[int, str, str]]:
    for n, key in enumerate(KEYS):
        assert storage.save_record(f"s-{n % 2}", key, TEXT, None)
        assert storage.save_record(f"s-{n % 2}", f"ledger:{n}", TEXT, None)
    return _listed(storage)


def _listed(storage: Any) -> list[tuple[int, str, str]]:
    page = storage.list_audit(limit=1000)
    assert page.next_after is None
    return [(r.written_ms, r.session_id, r.key) for r in page.items]


# --------------------------------------------------------------------------- SQLite
def test_sqlite_a_page_is_one_read_of_the_audit_index(tmp_path: Path) -> None:
    path = tmp_path / "plan.db"
    with SQLiteStorage(path) as storage:
        assert storage.save_record("s-0", "ledger:0", TEXT, None)  # creates the tables
        with sqlite3.connect(path) as raw:  # rows straight into the table: the plan is the point
            raw.executemany(
                "INSERT INTO akchat_sessions__records VALUES (?, ?, 1, '{}', 0, ?)",
                [
                    (f"s-{n // 3}", f"audit:t{n}:00" if n % 3 == 0 else f"ledger:{n}", n)
                    for n in range(1, 3001)
                ],
            )
            raw.execute("ANALYZE")
        first = storage.list_audit(limit=5)
        assert [r.written_ms for r in first.items] == [3, 6, 9, 12, 15]
        calls: list[str] = []
        assert storage._conn is not None
        storage._conn.set_trace_callback(calls.append)
        second = storage.list_audit(limit=5, after=first.next_after, since_ms=1)
        storage._conn.set_trace_callback(None)
    assert [r.written_ms for r in second.items] == [18, 21, 24, 27, 30]
    sent = [sql for sql in calls if "__records" in sql]
    assert len(sent) == 1, sent  # one read per page
    with sqlite3.connect(path) as conn:
        plan = " | ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sent[0]}"))
    assert "INDEX akchat_sessions__records_audit2" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort: the index is the order


def test_sqlite_a_store_without_the_index_is_upgraded_by_the_next_writer(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStorage(path) as storage:
        before = _write(storage)
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX akchat_sessions__records_audit2")
    with SQLiteStorage(path, read_only=True) as reader:
        with pytest.raises(ConfigError, match="predates the audit index"):
            reader.list_audit()
        assert reader.load_record("s-0", KEYS[0]) is not None  # the rest still reads
    with SQLiteStorage(path) as writer:
        assert _listed(writer) == before  # the entries already stored, at their own instants
    with SQLiteStorage(path, read_only=True) as reader:
        assert _listed(reader) == before


def test_sqlite_a_dev_store_indexed_without_settles_is_reindexed(tmp_path: Path) -> None:
    # The 0.2.0 dev builds before ADR-0139's amendment indexed `audit:` only, under another
    # name: such a store reads as lacking the index, and the next writer's index has its settle.
    path = tmp_path / "dev.db"
    settle = "audit-settle:c1:0000000000000001:n1"
    with SQLiteStorage(path) as storage:
        before = _write(storage)
    with sqlite3.connect(path) as raw:
        raw.execute("DROP INDEX akchat_sessions__records_audit2")
        raw.execute(
            "CREATE INDEX akchat_sessions__records_audit ON akchat_sessions__records"
            " (written_ms, session_id, key) WHERE substr(key, 1, 6) = 'audit:'"
        )
        raw.execute(
            f"INSERT INTO akchat_sessions__records VALUES ('s-9', '{settle}', 1, '{{}}', 0, 7)"
        )
    with SQLiteStorage(path, read_only=True) as reader, pytest.raises(ConfigError):
        reader.list_audit()
    with SQLiteStorage(path) as writer:
        assert _listed(writer) == sorted([*before, (7, "s-9", settle)])


# --------------------------------------------------------------------------- PostgreSQL
def _pg(pg_url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
        cur = conn.execute(sql, params or None)
        return cur.fetchall() if cur.description is not None else []


@pytest.fixture
def pg_table(pg_url: str) -> Iterator[str]:
    table = f"t_{uuid.uuid4().hex[:12]}"
    yield table
    _pg(pg_url, f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


@pytest.mark.postgres
def test_postgres_a_page_is_one_read_of_the_audit_index(pg_url: str, pg_table: str) -> None:
    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=pg_table) as storage:
        assert storage.save_record("s-0", "ledger:0", TEXT, None)  # creates the tables
        _pg(
            pg_url,
            f"INSERT INTO {pg_table}__records SELECT 's-' || (n / 3), CASE WHEN n % 3 = 0"
            " THEN 'audit:t' || n || ':00' ELSE 'ledger:' || n END, 1, '{}', false, n"
            " FROM generate_series(1, 20000) n",
        )
        _pg(pg_url, f"ANALYZE {pg_table}__records")
        first = storage.list_audit(limit=5)
        assert [r.written_ms for r in first.items] == [3, 6, 9, 12, 15]
        second = storage.list_audit(limit=5, after=first.next_after)
        assert [r.written_ms for r in second.items] == [18, 21, 24, 27, 30]
        _, sql, params = storage._plan.audit_sql.list_statement(
            limit=50, after=first.next_after, since_ms=10
        )
    plan = "\n".join(str(row[0]) for row in _pg(pg_url, f"EXPLAIN {sql}", params))
    assert f"{pg_table}__records_audit2" in plan, plan
    assert "Seq Scan" not in plan and "Sort" not in plan, plan


@pytest.mark.postgres
def test_postgres_a_store_without_the_index_is_upgraded_by_the_next_writer(
    pg_url: str, pg_table: str
) -> None:
    from akchat_fsm.storage import PostgresStorage

    with PostgresStorage(pg_url, table=pg_table) as storage:
        before = _write(storage)
    _pg(pg_url, f"DROP INDEX {pg_table}__records_audit2")
    with (
        PostgresStorage(pg_url, table=pg_table, read_only=True) as reader,
        pytest.raises(ConfigError, match="predates the audit index"),
    ):
        reader.list_audit()
    with PostgresStorage(pg_url, table=pg_table) as writer:
        assert _listed(writer) == before
    with PostgresStorage(pg_url, table=pg_table, read_only=True) as reader:
        assert _listed(reader) == before


# --------------------------------------------------------------------------- MySQL / MariaDB
def _my(mysql_url: str, sql: str, params: tuple[object, ...] | None = None) -> list[Any]:
    from storage_harness import mysql_admin

    conn = mysql_admin(mysql_url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    finally:
        conn.close()


@pytest.fixture
def my_table(mysql_url: str) -> Iterator[str]:
    from storage_harness import drop_mysql_tables

    table = f"t_{uuid.uuid4().hex[:12]}"
    yield table
    drop_mysql_tables(mysql_url, table)


_DIGITS = "(" + " UNION ALL ".join(f"SELECT {d} AS d" for d in range(10)) + ")"


@pytest.mark.mysql
def test_mysql_a_page_is_one_read_of_the_audit_index(mysql_url: str, my_table: str) -> None:
    with open_storage(f"{mysql_url}?table={my_table}") as storage:
        assert storage.save_record("s-0", "ledger:0", TEXT, None)  # creates the tables
        _my(
            mysql_url,
            f"INSERT INTO {my_table}__records (session_id, `key`, version, body, processing,"
            " written_ms) SELECT CONCAT('s-', n DIV 3), IF(n % 3 = 0, CONCAT('audit:t', n,"
            " ':00'), CONCAT('ledger:', n)), 1, '{}', 0, n FROM (SELECT a.d + 10 * b.d"
            f" + 100 * c.d + 1000 * e.d AS n FROM {_DIGITS} a, {_DIGITS} b, {_DIGITS} c,"
            f" {_DIGITS} e) g WHERE n > 0",
        )
        _my(mysql_url, f"ANALYZE TABLE {my_table}__records")
        first = storage.list_audit(limit=5)
        assert [r.written_ms for r in first.items] == [3, 6, 9, 12, 15]
        second = storage.list_audit(limit=5, after=first.next_after)
        assert [r.written_ms for r in second.items] == [18, 21, 24, 27, 30]
        _, sql, params = storage._plan.audit_sql.list_statement(
            limit=50, after=first.next_after, since_ms=10
        )
    plan = _my(mysql_url, f"EXPLAIN {sql}", params)
    assert len(plan) == 1, plan  # one table read
    assert plan[0][5] == "audit2_idx", plan
    assert plan[0][3] in ("range", "ref", "index"), plan  # never ALL (a full scan)
    assert "filesort" not in str(plan[0][9]), plan


@pytest.mark.mysql
def test_mysql_a_store_without_the_index_is_upgraded_by_the_next_writer(
    mysql_url: str, my_table: str
) -> None:
    url = f"{mysql_url}?table={my_table}"
    with open_storage(url) as storage:
        before = _write(storage)
    _my(mysql_url, f"ALTER TABLE {my_table}__records DROP INDEX audit2_idx, DROP COLUMN audit2_ms")
    with (
        open_storage(url, read_only=True) as reader,
        pytest.raises(ConfigError, match="predates the audit index"),
    ):
        reader.list_audit()
    # Writers connecting at once: one ALTER adds the column, the others find it there.
    barrier = threading.Barrier(3)

    def connect(_: int) -> list[tuple[int, str, str]]:
        with open_storage(url) as writer:
            barrier.wait(30)
            return _listed(writer)

    with ThreadPoolExecutor(3) as pool:
        assert list(pool.map(connect, range(3))) == [before] * 3
    with open_storage(url, read_only=True) as reader:
        assert _listed(reader) == before


# --------------------------------------------------------------------------- Redis
@pytest.mark.redis
def test_redis_a_store_written_before_the_index_is_backfilled_once(redis_url: str) -> None:
    import redis

    from akchat_fsm.storage import RedisStorage

    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    raw = redis.Redis.from_url(redis_url)
    try:
        with RedisStorage(redis_url, prefix=prefix) as storage:
            for n, key in enumerate(KEYS):
                assert storage.save_record(f"s-{n % 2}", key, TEXT, None)
            assert storage.save_record("s-0", "ledger:0", TEXT, None)
        # As the builds before the index left it: no set, no a: fields, no marker.
        raw.delete(f"{prefix}#audit")
        for sid in ("s-0", "s-1"):
            fields = [f for f in raw.hkeys(f"{prefix}{sid}#records") if f.startswith(b"a:")]
            raw.hdel(f"{prefix}{sid}#records", *fields)
        with (
            RedisStorage(redis_url, prefix=prefix, read_only=True) as reader,
            pytest.raises(ConfigError, match="never backfilled"),
        ):
            reader.list_audit()
        assert not raw.exists(f"{prefix}#audit")  # the read-only adapter wrote nothing
        with RedisStorage(redis_url, prefix=prefix) as writer:
            listed = _listed(writer)
            assert sorted((s, k) for _, s, k in listed) == sorted(
                (f"s-{n % 2}", key) for n, key in enumerate(KEYS)
            )
        assert raw.exists(f"{prefix}#audit:backfilled2")
        assert raw.zcard(f"{prefix}#audit") == 3
        with RedisStorage(redis_url, prefix=prefix) as again:
            assert _listed(again) == listed  # once: a second instance changes nothing
            again.delete("s-0")
            assert [s for _, s, _ in _listed(again)] == ["s-1"]
        with RedisStorage(redis_url, prefix=prefix, read_only=True) as reader:
            assert [s for _, s, _ in _listed(reader)] == ["s-1"]
    finally:
        drop_redis_prefix(raw, prefix)
        raw.close()


@pytest.mark.redis
def test_redis_a_dev_store_backfilled_without_settles_is_backfilled_again(redis_url: str) -> None:
    # The dev builds before ADR-0139's amendment left a settle unindexed and marked the store
    # backfilled under the old marker: the next writable list_audit backfills the settle.
    import redis

    from akchat_fsm.storage import RedisStorage

    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    settle = "audit-settle:c1:0000000000000001:n1"
    raw = redis.Redis.from_url(redis_url)
    try:
        with RedisStorage(redis_url, prefix=prefix) as storage:
            assert storage.save_record("s-0", KEYS[0], TEXT, None)
            assert storage.save_record("s-0", settle, TEXT, None)
        raw.hdel(f"{prefix}s-0#records", f"a:{settle}")
        raw.zrem(
            f"{prefix}#audit",
            *[m for m in raw.zrange(f"{prefix}#audit", 0, -1) if settle.encode() in m],
        )
        raw.set(f"{prefix}#audit:backfilled", "1")
        with RedisStorage(redis_url, prefix=prefix) as writer:
            assert sorted(k for _, _, k in _listed(writer)) == sorted([KEYS[0], settle])
    finally:
        drop_redis_prefix(raw, prefix)
        raw.close()
