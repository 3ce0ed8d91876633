"""Fixtures for the bridge tests (backends in :mod:`bridge_harness`, process helpers in
:mod:`process_helpers`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bridge_harness import BACKENDS, RecordsBackend
from process_helpers import StoreFactory, new_store_spec

from cleanup import drop_pg_tables, drop_redis_prefix_at


@pytest.fixture(params=sorted(BACKENDS))
def records_backend(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    return BACKENDS[request.param](tmp_path, request)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def new_store(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[StoreFactory]:
    """``new_store(where=None)``: a fresh, empty store spec for the worker processes (a file
    under ``where`` or ``tmp_path``, a PostgreSQL table pair or a Redis key prefix, removed
    afterwards)."""
    tables: list[str] = []
    server = {"postgres": "pg_url", "redis": "redis_url"}.get(request.param)

    def make(where: Path | None = None) -> str:
        url = request.getfixturevalue(server) if server else None
        spec, table = new_store_spec(request.param, where or tmp_path, url)
        if table:
            tables.append(table)
        return spec

    yield make
    if tables and request.param == "redis":
        for prefix in tables:
            drop_redis_prefix_at(request.getfixturevalue("redis_url"), f"{prefix}:")
    elif tables:
        drop_pg_tables(request.getfixturevalue("pg_url"), *tables)
