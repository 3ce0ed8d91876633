"""In-memory adapter: the reference's test storage, made thread-safe.

It stores the canonical JSON text (an immutable ``str``), so no caller can reach stored
state through aliasing, and ``load`` returns exactly what ``save`` wrote. Nothing survives
the process; use it for tests and single-process demos.
"""

from __future__ import annotations

import threading

from ..wire.session import SessionSnapshot
from ._audit_index import (
    audit_admits,
    audit_indexed,
    audit_sort_key,
    check_audit_query,
    make_audit_page,
)
from ._cas import (
    PendingRow,
    cas_allows,
    check_limit,
    check_record_key,
    check_session_id,
    loaded_text,
    prepare_save,
    prepare_save_with_records,
    prepare_stored_record,
    record_prefix_matches_nothing,
)
from ._closing import AsyncClosing, Closing
from ._pending import admits, carry_since, check_pending_query, check_token, make_page, sort_key
from .port import (
    AuditRef,
    AuditRefPage,
    CreatedRecords,
    PendingApproval,
    PendingOrder,
    PendingPage,
    ProcessingSession,
    StoredRecord,
)

__all__ = ["AsyncMemoryStorage", "MemoryStorage"]


class MemoryStorage(Closing):
    """Thread-safe compare-and-set storage in a dict guarded by one lock.

    ``MemoryStorage()`` takes no arguments. The compare and the swap run under the same
    lock, so concurrent ``save`` calls from any number of threads have exactly one winner.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[int, str]] = {}
        # session id -> record key -> (version, text, processing)
        self._records: dict[str, dict[str, tuple[int, str, bool]]] = {}
        # The processing index, written under the same lock as the state it describes:
        # session id -> (envelope processing, records processing, last write ms).
        self._index: dict[str, tuple[bool, frozenset[str], int]] = {}
        # The pending index (ADR-0029), under the same lock: session id -> its pending rows.
        self._pending: dict[str, tuple[PendingApproval, ...]] = {}
        # The audit index (ADR-0139), under the same lock: session id -> audit key -> the
        # instant of the record's last write.
        self._audit: dict[str, dict[str, int]] = {}

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        key = check_session_id(session_id)
        with self._lock:
            row = self._rows.get(key)
        return None if row is None else loaded_text(key, row[1], row[0])

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        prepared = prepare_save(snapshot, expected_cursor)
        with self._lock:
            row = self._rows.get(prepared.session_id)
            if not cas_allows(None if row is None else row[0], prepared.expected):
                return False
            self._rows[prepared.session_id] = (prepared.cursor, prepared.text)
            _, busy, _ = self._index.get(prepared.session_id, (False, frozenset(), 0))
            self._index[prepared.session_id] = (prepared.processing, busy, prepared.written_ms)
            self._save_pending(prepared.session_id, prepared.pending, prepared.written_ms)
        return True

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records``, all or nothing (``SaveWithRecords``)."""
        prepared, created = prepare_save_with_records(snapshot, expected_cursor, records)
        sid = prepared.session_id
        with self._lock:
            row = self._rows.get(sid)
            if not cas_allows(None if row is None else row[0], prepared.expected):
                return False
            stored = self._records.get(sid, {})
            if any(r.key in stored for r in created):
                return False
            self._rows[sid] = (prepared.cursor, prepared.text)
            records_now = self._records.setdefault(sid, {})
            for r in created:
                records_now[r.key] = (r.version, r.text, False)
                if audit_indexed(r.key):
                    self._audit.setdefault(sid, {})[r.key] = r.written_ms
            _, busy, _ = self._index.get(sid, (False, frozenset(), 0))
            self._index[sid] = (prepared.processing, busy, prepared.written_ms)
            self._save_pending(sid, prepared.pending, prepared.written_ms)
        return True

    def _save_pending(self, sid: str, rows: tuple[PendingRow, ...], written_ms: int) -> None:
        since = {item.token: item.pending_since_ms for item in self._pending.get(sid, ())}
        if rows:
            self._pending[sid] = carry_since(sid, rows, since, written_ms)
        else:
            self._pending.pop(sid, None)

    def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records; a missing session is not an error."""
        key = check_session_id(session_id)
        with self._lock:
            self._rows.pop(key, None)
            self._records.pop(key, None)
            self._index.pop(key, None)
            self._pending.pop(key, None)
            self._audit.pop(key, None)

    # ------------------------------------------------------------------ records capability
    def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        sid, k = check_session_id(session_id), check_record_key(key)
        with self._lock:
            row = self._records.get(sid, {}).get(k)
        return None if row is None else (row[0], row[1])

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        p = prepare_stored_record(session_id, key, text, expected_version, processing)
        with self._lock:
            records = self._records.setdefault(p.session_id, {})
            row = records.get(p.key)
            if not cas_allows(None if row is None else row[0], p.expected):
                return False
            records[p.key] = (p.version, p.text, p.processing)
            if audit_indexed(p.key):
                self._audit.setdefault(p.session_id, {})[p.key] = p.written_ms
            envelope, busy, _ = self._index.get(p.session_id, (False, frozenset(), 0))
            busy = busy | {p.key} if p.processing else busy - {p.key}
            self._index[p.session_id] = (envelope, busy, p.written_ms)
        return True

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        sid = check_session_id(session_id)
        if record_prefix_matches_nothing(prefix):
            return []
        with self._lock:
            return sorted(k for k in self._records.get(sid, {}) if k.startswith(prefix))

    def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        sid, k = check_session_id(session_id), check_record_key(key)
        with self._lock:
            self._records.get(sid, {}).pop(k, None)
            self._audit.get(sid, {}).pop(k, None)
            if sid in self._index:
                envelope, busy, written = self._index[sid]
                self._index[sid] = (envelope, busy - {k}, written)

    # ------------------------------------------------------------------ processing index
    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        limit, written_before_ms = check_limit(limit, written_before_ms)
        with self._lock:
            found = [
                ProcessingSession(sid, written)
                for sid, (envelope, busy, written) in self._index.items()
                if (envelope or busy) and (written_before_ms is None or written < written_before_ms)
            ]
        found.sort(key=lambda row: (row.last_write_ms, row.session_id))
        return found[:limit]

    # ------------------------------------------------------------------ pending index
    def list_pending(
        self,
        *,
        action: str | None = None,
        session_id: str | None = None,
        expiring_before_ms: int | None = None,
        pending_before_ms: int | None = None,
        order: PendingOrder = "expiry",
        after: str | None = None,
        limit: int = 50,
    ) -> PendingPage:
        """One page of the pending bindings across sessions (see the port's ``PendingIndex``)."""
        query = check_pending_query(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        with self._lock:
            if query.session_id is not None:
                rows = list(self._pending.get(query.session_id, ()))
            else:
                rows = [item for items in self._pending.values() for item in items]
        found = [item for item in rows if admits(query, item)]
        found.sort(key=lambda item: sort_key(item, query.order), reverse=query.order == "newest")
        return make_page(query, found[: query.limit + 1])

    def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        wanted = check_token(token)
        with self._lock:
            found = [
                sid for sid, items in self._pending.items() if any(i.token == wanted for i in items)
            ]
        return min(found, default=None)

    # ------------------------------------------------------------------ audit index
    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query = check_audit_query(since_ms=since_ms, after=after, limit=limit)
        with self._lock:
            rows = [
                AuditRef(sid, key, ms)
                for sid, keys in self._audit.items()
                for key, ms in keys.items()
            ]
        found = sorted((r for r in rows if audit_admits(query, r)), key=audit_sort_key)
        return make_audit_page(query, found[: query.limit + 1])

    def open_connections(self) -> int:
        """Always 0: nothing to leak (the leak-check capability of the conformance kit)."""
        return 0

    def close(self) -> None:
        """Nothing to release; the store stays usable (one store may back both flavours)."""


class AsyncMemoryStorage(AsyncClosing):
    """The asyncio twin: delegates to a :class:`MemoryStorage` without awaiting inside.

    ``AsyncMemoryStorage(inner=None)``; pass ``inner`` to share one store between sync and
    async code. No ``await`` happens between the compare and the swap, and the lock is held
    for a dict lookup only, so the event loop never waits on it for long.
    """

    def __init__(self, inner: MemoryStorage | None = None) -> None:
        self.sync = inner if inner is not None else MemoryStorage()

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        return self.sync.load(session_id)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        return self.sync.save(snapshot, expected_cursor)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records; a missing session is not an error."""
        self.sync.delete(session_id)

    async def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records``, all or nothing (``SaveWithRecords``)."""
        return self.sync.save_with_records(snapshot, expected_cursor, records)

    async def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        return self.sync.load_record(session_id, key)

    async def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        return self.sync.save_record(session_id, key, text, expected_version, processing=processing)

    async def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        return self.sync.list_records(session_id, prefix)

    async def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        self.sync.delete_record(session_id, key)

    async def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        return self.sync.list_processing(written_before_ms=written_before_ms, limit=limit)

    async def list_pending(
        self,
        *,
        action: str | None = None,
        session_id: str | None = None,
        expiring_before_ms: int | None = None,
        pending_before_ms: int | None = None,
        order: PendingOrder = "expiry",
        after: str | None = None,
        limit: int = 50,
    ) -> PendingPage:
        """One page of the pending bindings across sessions (see the port's ``PendingIndex``)."""
        return self.sync.list_pending(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )

    async def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        return self.sync.find_token(token)

    async def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        return self.sync.list_audit(since_ms=since_ms, after=after, limit=limit)

    def open_connections(self) -> int:
        """Always 0: nothing to leak (the leak-check capability of the conformance kit)."""
        return 0

    async def aclose(self) -> None:
        """Nothing to release; the store stays usable (one store may back both flavours)."""
