"""Operators' settles in ``akchat-fsm audit`` and ``inspect`` (ADR-0136).

A settle entry is written before each settle's compare-and-set over a ledger entry; whether it
applied is read off the verdict nonces (``settle_trail``). The table here is shown after the
decisions' table (with a SESSION column when the listing is across sessions, ``audit URL``
without SESSION, whose settles come from the audit index, ADR-0139); ``--json`` prints one
line per entry with ``"kind": "settle"``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, StorageError
from ..integrations.ledger import SettleAuditEntry, settle_trail
from ._common import EXIT_USAGE, describe, fail, inert, inert_json, pinned_rows
from ._envelope import _when

__all__ = ["settle_lines", "settle_section", "settle_table", "settles_or_fail"]


def settles_or_fail(
    storage: Any,
    session_id: str,
    url: str,
    *,
    since_ms: int | None = None,
    tool_call_ids: Iterable[str] | None = None,
) -> tuple[SettleAuditEntry, ...]:
    """The session's settle entries (only these calls' with ``tool_call_ids``); a storage
    failure or a bad argument exits 2."""
    try:
        entries = settle_trail(storage, session_id, since_ms=since_ms)
    except ConfigError as exc:
        fail(f"cannot read the settles: {describe(exc)}", EXIT_USAGE)
    except StorageError as exc:
        fail(f"cannot read the settles of {session_id!r} from {url}: {describe(exc)}", EXIT_USAGE)
    if tool_call_ids is not None:
        calls = set(tool_call_ids)
        entries = tuple(e for e in entries if e.tool_call_id in calls)
    return entries


def settle_table(entries: tuple[SettleAuditEntry, ...], *, sessions: bool = False) -> Group:
    """The settles, one row each (``sessions``: with a SESSION column, across sessions)."""
    table = Table(box=box.SIMPLE_HEAD, expand=False, pad_edge=False)
    headers = ("TOOL CALL", "VERSION", "VERDICT", "WHO", "VIA", "AT", "SETTLED", "APPLIED", "ARGS")
    for header in ("SESSION", *headers) if sessions else headers:
        table.add_column(header, no_wrap=True)
    table.add_column("REASON")
    rows = [
        (
            *((inert(e.session_id),) if sessions else ()),
            inert(e.tool_call_id),
            str(e.version),
            "ran" if e.ran else "did not run",
            inert(e.principal) if e.principal is not None else "(not named)",
            inert(e.via),
            _when(e.at_ms),
            f"{inert(e.settled_owner)} (attempt {e.settled_attempt})",
            "applied" if e.decided else "not applied",
            inert(e.args_digest[:12]),
            inert(e.reason) if e.reason is not None else "",
        )
        for e in entries
    ]
    applied = sum(e.decided for e in entries)
    summary = f"{len(rows)} settle(s); {applied} applied, the others wrote nothing to the ledger."
    return Group(pinned_rows(table, rows), Text(summary))


def settle_section(entries: tuple[SettleAuditEntry, ...], *, sessions: bool = False) -> Group:
    """The operators' settles, titled (shown only when there are some)."""
    title = Text("operators' settles of unknown executions", style="bold")
    return Group(title, settle_table(entries, sessions=sessions))


def settle_lines(entries: tuple[SettleAuditEntry, ...]) -> list[str]:
    """One JSON line per entry, control characters escaped."""
    return [inert_json(json.dumps(e.to_json(), ensure_ascii=False)) for e in entries]
