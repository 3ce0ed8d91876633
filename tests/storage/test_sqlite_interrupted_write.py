"""A write interrupted by a ``BaseException`` (Ctrl-C, a cancelled thread) never keeps the lock.

``save`` runs inside ``BEGIN IMMEDIATE``, which holds SQLite's write lock for the whole file. If
an interruption that is not an ``sqlite3.Error`` escaped between ``BEGIN`` and ``COMMIT`` with
the transaction left open, every other writer on that file would wait out its busy timeout and
fail until this process closed the connection. The adapter must roll back and re-raise.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from storage_harness import snap

from akchat_fsm.storage.sqlite import SQLiteStorage


class _InterruptedOnWrite:
    """The adapter's real connection, except that its next data write is interrupted."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql.lstrip().upper().startswith(("UPDATE", "INSERT")):
            raise KeyboardInterrupt
        return self.conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_an_interrupted_save_rolls_back_and_leaves_the_file_writable(
    tmp_path: Path, unique_id: str
) -> None:
    path = tmp_path / "interrupted.db"
    with SQLiteStorage(path) as mine, SQLiteStorage(path, busy_timeout=0.2) as other:
        assert mine.save(snap(unique_id, 1), None)
        real = mine._connection()
        mine._conn = _InterruptedOnWrite(real)  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            mine.save(snap(unique_id, 2, note="interrupted"), 1)
        assert not real.in_transaction  # rolled back: the write lock is released
        # Another writer is not blocked, and nothing of the interrupted write was kept.
        assert other.save(snap(unique_id, 2, note="other"), 1)
        mine._conn = real
        stored = mine.load(unique_id)
        assert stored == other.load(unique_id)
        assert "def-other" in str(stored) and "def-interrupted" not in str(stored)
