"""Resolution benchmarks (not tests): protocol overhead, and flatness over a long session.

Part 1, one resolution end to end (claim CAS + no-op upstream + terminal CAS, through
``ConfirmationCoordinator.approve``) against one raw CAS (``storage.save`` of an envelope of
the same size) on the same SQLite file, in the same run, at each envelope size of
``--records`` (default 40 and 999 confirmation records; ``keep_terminal`` holds the size
steady). The two are interleaved, and the medians are compared. Two CAS saves are the floor
(2.0x); target: ratio <= 2.3 at every size.

Part 2, one session going through ``--confirmations`` proposals + approvals (default 100,000)
on one store: every ``--every`` confirmations, the envelope size (bytes of stored JSON) and
the mean time per resolution over that block are printed. Retention keeps the envelope, and
so the time, flat.

    .venv/bin/python benchmarks/bench_resolution.py [--resolutions 300] [--records 40,999]
        [--confirmations 100000]
        [--every 10000] [--long-store memory|sqlite] [--keep-terminal 256]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage

DEFINITION = ChatDefinition("bench")


class NoOpUpstream:
    """Accepts every proposal; approve and deny do nothing (the protocol cost only)."""

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return ToolCallProposal(id, name, dict(args))

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


def overhead(resolutions: int, records: int, path: Path) -> None:
    storage = SQLiteStorage(path)
    session = resume_chat_session(DEFINITION, session_id="bench", storage=storage)
    # Each propose prunes the oldest terminal record beyond `records - 1`: the envelope holds
    # `records` confirmations at every measured approve.
    coordinator = session.confirmations_for(NoOpUpstream(), keep_terminal=records - 1)
    for n in range(records - 1):  # the history before measuring
        coordinator.approve(coordinator.propose("email.send", {"n": n}).token)
    raw_id = "bench-raw"
    resolution_s: list[float] = []
    raw_s: list[float] = []
    for n in range(resolutions):
        raw_cursor = n  # the baseline session's stored cursor (0: nothing stored yet)
        token = coordinator.propose("email.send", {"n": n}).token
        assert len(session.confirmations) == records
        start = time.perf_counter()
        coordinator.approve(token)
        resolution_s.append(time.perf_counter() - start)
        # The baseline: one CAS of an envelope as large as the one just resolved.
        snapshot = session.snapshot.model_copy(
            update={"session_id": raw_id, "cursor": raw_cursor + 1}
        )
        start = time.perf_counter()
        assert storage.save(snapshot, raw_cursor if raw_cursor else None)
        raw_s.append(time.perf_counter() - start)
    storage.close()
    resolution, raw = statistics.median(resolution_s), statistics.median(raw_s)
    print("part 1: one resolution vs one raw CAS, SQLite file, same run")
    print(f"  records         {records}")
    print(f"  resolutions     {resolutions}")
    print(f"  raw CAS         median {raw * 1e3:8.3f} ms")
    print(f"  resolution      median {resolution * 1e3:8.3f} ms  (2 CAS + decisions)")
    print(f"  ratio           {resolution / raw:8.2f}x  (floor 2.0, target <= 2.3)")


def flatness(confirmations: int, every: int, store: str, keep_terminal: int, path: Path) -> None:
    storage: Any = MemoryStorage() if store == "memory" else SQLiteStorage(path)
    session = resume_chat_session(DEFINITION, session_id="long", storage=storage)
    coordinator = session.confirmations_for(NoOpUpstream(), keep_terminal=keep_terminal)
    print(
        f"part 2: {confirmations} confirmations on one session ({store} store,"
        f" keep_terminal={keep_terminal})"
    )
    print(f"  {'done':>8}  {'records':>7}  {'envelope bytes':>14}  {'ms / resolution':>15}")
    block_start, block_resolve = time.perf_counter(), 0.0
    for n in range(1, confirmations + 1):
        token = coordinator.propose("email.send", {"n": n}).token
        start = time.perf_counter()
        coordinator.approve(token)
        block_resolve += time.perf_counter() - start
        if n % every == 0:
            raw = storage.load("long")
            size = len(raw.encode() if isinstance(raw, str) else raw)
            records = len(session.confirmations)
            print(f"  {n:>8}  {records:>7}  {size:>14}  {block_resolve / every * 1e3:>15.3f}")
            block_resolve = 0.0
    print(f"  total {time.perf_counter() - block_start:.1f} s")
    close = getattr(storage, "close", None)
    if close is not None:
        close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resolutions", type=int, default=300)
    parser.add_argument("--records", default="40,999", help="envelope sizes for part 1")
    parser.add_argument("--confirmations", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=10_000)
    parser.add_argument("--long-store", choices=("memory", "sqlite"), default="memory")
    parser.add_argument("--keep-terminal", type=int, default=256)
    parser.add_argument("--skip-long", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(r) for r in args.records.split(",")):
            overhead(args.resolutions, size, Path(tmp) / f"overhead-{size}.db")
        if not args.skip_long:
            flatness(
                args.confirmations,
                args.every,
                args.long_store,
                args.keep_terminal,
                Path(tmp) / "long.db",
            )


if __name__ == "__main__":
    main()
