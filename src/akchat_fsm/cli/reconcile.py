"""``akchat-fsm reconcile``: settle processing confirmations from chat-memory record files.

Two forms. ``reconcile URL SESSION_ID --memory FILE`` plans (dry run, the default) or applies
one session. ``reconcile URL --all --older-than 5m`` finds every session the store's
processing index lists as holding claims last written more than that long ago
(:func:`akchat_fsm.session.reconcile_all`), reading each one's memory from
``--memory-dir DIR/<session id>.json`` (:mod:`.reconcile_all`).

A dry run lists every ``approving`` / ``rejecting`` / ``expiring`` record, the status of its
tool call in the memory file, and what reconciliation would do (:mod:`._reconcile_plan`: the
core's decision). ``--apply`` writes with compare-and-set through the session API. The command
has no upstream chat controller, so it never calls upstream (docs/adr/0071):

* the tool call left ``requires_confirmation`` (upstream acted) → the matching final status
  is recorded (``approved`` / ``rejected`` / ``expired``);
* the tool call is still ``requires_confirmation`` (upstream never acted) → left as is, or
  released back to ``pending`` with ``--release-untouched`` (assert that no client is still
  resolving it); re-issuing the call needs the host's upstream: reconcile from the host;
* the tool call is not in the file → left as is.

Read-only unless ``--apply``; even then a store that does not exist is reported, not created.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..errors import AkchatError, SessionConflict
from ..session import reconcile as reconcile_session
from ..session import resume_chat_session
from ._common import (
    DEFAULT_WIDTH,
    EXIT_INVALID,
    EXIT_NEEDS_PERSON,
    EXIT_USAGE,
    describe,
    fail,
    inert,
    inert_json,
    opened_storage,
    pinned_rows,
    print_renderable,
    read_source,
)
from ._envelope import load_or_fail
from ._reconcile_plan import (
    applied_table,
    intent_plans,
    is_refused,
    memory_from_bytes,
    outcome_row,
    plan_for,
    plan_row,
    plan_table,
    refused_steps,
    session_ports,
    tool_statuses,
)
from .reconcile_all import Cli, Duration, reconcile_all_command

__all__ = ["reconcile"]


def _one(
    url: str,
    session_id: str,
    memory_file: str,
    apply_: bool,
    release_untouched: bool,
    as_json: bool,
    width: int | None,
) -> None:
    data = read_source(memory_file)  # unreadable: exit 2; too large: exit 1 (docs/cli.md)
    try:
        memory = memory_from_bytes(data)
    except AkchatError as exc:
        fail(f"{memory_file}: {describe(exc)}", EXIT_INVALID)
    # What binds an intent the session refused, once one of its records is decided.
    rerun = shlex.join(["akchat-fsm", "reconcile", url, session_id, "--memory", memory_file])
    rerun += " --apply" + (" --release-untouched" if release_untouched else "")
    with opened_storage(url, create=False, read_only=not apply_) as storage:
        snapshot = load_or_fail(storage, session_id, url).snapshot
        plans = plan_for(snapshot, tool_statuses(memory), release_untouched)
        plans += intent_plans(storage, snapshot, memory, release_untouched)
        if not apply_ or not plans:
            rows = [plan_row(p) for p in plans]
            steps = _refused_next(url, session_id, rows, rerun)
            if as_json:
                _echo_json(session_id, snapshot.cursor, applied=False, records=rows, next=steps)
            elif not plans:
                print_renderable(Text("No processing records: nothing to reconcile."), width)
            else:
                title = f"Dry run at cursor {snapshot.cursor} (nothing written)"
                parts: list[Any] = [plan_table(plans, title), *_step_lines(steps)]
                if not apply_:
                    parts.append(Text("Run again with --apply to write it."))
                print_renderable(Group(*parts), width)
            if steps:  # --apply would leave an intent waiting: a person decides first
                raise SystemExit(EXIT_NEEDS_PERSON)
            return
        try:
            ports = session_ports(snapshot, memory, release_untouched)
        except AkchatError as exc:
            fail(describe(exc), EXIT_INVALID)
        session = resume_chat_session(ports.definition, session_id=session_id, storage=storage)
        assert ports.memory is not None  # session_ports always reconciles with the file's memory
        try:
            outcomes = reconcile_session(session, ports.memory, release_untouched=release_untouched)
        except SessionConflict as exc:
            fail(f"another client kept writing; nothing more was applied ({describe(exc)})")
        rows = [outcome_row(o) for o in outcomes]
        steps = _refused_next(url, session_id, rows, rerun)
        if as_json:
            _echo_json(session_id, session.cursor, applied=True, records=rows, next=steps)
        else:
            cursor = Text(f"cursor now {session.cursor}")
            print_renderable(Group(applied_table(outcomes), cursor, *_step_lines(steps)), width)
    if steps:  # an intent is still waiting: work for a person, then one more command
        raise SystemExit(EXIT_NEEDS_PERSON)


def _refused_next(url: str, session_id: str, rows: list[dict[str, str]], rerun: str) -> list[str]:
    return refused_steps(url, session_id, rows, rerun) if any(map(is_refused, rows)) else []


def _step_lines(steps: list[str]) -> list[Table]:
    """The next steps, one whole line each: never wrapped or cut (an operator copies them)."""
    if not steps:
        return []
    table = Table(box=None, show_header=False, pad_edge=False, expand=False)
    table.add_column("next", no_wrap=True, overflow="ignore")
    return [pinned_rows(table, ((inert(step),) for step in steps))]


def _echo_json(
    session_id: str,
    cursor: int,
    *,
    applied: bool,
    records: list[dict[str, str]],
    next: list[str],
) -> None:
    document = {
        "sessionId": session_id,
        "cursor": cursor,
        "applied": applied,
        "records": records,
        "next": next,
    }
    click.echo(inert_json(json.dumps(document, ensure_ascii=False)))


@click.command("reconcile")
@click.argument("url")
@click.argument("session_id", required=False)
@click.option(
    "--memory",
    "memory_file",
    metavar="FILE",
    help="The host's chat-memory record ({version: 1, messages}) as JSON; - for stdin.",
)
@click.option("--all", "all_", is_flag=True, help="Every session the processing index lists.")
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    metavar="AGE",
    help="With --all: only sessions last written at least AGE ago (e.g. 90s, 5m, 2h, 1d).",
)
@click.option(
    "--memory-dir",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True, readable=True),
    help="With --all: DIR/<session id>.json holds each session's chat-memory record.",
)
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="With --all: at most this many sessions, oldest first.",
)
@click.option(
    "--bridge",
    "bridge_spec",
    metavar="MODULE:CALLABLE",
    default=None,
    help="With --all: the host's bridge factory, imported like an ASGI app: called as "
    "CALLABLE(session_id, storage) for each listed session, it returns "
    "SweepPorts(definition, bridge=...) (its bridge finishes the run) or None (not its session).",
)
@click.option("--apply", "apply_", is_flag=True, help="Write the result (CAS); default: dry run.")
@click.option(
    "--dry-run", "dry_run", is_flag=True, help="Only say what --apply would do (the default)."
)
@click.option(
    "--release-untouched",
    is_flag=True,
    help="Send records whose tool call is still requires_confirmation back to pending. "
    "Only when no client is still resolving them.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help=f"Output width (default: the terminal's, {DEFAULT_WIDTH} when not a TTY); rows whose "
    "tokens or ids need more are printed wider, never wrapped.",
)
def reconcile(
    url: str,
    session_id: str | None,
    memory_file: str | None,
    all_: bool,
    older_than: int | None,
    memory_dir: str | None,
    limit: int,
    bridge_spec: str | None,
    apply_: bool,
    dry_run: bool,
    release_untouched: bool,
    as_json: bool,
    width: int | None,
) -> None:
    """Settle processing confirmations in URL from chat-memory files: one SESSION_ID with
    --memory FILE, or --all sessions older than --older-than with --memory-dir DIR.

    Dry run by default: lists the processing records and what would happen. Never calls
    upstream. Run it only when no client is inside a resolution (after a crash).

    \b
    Examples:
      akchat-fsm reconcile sqlite:///sessions.db support-42 --memory memory.json
      akchat-fsm reconcile sqlite:///sessions.db support-42 --memory memory.json --apply
      akchat-fsm reconcile sqlite:///sessions.db --all --older-than 5m
      akchat-fsm reconcile sqlite:///sessions.db --all --older-than 5m --memory-dir memories --apply
      akchat-fsm reconcile sqlite:///s.db --all --older-than 0 --bridge host.mod:bridge_for --apply

    Exit status: 0 all settled, 1 a session failed, 2 usage, 3 work is left for a person or
    one more command (each printed with its exact next step).
    """
    if apply_ and dry_run:
        fail("--apply and --dry-run contradict each other: give one", EXIT_USAGE)
    if all_:
        if session_id is not None or memory_file is not None:
            fail("--all takes no SESSION_ID and no --memory (use --memory-dir)", EXIT_USAGE)
        if older_than is None:
            fail("--all needs --older-than AGE (e.g. --older-than 5m)", EXIT_USAGE)
        cli = Cli(url, older_than, bridge_spec, memory_dir, release_untouched)
        reconcile_all_command(cli, limit, apply_, as_json, width)
        return
    if session_id is None:
        fail("give a SESSION_ID, or --all (see 'akchat-fsm reconcile --help')", EXIT_USAGE)
    if memory_file is None:
        fail("Missing option '--memory' (a SESSION_ID is reconciled from a FILE)", EXIT_USAGE)
    if older_than is not None or memory_dir is not None or bridge_spec is not None:
        fail("--older-than, --memory-dir and --bridge go with --all", EXIT_USAGE)
    _one(url, session_id, memory_file, apply_, release_untouched, as_json, width)
