"""Read-only verbs never create a store: prove one exists before an adapter touches it.

The shipped adapters create what they need on first use (a SQLite file and its table, a
PostgreSQL table), which is right for a host and wrong for ``inspect sqlite:///typo.db ID``:
that must say the store does not exist, not leave an empty database behind. So ``inspect`` and
``reconcile`` look first, without writing: SQLite through a read-only connection (``mode=ro``
never creates a file), PostgreSQL through the catalog (``to_regclass``), MySQL / MariaDB
through ``information_schema``. Redis reads write
nothing, and ``memory://`` is a new private store either way.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from typing import Any
from urllib.parse import quote

from ..errors import StorageUnavailable

__all__ = ["MissingStore", "check_exists"]

NOT_CREATED = "read-only commands never create one"


class MissingStore(Exception):
    """The URL names a store that does not exist (the message says what is missing)."""


def _sqlite(path: str, table: str) -> None:
    if path == ":memory:":
        return  # a private in-memory database: nothing on disk to create
    if not os.path.exists(path):
        raise MissingStore(f"{path} does not exist ({NOT_CREATED})")
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    try:
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            row = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
            ).fetchone()
    except sqlite3.Error as exc:
        raise MissingStore(f"{path} is not a readable SQLite database: {exc}") from exc
    if row is None:
        raise MissingStore(
            f"{path} has no table {table!r}: not an akchat-fsm store ({NOT_CREATED})"
        )


def _postgres(url: str) -> None:
    import psycopg

    from ..storage.checks import DEFAULT_TABLE
    from ..storage.url import _postgres_args, _split

    _, parts, query = _split(url)
    args = _postgres_args(parts, query)  # the adapter's own reading of the URL
    table = args.get("table", DEFAULT_TABLE)
    try:
        with psycopg.connect(args["conninfo"], connect_timeout=10) as conn:
            found = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    except psycopg.Error as exc:
        raise StorageUnavailable(f"PostgreSQL unreachable: {exc}") from exc
    if found is None or found[0] is None:
        raise MissingStore(f"the database has no table {table!r} ({NOT_CREATED})")


def _mysql(url: str) -> None:
    import pymysql  # type: ignore[import-untyped]

    from ..storage.checks import DEFAULT_TABLE
    from ..storage.url import _mysql_args, _split

    _, parts, query = _split(url)
    args = _mysql_args(parts, query)  # the adapter's own reading of the URL
    table = args.get("table", DEFAULT_TABLE)
    probe = (
        "SELECT 1 FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND BINARY table_name = %s"
    )
    try:
        conn = pymysql.connect(
            host=args["host"],
            port=args["port"],
            user=args["user"],
            password=args["password"],
            database=args["database"],
            connect_timeout=10,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(probe, (table,))
                found = cur.fetchone()
        finally:
            conn.close()
    except pymysql.err.Error as exc:
        raise StorageUnavailable(f"MySQL unreachable: {exc}") from exc
    if found is None:
        raise MissingStore(f"the database has no table {table!r} ({NOT_CREATED})")


def check_exists(url: str, storage: Any) -> None:
    """Raise :class:`MissingStore` if ``storage`` (opened from ``url``, not yet used) names a
    store that does not exist; :class:`StorageError` if that cannot be told."""
    from ..storage.sqlite import SQLiteStorage

    if isinstance(storage, SQLiteStorage):
        _sqlite(storage.path, storage.table)
    elif url.split(":", 1)[0].lower() in ("postgresql", "postgres"):
        _postgres(url)
    elif url.split(":", 1)[0].lower() in ("mysql", "mariadb"):
        _mysql(url)
