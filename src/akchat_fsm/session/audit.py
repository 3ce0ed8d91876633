"""The audit trail: who decided each tool call, when, from where, why, on which arguments.

Every approve, reject and expire on a store with the records capability writes one entry
before its claim (ADR-0132; the mechanism is in :mod:`._audit`). ``audit_trail(storage,
session_id)`` reads them back, oldest cursor first per call, each marked ``decided`` when it
is the claim that applied. ``audit_log(storage, since_ms=...)`` pages through the entries of
every session, oldest write first, by the store's audit index (ADR-0139): the decisions' and
the operators' settles (ADR-0136), each a :data:`AuditLogEntry`. Read-only: neither needs a
definition nor writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from ..storage.capabilities import AUDIT_METHODS, MissingCapability, has_audit_index, keeps_records
from ..storage.checks import check_audit_query, check_session_id
from ..storage.port import AuditRefPage
from ..wire.decode import decode_session_snapshot
from ..wire.session import ConfirmationBinding
from ._audit import (
    AUDIT_PREFIX,
    SETTLE_AUDIT_PREFIX,
    AuditEntry,
    SettleAuditEntry,
    audit_key,
    check_decider,
    decided,
    read_entries,
    read_settle_entries,
)
from .drivers import Ports, run_async, run_sync
from .effects import ListAudit, ListRecords, Load, LoadRecord, Plan

__all__ = [
    "AUDIT_PREFIX",
    "AuditEntry",
    "AuditLogEntry",
    "AuditPage",
    "audit_key",
    "audit_log",
    "audit_log_async",
    "audit_trail",
    "audit_trail_async",
    "check_decider",
    "plan_audit_page",
    "plan_deciding_entry",
]


NO_RECORDS = (
    "This storage has no records capability, so it keeps no audit trail: decisions on it are "
    "not attributed to anyone."
)


def _plan(session_id: str, token: str | None, since_ms: int | None) -> Plan[tuple[AuditEntry, ...]]:
    prefix = AUDIT_PREFIX + (f"{token}:" if token is not None else "")
    keys = yield ListRecords(session_id, prefix)
    stored: list[tuple[str, object]] = []
    for key in keys:
        record = yield LoadRecord(session_id, key)
        if record is not None:
            stored.append((key, record[1]))
    bindings = yield from _bindings(session_id)
    entries = decided(read_entries(session_id, stored), bindings)
    return tuple(e for e in entries if since_ms is None or e.at_ms >= since_ms)


def _bindings(session_id: str) -> Plan[tuple[ConfirmationBinding, ...]]:
    """The session's confirmations as stored (none: deleted, or never saved)."""
    raw = yield Load(session_id)
    snapshot = decode_session_snapshot(raw[0] if isinstance(raw, tuple) else raw).snapshot
    return () if snapshot is None else snapshot.confirmations


#: One entry of :func:`audit_log`: a decision's (:class:`AuditEntry`: approve, reject, expire)
#: or an operator's settle of an unknown execution (:class:`SettleAuditEntry`, ADR-0136).
#: Tell them by type; their ``to_json()`` forms differ by ``"kind": "settle"`` (a decision's
#: has no ``kind``). Both carry ``session_id``, ``tool_call_id``, ``principal``, ``via``,
#: ``reason``, ``at_ms`` and ``decided`` (the decision, or the verdict, applied).
AuditLogEntry = AuditEntry | SettleAuditEntry


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of :func:`audit_log`: entries in the index's order, and the next page's cursor."""

    entries: tuple[AuditLogEntry, ...]
    #: Pass it as ``after`` for the next page; ``None`` when there is none. A page may hold
    #: fewer entries than ``limit`` (an entry deleted, or unreadable) and still have a next.
    next_after: str | None


def plan_audit_page(since_ms: int | None, after: str | None, limit: int) -> Plan[AuditPage]:
    """One page of the audit index, each entry read and marked ``decided`` as
    :func:`audit_trail` marks a decision and ``settle_trail`` a settle. Bounded by the page:
    per entry one record read; for decisions, per session one envelope read, per call one key
    listing and at most one more entry read (the highest cursor, which decides whether this
    entry's claim applied); for settles, per call one ledger read, one key listing and the
    reads of that call's later attempts (``plan_mark_settles``)."""
    # Here, not at the top: the ledger's module imports the session package.
    from ..integrations.ledger import plan_mark_settles

    page: AuditRefPage = yield ListAudit(since_ms, after, limit)
    found: dict[str, dict[str, str]] = {}
    for ref in page.items:
        record = yield LoadRecord(ref.session_id, ref.key)
        if record is not None:
            found.setdefault(ref.session_id, {})[ref.key] = record[1]
    marked: dict[tuple[str, str], AuditLogEntry] = {}
    for sid, stored in found.items():
        settles = [
            (key, got[0])
            for key, text in stored.items()
            if key.startswith(SETTLE_AUDIT_PREFIX)
            and (got := read_settle_entries(sid, [(key, text)]))
        ]
        if settles:
            judged_settles = yield from plan_mark_settles(sid, [entry for _, entry in settles])
            for (key, _), settle in zip(settles, judged_settles, strict=True):
                marked[(sid, key)] = settle
        texts = {key: text for key, text in stored.items() if key.startswith(AUDIT_PREFIX)}
        if not texts:
            continue
        parsed = {key: read_entries(sid, [(key, text)]) for key, text in texts.items()}
        mine = [(key, got[0]) for key, got in parsed.items() if got]
        # The highest cursor of each call decides; read it where it is not on this page.
        tops: list[AuditEntry] = []
        for token in sorted({entry.token for _, entry in mine}):
            keys = yield ListRecords(sid, f"{AUDIT_PREFIX}{token}:")
            top = max(keys, default=None)
            if top is not None and top not in texts:
                record = yield LoadRecord(sid, top)
                if record is not None:
                    tops += read_entries(sid, [(top, record[1])])
        bindings = yield from _bindings(sid)
        judged = decided([entry for _, entry in mine] + tops, bindings)
        for (key, _), entry in zip(mine, judged, strict=False):
            marked[(sid, key)] = entry
    entries = tuple(
        marked[(ref.session_id, ref.key)]
        for ref in page.items
        if (ref.session_id, ref.key) in marked
    )
    return AuditPage(entries, page.next_after)


def _log_plan(
    storage: Any, since_ms: int | None, after: str | None, limit: int
) -> tuple[Plan[AuditPage], Ports]:
    """The plan and its ports, the capability and every argument checked first."""
    if not has_audit_index(storage):
        missing = tuple(m for m in AUDIT_METHODS if not callable(getattr(storage, m, None)))
        raise MissingCapability("AuditIndex", missing, "An audit query across sessions", storage)
    if not keeps_records(storage):
        raise ConfigError(NO_RECORDS, hint="Use a shipped adapter, or one that keeps records.")
    check_audit_query(since_ms=since_ms, after=after, limit=limit)
    return plan_audit_page(since_ms, after, limit), Ports(storage)


def audit_log(
    storage: Any, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
) -> AuditPage:
    """One page of the audit entries of every session, oldest write first (ADR-0139).

    The decisions (:class:`AuditEntry`) and the operators' settles (``SettleAuditEntry``),
    in the index's order. ``since_ms``: only entries the store wrote at or after that epoch-ms
    instant (the adapter's clock at the write); ``after``: the previous page's ``next_after``;
    ``limit``: 1..1000 index rows a page. Each entry is marked ``decided`` as
    :func:`audit_trail` (a decision) or ``settle_trail`` (a settle) marks it.
    :class:`~akchat_fsm.storage.capabilities.MissingCapability` (a ``ConfigError``) for
    a storage without the ``AuditIndex`` capability, ``ConfigError`` for bad arguments, both
    before any read.
    """
    return run_sync(*_log_plan(storage, since_ms, after, limit))


async def audit_log_async(
    storage: Any, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
) -> AuditPage:
    """One page of the audit entries of every session, oldest write first (ADR-0139).

    The decisions (:class:`AuditEntry`) and the operators' settles (``SettleAuditEntry``),
    in the index's order. ``since_ms``: only entries the store wrote at or after that epoch-ms
    instant (the adapter's clock at the write); ``after``: the previous page's ``next_after``;
    ``limit``: 1..1000 index rows a page. Each entry is marked ``decided`` as
    :func:`audit_trail` (a decision) or ``settle_trail`` (a settle) marks it.
    :class:`~akchat_fsm.storage.capabilities.MissingCapability` (a ``ConfigError``) for
    a storage without the ``AuditIndex`` capability, ``ConfigError`` for bad arguments, both
    before any read.
    """
    return await run_async(*_log_plan(storage, since_ms, after, limit))


def plan_deciding_entry(session_id: str, binding: ConfirmationBinding) -> Plan[AuditEntry | None]:
    """The entry of the claim that decided ``binding`` (``None``: the call is still pending,
    or its deciding entry is missing or unreadable). Keys order by cursor (16 digits), and the
    claim that applied is at the highest one (:func:`~._audit.decided`), so only that entry is
    read. A bridge reads a rejection's reason here: the decider's own, never a rival's."""
    keys = yield ListRecords(session_id, f"{AUDIT_PREFIX}{binding.token}:")
    if not keys:
        return None
    record = yield LoadRecord(session_id, max(keys))
    if record is None:
        return None
    entries = decided(read_entries(session_id, [(max(keys), record[1])]), (binding,))
    return entries[0] if entries and entries[0].decided else None


def _audit_plan(
    storage: Any, session_id: object, token: object, since_ms: object
) -> tuple[Plan[tuple[AuditEntry, ...]], Ports]:
    """The plan and its ports, every argument checked first (nothing is read on a refusal)."""
    if not keeps_records(storage):
        raise ConfigError(NO_RECORDS, hint="Use a shipped adapter, or one that keeps records.")
    sid = check_session_id(session_id)
    if token is not None and not isinstance(token, str):
        raise ConfigError(f"token must be a str or None, got {type(token).__name__}.")
    if since_ms is not None and (isinstance(since_ms, bool) or not isinstance(since_ms, int)):
        raise ConfigError(f"since_ms must be an int (epoch ms) or None, got {since_ms!r}.")
    return _plan(sid, token, since_ms), Ports(storage)


def audit_trail(
    storage: Any, session_id: str, *, token: str | None = None, since_ms: int | None = None
) -> tuple[AuditEntry, ...]:
    """The session's audit entries (one call's with ``token``; from ``since_ms`` on).

    ``ConfigError`` for a storage without records (it keeps no trail: saying so beats an
    empty answer) or bad arguments, before any read.
    """
    return run_sync(*_audit_plan(storage, session_id, token, since_ms))


async def audit_trail_async(
    storage: Any, session_id: str, *, token: str | None = None, since_ms: int | None = None
) -> tuple[AuditEntry, ...]:
    """The session's audit entries (one call's with ``token``; from ``since_ms`` on).

    ``ConfigError`` for a storage without records (it keeps no trail: saying so beats an
    empty answer) or bad arguments, before any read.
    """
    return await run_async(*_audit_plan(storage, session_id, token, since_ms))
