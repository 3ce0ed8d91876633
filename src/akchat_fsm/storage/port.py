"""The ``SessionStorage`` port: load, compare-and-set save, optional delete.

This is all a third-party adapter has to provide (docs/reference.md §2). ``save`` is atomic:

=================  =====================================================================
expected_cursor    behaviour
=================  =====================================================================
``None``           create only: succeeds only if nothing is stored for the session id
an ``int``         succeeds only if the stored cursor equals it
mismatch/exists    returns ``False`` (a definite conflict; nothing was written)
=================  =====================================================================

Errors are never conflicts: an adapter raises :class:`~akchat_fsm.errors.StorageUnavailable`
when it knows nothing was applied and :class:`~akchat_fsm.errors.OutcomeUnknown` when the
write may have applied (a timeout after sending, a dropped connection before the commit
acknowledgement). ``load`` may return a :class:`SessionSnapshot`, its wire ``dict``, its JSON
text (``str``/``bytes``) or ``None`` when nothing is stored; callers decode it.

The shipped adapters (memory, SQLite, PostgreSQL, Redis) go further: they validate the
session id (a SafeIdentifier) and the cursor rule (an update stores ``expected_cursor + 1``)
before any I/O and raise :class:`~akchat_fsm.errors.ConfigError` otherwise; ``load`` returns
the canonical JSON text exactly as saved; ``delete`` is provided; each is a (async) context
manager whose exit closes its connections. See ``docs/adapters.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, Self, runtime_checkable

from ..wire.session import SessionSnapshot
from ._cas import check_session_id

__all__ = [
    "AsyncAuditIndex",
    "AsyncDeletableSessionStorage",
    "AsyncManagedSessionStorage",
    "AsyncPendingIndex",
    "AsyncProcessingIndex",
    "AsyncRecordStorage",
    "AsyncSaveWithRecords",
    "AsyncSessionStorage",
    "AuditIndex",
    "AuditRef",
    "AuditRefPage",
    "CreatedRecords",
    "DeletableSessionStorage",
    "ManagedSessionStorage",
    "PendingApproval",
    "PendingIndex",
    "PendingOrder",
    "PendingPage",
    "ProcessingIndex",
    "ProcessingSession",
    "RecordStorage",
    "SaveWithRecords",
    "SessionStorage",
    "StoredRecord",
    "StoredValue",
    "check_session_id",
]

#: What ``load`` may return: the snapshot, its wire dict, its JSON text, or nothing.
StoredValue = SessionSnapshot | Mapping[str, Any] | str | bytes | None


@runtime_checkable
class SessionStorage(Protocol):
    """Synchronous compare-and-set storage of session envelopes."""

    def load(self, session_id: str) -> StoredValue: ...

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool: ...


@runtime_checkable
class AsyncSessionStorage(Protocol):
    """The asyncio twin of :class:`SessionStorage`, with the same semantics."""

    async def load(self, session_id: str) -> StoredValue: ...

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool: ...


@runtime_checkable
class DeletableSessionStorage(SessionStorage, Protocol):
    """A :class:`SessionStorage` that can also forget a session (the optional ``delete``)."""

    def delete(self, session_id: str) -> None: ...


@runtime_checkable
class AsyncDeletableSessionStorage(AsyncSessionStorage, Protocol):
    """The asyncio twin of :class:`DeletableSessionStorage`."""

    async def delete(self, session_id: str) -> None: ...


@runtime_checkable
class ManagedSessionStorage(DeletableSessionStorage, Protocol):
    """What every shipped sync adapter is: deletable, closable, a context manager."""

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class AsyncManagedSessionStorage(AsyncDeletableSessionStorage, Protocol):
    """What every shipped asyncio adapter is: deletable, ``aclose()``, an async context manager."""

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


# --------------------------------------------------------------------------- capabilities
#
# Optional: a third-party adapter may leave them out (``isinstance(storage, RecordStorage)``
# tells); every shipped adapter has both, sync and async, and the conformance kit checks them
# where present.

#: A record as stored: its version (1 after the create, ``+1`` per update) and its JSON text.
StoredRecord = tuple[int, str]


@runtime_checkable
class RecordStorage(Protocol):
    """Small JSON records kept beside a session's envelope, each under its own CAS.

    The envelope stays byte-compatible with the reference; state it has no field for (the
    tool-execution ledger, an agent run's saved state) lives here, keyed by
    ``(session_id, key)``. ``save_record`` follows the envelope's rule with a version in
    place of the cursor: ``expected_version=None`` creates (stored version 1) only if nothing
    is stored under the key; an int updates only if the stored version equals it, storing
    ``expected_version + 1``; otherwise ``False`` and nothing is written. ``processing=True``
    marks the record as holding work a crash may leave unsettled, for the processing index.
    ``delete(session_id)`` of the session also removes its records. Errors are the port's:
    ``StorageUnavailable`` (nothing applied) or ``OutcomeUnknown`` (may have applied).
    """

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


@runtime_checkable
class AsyncRecordStorage(Protocol):
    """The asyncio twin of :class:`RecordStorage`."""

    async def load_record(self, session_id: str, key: str) -> StoredRecord | None: ...

    async def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool: ...

    async def list_records(self, session_id: str, prefix: str = "") -> list[str]: ...

    async def delete_record(self, session_id: str, key: str) -> None: ...


#: What :meth:`SaveWithRecords.save_with_records` creates: ``(key, text)`` pairs.
CreatedRecords = Sequence[tuple[str, str]]


@runtime_checkable
class SaveWithRecords(Protocol):
    """An envelope save that also creates records, all or nothing (ADR-0141).

    ``save_with_records(snapshot, expected_cursor, records)`` is one atomic write: the
    envelope's compare-and-set exactly as ``save`` (same cursor rule, same processing and
    pending index updates) *and* the create-only record (``save_record(..., None)``, stored
    version 1, not processing) of every ``(key, text)`` in ``records`` (1 to 16 distinct keys
    of the session). It applies only if the stored cursor equals ``expected_cursor`` **and**
    no record exists under any of the keys; otherwise ``False`` and nothing at all is written:
    neither the envelope nor any record. A reader never sees one half without the other.
    Errors are the port's: ``StorageUnavailable`` (nothing applied) or ``OutcomeUnknown``
    (both halves or neither may have applied: re-reading the envelope tells which, since
    they applied together). Optional: a store that offers it must also be a
    :class:`RecordStorage`; the session's audited claim then writes its entry inside the
    claim (two durable writes per approve instead of three).
    """

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool: ...


@runtime_checkable
class AsyncSaveWithRecords(Protocol):
    """The asyncio twin of :class:`SaveWithRecords`."""

    async def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class ProcessingSession:
    """A session that holds unsettled work, and when it was last written (epoch ms)."""

    session_id: str
    last_write_ms: int


@runtime_checkable
class ProcessingIndex(Protocol):
    """Lists the sessions whose stored state holds processing work, without loading envelopes.

    A session is listed when its envelope holds a processing confirmation record
    (``approving``/``rejecting``/``expiring``) or one of its records was saved with
    ``processing=True``. The index is maintained inside the same atomic write as the state
    it describes (never a scan). ``written_before_ms`` keeps only sessions whose last write
    is older than that epoch-ms instant; results are oldest first, at most ``limit``.
    """

    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]: ...


@runtime_checkable
class AsyncProcessingIndex(Protocol):
    """The asyncio twin of :class:`ProcessingIndex`."""

    async def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]: ...


#: The two orders of :meth:`PendingIndex.list_pending`.
PendingOrder = Literal["expiry", "newest"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One confirmation waiting for a person's decision, as the pending index holds it."""

    session_id: str
    token: str
    tool_call_id: str
    action: str
    #: The binding's ``expiresAt`` (epoch ms).
    expires_at_ms: int
    #: The adapter's clock at the write that first made it pending; later writes keep it.
    pending_since_ms: int


@dataclass(frozen=True, slots=True)
class PendingPage:
    """One page of :meth:`PendingIndex.list_pending`."""

    items: tuple[PendingApproval, ...]
    #: Opaque keyset cursor: pass it as ``after`` for the next page; ``None`` when there is none.
    next_after: str | None


@runtime_checkable
class PendingIndex(Protocol):
    """Lists the confirmations waiting for a decision across sessions, without loading envelopes.

    A binding is listed iff its status is ``pending`` in the session's saved snapshot. The
    index is maintained by the same atomic write as the envelope (never a scan) and
    ``delete(session_id)`` removes the session's rows. Filters: ``action`` and ``session_id``
    (equality), ``expiring_before_ms`` (``expires_at_ms`` strictly below) and
    ``pending_before_ms`` (``pending_since_ms`` strictly below). ``order="expiry"`` sorts by
    ascending ``(expires_at_ms, session_id, tool_call_id)``, ``order="newest"`` by descending
    ``(pending_since_ms, session_id, tool_call_id)``. ``after`` is a page's ``next_after``
    (keyset pagination: stable under concurrent writes, one indexed query per page);
    ``limit`` is 1..1000; a page may hold fewer rows and still have a ``next_after`` (an
    adapter that bounds the work of one page), so a walk ends at ``next_after is None``. A bad
    argument (or an ``after`` of another order) is a
    :class:`~akchat_fsm.errors.ConfigError` before any I/O.

    ``find_token(token)`` is the id of the session holding ``token`` as a *pending* binding,
    or ``None`` (decided, processing, unknown); if several sessions do, the smallest id.
    """

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


@runtime_checkable
class AsyncPendingIndex(Protocol):
    """The asyncio twin of :class:`PendingIndex`."""

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
    ) -> PendingPage: ...

    async def find_token(self, token: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class AuditRef:
    """One audit entry as the audit index holds it: where it is, and when it was written."""

    session_id: str
    #: The record key (a decision's ``audit:<token>:<cursor>``, an operator's settle's
    #: ``audit-settle:<call>:<version>:<nonce>``); read the entry with ``load_record``.
    key: str
    #: The adapter's clock at the record's last write, its create for an entry (epoch ms).
    written_ms: int


@dataclass(frozen=True, slots=True)
class AuditRefPage:
    """One page of :meth:`AuditIndex.list_audit`."""

    items: tuple[AuditRef, ...]
    #: Opaque keyset cursor: pass it as ``after`` for the next page; ``None`` when there is none.
    next_after: str | None


@runtime_checkable
class AuditIndex(Protocol):
    """Lists the audit records of every session, oldest first, without loading envelopes.

    Every record whose key starts with ``audit:`` (a decision, ADR-0132) or ``audit-`` (another
    kind: ``audit-settle:``, an operator's settle, ADR-0136) is listed, at the instant of its
    last write (``written_ms``, the adapter's clock), by the same atomic write: an index entry
    exists iff the record does, until ``delete_record`` or ``delete(session_id)`` removes it. Audit
    entries are create-only, so that instant is their create's. Order: ascending
    ``(written_ms, session_id, key)``, ids and
    keys by code point. ``since_ms`` keeps entries with ``written_ms >= since_ms``;
    ``after`` is a page's ``next_after`` (keyset pagination: stable under concurrent writes,
    one indexed range read per page); ``limit`` is 1..1000. A bad argument is a
    :class:`~akchat_fsm.errors.ConfigError` before any I/O (ADR-0139).
    """

    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage: ...


@runtime_checkable
class AsyncAuditIndex(Protocol):
    """The asyncio twin of :class:`AuditIndex`."""

    async def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage: ...
