"""Linearizability checker benchmark (not a test): one long single-session history.

The history is what a correct CAS store produces under 8 concurrent clients on one session
(``simulated_cas_history``): 5,000 operations, 20% unknown outcomes (half applied), deletes.
That is the shape that used to run the search out of memory (4.4 GB after 240 s). Each seed
is checked in a fresh child process, so its peak RSS is the checker's own.

Reported per seed: verdict, seconds, search steps, the memo's estimated size and the child's
peak RSS; then the worst seconds and RSS against the targets (<= 10 s, <= 500 MB), and the
ratio against a raw baseline measured in the same run: the same checker on a *sequential*
history of the same length (no overlap, no unknown outcome: one step per operation).

Then the same history with one read changed near operation ``--illegal-at``: proving a history
illegal searches everything before the failure point, so this grows with that position.

Then the shapes of issue 27, each with ``check_history``'s *default* budget (2,000,000 steps,
400 MB): 10,000 operations from 8 clients in lockstep (the kit's workers; 0.2.0 ran out of
memory after 1.9 million steps), 5,000 free-running ones, and 5,000 whose applied unknown
writes land up to 300 events late (where the eager order alone never ends); ``--full-shapes``
adds 20,000 in lockstep. Each is reported in search steps and as a ratio of steps and of
seconds against the sequential baseline of the same length, measured in the same run.

    python benchmarks/bench_linearizability.py [--ops 5000] [--seeds 3] [--illegal-at 300]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from akchat_fsm.testing.linearizability import (
    CasRegisterModel,
    Operation,
    check_history,
    simulated_cas_history,
    simulated_lockstep_history,
)

#: The shapes of issue 27: (name, generator, operations), checked with the default budget.
SHAPES: list[tuple[str, str, int]] = [
    ("lockstep", "lockstep", 10_000),
    ("free-running", "free", 5_000),
    ("late-landing", "late", 5_000),
]


def _sequential(ops: int) -> list[Operation]:
    """A history with no overlap and no unknown outcome: the search's raw per-op cost."""
    out = []
    value: Any = None
    for t in range(ops):
        if t % 3 == 0:
            out.append(Operation(0, "load", None, value, 2 * t, 2 * t + 1, "k"))
        else:
            cursor = 0 if value is None else value[0]
            new = (cursor + 1, f"w{t}")
            out.append(Operation(0, "save", (value and cursor, new), True, 2 * t, 2 * t + 1, "k"))
            value = new
    return out


def _shape(kind: str, seed: int, ops: int) -> list[Operation]:
    if kind == "lockstep":
        return simulated_lockstep_history(seed, ops)
    return simulated_cas_history(seed, ops, late=300 if kind == "late" else 0)


def _child(args: argparse.Namespace) -> None:
    if args.child == "sequential":
        ops = _sequential(args.ops)
    elif args.child in ("lockstep", "free", "late"):
        ops = _shape(args.child, args.seed, args.ops)
        started = time.perf_counter()
        result = check_history(ops, CasRegisterModel())  # the default budget
        print(
            json.dumps(
                {
                    "verdict": result.verdict,
                    "budget": result.budget,
                    "seconds": time.perf_counter() - started,
                    "steps": result.steps,
                    "memo_mb": result.memo_bytes / 1e6,
                    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                }
            )
        )
        return
    else:
        ops = simulated_cas_history(args.seed, args.ops, unknown=args.unknown, deletes=args.deletes)
    if args.child == "illegal":
        i = next(
            i
            for i, op in enumerate(ops)
            if op.kind == "load" and i >= args.illegal_at and not op.unknown
        )
        op = ops[i]
        ops[i] = Operation(op.process, "load", None, (99, "ghost"), op.call_ns, op.return_ns, "k")
    started = time.perf_counter()
    result = check_history(
        ops, CasRegisterModel(), max_steps=50_000_000, timeout_s=120, max_memory_mb=1_000
    )
    seconds = time.perf_counter() - started
    print(
        json.dumps(
            {
                "verdict": result.verdict,
                "budget": result.budget,
                "seconds": seconds,
                "steps": result.steps,
                "memo_mb": result.memo_bytes / 1e6,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "unknown": sum(op.unknown for op in ops),
                "deletes": sum(op.kind == "delete" for op in ops),
            }
        )
    )


def _measure(
    args: argparse.Namespace, kind: str, seed: int, ops: int | None = None
) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--seed",
        str(seed),
        "--ops",
        str(args.ops if ops is None else ops),
        "--unknown",
        str(args.unknown),
        "--deletes",
        str(args.deletes),
        "--illegal-at",
        str(args.illegal_at),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=5_000)
    parser.add_argument("--unknown", type=float, default=0.2)
    parser.add_argument("--deletes", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--illegal-at", type=int, default=300)
    parser.add_argument("--full-shapes", action="store_true", help="also 20,000 in lockstep")
    parser.add_argument(
        "--child",
        choices=["history", "sequential", "illegal", "lockstep", "free", "late"],
        help="internal",
    )
    parser.add_argument("--seed", type=int, default=1, help="internal")
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    print(
        f"single-session history: {args.ops} ops, {args.unknown:.0%} unknown outcomes, "
        f"deletes ~{args.deletes:.0%}, 8 clients"
    )
    print(f"{'seed':>4}  {'verdict':<8} {'s':>7} {'steps':>9} {'memo MB':>8} {'RSS MB':>7}")
    runs = []
    for seed in range(1, args.seeds + 1):
        run = _measure(args, "history", seed)
        runs.append(run)
        print(
            f"{seed:>4}  {run['verdict']:<8} {run['seconds']:>7.2f} {run['steps']:>9} "
            f"{run['memo_mb']:>8.1f} {run['rss_mb']:>7.0f}   "
            f"({run['unknown']} unknown, {run['deletes']} deletes)"
        )
    base = _measure(args, "sequential", 0)
    worst_s = max(r["seconds"] for r in runs)
    worst_mb = max(r["rss_mb"] for r in runs)
    print(f"worst seconds: {worst_s:.2f} (target <= 10)")
    print(f"worst peak RSS MB: {worst_mb:.0f} (target <= 500)")
    print(
        f"baseline: a sequential history of {args.ops} ops: {base['seconds']:.3f} s, "
        f"{base['steps']} steps"
    )
    print(f"ratio: {worst_s / base['seconds']:.1f}x (worst concurrent / sequential, same run)")
    bad = _measure(args, "illegal", 1)
    print(
        f"illegal (a ghost read at op >= {args.illegal_at}): {bad['verdict']} in "
        f"{bad['seconds']:.2f} s, {bad['steps']} steps, peak RSS {bad['rss_mb']:.0f} MB"
    )
    shapes = SHAPES + ([("lockstep", "lockstep", 20_000)] if args.full_shapes else [])
    print("issue 27 shapes, default budget (2,000,000 steps, 400 MB), seed 1:")
    for name, kind, ops in shapes:
        run = _measure(args, kind, 1, ops)
        base = _measure(args, "sequential", 0, ops)
        budget = f" ({run['budget']})" if run["budget"] else ""
        print(
            f"shape {name} {ops}: {run['verdict']}{budget}, {run['steps']} steps, "
            f"{run['memo_mb']:.0f} MB memo, peak RSS {run['rss_mb']:.0f} MB; "
            f"steps ratio {run['steps'] / base['steps']:.1f}x, "
            f"seconds ratio {run['seconds'] / base['seconds']:.1f}x (vs sequential, same run)"
        )


if __name__ == "__main__":
    main()
