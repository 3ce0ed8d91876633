"""``akchat-fsm audit URL [SESSION]``: who decided each tool call (ADR-0132, ADR-0139).

Reads a session's audit entries (one per claim attempt, written before the claim) and marks
the one whose claim applied; without SESSION, every session's, oldest write first, page by
page through the store's audit index, the operators' settles (ADR-0136) among them.
Read-only: the store is opened read-only and never changed. ``--json`` prints JSON Lines, one
entry a line, for an export.
"""

from __future__ import annotations

import json

import click
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, StorageError
from ..session.audit import AuditEntry, AuditLogEntry, audit_log, audit_trail
from ..session.session import default_clock
from ..session.settle_audit import SettleAuditEntry
from ..storage.capabilities import has_audit_index, keeps_records
from ._common import (
    EXIT_USAGE,
    describe,
    fail,
    inert,
    inert_json,
    opened_storage,
    pinned_rows,
    print_renderable,
)
from ._envelope import _when
from ._settle_view import settle_lines, settle_section, settles_or_fail
from .reconcile_all import Duration

__all__ = ["audit", "audit_section"]

NO_RECORDS = (
    "this store ({kind}) keeps no audit trail: it has no records capability, so its "
    "decisions are not attributed to anyone (docs/confirmations.md)"
)
NO_INDEX = (
    "this store ({kind}) cannot list audit entries across sessions: its adapter lacks the "
    "AuditIndex capability (docs/adapters.md); name a SESSION to read one session's trail"
)
#: Index rows read per page of a cross-session walk.
PAGE = 500


def _table(entries: tuple[AuditEntry, ...], *, sessions: bool = False) -> Group:
    table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
    headers = ("TOKEN", "CURSOR", "INTENT", "WHO", "VIA", "AT", "DECISION", "ARGS")
    for header in ("SESSION", *headers) if sessions else headers:
        table.add_column(header, no_wrap=True)
    table.add_column("REASON")
    rows = [
        (
            *((inert(e.session_id),) if sessions else ()),
            inert(e.token),
            str(e.cursor),
            inert(e.intent),
            inert(e.principal) if e.principal is not None else "(not named)",
            inert(e.via),
            _when(e.at_ms),
            "applied" if e.decided else "not applied",
            inert(e.args_digest[: len("sha256:") + 12]),
            inert(e.reason) if e.reason is not None else "",
        )
        for e in entries
    ]
    if not rows:
        return Group(Text("No audit entries match."))
    decided = sum(e.decided for e in entries)
    summary = f"{len(rows)} entries; {decided} decision(s) applied, the others lost their race."
    return Group(pinned_rows(table, rows), Text(summary))


def audit_section(entries: tuple[AuditEntry, ...]) -> Group:
    """``inspect``'s section: the trail, with the command that exports it."""
    title = Text("audit trail (export: akchat-fsm audit URL SESSION --json)", style="bold")
    return Group(title, _table(entries))


@click.command("audit")
@click.argument("url")
@click.argument("session_id", metavar="[SESSION]", required=False)
@click.option("--token", default=None, help="Only this confirmation's entries.")
@click.option(
    "--since",
    type=Duration(),
    default=None,
    help="Only entries written within this age (1h). Without SESSION: as the store's clock "
    "stamped them.",
)
@click.option(
    "--now",
    "now_ms",
    type=click.IntRange(0),
    default=None,
    help="The reference time for --since, epoch ms (default: now).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines, one entry a line.")
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help="Output width in columns; tokens are never wrapped.",
)
def audit(
    url: str,
    session_id: str | None,
    token: str | None,
    since: int | None,
    now_ms: int | None,
    as_json: bool,
    width: int | None,
) -> None:
    """Show who decided each tool call of SESSION (without SESSION: of every session,
    oldest first): principal, from where, when, why, on which arguments, and which attempt's
    claim applied; with SESSION, then who settled each of its unknown executions, and which
    settle applied (JSON lines with "kind": "settle").

    \b
    Examples:
      akchat-fsm audit sqlite:///sessions.db chat-42
      akchat-fsm audit postgresql://db/app chat-42 --since 24h --json > chat-42.jsonl
      akchat-fsm audit postgresql://db/app --since 24h --json > decisions.jsonl
    """
    now = default_clock() if now_ms is None else now_ms
    since_ms = None if since is None else now - since
    if session_id is None and token is not None:
        fail("--token needs a SESSION (a token is one session's call)", EXIT_USAGE)
    with opened_storage(url, read_only=True) as storage:
        if not keeps_records(storage):
            fail(NO_RECORDS.format(kind=type(storage).__name__), EXIT_USAGE)
        if session_id is None:
            if not has_audit_index(storage):
                fail(NO_INDEX.format(kind=type(storage).__name__), EXIT_USAGE)
            _every_session(url, storage, since_ms, as_json, width)
            return
        try:
            entries = audit_trail(storage, session_id, token=token, since_ms=since_ms)
        except ConfigError as exc:
            fail(f"cannot read the audit trail: {describe(exc)}", EXIT_USAGE)
        except StorageError as exc:
            fail(f"cannot read the audit trail from {url!r}: {describe(exc)}", EXIT_USAGE)
        # Operators' settles of the session's calls (of this token's call with --token).
        calls = None if token is None else {e.tool_call_id for e in entries}
        settles = settles_or_fail(storage, session_id, url, since_ms=since_ms, tool_call_ids=calls)
    if as_json:
        _print_json(entries)
        for line in settle_lines(settles):
            click.echo(line)
    else:
        parts = [_table(entries)] if entries or not settles else []
        print_renderable(Group(*parts, *([settle_section(settles)] if settles else [])), width)


def _print_json(entries: tuple[AuditLogEntry, ...]) -> None:
    for entry in entries:
        click.echo(inert_json(json.dumps(entry.to_json(), ensure_ascii=False)))


def _every_session(
    url: str, storage: object, since_ms: int | None, as_json: bool, width: int | None
) -> None:
    """Walk the audit index page by page; JSON Lines are printed as each page arrives, the
    decisions' and the settles' (``"kind": "settle"``) in the index's order. The table shows
    the decisions, then the settles, each in that order."""
    shown: list[AuditLogEntry] = []
    after: str | None = None
    while True:
        try:
            page = audit_log(storage, since_ms=since_ms, after=after, limit=PAGE)
        except ConfigError as exc:
            fail(f"cannot list the audit entries: {describe(exc)}", EXIT_USAGE)
        except StorageError as exc:
            fail(f"cannot list the audit entries from {url!r}: {describe(exc)}", EXIT_USAGE)
        if as_json:
            _print_json(page.entries)
        else:
            shown += page.entries
        after = page.next_after
        if after is None:
            break
    if not as_json:
        decisions = tuple(e for e in shown if isinstance(e, AuditEntry))
        settles = tuple(e for e in shown if isinstance(e, SettleAuditEntry))
        parts = [_table(decisions, sessions=True)] if decisions or not settles else []
        if settles:
            parts.append(settle_section(settles, sessions=True))
        print_renderable(Group(*parts), width)
