"""The ``SessionStorage`` port: load, compare-and-set save, optional delete.

This is all a third-party adapter has to provide (REFERENCE §2). ``save`` is atomic:

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

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from ..wire.session import SessionSnapshot
from ._cas import check_session_id

__all__ = [
    "AsyncDeletableSessionStorage",
    "AsyncManagedSessionStorage",
    "AsyncSessionStorage",
    "DeletableSessionStorage",
    "ManagedSessionStorage",
    "SessionStorage",
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
