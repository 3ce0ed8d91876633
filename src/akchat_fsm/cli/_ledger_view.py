"""The agent runs and tool-execution ledger beside an envelope, as ``inspect`` shows them.

Read with :func:`akchat_fsm.integrations.records.read_bridge_records` (no agent runtime
needed); an execution whose outcome is unknown is highlighted with how to settle it, because
the bridges never re-run it by themselves.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..integrations.records import SETTLE_HINT, BridgeRecords
from ._common import inert, inert_json, pinned_rows

__all__ = ["next_steps", "records_json", "render_records", "settle_commands"]


def settle_commands(
    records: BridgeRecords | None, source: str | None, session_id: str | None
) -> list[dict[str, str]]:
    """For each execution whose outcome is unknown, the two ``akchat-fsm settle`` commands an
    operator runs (``ran``: it happened; ``didNotRun``: it did not), with this store, session
    and tool call filled in and shell-quoted, so a copied line works as it is."""
    if not records or source is None or session_id is None:
        return []
    base = ["akchat-fsm", "settle", source, session_id]
    return [
        {
            "toolCallId": entry.tool_call_id,
            "ran": shlex.join([*base, entry.tool_call_id, "--ran"]),
            "didNotRun": shlex.join([*base, entry.tool_call_id, "--did-not-run"]),
        }
        for entry in records.unknown
    ]


def records_json(
    records: BridgeRecords | None, source: str | None = None, session_id: str | None = None
) -> str:
    """``inspect --ledger --json``: the records (with ``settleCommands``), or
    ``{"records": false}`` without the capability (control characters escaped)."""
    value: Any = {"records": False} if records is None else {"records": True, **records.to_json()}
    if records is not None:
        commands = settle_commands(records, source, session_id)
        value["settleCommands"] = commands
        if commands:  # the sentence with this store, session and tool calls filled in
            value["settle"] = _settle_sentence(commands)
        value["nextSteps"] = next_steps(records, source, session_id)
    return inert_json(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _settle_sentence(commands: list[dict[str, str]]) -> str:
    verdicts = "; ".join(
        f"{c['ran']} [--result JSON] if it happened, {c['didNotRun']} if it did not"
        for c in commands
    )
    return f"check the tool's side effect, then record the verdict: {verdicts}"


def next_steps(
    records: BridgeRecords | None, source: str | None, session_id: str | None
) -> list[str]:
    """Every line an operator runs next for this session's records, real values filled in and
    shell-pasteable (a sentence is a ``#`` comment): each unknown execution's two verdicts,
    then the bridge sweep that continues or finishes each run that is not completed."""
    if not records or source is None or session_id is None:
        return []
    steps: list[str] = []
    for command in settle_commands(records, source, session_id):
        steps.append(f"{command['ran']}  # it happened (add --result JSON)")
        steps.append(f"{command['didNotRun']}  # it did not")
    unfinished = records.unfinished_runs
    if unfinished:
        runs = ", ".join(
            f"{r.run_id} ({r.state.value}; calls {', '.join(c.tool_call_id for c in r.calls)})"
            for r in unfinished
        )
        steps.append(f"# not finished: {runs}; the host's bridge sweep continues it:")
        sweep = ["akchat-fsm", "reconcile", source, "--all", "--older-than", "0"]
        steps.append(shlex.join([*sweep, "--bridge", "MODULE:CALLABLE", "--apply"]))
    return steps


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
        # ``state`` reads OUTCOME UNKNOWN: never broken over two lines.
        table.add_column(name, no_wrap=name in ("tool call", "state"), overflow="fold")
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


def _commands(commands: list[dict[str, str]]) -> RenderableType:
    """One command per line, each pinned whole (never wrapped or cut: it is copied)."""
    table = Table(box=None, show_header=False, pad_edge=False, expand=False)
    table.add_column("command", no_wrap=True, overflow="ignore")
    table.add_column("when", no_wrap=True, overflow="ignore")
    rows = []
    for command in commands:
        rows.append((inert(command["ran"]), "# it happened (optionally --result JSON)"))
        rows.append((inert(command["didNotRun"]), "# it did not"))
    return pinned_rows(table, rows)


def _lines(lines: list[str]) -> RenderableType:
    """Lines printed whole (never wrapped or cut: they are copied)."""
    table = Table(box=None, show_header=False, pad_edge=False, expand=False)
    table.add_column("line", no_wrap=True, overflow="ignore")
    return pinned_rows(table, ([inert(line)] for line in lines))


def render_records(
    records: BridgeRecords | None, source: str | None = None, session_id: str | None = None
) -> list[RenderableType]:
    """The sections ``inspect`` adds after the envelope (none when there is nothing to show);
    given the store's ``source`` and the ``session_id``, the settle commands are the real ones."""
    if not records:
        return []
    parts: list[RenderableType] = []
    if records.runs:
        parts.append(_runs(records))
    if records.entries:
        parts.append(_ledger(records))
    unknown = records.unknown
    steps = next_steps(records, source, session_id)
    if records.unfinished_runs and steps and not unknown:
        parts.append(_lines(steps))
    if unknown:
        ids = ", ".join(inert(e.tool_call_id) for e in unknown)
        warning = Text(style="bold red")
        warning.append(
            f"execution outcome unknown: {len(unknown)} ({ids}); never re-run by the bridge. "
        )
        commands = settle_commands(records, source, session_id)
        if commands:
            ids_api = inert(repr(unknown[0].tool_call_id))
            warning.append(
                "check the tool's side effect, then record the verdict with one of these "
                f"(API: bridge.settle_execution({ids_api}, ran=..., result=...)):",
                style="red",
            )
            parts.extend([warning, _commands(commands)])
            rest = steps[2 * len(commands) :]
            if rest:
                parts.append(_lines(rest))
        else:
            warning.append(SETTLE_HINT, style="red")
            parts.append(warning)
    return [Group(*parts)]
