"""Backends for the bridge tests: a record-capable storage per backend, sync and async.

``records_backend`` is parametrized over the adapters that have the ``RecordStorage``
capability. Every client a test opens is its own adapter instance (its own connection), as
separate processes' clients are; the memory backend shares one in-process store instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.integrations.ledger import ClaimRequest, args_digest, plan_execute
from akchat_fsm.session.effects import LoadRecord, RunBody, SaveRecord
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage


@dataclass
class RecordsBackend:
    name: str
    sync: Callable[[], Any]
    async_: Callable[[], Any]


def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    shared = MemoryStorage()
    return RecordsBackend("memory", lambda: shared, lambda: AsyncMemoryStorage(shared))


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage

    path = tmp_path / f"bridge-{uuid.uuid4().hex[:8]}.db"
    return RecordsBackend("sqlite", lambda: SQLiteStorage(path), lambda: AsyncSQLiteStorage(path))


BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], RecordsBackend]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}


def crash_inside_body(
    storage: Any,
    tool_call_id: str = "c1",
    *,
    session_id: str = "s-ledger",
    tool: str = "send",
    args: Any = None,
) -> None:
    """Step the real plan until the body would run, then abandon it (the claimant died)."""
    request = ClaimRequest(
        tool_call_id, tool, args_digest(args or {"to": "a@example.com"}), "dead", "nonce", 5
    )
    plan = plan_execute(session_id, request)
    effect = next(plan)
    while not isinstance(effect, RunBody):
        if isinstance(effect, LoadRecord):
            value: Any = storage.load_record(effect.session_id, effect.key)
        else:
            assert isinstance(effect, SaveRecord)
            value = storage.save_record(
                effect.session_id,
                effect.key,
                effect.text,
                effect.expected_version,
                processing=effect.processing,
            )
        effect = plan.send(value)
    plan.close()


class ForwardingStorage:
    """A sync storage that forwards every call to ``inner``; subclasses override the one call
    they break. Every method is spelled out: from Python 3.12 a runtime-checkable protocol
    does not see methods forwarded by ``__getattr__``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        return bool(self.inner.save_record(session_id, key, text, *args, **kw))

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        return bool(self.inner.save(snapshot, expected_cursor))

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def list_records(self, session_id: str, prefix: str = "") -> Any:
        return self.inner.list_records(session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)

    def list_processing(self, **kw: Any) -> Any:
        return self.inner.list_processing(**kw)
