"""Session storage: the compare-and-set port and the shipped adapters.

``MemoryStorage`` and ``SQLiteStorage`` (stdlib) import eagerly; ``PostgresStorage`` needs
the ``postgres`` extra (psycopg 3), ``RedisStorage`` the ``redis`` extra (redis-py) and
``MySQLStorage`` the ``mysql`` extra (PyMySQL), so they import on first access.
``open_storage(url)`` picks one from a URL.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._audit_index import AUDIT_KEY_PREFIX, AUDIT_KEY_PREFIXES
from .capabilities import MissingCapability
from .memory import AsyncMemoryStorage, MemoryStorage
from .port import (
    AsyncAuditIndex,
    AsyncDeletableSessionStorage,
    AsyncManagedSessionStorage,
    AsyncPendingIndex,
    AsyncProcessingIndex,
    AsyncRecordStorage,
    AsyncSaveWithRecords,
    AsyncSessionStorage,
    AuditIndex,
    AuditRef,
    AuditRefPage,
    DeletableSessionStorage,
    ManagedSessionStorage,
    PendingApproval,
    PendingIndex,
    PendingPage,
    ProcessingIndex,
    ProcessingSession,
    RecordStorage,
    SaveWithRecords,
    SessionStorage,
    StoredRecord,
    StoredValue,
)
from .sqlite import AsyncSQLiteStorage, SQLiteStorage
from .url import open_async_storage, open_storage

if TYPE_CHECKING:
    from .mysql import AsyncMySQLStorage, MySQLStorage
    from .postgres import AsyncPostgresStorage, PostgresStorage
    from .redis import AsyncRedisStorage, RedisStorage

__all__ = [
    "AUDIT_KEY_PREFIX",
    "AUDIT_KEY_PREFIXES",
    "AsyncAuditIndex",
    "AsyncDeletableSessionStorage",
    "AsyncManagedSessionStorage",
    "AsyncMemoryStorage",
    "AsyncMySQLStorage",
    "AsyncPendingIndex",
    "AsyncPostgresStorage",
    "AsyncProcessingIndex",
    "AsyncRecordStorage",
    "AsyncRedisStorage",
    "AsyncSQLiteStorage",
    "AsyncSaveWithRecords",
    "AsyncSessionStorage",
    "AuditIndex",
    "AuditRef",
    "AuditRefPage",
    "DeletableSessionStorage",
    "ManagedSessionStorage",
    "MemoryStorage",
    "MissingCapability",
    "MySQLStorage",
    "PendingApproval",
    "PendingIndex",
    "PendingPage",
    "PostgresStorage",
    "ProcessingIndex",
    "ProcessingSession",
    "RecordStorage",
    "RedisStorage",
    "SQLiteStorage",
    "SaveWithRecords",
    "SessionStorage",
    "StoredRecord",
    "StoredValue",
    "open_async_storage",
    "open_storage",
]

_LAZY = {
    "PostgresStorage": ".postgres",
    "AsyncPostgresStorage": ".postgres",
    "RedisStorage": ".redis",
    "AsyncRedisStorage": ".redis",
    "MySQLStorage": ".mysql",
    "AsyncMySQLStorage": ".mysql",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module, __name__), name)
