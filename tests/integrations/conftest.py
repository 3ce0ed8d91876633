"""Fixtures for the bridge tests (backends in :mod:`bridge_harness`, process helpers in
:mod:`process_helpers`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_harness import BACKENDS, RecordsBackend
from process_helpers import StoreFactory, new_store_spec


@pytest.fixture(params=sorted(BACKENDS))
def records_backend(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    return BACKENDS[request.param](tmp_path, request)


@pytest.fixture(params=["sqlite", "postgres"])
def new_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """``new_store(where=None)``: a fresh, empty store spec for the worker processes (a file
    under ``where`` or ``tmp_path``, or a PostgreSQL table pair dropped afterwards)."""
    tables: list[str] = []

    def make(where: Path | None = None) -> str:
        pg_url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
        spec, table = new_store_spec(request.param, where or tmp_path, pg_url)
        if table:
            tables.append(table)
        return spec

    yield make
    if tables:
        import psycopg

        with psycopg.connect(request.getfixturevalue("pg_url"), autocommit=True) as conn:
            for table in tables:
                conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records")
