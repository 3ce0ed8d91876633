"""``akchat-fsm inspect``: decode, validate and show one session envelope.

Two forms: ``inspect URL SESSION_ID`` reads what a store holds; ``inspect FILE`` (``-`` for
stdin) reads a JSON document. Invalid envelopes exit 1 with the reference's diagnostic.
From a store with the records capability, the session's agent runs and tool-execution ledger
follow the envelope (``--ledger``: only those); an execution whose outcome is unknown is
highlighted with how to settle it. ``--json`` keeps the envelope's wire JSON byte-exact, so
the records have their own JSON form (``--ledger --json``).
"""

from __future__ import annotations

from typing import Any

import click
from rich.console import Group

from ..errors import ConfigError, StorageError
from ..integrations.ledger import SettleAuditEntry
from ..integrations.records import BridgeRecords, read_bridge_records
from ..session.audit import AuditEntry, audit_trail
from ._common import (
    DEFAULT_WIDTH,
    EXIT_INVALID,
    EXIT_USAGE,
    describe,
    fail,
    opened_storage,
    print_renderable,
    read_source,
)
from ._envelope import Decoded, decode_or_fail, load_or_fail, render_snapshot, wire_json
from ._ledger_view import records_json, render_records
from ._settle_view import settle_section, settles_or_fail
from .audit import audit_section

__all__ = ["inspect"]


def _trail_or_fail(storage: Any, session_id: str, url: str) -> tuple[AuditEntry, ...]:
    """Who decided each call (ADR-0132); a storage failure exits 2."""
    try:
        return audit_trail(storage, session_id)
    except StorageError as exc:
        fail(
            f"cannot read the audit trail of {session_id!r} from {url}: {describe(exc)}", EXIT_USAGE
        )


def _records_or_fail(storage: Any, session_id: str, url: str) -> BridgeRecords | None:
    """The session's bridge records; a storage failure exits 2, an invalid record exits 1."""
    try:
        return read_bridge_records(storage, session_id)
    except StorageError as exc:
        fail(f"cannot read the records of {session_id!r} from {url}: {describe(exc)}", EXIT_USAGE)
    except ConfigError as exc:
        fail(f"session {session_id!r} has an invalid record: {describe(exc)}", EXIT_INVALID)


@click.command("inspect")
@click.argument("source", metavar="URL SESSION_ID | FILE")
@click.argument("session_id", required=False, metavar="")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the canonical wire JSON instead (control characters escaped).",
)
@click.option(
    "--ledger",
    "ledger_only",
    is_flag=True,
    help="URL SESSION_ID only: show just the session's agent runs and tool-execution ledger "
    "(with --json: their JSON).",
)
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help=f"Output width in columns (default: the terminal's, {DEFAULT_WIDTH} when not a TTY); "
    "rows whose tokens or ids need more are printed wider, never wrapped.",
)
def inspect(
    source: str, session_id: str | None, as_json: bool, ledger_only: bool, width: int | None
) -> None:
    """Show a session envelope: from a store (URL SESSION_ID) or a FILE (- for stdin).

    Confirmations are grouped by status; the turn lease, terminal turns, conversation state,
    decision count, cursor and updatedAt are shown, and a v0 input is flagged as migrated.
    From a store that keeps records, the session's agent runs and tool-execution ledger follow,
    executions whose outcome is unknown highlighted (--ledger: only those), then the audit
    trail: who decided each call, and who settled each unknown execution (akchat-fsm audit
    exports both).
    Read-only: a store that does not exist is reported, never created. A FILE is read up to
    64 MiB.

    \b
    Examples:
      akchat-fsm inspect sqlite:///sessions.db support-42
      akchat-fsm inspect snapshot.json --json
      akchat-fsm inspect sqlite:///sessions.db support-42 --ledger --json
    """
    records: BridgeRecords | None = None
    trail: tuple[AuditEntry, ...] = ()
    settles: tuple[SettleAuditEntry, ...] = ()
    if session_id is None:
        if "://" in source:
            fail("a storage URL needs a SESSION_ID: inspect URL SESSION_ID", EXIT_USAGE)
        if ledger_only:
            fail("--ledger reads a store: inspect URL SESSION_ID --ledger", EXIT_USAGE)
        decoded: Decoded = decode_or_fail(read_source(source), source)
    else:
        with opened_storage(source, read_only=True) as storage:
            decoded = load_or_fail(storage, session_id, source)
            records = _records_or_fail(storage, session_id, source)
            if records is not None and not ledger_only and not as_json:
                trail = _trail_or_fail(storage, session_id, source)
                settles = settles_or_fail(storage, session_id, source)
    if ledger_only:
        if as_json:
            click.echo(records_json(records, source, session_id))
        else:
            parts = render_records(records, source, session_id)
            print_renderable(Group(*parts) if parts else "No agent runs or ledger entries.", width)
    elif as_json:
        click.echo(wire_json(decoded.snapshot))
    else:
        parts = render_records(records, source, session_id)
        if trail:
            parts.append(audit_section(trail))
        if settles:
            parts.append(settle_section(settles))
        print_renderable(Group(render_snapshot(decoded), *parts), width)
