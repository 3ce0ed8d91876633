"""Storage adapter benchmarks (not tests): overhead against the raw driver, and hot-key throughput.

Part 1, sequential CAS saves: each adapter's ``save`` against the raw driver doing the same
durable work on the same JSON text in the same run (SQLite: ``BEGIN IMMEDIATE`` + conditional
``UPDATE`` + ``COMMIT``; PostgreSQL: autocommit ``UPDATE … WHERE cursor = %s RETURNING``;
MySQL/MariaDB: autocommit ``UPDATE … WHERE session_id = %s AND cursor = %s`` with PyMySQL's
``FOUND_ROWS`` flag; Redis: ``EVALSHA`` of the single-key CAS script without the processing
index, as 0.1.0 ran it). The baselines stay the index-free CAS, so each ratio includes the
index's cost. Both sides serialize the same prebuilt snapshots (``to_wire`` + ``json.dumps``),
rounds alternate A/B, and the median round is reported.
Target: ratio <= 1.25.

Part 2, committed saves/s on one hot session with 1, 4 and 8 worker threads, each with its own
adapter instance, running a load → save(cursor + 1) retry loop for a fixed time.

    .venv/bin/python benchmarks/bench_storage.py [--saves 300] [--rounds 5] [--seconds 2]
        [--only sqlite,postgres,mysql,redis,memory]

Servers: AKCHAT_PG_URL (default postgresql://127.0.0.1:5432/test), AKCHAT_MYSQL_URL (default
mysql://root@127.0.0.1:3306/test), AKCHAT_REDIS_URL (default redis://127.0.0.1:6379/0). A
backend whose server is missing is reported and skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from akchat_fsm.storage import MemoryStorage, SQLiteStorage
from akchat_fsm.wire.session import SessionSnapshot

PG_URL = os.environ.get("AKCHAT_PG_URL", "postgresql://127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AKCHAT_REDIS_URL", "redis://127.0.0.1:6379/0")
MYSQL_URL = os.environ.get("AKCHAT_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")


def snapshots(session_id: str, count: int) -> list[SessionSnapshot]:
    """Cursor 1 (the create) then 2..count+1, built before any timing starts."""
    base = SessionSnapshot(
        session_id=session_id,
        definition_id="bench",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=1,
        confirmations=(),
    )
    return [base.model_copy(update={"cursor": n}) for n in range(1, count + 2)]


def text(s: SessionSnapshot) -> str:
    return json.dumps(s.to_wire(), separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- part 1
#: The raw Redis baseline: one hash, compare the cursor, write cursor and body (no index).
RAW_CAS_SCRIPT = """\
local stored = redis.call('HGET', KEYS[1], 'cursor')
if ARGV[1] == '' then
  if stored then return 0 end
elseif stored ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'cursor', ARGV[2], 'body', ARGV[3])
return 1
"""


class Pair:
    """An adapter and the raw driver, each able to run ``count`` sequential CAS saves."""

    def __init__(
        self,
        name: str,
        adapter: Any,
        raw_save: Callable[[SessionSnapshot, int], bool],
        cleanup: Callable[[], None],
    ) -> None:
        self.name, self.adapter, self.raw_save, self.cleanup = name, adapter, raw_save, cleanup
        #: What the raw side looks up once per session, before its saves are timed.
        self.prepare: Callable[[SessionSnapshot], object] = lambda first: None

    def run_adapter(self, snaps: list[SessionSnapshot]) -> float:
        assert self.adapter.save(snaps[0], None)
        t0 = time.perf_counter()
        for s in snaps[1:]:
            if not self.adapter.save(s, s.cursor - 1):
                raise RuntimeError("adapter save refused")
        return time.perf_counter() - t0

    def run_raw(self, snaps: list[SessionSnapshot]) -> float:
        assert self.adapter.save(snaps[0], None)  # the create is not timed
        self.prepare(snaps[0])
        t0 = time.perf_counter()
        for s in snaps[1:]:
            if not self.raw_save(s, s.cursor - 1):
                raise RuntimeError("raw save refused")
        return time.perf_counter() - t0


def sqlite_pair(tmp: Path) -> Pair:
    path = tmp / "bench.db"
    adapter = SQLiteStorage(path)
    raw = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    raw.execute("PRAGMA journal_mode=WAL").fetchall()
    raw.execute("PRAGMA synchronous=FULL")
    update = "UPDATE akchat_sessions SET cursor = ?, body = ? WHERE session_id = ? AND cursor = ?"

    def raw_save(s: SessionSnapshot, expected: int) -> bool:
        raw.execute("BEGIN IMMEDIATE")
        ok = raw.execute(update, (s.cursor, text(s), s.session_id, expected)).rowcount == 1
        raw.execute("COMMIT" if ok else "ROLLBACK")
        return ok

    def cleanup() -> None:
        raw.close()
        adapter.close()

    return Pair("sqlite", adapter, raw_save, cleanup)


def postgres_pair() -> Pair:
    import psycopg

    from akchat_fsm.storage import PostgresStorage

    table = f"bench_{uuid.uuid4().hex[:10]}"
    adapter = PostgresStorage(PG_URL, table=table)
    adapter.load("warm-up")  # connects and creates the table
    raw = psycopg.connect(PG_URL, autocommit=True)
    update = (
        f"UPDATE {table} SET cursor = %s, body = %s, updated_at = now()"
        " WHERE session_id = %s AND cursor = %s RETURNING cursor"
    )

    def raw_save(s: SessionSnapshot, expected: int) -> bool:
        return (
            raw.execute(update, (s.cursor, text(s), s.session_id, expected)).fetchone() is not None
        )

    def cleanup() -> None:
        raw.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")
        raw.close()
        adapter.close()

    return Pair("postgres", adapter, raw_save, cleanup)


def mysql_pair() -> Pair:
    import pymysql  # type: ignore[import-untyped]

    from akchat_fsm.storage import open_storage

    table = f"bench_{uuid.uuid4().hex[:10]}"
    adapter = open_storage(f"{MYSQL_URL}?table={table}")
    adapter.load("warm-up")  # connects and creates the tables
    parts = urlsplit(MYSQL_URL)
    raw = pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.path.lstrip("/") or "test",
        autocommit=True,
        charset="utf8mb4",
        client_flag=pymysql.constants.CLIENT.FOUND_ROWS,
    )
    update = f"UPDATE {table} SET `cursor` = %s, body = %s WHERE session_id = %s AND `cursor` = %s"

    def raw_save(s: SessionSnapshot, expected: int) -> bool:
        with raw.cursor() as cur:
            return bool(cur.execute(update, (s.cursor, text(s), s.session_id, expected)) == 1)

    def cleanup() -> None:
        with raw.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")
        raw.close()
        adapter.close()

    return Pair("mysql", adapter, raw_save, cleanup)


def redis_pair() -> Pair:
    import redis

    from akchat_fsm.storage import RedisStorage

    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    adapter = RedisStorage(REDIS_URL, prefix=prefix)
    raw = redis.Redis.from_url(REDIS_URL)
    sha = raw.script_load(RAW_CAS_SCRIPT)

    def raw_save(s: SessionSnapshot, expected: int) -> bool:
        key = prefix + s.session_id
        return bool(raw.evalsha(sha, 1, key, str(expected), str(s.cursor), text(s)) == 1)

    def cleanup() -> None:
        keys = list(raw.scan_iter(match=f"{prefix}*", count=10_000))
        if keys:
            raw.delete(*keys)
        raw.close()
        adapter.close()

    return Pair("redis", adapter, raw_save, cleanup)


def redis_cluster_pair(cluster: Any) -> Pair:
    """Cluster mode (ADR-0089): the adapter follows each write with ``WAIT 1`` (its default),
    so the raw side does the same durable work, the one-key CAS script and ``WAIT 1`` in one
    round trip to the primary that holds the key."""
    import redis

    from akchat_fsm.storage import RedisStorage

    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    adapter = RedisStorage(cluster.url, prefix=prefix, cluster=True, shards=4)
    primaries: dict[str, tuple[Any, str]] = {}  # session -> its primary, found before timing

    def raw_save(s: SessionSnapshot, expected: int) -> bool:
        key = adapter._plan.key(s.session_id)  # the session's hash key, in its bucket's slot
        if s.session_id not in primaries:
            conn = redis.Redis(port=cluster.primary_of(key))
            primaries[s.session_id] = (conn, conn.script_load(RAW_CAS_SCRIPT))
        conn, sha = primaries[s.session_id]
        pipe = conn.pipeline(transaction=False)
        pipe.evalsha(sha, 1, key, str(expected), str(s.cursor), text(s))
        pipe.execute_command("WAIT", 1, 1000)
        applied, acks = pipe.execute()
        return bool(applied == 1 and acks >= 1)

    def cleanup() -> None:
        for conn, _sha in primaries.values():
            conn.close()
        adapter.close()  # the cluster itself is stopped with all its keys

    pair = Pair("redis-cluster", adapter, raw_save, cleanup)
    pair.prepare = lambda first: raw_save(first, -1)  # connects, loads; refused (no cursor -1)
    return pair


def overhead(pair: Pair, saves: int, rounds: int) -> tuple[float, float, float]:
    """Median seconds per save (adapter, raw) and their ratio, alternating A/B per round."""
    per_adapter, per_raw = [], []
    for r in range(rounds):
        a_snaps = snapshots(f"a-{r}-{uuid.uuid4().hex[:8]}", saves)
        b_snaps = snapshots(f"b-{r}-{uuid.uuid4().hex[:8]}", saves)
        if r % 2:
            per_raw.append(pair.run_raw(b_snaps) / saves)
            per_adapter.append(pair.run_adapter(a_snaps) / saves)
        else:
            per_adapter.append(pair.run_adapter(a_snaps) / saves)
            per_raw.append(pair.run_raw(b_snaps) / saves)
    a, b = statistics.median(per_adapter), statistics.median(per_raw)
    return a, b, a / b


# --------------------------------------------------------------------------- part 2
def hot_key(open_adapter: Callable[[], Any], workers: int, seconds: float) -> tuple[int, int]:
    """(committed saves, conflicts) of ``workers`` threads on one session for ``seconds``."""
    session_id = f"hot-{uuid.uuid4().hex[:10]}"
    first = snapshots(session_id, 0)[0]
    adapters = [open_adapter() for _ in range(workers)]
    assert adapters[0].save(first, None)
    barrier = threading.Barrier(workers)
    counts = [[0, 0] for _ in range(workers)]

    def work(i: int) -> None:
        st = adapters[i]
        barrier.wait()
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            current = json.loads(st.load(session_id))["cursor"]
            if st.save(first.model_copy(update={"cursor": current + 1}), current):
                counts[i][0] += 1
            else:
                counts[i][1] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = json.loads(adapters[0].load(session_id))["cursor"]
    committed = sum(c[0] for c in counts)
    if final != 1 + committed:
        raise RuntimeError(f"lost update: final cursor {final}, committed {committed}")
    for st in adapters:
        st.close()
    return committed, sum(c[1] for c in counts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--only", default="memory,sqlite,postgres,mysql,redis,redis-cluster")
    args = parser.parse_args()
    only = set(args.only.split(","))

    with tempfile.TemporaryDirectory() as tmp_dir, contextlib.ExitStack() as stack:
        tmp = Path(tmp_dir)
        builders: dict[str, Callable[[], Pair]] = {
            "sqlite": lambda: sqlite_pair(tmp),
            "postgres": postgres_pair,
            "mysql": mysql_pair,
            "redis": redis_pair,
        }
        cluster = None
        if "redis-cluster" in only:
            try:
                from _cluster import local_cluster

                cluster = stack.enter_context(local_cluster())
                builders["redis-cluster"] = lambda: redis_cluster_pair(cluster)
            except Exception as exc:  # no redis-server installed: reported, not fatal
                print(f"redis-cluster skipped: {exc}")
        print(f"Part 1: sequential CAS saves ({args.saves} per round, median of {args.rounds})")
        print(f"{'backend':<10} {'adapter µs':>11} {'raw µs':>9} {'ratio':>7}  target <= 1.25")
        for name, build in builders.items():
            if name not in only:
                continue
            try:
                pair = build()
            except Exception as exc:  # a missing server is reported, not fatal
                print(f"{name:<10} skipped: {exc}")
                continue
            try:
                a, b, ratio = overhead(pair, args.saves, args.rounds)
                verdict = "ok" if ratio <= 1.25 else "OVER"
                print(f"{name:<10} {a * 1e6:>11.1f} {b * 1e6:>9.1f} {ratio:>7.3f}  {verdict}")
            finally:
                pair.cleanup()

        openers: dict[str, Callable[[], Any]] = {}
        shared_memory = MemoryStorage()
        openers["memory"] = lambda: shared_memory
        db = tmp / "hot.db"
        openers["sqlite"] = lambda: SQLiteStorage(db)
        hot_table = f"hot_{uuid.uuid4().hex[:10]}"
        if "postgres" in only:
            from akchat_fsm.storage import PostgresStorage

            openers["postgres"] = lambda: PostgresStorage(PG_URL, table=hot_table)
        if "mysql" in only:
            from akchat_fsm.storage import open_storage

            openers["mysql"] = lambda: open_storage(f"{MYSQL_URL}?table={hot_table}")
        hot_prefix = f"bench-hot:{uuid.uuid4().hex[:10]}:"
        if "redis" in only:
            from akchat_fsm.storage import RedisStorage

            openers["redis"] = lambda: RedisStorage(REDIS_URL, prefix=hot_prefix)
        if cluster is not None:
            from akchat_fsm.storage import RedisStorage

            openers["redis-cluster"] = lambda: RedisStorage(
                cluster.url, prefix=hot_prefix, cluster=True, shards=4
            )

        print(f"\nPart 2: committed saves/s on one hot session ({args.seconds:.1f} s per cell)")
        print(f"{'backend':<10} {'1 worker':>14} {'4 workers':>14} {'8 workers':>14}")
        for name, opener in openers.items():
            if name not in only:
                continue
            cells = []
            try:
                for workers in (1, 4, 8):
                    committed, conflicts = hot_key(opener, workers, args.seconds)
                    rate = committed / args.seconds
                    cells.append(
                        f"{rate:>7.0f} ({conflicts / max(1, committed + conflicts):>3.0%}c)"
                    )
            except Exception as exc:
                print(f"{name:<10} skipped: {exc}")
                continue
            print(f"{name:<10} " + " ".join(f"{c:>14}" for c in cells))
        print("(c = share of attempts that were CAS conflicts)")
        _drop_hot(only, hot_table, hot_prefix)


def _drop_hot(only: set[str], table: str, prefix: str) -> None:
    if "postgres" in only:
        try:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")
        except Exception:
            pass
    if "mysql" in only:
        try:
            import pymysql

            parts = urlsplit(MYSQL_URL)
            conn = pymysql.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 3306,
                user=parts.username or "root",
                password=parts.password or "",
                database=parts.path.lstrip("/") or "test",
                autocommit=True,
            )
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")
            conn.close()
        except Exception:
            pass
    if "redis" in only:
        try:
            import redis

            r = redis.Redis.from_url(REDIS_URL)
            keys = list(r.scan_iter(match=f"{prefix}*", count=10_000))
            if keys:
                r.delete(*keys)
            r.close()
        except Exception:
            pass


if __name__ == "__main__":
    main()
