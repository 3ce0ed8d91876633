"""The agent runs and tool-execution ledger beside an envelope, as ``inspect`` shows them.

Read with :func:`akchat_fsm.integrations.records.read_bridge_records` (no agent runtime
needed); an execution whose outcome is unknown is highlighted with how to settle it, because
the bridges never re-run it by themselves.
"""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..integrations.records import SETTLE_HINT, BridgeRecords
from ._common import inert, inert_json, pinned_rows

__all__ = ["records_json", "render_records"]


def records_json(records: BridgeRecords | None) -> str:
    """``inspect --ledger --json``: the records, or ``{"records": false}`` without the
    capability (control characters escaped)."""
    value: Any = {"records": False} if records is None else {"records": True, **records.to_json()}
    return inert_json(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _runs(records: BridgeRecords) -> RenderableType:
    table = Table(
        box=box.SIMPLE_HEAD, title=f"Agent runs ({len(records.runs)})", title_justify="left"
    )
    for name in ("run", "runtime", "state", "batch", "calls"):
        table.add_column(name, no_wrap=name in ("run", "state"), overflow="fold")
    rows = [
        (
            inert(run.run_id),
            inert(run.runtime),
            run.state.value,
            str(run.batch),
            ", ".join(f"{inert(c.tool_call_id)} {inert(c.tool)} ({c.kind})" for c in run.calls)
            or "-",
        )
        for run in records.runs
    ]
    return pinned_rows(table, rows)


def _ledger(records: BridgeRecords) -> RenderableType:
    table = Table(
        box=box.SIMPLE_HEAD, title=f"Tool executions ({len(records.entries)})", title_justify="left"
    )
    for name in ("tool call", "tool", "state", "outcome", "attempt", "owner"):
        table.add_column(name, no_wrap=name == "tool call", overflow="fold")
    rows = [
        (
            inert(entry.tool_call_id),
            inert(entry.tool),
            "OUTCOME UNKNOWN" if entry.unknown else entry.state.value,
            entry.outcome or "-",
            str(entry.attempt),
            inert(entry.owner),
        )
        for entry in records.entries
    ]
    return pinned_rows(table, rows)


def render_records(records: BridgeRecords | None) -> list[RenderableType]:
    """The sections ``inspect`` adds after the envelope (none when there is nothing to show)."""
    if not records:
        return []
    parts: list[RenderableType] = []
    if records.runs:
        parts.append(_runs(records))
    if records.entries:
        parts.append(_ledger(records))
    unknown = records.unknown
    if unknown:
        ids = ", ".join(inert(e.tool_call_id) for e in unknown)
        warning = Text(style="bold red")
        warning.append(
            f"execution outcome unknown: {len(unknown)} ({ids}); never re-run by the bridge. "
        )
        warning.append(SETTLE_HINT, style="red")
        parts.append(warning)
    return [Group(*parts)]
