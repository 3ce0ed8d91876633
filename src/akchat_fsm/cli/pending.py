"""``akchat-fsm pending URL``: the confirmations waiting for a person, across sessions.

Reads the store's pending index (:class:`~akchat_fsm.storage.port.PendingIndex`, ADR-0029),
one keyset page at a time, without loading any envelope; the store is opened read-only. Each
row is one pasteable line's worth of values (session, token, tool call, action, expiry, age),
and the footer prints the exact command for the next page. ``--json`` gives the same page as
one document (``items``, ``nextAfter``, ``next``).
"""

from __future__ import annotations

import json
import shlex
from typing import Any, cast

import click
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, StorageError
from ..session.session import default_clock
from ..storage.capabilities import has_pending_index
from ..storage.port import PendingApproval, PendingIndex, PendingPage
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
from .reconcile_all import Duration

__all__ = ["pending"]

NO_PENDING_INDEX = (
    "this store ({kind}) has no pending index; the shipped adapters have one, a third-party "
    "adapter needs the PendingIndex capability (docs/adapters.md)"
)


def _span(ms: int) -> str:
    """A non-negative span as its two largest units: ``4m 10s``, ``2h 5m``, ``250ms``."""
    if ms < 1_000:
        return f"{ms}ms"
    seconds = ms // 1_000
    parts = [(seconds // 86_400, "d"), (seconds // 3_600 % 24, "h"), (seconds // 60 % 60, "m")]
    parts.append((seconds % 60, "s"))
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return " ".join(shown) or "0s"


def _expires(item: PendingApproval, now_ms: int) -> str:
    left = item.expires_at_ms - now_ms
    return f"in {_span(left)}" if left > 0 else f"expired {_span(-left)} ago"


def _as_json(item: PendingApproval, now_ms: int) -> dict[str, Any]:
    return {
        "sessionId": item.session_id,
        "token": item.token,
        "toolCallId": item.tool_call_id,
        "action": item.action,
        "expiresAtMs": item.expires_at_ms,
        "pendingSinceMs": item.pending_since_ms,
        "expired": item.expires_at_ms <= now_ms,
    }


def _next_command(url: str, options: dict[str, object], page: PendingPage) -> str | None:
    """The command that prints the next page: these options, with ``--after`` the new cursor."""
    if page.next_after is None:
        return None
    argv = ["akchat-fsm", "pending", url]
    for name, value in options.items():
        if value is not None:
            argv += [name, str(value)]
    return shlex.join([*argv, "--after", page.next_after])


def _table(page: PendingPage, now_ms: int, next_command: str | None) -> Group:
    table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
    for header in ("SESSION", "TOKEN", "TOOL CALL", "ACTION"):
        table.add_column(header, no_wrap=True)
    table.add_column("EXPIRES", no_wrap=True)
    table.add_column("PENDING FOR", no_wrap=True)
    rows = [
        (
            inert(item.session_id),
            inert(item.token),
            inert(item.tool_call_id),
            inert(item.action),
            _expires(item, now_ms),
            _span(max(0, now_ms - item.pending_since_ms)),
        )
        for item in page.items
    ]
    count = len(page.items)
    parts: list[Any] = []
    if count:
        parts.append(pinned_rows(table, rows))
        soonest = min(item.expires_at_ms for item in page.items)
        parts.append(Text(f"{count} pending on this page; the soonest expiry is {_when(soonest)}."))
    else:
        parts.append(Text("No pending approvals match."))
    if next_command is not None:
        # Pinned like every copied line: the terminal folds it, rich never wraps or cuts it.
        lines = Table(box=None, show_header=False, pad_edge=False, expand=False)
        lines.add_column("line", no_wrap=True, overflow="ignore")
        parts.append(pinned_rows(lines, [("next page:",), (f"  {inert(next_command)}",)]))
    return Group(*parts)


@click.command("pending")
@click.argument("url")
@click.option("--action", default=None, help="Only this action (the tool's name).")
@click.option("--session", "session_id", default=None, help="Only this session.")
@click.option(
    "--expiring-within",
    type=Duration(),
    default=None,
    help="Only approvals that expire within this age from now (e.g. 10m).",
)
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="Only approvals pending for longer than this age (e.g. 1h).",
)
@click.option(
    "--order",
    type=click.Choice(["expiry", "newest"]),
    default="expiry",
    show_default=True,
    help="Soonest to expire first, or most recently pending first.",
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="Rows a page."
)
@click.option("--after", default=None, help="The cursor a previous page printed (next page).")
@click.option(
    "--now",
    "now_ms",
    type=click.IntRange(0),
    default=None,
    help="The reference time for ages and --expiring-within, epoch ms (default: now).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the page as one JSON document.")
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help="Output width in columns; ids and tokens are never wrapped.",
)
def pending(
    url: str,
    action: str | None,
    session_id: str | None,
    expiring_within: int | None,
    older_than: int | None,
    order: str,
    limit: int,
    after: str | None,
    now_ms: int | None,
    as_json: bool,
    width: int | None,
) -> None:
    """List the approvals waiting for a person, across every session of a store.

    One page at a time (--limit rows, --after the printed cursor), soonest expiry first or
    newest first, filtered by action, session, expiry and age. Read-only: the store is never
    created or changed. An expired approval stays listed until something expires it (a sweep
    or a decision); it is flagged.

    \b
    Examples:
      akchat-fsm pending sqlite:///sessions.db
      akchat-fsm pending sqlite:///sessions.db --action send_email --expiring-within 10m
      akchat-fsm pending postgresql://db/app --order newest --json
    """
    now = default_clock() if now_ms is None else now_ms
    with opened_storage(url, read_only=True) as storage:
        if not has_pending_index(storage):
            fail(NO_PENDING_INDEX.format(kind=type(storage).__name__), EXIT_USAGE)
        index = cast(PendingIndex, storage)  # checked just above; the CLI's adapters are sync
        try:
            page = index.list_pending(
                action=action,
                session_id=session_id,
                expiring_before_ms=None if expiring_within is None else now + expiring_within,
                pending_before_ms=None if older_than is None else now - older_than,
                order=order,  # type: ignore[arg-type]  # click.Choice checked it
                after=after,
                limit=limit,
            )
        except (ConfigError, StorageError) as exc:  # a bad cursor; a store that stopped answering
            fail(f"cannot list pending approvals in {url!r}: {describe(exc)}", EXIT_USAGE)
    options: dict[str, object] = {
        "--action": action,
        "--session": session_id,
        "--expiring-within": None if expiring_within is None else f"{expiring_within}ms",
        "--older-than": None if older_than is None else f"{older_than}ms",
        "--order": order,
        "--limit": limit,
        # The same reference time when the filters depend on it, so the next page continues
        # the same selection; otherwise the next page's ages are read at its own time.
        "--now": now
        if now_ms is not None or expiring_within is not None or older_than is not None
        else None,
    }
    next_command = _next_command(url, options, page)
    if as_json:
        document = {
            "nowMs": now,
            "order": order,
            "items": [_as_json(item, now) for item in page.items],
            "nextAfter": page.next_after,
            "next": next_command,
        }
        click.echo(inert_json(json.dumps(document, ensure_ascii=False)))
    else:
        print_renderable(_table(page, now, next_command), width)
