"""An asyncio twin for a blocking adapter: each call runs the sync adapter in a worker thread.

No logic is copied: the async class only changes *where* the sync call runs. Cancelling the
awaiting task does not stop a call already running in its thread, so a ``save`` cancelled
mid-flight may still apply: treat it like :class:`~akchat_fsm.errors.OutcomeUnknown`.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Generic, Protocol, TypeVar

from ..wire.session import SessionSnapshot
from ._closing import AsyncClosing
from .port import (
    AuditRefPage,
    CreatedRecords,
    PendingOrder,
    PendingPage,
    ProcessingSession,
    StoredRecord,
)

__all__ = ["ThreadedAsyncStorage"]


class _Blocking(Protocol):
    def load(self, session_id: str) -> str | None: ...

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool: ...

    def delete(self, session_id: str) -> None: ...

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool: ...

    def load_record(self, session_id: str, key: str) -> StoredRecord | None: ...

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool: ...

    def list_records(self, session_id: str, prefix: str = "") -> list[str]: ...

    def delete_record(self, session_id: str, key: str) -> None: ...

    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]: ...

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
    ) -> PendingPage: ...

    def find_token(self, token: str) -> str | None: ...

    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage: ...

    def close(self) -> None: ...

    def open_connections(self) -> int: ...


S = TypeVar("S", bound=_Blocking)


class ThreadedAsyncStorage(AsyncClosing, Generic[S]):
    """Runs every call of the wrapped blocking adapter ``sync`` via ``asyncio.to_thread``."""

    def __init__(self, sync: S) -> None:
        self.sync = sync

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        return await asyncio.to_thread(self.sync.load, session_id)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        return await asyncio.to_thread(self.sync.save, snapshot, expected_cursor)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records (one transaction); a missing one is no error."""
        await asyncio.to_thread(self.sync.delete, session_id)

    async def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one transaction, all or nothing
        (``SaveWithRecords``)."""
        return await asyncio.to_thread(
            self.sync.save_with_records, snapshot, expected_cursor, records
        )

    async def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        return await asyncio.to_thread(self.sync.load_record, session_id, key)

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
        return await asyncio.to_thread(
            functools.partial(
                self.sync.save_record,
                session_id,
                key,
                text,
                expected_version,
                processing=processing,
            )
        )

    async def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        return await asyncio.to_thread(self.sync.list_records, session_id, prefix)

    async def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        await asyncio.to_thread(self.sync.delete_record, session_id, key)

    async def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        return await asyncio.to_thread(
            functools.partial(
                self.sync.list_processing, written_before_ms=written_before_ms, limit=limit
            )
        )

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
        return await asyncio.to_thread(
            functools.partial(
                self.sync.list_pending,
                action=action,
                session_id=session_id,
                expiring_before_ms=expiring_before_ms,
                pending_before_ms=pending_before_ms,
                order=order,
                after=after,
                limit=limit,
            )
        )

    async def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        return await asyncio.to_thread(self.sync.find_token, token)

    async def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        return await asyncio.to_thread(
            functools.partial(self.sync.list_audit, since_ms=since_ms, after=after, limit=limit)
        )

    def open_connections(self) -> int:
        """1 while a connection is open, else 0 (the kit's leak check)."""
        return self.sync.open_connections()

    async def aclose(self) -> None:
        """Close the connection (after a call in flight; no transaction outlives a call)."""
        await asyncio.to_thread(self.sync.close)
