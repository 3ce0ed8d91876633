"""Sweep benchmark (not a test): ``reconcile_all`` against reconciling the same sessions by hand.

One SQLite file holds ``--total`` sessions, ``--stuck`` of them with an ``approving`` claim whose
process died after upstream acted (so reconcile completes it: one CAS, no upstream call). Two
byte-identical copies are swept in the same run:

* baseline: the host already knows the stuck ids and, for each, calls
  ``resume_chat_session`` + ``reconcile`` (what a host did before the index existed, minus
  the finding);
* sweep: ``reconcile_all`` finds them through the processing index and does the same.

The ratio sweep / baseline is the cost of finding the stuck sessions among all of them plus
the sweep's bookkeeping; target <= 1.25. Repeated ``--rounds`` times on fresh copies; medians.

    .venv/bin/python benchmarks/bench_sweep.py [--total 5000] [--stuck 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from akchat_fsm import reconcile_all
from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.storage.sqlite import SQLiteStorage

DEFINITION = ChatDefinition("bench")
LATER_MS = 10 * 60_000


class Died(BaseException):
    """The claimant's process died right after upstream acted."""


class Upstream:
    """Every tool call it was asked about, with its status; doubles as the chat memory."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.die = False

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        self.status.setdefault(id, "requires_confirmation")
        return ToolCallProposal(id, name, dict(args))

    def approve(self, tool_call_id: str) -> None:
        self.status[tool_call_id] = "complete"
        if self.die:
            raise Died()

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.status[tool_call_id] = "error"

    def load(self) -> dict[str, Any]:
        calls = [{"id": i, "name": "t", "args": {}, "status": s} for i, s in self.status.items()]
        message = {
            "id": "m",
            "role": "assistant",
            "content": "",
            "status": "complete",
            "createdAt": "2026-07-11T00:00:00.000Z",
            "toolCalls": calls,
        }
        return {"version": 1, "messages": [message]}


def build(path: Path, total: int, stuck: int) -> tuple[list[str], Upstream]:
    storage = SQLiteStorage(path)
    upstream = Upstream()
    stuck_ids = [f"stuck-{n:06d}" for n in range(stuck)]
    for n in range(total - stuck):
        resume_chat_session(DEFINITION, session_id=f"idle-{n:06d}", storage=storage).persist()
    for sid in stuck_ids:
        session = resume_chat_session(DEFINITION, session_id=sid, storage=storage)
        coordinator = session.confirmations_for(upstream)
        binding = coordinator.propose("t", {})
        upstream.die = True
        try:
            coordinator.approve(binding.token)
        except Died:
            upstream.die = False
    storage.close()
    return stuck_ids, upstream


def later() -> int:
    return time.time_ns() // 1_000_000 + LATER_MS


def baseline(path: Path, stuck_ids: list[str], upstream: Upstream) -> float:
    storage = SQLiteStorage(path)
    started = time.perf_counter()
    for sid in stuck_ids:
        session = resume_chat_session(DEFINITION, session_id=sid, storage=storage, clock=later)
        outcomes = session.reconcile(upstream, upstream=upstream)
        assert [o.action for o in outcomes] == ["completed"]
    elapsed = time.perf_counter() - started
    storage.close()
    return elapsed


def sweep(path: Path, stuck: int, upstream: Upstream) -> tuple[float, float]:
    storage = SQLiteStorage(path)
    started = time.perf_counter()
    storage.list_processing(written_before_ms=later() - LATER_MS // 2, limit=stuck)
    listed = time.perf_counter() - started
    started = time.perf_counter()
    report = reconcile_all(
        storage,
        lambda sid: SweepPorts(DEFINITION, upstream, upstream),
        older_than_ms=LATER_MS // 2,
        limit=stuck + 1,
        clock=later,
    )
    elapsed = time.perf_counter() - started
    assert report.counts == {"settled": stuck}, report.counts
    storage.close()
    return elapsed, listed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=5000)
    parser.add_argument("--stuck", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        master = Path(scratch) / "master.db"
        stuck_ids, upstream = build(master, args.total, args.stuck)
        base_times, sweep_times, list_times = [], [], []
        for n in range(args.rounds):
            for which in ("base", "sweep"):
                copy = Path(scratch) / f"{which}-{n}.db"
                shutil.copy(master, copy)
            # alternate which runs first, so a noisy neighbour or a warm cache favours neither
            for which in ("base", "sweep") if n % 2 == 0 else ("sweep", "base"):
                copy = Path(scratch) / f"{which}-{n}.db"
                if which == "base":
                    base_times.append(baseline(copy, stuck_ids, upstream))
                else:
                    swept, listed = sweep(copy, args.stuck, upstream)
                    sweep_times.append(swept)
                    list_times.append(listed)
    base, swept, listed = (statistics.median(t) for t in (base_times, sweep_times, list_times))
    print(f"sessions: {args.total} total, {args.stuck} stuck (SQLite, {args.rounds} rounds)")
    print(f"list_processing alone: {listed * 1000:.2f} ms")
    print(f"baseline (ids known): {base * 1000:.1f} ms")
    print(f"reconcile_all:        {swept * 1000:.1f} ms")
    print(f"ratio: {swept / base:.2f}x (target <= 1.25)")


if __name__ == "__main__":
    main()
