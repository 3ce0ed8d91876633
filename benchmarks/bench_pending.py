"""Pending-index benchmark (not a test): the first page of 50 among 10,000 pending approvals.

A store holds ``N`` sessions (``--sessions``, default 10,000 and 100,000; 1,000,000 more with
``--full``), of which 10,000 (``--pending``) hold one pending binding each. Both tables are
bulk-loaded with the very rows the adapter writes: its own ``prepare_save`` decides the
envelope's columns and its pending rows, ``carry_since`` their clock. We time
``list_pending(limit=50)`` in both orders, and the page after it (``after=``), the fastest of
``--repeat`` alternating rounds of ``--batch`` calls; check each page against the raw answer;
and compare it in the same run with one
raw indexed query on the same pending table by the bare driver (``ORDER BY`` the page's key,
``LIMIT 51``): the ratio is everything the adapter adds (argument checks, the keyset cursor,
building the page). The pending table is the same size whatever ``N`` is, so the time should
be flat from 10^4 to 10^6 sessions: the last lines divide the ratio at the largest store by
the ratio at the smallest (ratios, not times: a shared machine's load changes between stores).

    .venv/bin/python benchmarks/bench_pending.py [--sessions 10000,100000] [--full]
        [--pending 10000] [--repeat 30] [--batch 10] [--only sqlite,postgres,redis]

Servers: AKCHAT_PG_URL (default postgresql://127.0.0.1:5432/test), AKCHAT_REDIS_URL (default
redis://127.0.0.1:6379/0). A backend whose server is missing is reported and skipped.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from bench_storage import PG_URL, REDIS_URL

from akchat_fsm.storage import SQLiteStorage
from akchat_fsm.storage._cas import prepare_save
from akchat_fsm.storage._pending import carry_since
from akchat_fsm.storage._sql import PENDING_COLUMNS, pending_params
from akchat_fsm.wire.session import SessionSnapshot

PAGE = 50
ORDERS = {
    "expiry": "expires_at_ms, session_id, tool_call_id",
    "newest": "pending_since_ms DESC, session_id DESC, tool_call_id DESC",
}

#: What a store hands the measurement: the adapter, and a raw query runner on the same store.
Store = tuple[Any, Callable[[str], list[Any]], str]


def envelope(session_id: str, n: int, pending: bool) -> SessionSnapshot:
    binding = {
        "token": f"tok-{n}",
        "action": "refund" if n % 2 else "ship",
        "input": {"amount": n % 100},
        "toolCallId": f"call-{n}",
        # Spread, and colliding, expiries: the tie-breaks are part of every page.
        "expiresAt": 1_800_000_000_000 + (n * 7919) % 5_000 * 1000,
        "status": "pending" if pending else "approved",
    }
    return SessionSnapshot.from_wire(
        {
            "protocol": "agentskit.chat.session",
            "version": 1,
            "sessionId": session_id,
            "definitionId": "bench",
            "definitionRevision": 1,
            "updatedAt": "2026-11-29T00:00:00.000Z",
            "cursor": 1,
            "confirmations": [binding],
        }
    )


def rows(sessions: int, pending: int, index: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """Envelope rows as the adapter would write them (its own decisions), one at a time; the
    pending rows of those that ask are appended to ``index`` on the way (10^6 envelopes are
    never all in memory)."""
    calm = envelope("calm", 0, False)
    step = max(1, sessions // pending)
    for n in range(sessions):
        sid = f"s-{n:07d}"
        asks = n % step == 0 and len(index) < pending
        snap = envelope(sid, n, True) if asks else calm.model_copy(update={"session_id": sid})
        p = prepare_save(snap, None)
        written = p.written_ms - (sessions - n)  # distinct instants, oldest first
        index.extend(pending_params(carry_since(sid, p.pending, {}, written)))
        yield p.session_id, p.cursor, p.text, int(p.processing), written


def interleaved(calls: dict[str, Callable[[], Any]], repeat: int, batch: int) -> dict[str, float]:
    """Seconds per call of each of ``calls``: the fastest of ``repeat`` alternating rounds of
    ``batch`` calls. Sub-millisecond calls on a shared, loaded machine are mostly delayed by
    the scheduler, never sped up, so the least-disturbed round is the estimate (as ``timeit``
    advises), and alternating rounds expose every side to the same load."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                call()
            times[name].append((time.perf_counter() - t0) / batch)
    return {name: min(found) for name, found in times.items()}


@contextmanager
def sqlite_store(tmp: Path, sessions: int, pending: int) -> Iterator[Store]:
    import sqlite3

    path = tmp / f"pending-{sessions}.db"
    adapter = SQLiteStorage(path)
    adapter.list_pending()  # connects, creates the tables
    index: list[tuple[Any, ...]] = []
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    raw.executemany(
        "INSERT INTO akchat_sessions (session_id, cursor, body, processing, written_ms)"
        " VALUES (?, ?, ?, ?, ?)",
        rows(sessions, pending, index),
    )
    raw.executemany(
        f"INSERT INTO akchat_sessions__pending ({PENDING_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        index,
    )
    raw.execute("COMMIT")
    raw.execute("ANALYZE")
    try:
        yield adapter, lambda sql: raw.execute(sql).fetchall(), "akchat_sessions__pending"
    finally:
        raw.close()
        adapter.close()
        path.unlink()


@contextmanager
def postgres_store(tmp: Path, sessions: int, pending: int) -> Iterator[Store]:
    import psycopg

    from akchat_fsm.storage import PostgresStorage

    table = f"bench_{uuid.uuid4().hex[:10]}"
    adapter = PostgresStorage(PG_URL, table=table)
    adapter.list_pending()
    raw = psycopg.connect(PG_URL, autocommit=True)
    try:
        index: list[tuple[Any, ...]] = []
        with raw.cursor() as cur:
            columns = "session_id, cursor, body, processing, written_ms"
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in rows(sessions, pending, index):
                    copy.write_row((*row[:3], bool(row[3]), row[4]))
            with cur.copy(f"COPY {table}__pending ({PENDING_COLUMNS}) FROM STDIN") as copy:
                for row in index:
                    copy.write_row(row)
        raw.execute(f"ANALYZE {table}")
        raw.execute(f"ANALYZE {table}__pending")
        yield adapter, lambda sql: raw.execute(sql).fetchall(), f"{table}__pending"
    finally:
        raw.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")
        raw.close()
        adapter.close()


@contextmanager
def redis_store(tmp: Path, sessions: int, pending: int) -> Iterator[Store]:
    """Redis: the sessions that ask are saved through the adapter (its script writes the
    index); the calm ones are the hash the same script writes for an envelope with no pending
    row, pipelined. The raw side is one ``ZRANGEBYLEX`` (``ZREVRANGEBYLEX`` for newest first)
    of 51 members on the index's sorted set, its members split as the rows of a query."""
    import redis

    from akchat_fsm.storage import RedisStorage

    prefix = f"bench-pending:{uuid.uuid4().hex[:10]}:"
    adapter = RedisStorage(REDIS_URL, prefix=prefix)
    raw = redis.Redis.from_url(REDIS_URL)
    step, asked = max(1, sessions // pending), 0
    calm = prepare_save(envelope("calm", 0, False), None).text.replace('"calm"', '"{sid}"', 1)
    pipe = raw.pipeline(transaction=False)
    for n in range(sessions):
        sid = f"s-{n:07d}"
        if n % step == 0 and asked < pending:
            asked += 1
            if not adapter.save(envelope(sid, n, True), None):
                raise RuntimeError(f"{sid} exists")
            continue
        body = calm.replace("{sid}", sid, 1)
        pipe.hset(prefix + sid, mapping={"cursor": "1", "body": body, "processing": "0"})
        pipe.hset(prefix + sid, "pending", "0")
        if len(pipe) >= 20_000:
            pipe.execute()
    pipe.execute()
    ns = prefix + "#pending:"

    def query(sql: str) -> list[Any]:
        if "DESC" in sql:
            found = raw.zrevrangebylex(ns + "n", "+", "-", 0, PAGE + 1)
        else:
            found = raw.zrangebylex(ns + "e", "-", "+", 0, PAGE + 1)
        # A member is "key sid tool_call_id token action other"; a query row starts
        # (session_id, token), as PENDING_COLUMNS does.
        return [(words[1], words[3]) for words in (m.decode().split(" ") for m in found)]

    try:
        yield adapter, query, "pending index"
    finally:
        for keys in _batches(raw.scan_iter(match=f"{prefix}*", count=10_000), 10_000):
            raw.unlink(*keys)
        raw.close()
        adapter.close()


def _batches(items: Iterator[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


STORES: dict[str, Callable[[Path, int, int], AbstractContextManager[Store]]] = {
    "sqlite": sqlite_store,
    "postgres": postgres_store,
    "redis": redis_store,
}


def measure(name: str, store: AbstractContextManager[Store], sessions: int, args: Any) -> dict:
    found: dict[str, float] = {}
    with store as (adapter, raw, table):
        for order, key in ORDERS.items():
            sql = f"SELECT {PENDING_COLUMNS} FROM {table} ORDER BY {key} LIMIT {PAGE + 1}"
            page = adapter.list_pending(order=order, limit=PAGE)
            expected = [str(row[1]) for row in raw(sql)[:PAGE]]
            if [item.token for item in page.items] != expected or page.next_after is None:
                raise RuntimeError(f"{name}: the first {order} page disagrees with the raw query")
            after = page.next_after
            median = interleaved(
                {
                    "raw": lambda sql=sql: raw(sql),
                    "first": lambda order=order: adapter.list_pending(order=order, limit=PAGE),
                    "next": lambda order=order, after=after: adapter.list_pending(
                        order=order, limit=PAGE, after=after
                    ),
                },
                args.repeat,
                args.batch,
            )
            found[order] = median["first"] / median["raw"]
            print(
                f"{name:<9} {sessions:>9} {args.pending:>8} {order:<7}"
                f" {median['first'] * 1e3:>10.3f} {median['next'] * 1e3:>9.3f}"
                f" {median['raw'] * 1e3:>8.3f} {median['first'] / median['raw']:>7.2f}"
            )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", default="10000,100000")
    parser.add_argument("--full", action="store_true", help="also 1,000,000 sessions")
    parser.add_argument("--pending", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30, help="alternating rounds")
    parser.add_argument("--batch", type=int, default=10, help="calls timed together")
    parser.add_argument("--only", default="sqlite,postgres,redis")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sessions.split(",")] + ([1_000_000] if args.full else [])
    only = args.only.split(",")

    print(
        f"list_pending(limit={PAGE}) / one raw indexed query"
        f" (fastest of {args.repeat} alternating rounds of {args.batch} calls)"
    )
    print(
        f"{'backend':<9} {'sessions':>9} {'pending':>8} {'order':<7} {'first ms':>10}"
        f" {'next ms':>9} {'raw ms':>8} {'ratio':>7}"
    )
    flat: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        for name in only:
            for sessions in sizes:
                try:
                    store = STORES[name](Path(tmp_dir), sessions, args.pending)
                    times = measure(name, store, sessions, args)
                except Exception as exc:  # a missing server is reported, not fatal
                    print(f"{name:<9} {sessions:>9} skipped: {exc}")
                    break
                for order, ratio in times.items():
                    flat.setdefault((name, order), []).append(ratio)
    print("(ratio = the adapter's first page / the same page by the bare driver, same table)")
    for (name, order), times in flat.items():
        if len(times) > 1:
            print(
                f"flat {name} {order}: ratio at {sizes[len(times) - 1]} / at {sizes[0]}"
                f" sessions = {times[-1] / times[0]:.2f}"
            )


if __name__ == "__main__":
    main()
