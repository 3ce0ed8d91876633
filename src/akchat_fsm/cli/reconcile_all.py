"""``akchat-fsm reconcile URL --all --older-than AGE``: every stuck session in one run.

The store's processing index (:class:`~akchat_fsm.storage.port.ProcessingIndex`) lists the
sessions holding ``approving`` / ``rejecting`` / ``expiring`` records, oldest write first,
without loading every envelope. Each one's chat memory is ``--memory-dir DIR/<session id>.json``.
A dry run (the default) shows what each session would get; ``--apply`` runs
:func:`akchat_fsm.session.reconcile_all` with the same no-upstream rule as one session
(ADR-0071, ADR-0095). One session failing (an invalid memory file, a stored envelope that no
longer decodes) is reported and the others go on; the exit status is 1 if any failed.
A session held by a tool-execution ledger entry whose outcome is unknown (an agent-runtime
bridge's claimant died mid-body, ADR-0100) is reported ``execution outcome unknown`` with the
tool calls to settle, never ``settled``: nothing here re-runs or releases it.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import click
from rich import box
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ..errors import AkchatError, ConfigError
from ..integrations.records import read_bridge_records
from ..session.session import default_clock
from ..session.sweep import NO_INDEX, SweepPorts, SweptSession, reconcile_all
from ..storage.port import ProcessingIndex, ProcessingSession
from ..wire.decode import decode_session_snapshot
from ..wire.session import SessionSnapshot
from ._common import (
    EXIT_INVALID,
    EXIT_USAGE,
    describe,
    fail,
    inert,
    inert_json,
    opened_storage,
    pinned_rows,
    print_renderable,
    stderr_console,
)
from ._envelope import _when
from ._reconcile_plan import (
    load_memory,
    outcome_row,
    plan_for,
    plan_row,
    session_ports,
    tool_statuses,
)

__all__ = ["Duration", "reconcile_all_command"]

_UNITS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_AGE = re.compile(r"(\d{1,12})(ms|s|m|h|d)")


class Duration(click.ParamType):  # type: ignore[type-arg]
    """An age such as ``90s``, ``5m``, ``2h``, ``1d`` or ``250ms`` (``0`` alone), in ms."""

    name = "age"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text == "0":
            return 0
        match = _AGE.fullmatch(text)
        if match is None:
            self.fail(f"{value!r} is not an age like 90s, 5m, 2h or 1d", param, ctx)
        return int(match[1]) * _UNITS[match[2]]


#: The status of a session an unknown execution (or another record beside the envelope) holds.
EXECUTION_UNKNOWN = "execution outcome unknown"


def _unknown_rows(storage: Any, session_id: str) -> list[dict[str, str]]:
    """One row per ledger entry of the session whose execution outcome is unknown."""
    records = read_bridge_records(storage, session_id)
    return [
        {"toolCallId": e.tool_call_id, "tool": e.tool, "status": EXECUTION_UNKNOWN}
        for e in (records.unknown if records else ())
    ]


#: The status of a session held only by agent runs not completed: a bridge's work (calls to
#: propose, a run to continue) or a person's (calls to decide), which this command cannot do.
RUN_LEFT = "agent run not finished"


def _run_rows(storage: Any, session_id: str) -> list[dict[str, str]]:
    """One row per agent run of the session that is not completed (ADR-0106)."""
    records = read_bridge_records(storage, session_id)
    return [
        {
            "runId": run.run_id,
            "status": f"run {run.state.value}",
            "next": "sweep with the host's bridge (reconcile_all, SweepPorts.bridge); "
            "calls awaiting a decision wait for a person",
        }
        for run in (records.unfinished_runs if records else ())
    ]


@dataclass
class Entry:
    """One listed session as the command reports it."""

    session_id: str
    last_write_ms: int
    status: str
    records: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "lastWriteMs": self.last_write_ms,
            "status": self.status,
            "records": self.records,
            "error": self.error,
        }


def _memory_path(memory_dir: str, session_id: str) -> str:
    # A session id is a SafeIdentifier (letters, digits, '._:-', no '/'): a plain file name.
    return os.path.join(memory_dir, f"{session_id}.json")


def _stored(storage: Any, session_id: str) -> SessionSnapshot | None:
    """The stored envelope, decoded; ``None`` if it is gone; a typed error if invalid."""
    raw = storage.load(session_id)
    if raw is None:
        return None
    result = decode_session_snapshot(raw)
    if result.snapshot is None:
        diagnostic = result.diagnostic
        reason = f"{diagnostic.code}: {diagnostic.message}" if diagnostic else "invalid"
        raise ConfigError(f"stored envelope: {reason}")
    return result.snapshot


# --------------------------------------------------------------------------- dry run


def _plan_one(
    storage: Any, row: ProcessingSession, memory_dir: str | None, release_untouched: bool
) -> Entry:
    entry = Entry(row.session_id, row.last_write_ms, "planned")
    try:
        snapshot = _stored(storage, row.session_id)
        runs = _run_rows(storage, row.session_id)
        if snapshot is None:  # a run killed before its first proposal has no envelope yet
            entry.status, entry.records = (RUN_LEFT, runs) if runs else ("gone", [])
            return entry
        claims = [b for b in snapshot.confirmations if b.status.is_processing]
        unknown = _unknown_rows(storage, row.session_id)
        if unknown and not claims:
            entry.status, entry.records = EXECUTION_UNKNOWN, unknown
            return entry
        if runs and not claims:
            entry.status, entry.records = RUN_LEFT, runs
            return entry
        if memory_dir is None:
            entry.status = "stuck"
            entry.records = [
                {"token": b.token, "toolCallId": b.tool_call_id, "status": b.status.value}
                for b in claims
            ]
            return entry
        path = _memory_path(memory_dir, row.session_id)
        if not os.path.isfile(path):
            entry.status = "no memory file"
            return entry
        statuses = tool_statuses(load_memory(path))
        entry.records = [plan_row(p) for p in plan_for(snapshot, statuses, release_untouched)]
    except AkchatError as exc:  # this session's failure; the others go on
        entry.status, entry.error = "failed", describe(exc)
    return entry


def _dry_run(
    storage: Any,
    listed: list[ProcessingSession],
    memory_dir: str | None,
    release_untouched: bool,
    tick: Callable[[int, int], None],
) -> list[Entry]:
    entries: list[Entry] = []
    for row in listed:
        entries.append(_plan_one(storage, row, memory_dir, release_untouched))
        tick(len(entries), len(listed))
    return entries


# --------------------------------------------------------------------------- apply


def _apply(
    storage: Any,
    older_than_ms: int,
    memory_dir: str,
    limit: int,
    release_untouched: bool,
    tick: Callable[[int, int], None],
) -> tuple[int, list[Entry]]:
    skipped: dict[str, str] = {}

    def ports_for(session_id: str) -> SweepPorts | None:
        path = _memory_path(memory_dir, session_id)
        if not os.path.isfile(path):
            skipped[session_id] = "no memory file"
            return None
        memory = load_memory(path)
        snapshot = _stored(storage, session_id)
        if snapshot is None:
            skipped[session_id] = "gone"
            return None
        return session_ports(snapshot, memory, release_untouched)

    def progress(swept: SweptSession, done: int, total: int) -> None:
        tick(done, total)

    report = reconcile_all(
        storage,
        ports_for,
        older_than_ms=older_than_ms,
        limit=limit,
        release_untouched=release_untouched,
        progress=progress,
    )
    entries = [_applied_entry(storage, swept, skipped) for swept in report.sessions]
    return report.written_before_ms, entries


def _applied_entry(storage: Any, swept: SweptSession, skipped: dict[str, str]) -> Entry:
    status: str = swept.status
    rows = [outcome_row(o) for o in swept.outcomes]
    if swept.skipped:
        status = skipped.get(swept.session_id, status)
    elif status == "execution_unknown":
        status = EXECUTION_UNKNOWN
        try:
            unknown = _unknown_rows(storage, swept.session_id)
            runs = [] if unknown else _run_rows(storage, swept.session_id)
            if runs:  # held by an agent run only, not by an unknown execution
                status = RUN_LEFT
            rows += unknown or runs
        except AkchatError as exc:  # the sweep's report stands; say what could not be read
            rows.append({"status": EXECUTION_UNKNOWN, "error": describe(exc)})
    error = None if swept.error is None else describe(swept.error)
    return Entry(swept.session_id, swept.last_write_ms, status, rows, error)


# --------------------------------------------------------------------------- output


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None]]:
    """``tick(done, total)`` drawing a bar on stderr, only when stderr is a terminal."""
    console = stderr_console()
    with Progress(
        TextColumn("reconciling"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=True,
    ) as bar:
        task = bar.add_task("reconciling", total=None)

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield tick


def _detail(entry: Entry) -> str:
    if entry.error is not None:
        return entry.error
    actions = Counter(r.get("action", r["status"]) for r in entry.records)
    return ", ".join(f"{name} {count}" for name, count in actions.items()) or "-"


def _summary(entries: Iterable[Entry], cutoff_ms: int, limit: int, applied: bool) -> Group:
    entries = list(entries)
    table = Table(box=box.SIMPLE_HEAD, title="Sessions", title_justify="left")
    table.add_column("session", no_wrap=True)
    table.add_column("last write (UTC)", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("records", overflow="fold")
    pinned_rows(
        table,
        (
            (inert(e.session_id), _when(e.last_write_ms), e.status, inert(_detail(e)))
            for e in entries
        ),
    )
    counts = Counter(e.status for e in entries)
    tally = ", ".join(f"{count} {status}" for status, count in counts.items())
    lines = [f"{len(entries)} session(s) last written before {_when(cutoff_ms)}: {tally or '-'}"]
    if len(entries) >= limit:
        lines.append(f"limit {limit} reached: more may be waiting; run again or raise --limit")
    lines.append("applied" if applied else "dry run: nothing written")
    parts: list[Any] = [table] if entries else []
    return Group(*parts, Text("\n".join(lines)))


def reconcile_all_command(
    url: str,
    older_than_ms: int,
    memory_dir: str | None,
    limit: int,
    apply_: bool,
    release_untouched: bool,
    as_json: bool,
    width: int | None,
) -> None:
    """The ``--all`` form of ``reconcile`` (arguments already checked by the command)."""
    with opened_storage(url, create=False, read_only=not apply_) as storage:
        if not isinstance(storage, ProcessingIndex):
            fail(NO_INDEX.format(kind=type(storage).__name__), EXIT_USAGE)
        with _progress_bar() as tick:
            if apply_:
                assert memory_dir is not None  # checked by the command
                cutoff, entries = _apply(
                    storage, older_than_ms, memory_dir, limit, release_untouched, tick
                )
            else:
                cutoff = default_clock() - older_than_ms
                try:
                    listed = storage.list_processing(written_before_ms=cutoff, limit=limit)
                except ConfigError as exc:  # a 0.1.0 table a dry run must not upgrade
                    fail(f"cannot read storage {url!r}: {describe(exc)}", EXIT_USAGE)
                entries = _dry_run(storage, listed, memory_dir, release_untouched, tick)
    if as_json:
        document = {
            "writtenBeforeMs": cutoff,
            "limit": limit,
            "truncated": len(entries) >= limit,
            "applied": apply_,
            "counts": dict(Counter(e.status for e in entries)),
            "sessions": [e.as_json() for e in entries],
        }
        click.echo(inert_json(json.dumps(document, ensure_ascii=False)))
    else:
        print_renderable(_summary(entries, cutoff, limit, apply_), width)
    if any(e.status == "failed" for e in entries):
        raise SystemExit(EXIT_INVALID)
