"""Redis pending-index benchmark (not a test): what a page costs, and what the index costs a save.

Part 1, pages: ``--sessions`` sessions (default 10,000), each with one pending binding (every
tenth of action "wire", the rest "refund"), saved through the adapter. We time one page of 50
per query shape (median of ``--repeat``) and compare it, in the same run, with the bare driver
reading the same number of members with one ``ZRANGEBYLEX`` (the floor: what the adapter adds
is the script, the decoding and the page). The cross filter (``expiring_before_ms`` in
"newest" order) examines at most ``PENDING_SCAN_BUDGET`` entries a page.

Part 2, saves: sequential CAS saves of an envelope holding one binding, decided (no row: what
every other save pays) or pending (a row rewritten each save), through the adapter, against the
index-free CAS of 0.1.0 (``bench_storage.RAW_CAS_SCRIPT``) on the same text, alternating per
round. Target: ratio <= 1.25 for the decided binding; the pending one shows the rows' cost.

    .venv/bin/python benchmarks/bench_pending_redis.py [--sessions 10000] [--repeat 7]
        [--saves 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from bench_storage import RAW_CAS_SCRIPT, REDIS_URL, text

from akchat_fsm.storage import RedisStorage
from akchat_fsm.wire.session import ConfirmationBinding, SessionSnapshot


def envelope(session_id: str, cursor: int, n: int, status: str = "pending") -> SessionSnapshot:
    return SessionSnapshot(
        session_id=session_id,
        definition_id="bench",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=(
            ConfirmationBinding(
                token=f"tok-{n}",
                action="wire" if n % 10 == 0 else "refund",
                input={"amount": n},
                tool_call_id="call-1",
                expires_at=1_800_000_000_000 + n * 1000,
                status=status,
            ),
        ),
    )


def median_ms(call: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def pages(adapter: RedisStorage, raw: redis.Redis, args: argparse.Namespace) -> None:
    for n in range(args.sessions):
        assert adapter.save(envelope(f"s-{n:06d}", 1, n), None)
    ns = adapter.prefix + "#pending:"
    cut = 1_800_000_000_000 + args.sessions * 100  # the first tenth of the expiries
    shapes: list[tuple[str, dict[str, Any], str]] = [
        ("expiry, first page", {}, "e"),
        ("newest, first page", {"order": "newest"}, "n"),
        ("action=wire", {"action": "wire"}, "e:wire"),
        ("expiring_before (range)", {"expiring_before_ms": cut}, "e"),
        ("newest + expiring_before", {"order": "newest", "expiring_before_ms": cut}, "n"),
    ]
    print(f"Part 1: one page of 50 among {args.sessions} pending (median of {args.repeat})")
    print(f"{'query':<28} {'adapter ms':>11} {'raw ms':>8} {'ratio':>7} {'rows':>5}")
    for label, query, key in shapes:
        page = adapter.list_pending(limit=50, **query)
        a = median_ms(lambda q=query: adapter.list_pending(limit=50, **q), args.repeat)
        b = median_ms(lambda k=key: raw.zrangebylex(ns + k, "-", "+", 0, 51), args.repeat)
        print(f"{label:<28} {a:>11.3f} {b:>8.3f} {a / b:>7.2f} {len(page.items):>5}")
    print("(raw = one ZRANGEBYLEX of 51 members by the bare driver; the cross filter scans)")


def saves(adapter: RedisStorage, raw: redis.Redis, args: argparse.Namespace, status: str) -> None:
    sha = raw.script_load(RAW_CAS_SCRIPT)
    per_adapter, per_raw = [], []

    def run_adapter(sid: str) -> float:
        snaps = [envelope(sid, c, 1, status) for c in range(1, args.saves + 2)]
        assert adapter.save(snaps[0], None)
        t0 = time.perf_counter()
        for s in snaps[1:]:
            assert adapter.save(s, s.cursor - 1)
        return (time.perf_counter() - t0) / args.saves

    def run_raw(sid: str) -> float:
        snaps = [envelope(sid, c, 1, status) for c in range(1, args.saves + 2)]
        key = adapter.prefix + sid
        assert raw.evalsha(sha, 1, key, "", "1", text(snaps[0])) == 1
        t0 = time.perf_counter()
        for s in snaps[1:]:
            assert raw.evalsha(sha, 1, key, str(s.cursor - 1), str(s.cursor), text(s)) == 1
        return (time.perf_counter() - t0) / args.saves

    for r in range(args.rounds):
        first, second = (run_raw, run_adapter) if r % 2 else (run_adapter, run_raw)
        for run in (first, second):
            sid = f"w-{status}-{r}-{run.__name__}"
            (per_adapter if run is run_adapter else per_raw).append(run(sid))
    a, b = statistics.median(per_adapter), statistics.median(per_raw)
    verdict = "ok" if a / b <= 1.25 else "OVER"
    print(f"{status:<10} {a * 1e6:>11.1f} {b * 1e6:>9.1f} {a / b:>7.3f}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    prefix = f"bench:{uuid.uuid4().hex[:10]}:"
    adapter = RedisStorage(REDIS_URL, prefix=prefix)
    raw = redis.Redis.from_url(REDIS_URL)
    try:
        pages(adapter, raw, args)
        print(f"\nPart 2: CAS save / raw index-free CAS, one binding (median of {args.rounds})")
        print(f"{'binding':<10} {'adapter µs':>11} {'raw µs':>9} {'ratio':>7}  target <= 1.25")
        for status in ("expired", "pending"):
            saves(adapter, raw, args, status)
    finally:
        keys = list(raw.scan_iter(match=f"{prefix}*", count=10_000))
        for i in range(0, len(keys), 1000):
            raw.delete(*keys[i : i + 1000])
        raw.close()
        adapter.close()


if __name__ == "__main__":
    main()
