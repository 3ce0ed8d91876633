"""A session's bridge records as an operator reads them: agent runs and the tool-execution ledger.

Read-only: one plan lists the run records (``run:``) and ledger entries (``call:``) beside a
session's envelope, run by the sync or the asyncio driver. Needs no agent runtime, so the CLI
(``akchat-fsm inspect``) and ``reconcile_all``'s bridge hook use it on any record-capable storage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..session.drivers import Ports, run_async, run_sync
from ..storage.capabilities import provides
from ._bridge_io import ListRecords, LoadRecord, Plan, asyncio_records
from ._bridge_runs import RUN_PREFIX, RunRecord, RunState
from .ledger import LedgerEntry, plan_entries

__all__ = [
    "SETTLE_HINT",
    "BridgeRecords",
    "has_records",
    "plan_bridge_records",
    "read_bridge_records",
    "read_bridge_records_async",
]

#: How an operator settles an execution whose outcome is unknown (the call is never re-run).
SETTLE_HINT = (
    "check the tool's side effect, then record the verdict: "
    "akchat-fsm settle URL SESSION_ID TOOL_CALL_ID --ran [--result JSON] if it happened, "
    "--did-not-run if it did not (API: bridge.settle_execution(TOOL_CALL_ID, ran=..., "
    "result=...), or ToolLedger(storage, SESSION_ID).settle(...) without a bridge)"
)
#: An operator's read needs only these of the records capability.
_READ_METHODS = ("load_record", "list_records")


@dataclass(frozen=True, slots=True)
class BridgeRecords:
    """The agent runs and ledger entries kept beside one session's envelope."""

    runs: tuple[RunRecord, ...]
    entries: tuple[LedgerEntry, ...]

    @property
    def unknown(self) -> tuple[LedgerEntry, ...]:
        """Executions claimed and never recorded: their outcome is unknown."""
        return tuple(e for e in self.entries if e.unknown)

    @property
    def unfinished_runs(self) -> tuple[RunRecord, ...]:
        return tuple(r for r in self.runs if r.state is not RunState.COMPLETED)

    def __bool__(self) -> bool:
        return bool(self.runs or self.entries)

    def to_json(self) -> dict[str, Any]:
        """The records as JSON values (what ``inspect --ledger --json`` prints)."""
        return {
            "runs": [_run_json(r) for r in self.runs],
            "ledger": [_entry_json(e) for e in self.entries],
            "executionUnknown": [e.tool_call_id for e in self.unknown],
            "settle": SETTLE_HINT if self.unknown else None,
        }


def _run_json(run: RunRecord) -> dict[str, Any]:
    return {
        "runId": run.run_id,
        "runtime": run.runtime,
        "state": run.state.value,
        "batch": run.batch,
        "attempt": run.attempt,
        "owner": run.owner,
        "updatedMs": run.updated_ms,
        "calls": [c.to_wire() for c in run.calls],
    }


def _entry_json(entry: LedgerEntry) -> dict[str, Any]:
    raw: dict[str, Any] = json.loads(entry.to_json())
    raw["unknown"] = entry.unknown
    return raw


def has_records(storage: Any) -> bool:
    """Whether ``storage`` has the ``RecordStorage`` capability (reads are enough here)."""
    return provides(storage, _READ_METHODS)


def plan_bridge_records(session_id: str) -> Plan[BridgeRecords]:
    runs: list[RunRecord] = []
    for key in sorted((yield ListRecords(session_id, RUN_PREFIX))):
        run = RunRecord.from_stored((yield LoadRecord(session_id, key)))
        if run is not None:
            runs.append(run)
    entries = yield from plan_entries(session_id)
    return BridgeRecords(tuple(runs), tuple(entries))


def _plan_read(storage: Any, session_id: str) -> Plan[BridgeRecords | None]:
    if not has_records(storage):  # no I/O: the records read only what the storage can hold
        return None
    return (yield from plan_bridge_records(session_id))


def read_bridge_records(storage: Any, session_id: str) -> BridgeRecords | None:
    """The session's bridge records, or ``None`` when ``storage`` cannot hold any."""
    return run_sync(_plan_read(storage, session_id), Ports(storage))


async def read_bridge_records_async(storage: Any, session_id: str) -> BridgeRecords | None:
    """The session's bridge records, or ``None`` when ``storage`` cannot hold any."""
    return await run_async(_plan_read(storage, session_id), Ports(asyncio_records(storage)))
