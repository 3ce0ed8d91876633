"""SQLite failure branches that no battery reaches: reads of a vanished table, a failed upgrade.

All real SQLite errors on a real file, through the adapter's public methods.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from storage_harness import snap

from akchat_fsm.errors import ConfigError, StorageUnavailable
from akchat_fsm.storage.sqlite import SQLiteStorage


def _side(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_reads_of_a_dropped_table_are_config_errors(tmp_path: Path, unique_id: str) -> None:
    # The table's shape is wrong, not the store's reachability: the same call fails again,
    # so it is never retryable (issue 27; PostgreSQL's 42P01 maps the same way).
    path = tmp_path / "dropped.db"
    with SQLiteStorage(path) as storage:
        assert storage.save(snap(unique_id, 1), None)
        assert storage.save_record(unique_id, "k", "{}", None)
        side = _side(path)
        side.execute("DROP TABLE akchat_sessions")
        side.execute("DROP TABLE akchat_sessions__records")
        side.close()
        with pytest.raises(ConfigError, match="no such table") as envelope:
            storage.load(unique_id)
        assert isinstance(envelope.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(ConfigError, match="no such table") as record:
            storage.load_record(unique_id, "k")
        assert isinstance(record.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(ConfigError, match="no such table"):
            storage.list_processing()
        with pytest.raises(ConfigError, match="no such table"):
            storage.save(snap(unique_id, 2), 1)


def test_an_upgrade_that_fails_midway_changes_nothing_and_is_retried(
    tmp_path: Path, unique_id: str
) -> None:
    # A 0.1.0 table, and a *table* squatting on the name of the processing index the upgrade
    # creates: the upgrade gets as far as that CREATE INDEX, fails, and must roll back the
    # columns it added and the records table it created.
    path = tmp_path / "old.db"
    side = _side(path)
    side.execute(
        "CREATE TABLE akchat_sessions (session_id TEXT PRIMARY KEY NOT NULL,"
        " cursor INTEGER NOT NULL, body TEXT NOT NULL)"
    )
    side.execute("CREATE TABLE akchat_sessions__records_processing (x INTEGER)")
    storage = SQLiteStorage(path)
    try:
        with pytest.raises(StorageUnavailable) as info:
            storage.load(unique_id)
        assert "already" in str(info.value.__cause__)
        assert storage.open_connections() == 0  # nothing half-open kept
        columns = {row[1] for row in side.execute("PRAGMA table_info(akchat_sessions)")}
        assert columns == {"session_id", "cursor", "body"}  # the ALTERs were rolled back
        tables = {row[0] for row in side.execute("SELECT name FROM sqlite_master")}
        assert "akchat_sessions__records" not in tables
        # The obstacle removed, the next call upgrades and works.
        side.execute("DROP TABLE akchat_sessions__records_processing")
        assert storage.load(unique_id) is None
        assert storage.save(snap(unique_id, 1), None)
    finally:
        storage.close()
        side.close()
