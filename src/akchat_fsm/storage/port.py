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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from ..wire.session import SessionSnapshot

__all__ = ["AsyncSessionStorage", "SessionStorage", "StoredValue"]

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
