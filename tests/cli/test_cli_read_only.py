"""Read-only verbs never change a store, whatever they find (issue 27).

``inspect``, ``reconcile`` without ``--apply`` (one session or ``--all``) open the adapter
read-only: no DDL, no upgrade, no write. A table of the wrong shape is one exit-2 line naming
what is wrong, and the store is left byte for byte (SQLite) or catalogue and rows (PostgreSQL)
as it was; a 0.1.0 table is read as it is, not upgraded.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run, stuck_session

from akchat_fsm.storage import open_storage

NO_CURSOR = "CREATE TABLE {t} (session_id text, body text)"
JSONB_BODY = (
    "CREATE TABLE {t} (session_id text PRIMARY KEY, cursor bigint NOT NULL, body jsonb NOT NULL,"
    " updated_at timestamptz NOT NULL DEFAULT now())"
)
OLD_SQLITE = (
    "CREATE TABLE akchat_sessions (session_id TEXT PRIMARY KEY NOT NULL,"
    " cursor INTEGER NOT NULL, body TEXT NOT NULL)"
)
OLD_POSTGRES = (
    "CREATE TABLE {t} (session_id text PRIMARY KEY, cursor bigint NOT NULL,"
    " body text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
)


def _verbs(url: str, memory: Path) -> list[list[str]]:
    return [
        ["inspect", url, "s1"],
        ["inspect", url, "s1", "--ledger", "--json"],
        ["reconcile", url, "s1", "--memory", str(memory)],
        ["reconcile", url, "s1", "--memory", str(memory), "--json"],
        ["reconcile", url, "--all", "--older-than", "0s"],
    ]


def _memory(tmp_path: Path, record: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "memory.json"
    path.write_text(json.dumps(record or {"version": 1, "messages": []}), encoding="utf-8")
    return path


#: ``reconcile --all`` lists work left (docs/cli.md, exit status).
NEEDS_PERSON = 3


def _exit_line(argv: list[str], code: int) -> str:
    result = run(*argv)
    assert result.exit_code == code, (argv, result.exit_code, result.stdout, result.stderr)
    if code in (0, NEEDS_PERSON):
        return result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _sqlite_state(path: Path) -> tuple[bytes, list[str]]:
    """The database file's bytes, and any WAL content beside it (a read writes none)."""
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes(), [wal.name] if wal.exists() and wal.stat().st_size else []


# --------------------------------------------------------------------------- SQLite
def test_a_sqlite_table_without_a_cursor_is_reported_and_left_byte_for_byte(
    tmp_path: Path,
) -> None:
    db = tmp_path / "w.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(NO_CURSOR.format(t="akchat_sessions"))
        conn.execute("INSERT INTO akchat_sessions VALUES ('s1', '{}')")
        conn.commit()
    before = _sqlite_state(db)
    url = f"sqlite:///{db}"
    for argv in _verbs(url, _memory(tmp_path)):
        line = _exit_line(argv, 2)
        assert "has no column 'cursor'" in line, line
        assert _sqlite_state(db) == before, argv


def test_the_writing_verbs_refuse_a_table_of_the_wrong_shape_before_touching_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "w.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(NO_CURSOR.format(t="akchat_sessions"))
        conn.commit()
    before = _sqlite_state(db)
    url, memory = f"sqlite:///{db}", _memory(tmp_path)
    for argv in (
        ["reconcile", url, "s1", "--memory", str(memory), "--apply"],
        ["reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(tmp_path), "--apply"],
        ["settle", url, "s1", "c1", "--ran"],
    ):
        assert "has no column 'cursor'" in _exit_line(argv, 2), argv
        assert _sqlite_state(db) == before, argv


def test_a_sqlite_0_1_0_table_is_read_not_upgraded(tmp_path: Path) -> None:
    current = tmp_path / "current.db"
    record = stuck_session(f"sqlite:///{current}", "s1")
    with open_storage(f"sqlite:///{current}") as storage:
        text = storage.load("s1")
    assert text is not None
    db = tmp_path / "old.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(OLD_SQLITE)
        conn.execute("INSERT INTO akchat_sessions VALUES (?, ?, ?)", ("s1", 5, text))
        conn.commit()
    before = _sqlite_state(db)
    url, memory = f"sqlite:///{db}", _memory(tmp_path, record)
    *reads, sweep = _verbs(url, memory)
    for argv in reads:
        _exit_line(argv, 0)
        assert _sqlite_state(db) == before, argv
    assert "predates the processing index" in _exit_line(sweep, 2)
    assert _sqlite_state(db) == before


def test_a_current_sqlite_store_is_left_byte_for_byte(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    url = f"sqlite:///{db}"
    memory = _memory(tmp_path, stuck_session(url, "s1"))
    before = _sqlite_state(db)
    for argv in _verbs(url, memory):
        _exit_line(argv, NEEDS_PERSON if "--all" in argv else 0)  # the sweep: claims left
        assert _sqlite_state(db) == before, argv


# --------------------------------------------------------------------------- PostgreSQL
@pytest.fixture
def pg_table(pg_url: str) -> Iterator[str]:
    import psycopg

    table = f"ro_{uuid.uuid4().hex[:12]}"
    yield table
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
        ).fetchall():
            conn.execute(f"DROP TABLE IF EXISTS {name}")


def _catalogue(pg_url: str, table: str) -> tuple[list[Any], ...]:
    """Every relation named after ``table``, its columns and indexes, and its rows."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT relname, relkind FROM pg_class WHERE relname LIKE %s ORDER BY relname",
            (f"{table}%",),
        ).fetchall()
        columns = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull"
            " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE c.relname LIKE %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, 2",
            (f"{table}%",),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE %s ORDER BY 1",
            (f"{table}%",),
        ).fetchall()
        rows = conn.execute(f"SELECT row_to_json(x)::text FROM {table} x ORDER BY 1").fetchall()
    return relations, columns, indexes, rows


def _create(pg_url: str, sql: str, *rows: tuple[Any, ...]) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql)
        for statement, params in rows:
            conn.execute(statement, params)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("shape", "row", "named"),
    [
        (NO_CURSOR, "INSERT INTO {t} VALUES ('s1', '{{}}')", "has no column 'cursor'"),
        (JSONB_BODY, "INSERT INTO {t} VALUES ('s1', 1, '{{}}')", "column 'body' is jsonb"),
    ],
)
def test_a_postgres_table_of_the_wrong_shape_is_reported_and_left_as_it_was(
    pg_url: str, pg_table: str, tmp_path: Path, shape: str, row: str, named: str
) -> None:
    _create(pg_url, shape.format(t=pg_table), (row.format(t=pg_table), ()))
    before = _catalogue(pg_url, pg_table)
    for argv in _verbs(f"{pg_url}?table={pg_table}", _memory(tmp_path)):
        line = _exit_line(argv, 2)
        assert named in line, line
        assert _catalogue(pg_url, pg_table) == before, argv


@pytest.mark.postgres
def test_a_postgres_0_1_0_table_is_read_not_upgraded(
    pg_url: str, pg_table: str, tmp_path: Path
) -> None:
    current = f"{pg_url}?table={pg_table}x"
    record = stuck_session(current, "s1")
    with open_storage(current) as storage:
        text = storage.load("s1")
    _create(
        pg_url,
        OLD_POSTGRES.format(t=pg_table),
        (f"INSERT INTO {pg_table} (session_id, cursor, body) VALUES ('s1', 5, %s)", (text,)),
    )
    before = _catalogue(pg_url, pg_table)
    *reads, sweep = _verbs(f"{pg_url}?table={pg_table}", _memory(tmp_path, record))
    for argv in reads:
        _exit_line(argv, 0)
        assert _catalogue(pg_url, pg_table) == before, argv
    assert "predates the processing index" in _exit_line(sweep, 2)
    assert _catalogue(pg_url, pg_table) == before
