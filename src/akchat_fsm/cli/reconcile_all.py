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
On a store with the pending index, ``--apply`` also takes the sessions holding confirmations
past their expiry: the host's bridge expires them (its run continues with the expired answer);
without a bridge nothing can deny them upstream, so they are reported with the next step.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import click
from rich import box
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ..errors import AkchatError, ConfigError
from ..integrations.records import BridgeRecords, read_bridge_records
from ..session.session import default_clock
from ..session.sweep import NO_INDEX, SweepPorts, SweepReport, SweptSession, reconcile_all
from ..storage.capabilities import has_processing_index
from ..storage.port import ProcessingIndex, ProcessingSession
from ..wire.decode import decode_session_snapshot
from ..wire.session import SessionSnapshot
from ._common import (
    EXIT_INVALID,
    EXIT_NEEDS_PERSON,
    EXIT_USAGE,
    describe,
    fail,
    inert,
    inert_json,
    load_callable,
    opened_storage,
    pinned_rows,
    print_renderable,
    stderr_console,
)
from ._envelope import _when
from ._reconcile_plan import (
    LEFT,
    intent_plans,
    is_refused,
    load_memory,
    outcome_row,
    plan_for,
    plan_row,
    refused_steps,
    session_ports,
    tool_statuses,
)

__all__ = ["Cli", "Duration", "reconcile_all_command"]

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
#: The status of a session held only by agent runs not completed: a bridge's work (calls to
#: propose, a run to continue) or a person's (calls to decide).
RUN_LEFT = "agent run not finished"
NO_MEMORY_FILE = "no memory file"
#: The status of a session whose confirmations are past their expiry and were not expired.
PAST_EXPIRY = "past expiry, not expired"
#: What stands for the host's bridge factory in a printed command when none was given.
BRIDGE_PLACEHOLDER = "MODULE:CALLABLE"
MEMORY_DIR_PLACEHOLDER = "MEMORY_DIR"


@dataclass(frozen=True)
class Cli:
    """The command line an operator typed, so every next step is printed with its real values:
    the URL exactly as given (shell-quoted), the age, the bridge factory, the memory dir."""

    url: str
    older_than_ms: int
    bridge: str | None = None
    memory_dir: str | None = None
    release_untouched: bool = False

    def age(self) -> str:
        for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)):
            if self.older_than_ms and self.older_than_ms % size == 0:
                return f"{self.older_than_ms // size}{unit}"
        return f"{self.older_than_ms}ms" if self.older_than_ms else "0"

    def sweep(self, *extra: str, bridge: bool = False, memory: bool = False) -> str:
        """``akchat-fsm reconcile URL --all --older-than AGE --apply ...``, shell-quoted."""
        argv = ["akchat-fsm", "reconcile", self.url, "--all", "--older-than", self.age()]
        if bridge:
            argv += ["--bridge", self.bridge or BRIDGE_PLACEHOLDER]
        if memory:
            argv += ["--memory-dir", self.memory_dir or MEMORY_DIR_PLACEHOLDER]
        return shlex.join([*argv, "--apply", *extra])

    def settle(self, session_id: str, tool_call_id: str) -> list[str]:
        base = ["akchat-fsm", "settle", self.url, session_id, tool_call_id]
        return [
            f"{shlex.join([*base, '--ran'])}  # it happened (add --result JSON)",
            f"{shlex.join([*base, '--did-not-run'])}  # it did not",
        ]


def _unknown_rows(records: BridgeRecords | None) -> list[dict[str, str]]:
    """One row per ledger entry of the session whose execution outcome is unknown."""
    return [
        {"toolCallId": e.tool_call_id, "tool": e.tool, "status": EXECUTION_UNKNOWN}
        for e in (records.unknown if records else ())
    ]


def _run_rows(records: BridgeRecords | None) -> list[dict[str, str]]:
    """One row per agent run of the session that is not completed (ADR-0106)."""
    return [
        {
            "runId": run.run_id,
            "status": f"run {run.state.value}",
            "calls": ", ".join(c.tool_call_id for c in run.calls),
        }
        for run in (records.unfinished_runs if records else ())
    ]


@dataclass
class Entry:
    """One listed session as the command reports it; ``next``: its exact next steps, one
    copy-pasteable line each (empty: nothing is left for anyone)."""

    session_id: str
    #: ``None``: listed only for confirmations past their expiry (not by the processing index).
    last_write_ms: int | None
    status: str
    records: list[dict[str, str]] = field(default_factory=list)
    error: str | None = None
    next: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "lastWriteMs": self.last_write_ms,
            "status": self.status,
            "records": self.records,
            "error": self.error,
            "next": self.next,
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


def _bridged_steps(cli: Cli, session_id: str, records: BridgeRecords | None) -> list[str]:
    """What finishes a session an agent-runtime bridge runs: settle each unknown execution,
    then sweep it through the host's bridge (which continues the run with the verdict)."""
    steps: list[str] = []
    for entry in records.unknown if records else ():
        steps += cli.settle(session_id, entry.tool_call_id)
    why = "then the host's bridge continues the run" if steps else "the host's bridge finishes it"
    if cli.bridge is None:
        why += f" (name your bridge factory for {BRIDGE_PLACEHOLDER})"
    steps.append(f"{cli.sweep(bridge=True)}  # {why}")
    return steps


def _claim_steps(cli: Cli, session_id: str, planned: list[dict[str, str]]) -> list[str]:
    """What settles the claims of a session without bridge records, from its chat memory."""
    if cli.memory_dir is None or not planned:
        where = _memory_path(cli.memory_dir or MEMORY_DIR_PLACEHOLDER, session_id)
        return [
            f"# save the host's chat memory of {session_id} as {where}, then:",
            cli.sweep(memory=True),
        ]
    steps: list[str] = []
    if any(r["action"] in ("complete", "release", "bind") for r in planned):
        steps.append(cli.sweep(*_release(cli), memory=True))
    if any(r["action"].startswith(LEFT) for r in planned):
        untouched = ", ".join(r["toolCallId"] for r in planned if r["action"].startswith(LEFT))
        steps.append(
            f"# {untouched}: upstream never acted; re-issue from the host "
            "(akchat_fsm.session.reconcile with its upstream), or, once no client is still "
            "resolving them, release them to pending:"
        )
        steps.append(cli.sweep("--release-untouched", memory=True))
    if any(map(is_refused, planned)):
        steps += refused_steps(cli.url, session_id, planned, cli.sweep(*_release(cli), memory=True))
    return steps


def _expiry_rows(swept: SweptSession) -> list[dict[str, str]]:
    """One row per confirmation past its expiry: expired by this sweep, or left pending."""
    return [
        *({"toolCallId": c, "status": "expired", "action": "expired"} for c in swept.expired),
        *({"toolCallId": c, "status": "pending", "action": PAST_EXPIRY} for c in swept.still_due),
    ]


def _expiry_steps(cli: Cli, swept: SweptSession) -> list[str]:
    """What expires confirmations the sweep could not: only an upstream can deny them."""
    if not swept.still_due:
        return []
    return [
        f"# {', '.join(swept.still_due)}: past their expiry; the host's bridge (or its "
        "upstream, akchat_fsm.reconcile_all with SweepPorts(upstream=...)) expires them:",
        cli.sweep(bridge=True),
    ]


def _release(cli: Cli) -> tuple[str, ...]:
    return ("--release-untouched",) if cli.release_untouched else ()


# --------------------------------------------------------------------------- dry run


def _plan_one(storage: Any, row: ProcessingSession, cli: Cli, factory: Any) -> Entry:
    """What ``--apply`` would do for one listed session, and what is left for a person. Every
    record that holds the session is reported (a claim never hides an unknown execution)."""
    sid = row.session_id
    entry = Entry(sid, row.last_write_ms, "planned")
    try:
        snapshot = _stored(storage, sid)
        records = read_bridge_records(storage, sid)
        unknown, runs = _unknown_rows(records), _run_rows(records)
        claims = [b for b in snapshot.confirmations if b.status.is_processing] if snapshot else []
        claim_rows = [
            {"token": b.token, "toolCallId": b.tool_call_id, "status": b.status.value}
            for b in claims
        ]
        if records:  # a bridged session: the host's bridge finishes it, after any verdict
            entry.records = claim_rows + unknown + runs
            entry.status = EXECUTION_UNKNOWN if unknown else RUN_LEFT if runs else "stuck"
            if snapshot is None and not runs:
                entry.status = "gone"
                return entry
            entry.next = _bridged_steps(cli, sid, records)
            if factory is not None and not unknown and _host_takes(factory, sid, storage):
                entry.status = "bridge would reconcile"
            return entry
        if snapshot is None:
            entry.status = "gone"
            return entry
        if cli.memory_dir is None:
            entry.status, entry.records = "stuck", claim_rows
        elif not os.path.isfile(_memory_path(cli.memory_dir, sid)):
            entry.status, entry.records = NO_MEMORY_FILE, claim_rows
        else:
            memory = load_memory(_memory_path(cli.memory_dir, sid))
            plans = plan_for(snapshot, tool_statuses(memory), cli.release_untouched)
            plans += intent_plans(storage, snapshot, memory, cli.release_untouched)
            entry.records = [plan_row(p) for p in plans]
            entry.next = _claim_steps(cli, sid, entry.records)
            return entry
        entry.next = _claim_steps(cli, sid, [])
    except AkchatError as exc:  # this session's failure; the others go on
        entry.status, entry.error = "failed", describe(exc)
    return entry


def _host_takes(factory: Any, session_id: str, storage: Any) -> bool:
    """Whether the host's factory claims the session (it builds ports; nothing is written)."""
    return _ports_from(factory, session_id, storage) is not None


def _ports_from(factory: Any, session_id: str, storage: Any) -> SweepPorts | None:
    try:
        ports = factory(session_id, storage)
    except Exception as exc:  # the host's factory: its failure is this session's
        raise ConfigError(f"--bridge factory raised {exc!r} for {session_id!r}") from exc
    if ports is not None and not isinstance(ports, SweepPorts):
        raise ConfigError(
            f"--bridge factory returned {type(ports).__name__} for {session_id!r}; it must "
            "return SweepPorts(definition, bridge=...) or None (not this host's session)"
        )
    return ports


def _dry_run(
    storage: Any,
    listed: list[ProcessingSession],
    cli: Cli,
    factory: Any,
    tick: Callable[[int, int], None],
) -> list[Entry]:
    entries: list[Entry] = []
    for row in listed:
        entries.append(_plan_one(storage, row, cli, factory))
        tick(len(entries), len(listed))
    return entries


# --------------------------------------------------------------------------- apply


def _apply(
    storage: Any,
    cli: Cli,
    factory: Any,
    limit: int,
    tick: Callable[[int, int], None],
) -> tuple[SweepReport, list[Entry]]:
    """One ``reconcile_all`` sweep: a session the host's bridge factory claims goes through its
    bridge; any other through ``--memory-dir`` (no upstream); a session neither can take is
    skipped, with the reason and what would finish it."""
    skipped: dict[str, str] = {}

    def ports_for(session_id: str) -> SweepPorts | None:
        if factory is not None:
            ports = _ports_from(factory, session_id, storage)
            if ports is not None:
                return ports
        if cli.memory_dir is None:
            skipped[session_id] = "no bridge" if factory is None else "not the bridge's"
            return None
        path = _memory_path(cli.memory_dir, session_id)
        if not os.path.isfile(path):
            skipped[session_id] = NO_MEMORY_FILE
            return None
        memory = load_memory(path)
        snapshot = _stored(storage, session_id)
        if snapshot is None:
            skipped[session_id] = "gone"
            return None
        return session_ports(snapshot, memory, cli.release_untouched)

    def progress(swept: SweptSession, done: int, total: int) -> None:
        tick(done, total)

    report = reconcile_all(
        storage,
        ports_for,
        older_than_ms=cli.older_than_ms,
        limit=limit,
        release_untouched=cli.release_untouched,
        progress=progress,
    )
    entries = [_applied_entry(storage, swept, skipped, cli) for swept in report.sessions]
    return report, entries


def _applied_entry(storage: Any, swept: SweptSession, skipped: dict[str, str], cli: Cli) -> Entry:
    sid = swept.session_id
    entry = Entry(sid, swept.last_write_ms, swept.status, [outcome_row(o) for o in swept.outcomes])
    entry.records += _expiry_rows(swept)
    if swept.error is not None:
        entry.error = describe(swept.error)
        return entry
    if swept.status in ("settled", "expired"):
        return entry
    try:
        records = read_bridge_records(storage, sid)
        snapshot = _stored(storage, sid)
    except AkchatError as exc:  # the sweep's report stands; say what could not be read
        entry.error = describe(exc)
        return entry
    if swept.skipped:
        entry.status = skipped.get(sid, entry.status)
        if entry.status == "gone":
            return entry
        claims = [b for b in snapshot.confirmations if b.status.is_processing] if snapshot else []
        entry.records = [
            {"token": b.token, "toolCallId": b.tool_call_id, "status": b.status.value}
            for b in claims
        ] + _expiry_rows(swept)
    unknown, runs = _unknown_rows(records), _run_rows(records)
    if records:
        entry.records += unknown + runs
        if swept.status == "execution_unknown":
            entry.status = EXECUTION_UNKNOWN if unknown else RUN_LEFT
        waiting = [f"# run {run_id}: {step}" for run_id, step in swept.waiting]
        if waiting and not unknown:
            entry.next = waiting  # a person decides; the bridge continues the run by itself
        else:
            entry.next = [*waiting, *_bridged_steps(cli, sid, records)]
        return entry
    if swept.last_write_ms is None:  # listed only for confirmations past their expiry
        if swept.still_due:  # left pending (no upstream here), whatever else was skipped
            entry.status = PAST_EXPIRY
        entry.next = _expiry_steps(cli, swept)
        return entry
    left = [r for r in entry.records if r.get("action") == LEFT or is_refused(r)]
    entry.next = _claim_steps(cli, sid, left if not swept.skipped else []) + _expiry_steps(
        cli, swept
    )
    return entry


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


def _written(entry: Entry) -> str:
    # A session listed only for its due confirmations has no processing-index stamp.
    return "-" if entry.last_write_ms is None else _when(entry.last_write_ms)


def _who(record: dict[str, str]) -> str:
    return record.get("toolCallId") or record.get("runId") or "-"


def _summary(
    entries: Iterable[Entry], cutoff_ms: int, limit: int, applied: bool, truncated: bool
) -> Group:
    """The sessions table, then each session's next steps, one whole line each: nothing an
    operator copies (an id, a status, a command) is ever wrapped; a line wider than the
    terminal is printed whole and the terminal folds it."""
    entries = list(entries)
    due = sum(1 for e in entries if e.last_write_ms is None)
    table = Table(box=box.SIMPLE_HEAD, title="Sessions", title_justify="left")
    for name in ("session", "last write (UTC)", "status", "records"):
        table.add_column(name, no_wrap=True, overflow="ignore")
    pinned_rows(
        table,
        ((inert(e.session_id), _written(e), e.status, inert(_detail(e))) for e in entries),
    )
    counts = Counter(e.status for e in entries)
    tally = ", ".join(f"{count} {status}" for status, count in counts.items())
    listed = f"{len(entries) - due} session(s) last written before {_when(cutoff_ms)}"
    if due:
        listed += f" and {due} with confirmations past their expiry"
    lines = [f"{listed}: {tally or '-'}"]
    if truncated:
        lines.append(f"limit {limit} reached: more may be waiting; run again or raise --limit")
    lines.append("applied" if applied else "dry run: nothing written")
    left = [e for e in entries if e.next]
    if left:
        lines.append(
            f"needs a person or one more command: {len(left)} session(s), next steps below"
        )
    parts: list[Any] = [table] if entries else []
    parts.append(Text("\n".join(lines)))
    steps: list[tuple[str]] = []
    for entry in left:
        named = ", ".join(inert(_who(r)) for r in entry.records) or "-"
        steps.append((f"{inert(entry.session_id)} ({entry.status}: {named}):",))
        steps.extend((f"  {inert(step)}",) for step in entry.next)
    if steps:
        next_table = Table(box=None, show_header=False, pad_edge=False, expand=False)
        next_table.add_column("next", no_wrap=True, overflow="ignore")
        parts.append(pinned_rows(next_table, steps))
    return Group(*parts)


def reconcile_all_command(
    cli: Cli, limit: int, apply_: bool, as_json: bool, width: int | None
) -> None:
    """The ``--all`` form of ``reconcile`` (arguments already checked by the command).

    Exit status: 0 when every listed session is settled or expired (or none is listed), 1 when one
    failed, 3 (:data:`EXIT_NEEDS_PERSON`) when work is left, each session with its next steps.
    """
    factory = None if cli.bridge is None else load_callable(cli.bridge, "--bridge")
    with opened_storage(cli.url, create=False, read_only=not apply_) as storage:
        if not has_processing_index(storage):
            fail(NO_INDEX.format(kind=type(storage).__name__), EXIT_USAGE)
        with _progress_bar() as tick:
            expiring: int | None = None
            if apply_:
                report, entries = _apply(storage, cli, factory, limit, tick)
                cutoff, expiring, truncated = (
                    report.written_before_ms,
                    report.expiring_before_ms,
                    report.truncated,
                )
            else:
                cutoff = default_clock() - cli.older_than_ms
                try:
                    index = cast(ProcessingIndex, storage)  # checked above; sync adapters
                    listed = index.list_processing(written_before_ms=cutoff, limit=limit)
                except ConfigError as exc:  # a 0.1.0 table a dry run must not upgrade
                    fail(f"cannot read storage {cli.url!r}: {describe(exc)}", EXIT_USAGE)
                entries = _dry_run(storage, listed, cli, factory, tick)
                truncated = len(entries) >= limit
    if as_json:
        document = {
            "writtenBeforeMs": cutoff,
            "expiringBeforeMs": expiring,
            "limit": limit,
            "truncated": truncated,
            "applied": apply_,
            "counts": dict(Counter(e.status for e in entries)),
            "needsPerson": sum(1 for e in entries if e.next),
            "sessions": [e.as_json() for e in entries],
        }
        click.echo(inert_json(json.dumps(document, ensure_ascii=False)))
    else:
        print_renderable(_summary(entries, cutoff, limit, apply_, truncated), width)
    if any(e.status == "failed" or e.error is not None for e in entries):
        raise SystemExit(EXIT_INVALID)
    if any(e.next for e in entries):
        raise SystemExit(EXIT_NEEDS_PERSON)
