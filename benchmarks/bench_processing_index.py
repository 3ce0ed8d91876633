"""Processing-index benchmark (not a test): finding the stuck sessions, and what the index costs.

Part 1, finding the stuck: a store holds ``--sessions`` sessions (default 100,000) of which
``--stuck`` (default 100) hold processing work, half through a processing confirmation in
the envelope and half through a record saved with ``processing=True``. The calm sessions are
bulk-loaded with the very columns the adapter writes (its own ``prepare_save`` decides them);
the stuck ones are written through the adapter. We time ``list_processing(written_before_ms=
now)`` (median of ``--repeat``), check it returns exactly the stuck sessions, and compare it in
the same run with the raw driver running the adapter's own SQL text (the ratio is the adapter's
overhead), with the simplest indexed query on the sessions table alone (a floor, which misses
the sessions stuck through records) and, for scale, with a full scan of the envelopes' text
(what finding them costs without an index). Target: at most 1 s.

Part 2, the index's cost on every save: ``bench_storage.py``'s sequential CAS saves, whose raw
baselines are the index-free CAS of 0.1.0. Target: ratio <= 1.25.

    .venv/bin/python benchmarks/bench_processing_index.py [--sessions 100000] [--stuck 100]
        [--repeat 7] [--saves 300] [--rounds 5] [--only sqlite,postgres,redis] [--no-saves]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_storage import PG_URL, Pair, overhead, postgres_pair, redis_pair, sqlite_pair

from akchat_fsm.storage import SQLiteStorage
from akchat_fsm.storage._cas import prepare_save
from akchat_fsm.wire.session import SessionSnapshot

SCAN_LIKE = 'body LIKE \'%"status":"approving"%\''


def envelope(session_id: str, status: str | None) -> SessionSnapshot:
    confirmations = []
    if status is not None:
        confirmations.append(
            {
                "token": "tok-1",
                "action": "refund",
                "input": {"amount": 12},
                "toolCallId": "call-1",
                "expiresAt": 1_800_000_000_000,
                "status": status,
            }
        )
    return SessionSnapshot.from_wire(
        {
            "protocol": "agentskit.chat.session",
            "version": 1,
            "sessionId": session_id,
            "definitionId": "bench",
            "definitionRevision": 1,
            "updatedAt": "2026-11-29T00:00:00.000Z",
            "cursor": 1,
            "confirmations": confirmations,
        }
    )


def calm_rows(count: int) -> Iterator[tuple[str, int, str, bool, int]]:
    """Settled sessions as the adapter would store them (its own decision, not ours)."""
    template = envelope("calm-0", "approved")
    for n in range(count):
        p = prepare_save(template.model_copy(update={"session_id": f"calm-{n}"}), None)
        yield p.session_id, p.cursor, p.text, p.processing, p.written_ms - n


def write_stuck(adapter: Any, stuck: int) -> set[str]:
    ids = set()
    for n in range(stuck):
        sid = f"stuck-{n}"
        if n % 2:
            assert adapter.save(envelope(sid, "approving"), None)
        else:
            assert adapter.save(envelope(sid, "approved"), None)
            assert adapter.save_record(sid, "call:call-1", "{}", None, processing=True)
        ids.add(sid)
    return ids


def median_seconds(call: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


@contextmanager
def sqlite_store(tmp: Path, sessions: int, stuck: int) -> Iterator[tuple[Any, Any, str]]:
    import sqlite3

    path = tmp / "index.db"
    adapter = SQLiteStorage(path)
    adapter.list_processing()  # connects, creates the tables
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    raw.executemany(
        "INSERT INTO akchat_sessions (session_id, cursor, body, processing, written_ms)"
        " VALUES (?, ?, ?, ?, ?)",
        calm_rows(sessions - stuck),
    )
    raw.execute("COMMIT")
    raw.execute("ANALYZE")

    def query(sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return raw.execute(sql, params).fetchall()

    try:
        yield adapter, query, adapter._schema.list_processing
    finally:
        raw.close()
        adapter.close()


@contextmanager
def postgres_store(tmp: Path, sessions: int, stuck: int) -> Iterator[tuple[Any, Any, str]]:
    import psycopg

    from akchat_fsm.storage import PostgresStorage

    table = f"bench_{uuid.uuid4().hex[:10]}"
    adapter = PostgresStorage(PG_URL, table=table)
    adapter.list_processing()
    raw = psycopg.connect(PG_URL, autocommit=True)
    try:
        with raw.cursor() as cur:
            columns = "session_id, cursor, body, processing, written_ms"
            with cur.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
                for row in calm_rows(sessions - stuck):
                    copy.write_row(row)
        raw.execute(f"ANALYZE {table}")

        def query(sql: str, params: tuple[Any, ...] | None = None) -> list[Any]:
            return raw.execute(sql, params).fetchall()

        yield adapter, query, adapter._plan.list_processing
    finally:
        raw.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")
        raw.close()
        adapter.close()


def find_stuck(name: str, store: Any, args: argparse.Namespace) -> None:
    with store as (adapter, query, same_sql):
        table = adapter.table
        expected = write_stuck(adapter, args.stuck)
        before = time.time_ns() // 1_000_000 + 1
        adapter_s, rows = median_seconds(
            lambda: adapter.list_processing(written_before_ms=before, limit=1000), args.repeat
        )
        found = {row.session_id for row in rows}
        if found != expected:
            raise RuntimeError(f"{name}: found {len(found)} sessions, expected {len(expected)}")
        raw_s, raw_rows = median_seconds(
            lambda: query(same_sql, (before, before, 1000)), args.repeat
        )
        if {row[0] for row in raw_rows} != expected:
            raise RuntimeError(f"{name}: the raw query disagrees with the adapter")
        floor_sql = (
            f"SELECT session_id, written_ms FROM {table} WHERE processing = {_true(name)}"
            f" AND written_ms < {before} ORDER BY written_ms LIMIT 1000"
        )
        floor_s, _ = median_seconds(lambda: query(floor_sql), args.repeat)
        scan_s, _ = median_seconds(
            lambda: query(f"SELECT session_id FROM {table} WHERE {SCAN_LIKE}"), 3
        )
        verdict = "ok" if adapter_s <= 1.0 else "OVER"
        print(
            f"{name:<10} {args.sessions:>9} {len(found):>6} {adapter_s * 1e3:>11.2f}"
            f" {raw_s * 1e3:>9.2f} {adapter_s / raw_s:>7.2f} {floor_s * 1e3:>9.2f}"
            f" {scan_s * 1e3:>10.1f}  {verdict}"
        )


def _true(name: str) -> str:
    return "1" if name == "sqlite" else "true"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--stuck", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="sqlite,postgres,redis")
    parser.add_argument(
        "--no-saves",
        action="store_true",
        help="part 1 only (run_all takes part 2 from bench_storage)",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        print(f"Part 1: list_processing finds the stuck sessions (median of {args.repeat})")
        print(
            f"{'backend':<10} {'sessions':>9} {'stuck':>6} {'adapter ms':>11} {'raw ms':>9}"
            f" {'ratio':>7} {'floor ms':>9} {'scan ms':>10}  target <= 1 s"
        )
        stores = {
            "sqlite": lambda: sqlite_store(tmp, args.sessions, args.stuck),
            "postgres": lambda: postgres_store(tmp, args.sessions, args.stuck),
        }
        for name, open_store in stores.items():
            if name not in only:
                continue
            try:
                find_stuck(name, open_store(), args)
            except Exception as exc:  # a missing server is reported, not fatal
                print(f"{name:<10} skipped: {exc}")
        print("(raw = the adapter's SQL run by the bare driver; floor = one indexed query on the")
        print(" sessions table alone; scan = a full scan of the envelopes' text, no index)")

        if args.no_saves:
            return
        print(f"\nPart 2: CAS save with the index / raw index-free CAS (median of {args.rounds})")
        print(f"{'backend':<10} {'adapter µs':>11} {'raw µs':>9} {'ratio':>7}  target <= 1.25")
        pairs: dict[str, Callable[[], Pair]] = {
            "sqlite": lambda: sqlite_pair(tmp),
            "postgres": postgres_pair,
            "redis": redis_pair,
        }
        for name, build in pairs.items():
            if name not in only:
                continue
            try:
                pair = build()
            except Exception as exc:
                print(f"{name:<10} skipped: {exc}")
                continue
            try:
                a, b, ratio = overhead(pair, args.saves, args.rounds)
                verdict = "ok" if ratio <= 1.25 else "OVER"
                print(f"{name:<10} {a * 1e6:>11.1f} {b * 1e6:>9.1f} {ratio:>7.3f}  {verdict}")
            finally:
                pair.cleanup()


if __name__ == "__main__":
    main()
