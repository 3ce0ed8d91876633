"""Audit-index benchmark (not a test): a page of 50 audit entries among other records.

A records table holds ``R`` records (``--records``, default 20,000 and 200,000), of which
``--audit`` (default 10,000) are audit entries (``audit:<token>:<cursor>``) and the rest other
records (ledger entries, intents), bulk-loaded as the adapter writes them. We time
``list_audit(limit=50)`` (the first page) and the page after it, the fastest of ``--repeat``
alternating rounds of ``--batch`` calls, check each against the raw answer, and compare them
in the same run with one raw query by the bare driver on the same table (``ORDER BY`` the
page's key, ``LIMIT 51``, the audit predicate): the ratio is everything the adapter adds. The
audit index only holds the audit entries, so the time should be flat in the number of other
records: the last line divides the ratio at the largest table by the one at the smallest.

    .venv/bin/python benchmarks/bench_audit.py [--records 20000,200000] [--audit 10000]
        [--repeat 20] [--batch 10] [--only sqlite,postgres,redis]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from bench_storage import PG_URL

from akchat_fsm.storage import SQLiteStorage

PAGE = 50
#: What a store hands the measurement: the adapter, and a raw query runner on the same store.
Store = tuple[Any, Callable[[str], list[Any]], str]


def rows(records: int, audit: int) -> Iterator[tuple[str, str, int, str, int, int]]:
    """(session, key, version, body, processing, written_ms): every ``records // audit``-th
    record an audit entry, the others ledger records; instants increase, a few ms apart."""
    step = max(1, records // audit)
    start = int(time.time() * 1000) - records
    for n in range(records):
        sid = f"s-{n // 4:07d}"
        key = f"audit:tok-{n}:{n:016d}" if n % step == 0 else f"ledger:call-{n}"
        yield sid, key, 1, '{"v":1}', 0, start + n


@contextmanager
def sqlite_store(tmp: Path, records: int, audit: int) -> Iterator[Store]:
    import sqlite3

    path = tmp / f"audit-{records}.db"
    adapter = SQLiteStorage(path)
    adapter.list_audit()  # connects, creates the tables
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    raw.executemany(
        "INSERT INTO akchat_sessions__records VALUES (?, ?, ?, ?, ?, ?)", rows(records, audit)
    )
    raw.execute("COMMIT")
    raw.execute("ANALYZE")
    try:
        # The index's own predicate (ADR-0139, amended: the audit namespace), as the adapter's.
        where = "(substr(key, 1, 6) = 'audit:' OR substr(key, 1, 6) = 'audit-')"
        sql = (
            "SELECT written_ms, session_id, key FROM akchat_sessions__records WHERE"
            f" {where} ORDER BY written_ms, session_id, key LIMIT {PAGE + 1}"
        )
        yield adapter, lambda _: raw.execute(sql).fetchall(), sql
    finally:
        raw.close()
        adapter.close()
        path.unlink()


@contextmanager
def postgres_store(tmp: Path, records: int, audit: int) -> Iterator[Store]:
    import psycopg

    from akchat_fsm.storage import PostgresStorage

    table = f"bench_{uuid.uuid4().hex[:10]}"
    adapter = PostgresStorage(PG_URL, table=table)
    adapter.list_audit()
    raw = psycopg.connect(PG_URL, autocommit=True)
    try:
        with raw.cursor() as cur:
            columns = "session_id, key, version, body, processing, written_ms"
            with cur.copy(f"COPY {table}__records ({columns}) FROM STDIN") as copy:
                for row in rows(records, audit):
                    copy.write_row((*row[:4], bool(row[4]), row[5]))
        raw.execute(f"ANALYZE {table}__records")
        sql = (
            f"SELECT written_ms, session_id, key FROM {table}__records WHERE (left(key, 6) ="
            " 'audit:' OR left(key, 6) = 'audit-') ORDER BY written_ms, session_id COLLATE \"C\","
            " key LIMIT 51"
        )
        yield adapter, lambda _: raw.execute(sql).fetchall(), sql
    finally:
        raw.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")
        raw.close()
        adapter.close()


@contextmanager
def redis_store(tmp: Path, records: int, audit: int) -> Iterator[Store]:
    """The records hashes and the audit set as the record script writes them (pipelined);
    the raw side is one ``ZRANGEBYLEX … LIMIT 0 51`` of the set."""
    import redis

    from akchat_fsm.storage import RedisStorage

    url = os.environ.get("AKCHAT_REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    adapter = RedisStorage(url, prefix=prefix)
    raw = redis.Redis.from_url(url)
    try:
        pipe = raw.pipeline(transaction=False)
        for n, (sid, key, version, body, _, ms) in enumerate(rows(records, audit)):
            fields = {f"v:{key}": version, f"b:{key}": body}
            if key.startswith("audit:"):
                fields[f"a:{key}"] = f"{ms:016d}"
                pipe.zadd(f"{prefix}#audit", {f"{ms:016d} {sid} {key}": 0})
            pipe.hset(f"{prefix}{sid}#records", mapping=fields)
            if n % 5000 == 4999:
                pipe.execute()
        pipe.set(f"{prefix}#audit:backfilled2", "1")
        pipe.execute()
        yield adapter, lambda _: raw.zrangebylex(f"{prefix}#audit", "-", "+", 0, PAGE + 1), ""
    finally:
        names = list(raw.scan_iter(match=f"{prefix}*", count=10_000))
        for i in range(0, len(names), 10_000):
            raw.delete(*names[i : i + 10_000])
        raw.close()
        adapter.close()


STORES: dict[str, Callable[[Path, int, int], AbstractContextManager[Store]]] = {
    "sqlite": sqlite_store,
    "postgres": postgres_store,
    "redis": redis_store,
}


def interleaved(calls: dict[str, Callable[[], Any]], repeat: int, batch: int) -> dict[str, float]:
    """Seconds per call: the fastest of ``repeat`` alternating rounds of ``batch`` calls."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            times[name].append((time.perf_counter() - t0) / batch)
    return {name: min(found) for name, found in times.items()}


def measure(name: str, store: AbstractContextManager[Store], records: int, args: Any) -> float:
    with store as (adapter, raw, sql):
        page = adapter.list_audit(limit=PAGE)
        expected = [
            bytes(row).decode().split(" ")[2] if isinstance(row, bytes) else str(row[2])
            for row in raw(sql)[:PAGE]
        ]
        if [ref.key for ref in page.items] != expected or page.next_after is None:
            raise RuntimeError(f"{name}: the first page disagrees with the raw query")
        after = page.next_after
        best = interleaved(
            {
                "raw": lambda: raw(sql),
                "first": lambda: adapter.list_audit(limit=PAGE),
                "next": lambda: adapter.list_audit(limit=PAGE, after=after),
            },
            args.repeat,
            args.batch,
        )
    ratio = best["first"] / best["raw"]
    print(
        f"{name:9} {records:>8} records: raw {best['raw'] * 1e3:7.3f} ms, first page "
        f"{best['first'] * 1e3:7.3f} ms ({ratio:4.2f}x), next page {best['next'] * 1e3:7.3f} ms "
        f"({best['next'] / best['raw']:4.2f}x)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", default="20000,200000")
    parser.add_argument("--audit", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--only", default=",".join(STORES))
    args = parser.parse_args()
    sizes = [int(s) for s in args.records.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            ratios = []
            try:
                for records in sizes:
                    store = STORES[name](Path(tmp), records, args.audit)
                    ratios.append(measure(name, store, records, args))
            except Exception as exc:  # a missing server: reported, not fatal
                print(f"{name}: skipped ({type(exc).__name__}: {exc})")
                continue
            print(
                f"{name:9} flat: ratio at {sizes[-1]} / ratio at {sizes[0]} = "
                f"{ratios[-1] / ratios[0]:.2f}"
            )


if __name__ == "__main__":
    main()
