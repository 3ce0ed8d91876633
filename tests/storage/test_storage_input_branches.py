"""Input branches of the shared CAS validation, the lazy adapter names, URLs and ``async with``.

Every refusal is a ``ConfigError`` raised before any I/O (a caller bug is never a storage
error), checked through the real SQLite adapter so the shared path is the one adapters use.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from storage_harness import snap

import akchat_fsm.storage as storage_pkg
from akchat_fsm.errors import ConfigError, StorageUnavailable
from akchat_fsm.storage.checks import MAX_RECORD_CHARS
from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage
from akchat_fsm.storage.url import open_storage


class _Duck:
    """A snapshot-shaped object that is not a ``SessionSnapshot``."""

    def __init__(self, session_id: str, to_json: Any = None, to_wire: Any = None) -> None:
        self.session_id, self.cursor, self.confirmations = session_id, 1, ()
        if to_json is not None:
            self.to_json = to_json
        if to_wire is not None:
            self.to_wire = to_wire


def test_snapshot_text_takes_bytes_from_to_json(tmp_path: Path, unique_id: str) -> None:
    text = snap(unique_id, 1).to_json()
    with SQLiteStorage(tmp_path / "a.db") as storage:
        assert storage.save(_Duck(unique_id, to_json=lambda: text.encode()), None)  # type: ignore[arg-type]
        assert storage.load(unique_id) == text


def test_a_save_without_a_snapshot_is_a_config_error(tmp_path: Path, unique_id: str) -> None:
    with SQLiteStorage(tmp_path / "a.db") as storage:
        with pytest.raises(ConfigError, match="needs a SessionSnapshot"):
            storage.save(_Duck(unique_id), None)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="not JSON-serializable"):
            storage.save(_Duck(unique_id, to_wire=lambda: {"x": float("nan")}), None)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="not JSON-serializable"):
            storage.save(_Duck(unique_id, to_wire=lambda: {"x": object()}), None)  # type: ignore[arg-type]
        assert storage.load(unique_id) is None


def test_record_and_index_arguments_are_checked_before_io(tmp_path: Path, unique_id: str) -> None:
    with SQLiteStorage(tmp_path / "a.db") as storage:
        with pytest.raises(ConfigError, match="processing must be a bool"):
            storage.save_record(unique_id, "k", "{}", None, processing=1)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="at most"):
            storage.save_record(unique_id, "k", "x" * (MAX_RECORD_CHARS + 1), None)
        with pytest.raises(ConfigError, match="prefix"):
            storage.list_records(unique_id, prefix=3)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="written_before_ms"):
            storage.list_processing(written_before_ms="soon")  # type: ignore[arg-type]
        assert storage.load_record(unique_id, "k") is None


def test_server_adapters_are_imported_lazily_by_name() -> None:
    assert storage_pkg.PostgresStorage.__name__ == "PostgresStorage"
    assert storage_pkg.AsyncRedisStorage.__name__ == "AsyncRedisStorage"
    with pytest.raises(AttributeError, match="NoSuchStorage"):
        storage_pkg.NoSuchStorage  # noqa: B018


def test_a_malformed_query_string_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Bad query string"):
        open_storage(f"sqlite:///{tmp_path / 'a.db'}?busy_timeout")


def test_async_with_closes_the_async_adapter(tmp_path: Path, unique_id: str) -> None:
    async def scenario() -> AsyncSQLiteStorage:
        async with AsyncSQLiteStorage(tmp_path / "a.db") as storage:
            assert await storage.save(snap(unique_id, 1), None)
        return storage

    storage = asyncio.run(scenario())
    with pytest.raises(StorageUnavailable, match="closed"):
        asyncio.run(storage.load(unique_id))
