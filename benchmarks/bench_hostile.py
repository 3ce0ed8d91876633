"""Hostile envelopes: arrays far past their limits must be refused about as cheaply as parsed.

Each case is a ~3 MB envelope whose ``confirmations`` (limit 1,000), ``terminalTurns`` (64) or
``conversation.decisions`` (1,000) holds 10^6 empty objects, as v1 and as v0 (migration). For
each it prints, measured in the same run:

- the time of ``decode_session_snapshot(text)`` over ``json.loads(text)`` (median of paired
  batches; target <= 5x);
- the extra peak memory of the decode: the Python heap peak (``tracemalloc``) and, from a fresh
  child process, the growth of the peak resident set over the resident set just before the
  decode, which also sees pydantic-core's Rust allocations (target <= 300 MB each);
- the same two numbers for ``json.loads`` of the text, for scale.

Not a test: timing never gates CI (tests/wire/test_hostile_sizes.py bounds the work by counts).

    python benchmarks/bench_hostile.py [--items N] [--repeat N]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable

from akchat_fsm.wire.decode import decode_session_snapshot

FIELDS = ("confirmations", "terminalTurns", "decisions")


def hostile_text(field: str, items: int, version: int) -> str:
    head = {
        "protocol": "agentskit.chat.session",
        "version": version,
        "sessionId": "s",
        "definitionId": "d",
        "definitionRevision": 1,
        "updatedAt": "2026-07-11T00:00:00.000Z",
        "cursor": 1,
    }
    array = "[" + ",".join(["{}"] * items) + "]"
    text = json.dumps(head)[:-1]
    if field == "decisions":
        return f'{text},"conversation":{{"state":"a","decisions":{array}}},"confirmations":[]}}'
    if field == "terminalTurns":
        return f'{text},"terminalTurns":{array},"confirmations":[]}}'
    return f'{text},"confirmations":{array}}}'


def paired_ratio(
    baseline: Callable[[], object], subject: Callable[[], object], repeat: int
) -> tuple[float, float]:
    pairs = []
    for _ in range(repeat):
        start = time.perf_counter()
        baseline()
        middle = time.perf_counter()
        subject()
        end = time.perf_counter()
        pairs.append((middle - start, end - middle))
    return statistics.median(p[1] for p in pairs), statistics.median(p[1] / p[0] for p in pairs)


def heap_peak_mb(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def _status_mb(field: str) -> float:
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report the
    # parent's peak; the mm's high-water mark starts fresh in the new process.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1e3  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_growth_mb(field: str, items: int, version: int, subject: str) -> float:
    """Peak RSS of a fresh process during one call, over its RSS just before the call."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", field, str(items), str(version), subject],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(done.stdout.strip())


def child(field: str, items: int, version: int, subject: str) -> None:
    text = hostile_text(field, items, version)
    call = json.loads if subject == "loads" else decode_session_snapshot
    before = _status_mb("VmRSS")
    result = call(text)
    peak = _status_mb("VmHWM")
    if subject == "decode":
        assert not result.ok
    print(f"{max(peak - before, 0.0):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        field, items, version, subject = args.child
        child(field, int(items), int(version), subject)
        return
    print(
        f"{'case':<20} {'bytes':>9} {'decode ms':>9} {'ratio':>6} "
        f"{'heap MB':>8} {'rss MB':>7} {'loads heap':>10} {'loads rss':>9}"
    )
    for version in (1, 0):
        for field in FIELDS:
            text = hostile_text(field, args.items, version)
            decode = decode_session_snapshot(text)
            assert not decode.ok, f"{field} v{version} must be refused"
            loads = functools.partial(json.loads, text)
            refuse = functools.partial(decode_session_snapshot, text)
            took, ratio = paired_ratio(loads, refuse, args.repeat)
            heap = heap_peak_mb(refuse)
            loads_heap = heap_peak_mb(loads)
            rss = rss_growth_mb(field, args.items, version, "decode")
            loads_rss = rss_growth_mb(field, args.items, version, "loads")
            print(
                f"{field + ' v' + str(version):<20} {len(text):>9} {took * 1e3:>9.1f} "
                f"{ratio:>5.2f}x {heap:>8.1f} {rss:>7.1f} {loads_heap:>10.1f} {loads_rss:>9.1f}"
            )


if __name__ == "__main__":
    main()
