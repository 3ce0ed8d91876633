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

Measured at each store size of ``--totals`` (default 10,000 and 100,000 sessions; 1,000,000
more with ``--full``): the idle sessions are bulk-loaded with the very rows the adapter
writes (its own ``prepare_save`` decides each row), the stuck ones go through the library.
The sweep reads the processing index, never the idle rows, so the ratio should be flat in the
number of sessions: the last line divides the ratio at the largest store by the ratio at the
smallest (ratios, not times: a shared machine's load changes between stores).

    .venv/bin/python benchmarks/bench_sweep.py [--totals 10000,100000] [--full] [--stuck 100]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from akchat_fsm import reconcile_all
from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.storage._cas import prepare_save
from akchat_fsm.storage.sqlite import DEFAULT_TABLE, SQLiteStorage

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


def idle_rows(count: int, template: Any) -> Any:
    """The envelope rows the adapter writes for ``count`` idle sessions, one at a time."""
    for n in range(count):
        prepared = prepare_save(template.model_copy(update={"session_id": f"idle-{n:07d}"}), None)
        yield (
            prepared.session_id,
            prepared.cursor,
            prepared.text,
            int(prepared.processing),
            prepared.written_ms,
        )


def build(path: Path, total: int, stuck: int) -> tuple[list[str], Upstream]:
    storage = SQLiteStorage(path)
    upstream = Upstream()
    stuck_ids = [f"stuck-{n:06d}" for n in range(stuck)]
    template = resume_chat_session(DEFINITION, session_id="idle-template", storage=storage)
    template.persist()
    raw = sqlite3.connect(path, isolation_level=None)
    raw.execute("BEGIN")
    raw.executemany(
        f"INSERT INTO {DEFAULT_TABLE} (session_id, cursor, body, processing, written_ms)"
        " VALUES (?, ?, ?, ?, ?)",
        idle_rows(total - stuck - 1, template.snapshot),
    )
    raw.execute("COMMIT")
    raw.close()
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


def measure(total: int, stuck: int, rounds: int, scratch: Path) -> float:
    master = scratch / f"master-{total}.db"
    stuck_ids, upstream = build(master, total, stuck)
    base_times, sweep_times, list_times = [], [], []
    for n in range(rounds):
        for which in ("base", "sweep"):
            shutil.copy(master, scratch / f"{which}-{n}.db")
        # alternate which runs first, so a noisy neighbour or a warm cache favours neither
        for which in ("base", "sweep") if n % 2 == 0 else ("sweep", "base"):
            copy = scratch / f"{which}-{n}.db"
            if which == "base":
                base_times.append(baseline(copy, stuck_ids, upstream))
            else:
                swept, listed = sweep(copy, stuck, upstream)
                sweep_times.append(swept)
                list_times.append(listed)
            copy.unlink()
    master.unlink()
    base, swept, listed = (statistics.median(t) for t in (base_times, sweep_times, list_times))
    print(
        f"{total:>9} {stuck:>6} {listed * 1000:>10.2f} {base * 1000:>11.1f}"
        f" {swept * 1000:>11.1f} {swept / base:>7.2f}"
    )
    return swept / base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--totals", default="10000,100000")
    parser.add_argument("--full", action="store_true", help="also 1,000,000 sessions")
    parser.add_argument("--stuck", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    totals = [int(n) for n in args.totals.split(",")] + ([1_000_000] if args.full else [])
    print(f"reconcile_all / reconciling the known stuck ids by hand (SQLite, {args.rounds} rounds)")
    print(
        f"{'sessions':>9} {'stuck':>6} {'list ms':>10} {'baseline ms':>11}"
        f" {'sweep ms':>11} {'ratio':>7}  target <= 1.25"
    )
    ratios = []
    with tempfile.TemporaryDirectory() as scratch:
        for total in totals:
            ratios.append(measure(total, args.stuck, args.rounds, Path(scratch)))
    if len(ratios) > 1:
        print(
            f"flat: ratio at {totals[-1]} / at {totals[0]} sessions = {ratios[-1] / ratios[0]:.2f}"
        )


if __name__ == "__main__":
    main()
