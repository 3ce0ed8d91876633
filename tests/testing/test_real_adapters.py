"""The shipped adapters pass the kit, through its pytest form (one test per check).

PostgreSQL and Redis run against the real servers with a fresh table / key prefix. Their
spawn-process racers run in the deep profile only (each costs ~10 s of process start-up on
two cores); SQLite races processes on every run.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.storage.url import open_async_storage
from akchat_fsm.testing import check_session_storage
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance

# No shipped adapter reports open connections, and driver-fault injection into the real
# drivers is the storage battery's job (tests/storage): the kit's error_mapping check is
# exercised against test doubles in test_conformance.py.
NOT_APPLICABLE = frozenset({"no_open_connections", "error_mapping"})


class TestMemoryConformance(SessionStorageConformance):
    skip_checks = NOT_APPLICABLE | {"processes"}  # a private in-process store

    def make_storage(self) -> Any:
        return MemoryStorage()

    def make_async_storage(self) -> Any:
        return AsyncMemoryStorage()


class TestSQLiteConformance(SessionStorageConformance):
    processes = True
    skip_checks = NOT_APPLICABLE

    @pytest.fixture
    def storage_factory(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'kit.db'}"  # a URL: picklable for spawn racers

    @pytest.fixture
    def async_storage_factory(self, tmp_path: Path) -> Callable[[], Any]:
        url = f"sqlite:///{tmp_path / 'kit-async.db'}"
        return lambda: open_async_storage(url)


@pytest.fixture
def pg_kit_url(pg_url: str) -> Iterator[str]:
    import psycopg

    table = f"kit_{uuid.uuid4().hex[:12]}"
    yield f"{pg_url}?table={table}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.fixture
def redis_kit_url(redis_url: str) -> Iterator[str]:
    import redis

    prefix = f"kit:{uuid.uuid4().hex[:12]}:"
    yield f"{redis_url}?prefix={prefix}"
    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.mark.postgres
class TestPostgresConformance(SessionStorageConformance):
    skip_checks = NOT_APPLICABLE | {"processes"}  # see test_processes_deep below

    @pytest.fixture
    def storage_factory(self, pg_kit_url: str) -> str:
        return pg_kit_url

    @pytest.fixture
    def async_storage_factory(self, pg_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(pg_kit_url)


@pytest.mark.postgres
class TestPostgresSerializableConformance(TestPostgresConformance):
    """SERIALIZABLE turns the losers' waits into 40001 errors, which must map to False."""

    @pytest.fixture
    def storage_factory(self, pg_kit_url: str) -> str:
        return f"{pg_kit_url}&isolation=serializable"

    @pytest.fixture
    def async_storage_factory(self, pg_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(f"{pg_kit_url}&isolation=serializable")


@pytest.mark.redis
class TestRedisConformance(SessionStorageConformance):
    skip_checks = NOT_APPLICABLE | {"processes"}  # see test_processes_deep below

    @pytest.fixture
    def storage_factory(self, redis_kit_url: str) -> str:
        return redis_kit_url

    @pytest.fixture
    def async_storage_factory(self, redis_kit_url: str) -> Callable[[], Any]:
        return lambda: open_async_storage(redis_kit_url)


@pytest.mark.deep
@pytest.mark.parametrize(
    "server",
    [
        pytest.param("pg_kit_url", marks=pytest.mark.postgres),
        pytest.param("redis_kit_url", marks=pytest.mark.redis),
    ],
)
def test_processes_deep(server: str, request: pytest.FixtureRequest) -> None:
    url = request.getfixturevalue(server)
    report = check_session_storage(url, only=["processes"], processes=True)
    assert report.ok, str(report)
