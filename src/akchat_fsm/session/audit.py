"""The audit trail: who decided each tool call, when, from where, why, on which arguments.

Every approve, reject and expire on a store with the records capability writes one entry
before its claim (ADR-0132; the mechanism is in :mod:`._audit`). ``audit_trail(storage,
session_id)`` reads them back, oldest cursor first per call, each marked ``decided`` when it
is the claim that applied. Read-only: it needs no definition and writes nothing.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..storage.capabilities import keeps_records
from ..storage.checks import check_session_id
from ..wire.decode import decode_session_snapshot
from ..wire.session import ConfirmationBinding
from ._audit import AUDIT_PREFIX, AuditEntry, audit_key, check_decider, decided, read_entries
from .drivers import Ports, run_async, run_sync
from .effects import ListRecords, Load, LoadRecord, Plan

__all__ = [
    "AUDIT_PREFIX",
    "AuditEntry",
    "audit_key",
    "audit_trail",
    "audit_trail_async",
    "check_decider",
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
    raw = yield Load(session_id)
    snapshot = decode_session_snapshot(raw[0] if isinstance(raw, tuple) else raw).snapshot
    bindings = () if snapshot is None else snapshot.confirmations
    entries = decided(read_entries(session_id, stored), bindings)
    return tuple(e for e in entries if since_ms is None or e.at_ms >= since_ms)


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
