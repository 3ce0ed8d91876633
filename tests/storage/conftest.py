"""One battery, every adapter, sync and async: the fixtures that make that possible.

``backend`` is parametrized over the adapters; ``mode`` over sync/async. A test talks to a
:class:`Client`, a synchronous facade whose calls go straight to a sync adapter or through a
private event loop (``asyncio.Runner``) to its async twin, so each test body exists once.
Every client a test opens is a separate adapter instance (its own connection), as separate
clients of one store are; the memory backend shares one in-process store instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from storage_harness import Backend, Client, Harness, drop_mysql_tables

from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from cleanup import drop_redis_prefix_at


# --------------------------------------------------------------------------- backends
def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    shared = MemoryStorage()  # one in-process store; every "client" is a view of it
    return Backend("memory", "memory://", lambda: shared, lambda: AsyncMemoryStorage(shared))


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage

    path = tmp_path / "sessions.db"
    return Backend(
        "sqlite",
        f"sqlite:///{path}",
        lambda: SQLiteStorage(path),
        lambda: AsyncSQLiteStorage(path),
        {"path": path},
    )


def _postgres(isolation: str) -> Callable[[Path, pytest.FixtureRequest], Backend]:
    def make(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
        from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage

        pg_url = request.getfixturevalue("pg_url")
        table = f"t_{uuid.uuid4().hex[:12]}"
        request.addfinalizer(lambda: _drop_pg_table(pg_url, table))
        return Backend(
            f"postgres-{isolation}",
            f"{pg_url}?table={table}&isolation={isolation}",
            lambda: PostgresStorage(pg_url, table=table, isolation=isolation),
            lambda: AsyncPostgresStorage(pg_url, table=table, isolation=isolation),
            {"pg_url": pg_url, "table": table},
        )

    return make


def _drop_pg_table(pg_url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage

    redis_url = request.getfixturevalue("redis_url")
    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    request.addfinalizer(lambda: drop_redis_prefix_at(redis_url, prefix))
    return Backend(
        "redis",
        f"{redis_url}?prefix={prefix}",
        lambda: RedisStorage(redis_url, prefix=prefix),
        lambda: AsyncRedisStorage(redis_url, prefix=prefix),
        {"redis_url": redis_url, "prefix": prefix},
    )


def _redis_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage

    cluster = request.getfixturevalue("redis_cluster")
    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    options: dict[str, Any] = {"prefix": prefix, "cluster": True, "shards": 4}
    return Backend(
        "redis-cluster",
        f"redis+cluster://127.0.0.1:{cluster.ports[0]}/0?prefix={prefix}&shards=4",
        lambda: RedisStorage(cluster.url, **options),
        lambda: AsyncRedisStorage(cluster.url, **options),
        {"cluster": cluster, "prefix": prefix},
    )


def _mysql(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    from akchat_fsm.storage.url import open_async_storage, open_storage

    mysql_url = request.getfixturevalue("mysql_url")
    table = f"t_{uuid.uuid4().hex[:12]}"
    url = f"{mysql_url}?table={table}"
    request.addfinalizer(lambda: drop_mysql_tables(mysql_url, table))
    return Backend(
        "mysql",
        url,
        lambda: open_storage(url),
        lambda: open_async_storage(url),
        {"mysql_url": mysql_url, "table": table},
    )


BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], Backend]] = {
    "memory": _memory,
    "sqlite": _sqlite,
}
if os.environ.get("AKCHAT_STORAGE_SKIP_SERVERS") != "1":
    BACKENDS.update(
        {
            "postgres": _postgres("read_committed"),
            "postgres-serializable": _postgres("serializable"),
            "redis": _redis,
            "mysql": _mysql,
        }
    )
#: Backends a test module asks for by name (``indirect`` parametrization), never by default.
OPT_IN: dict[str, Callable[[Path, pytest.FixtureRequest], Backend]] = {
    "redis-cluster": _redis_cluster,
}
_MARKS = {
    "postgres": [pytest.mark.postgres],
    "postgres-serializable": [pytest.mark.postgres],
    "redis": [pytest.mark.redis],
    # Deep only: each test opens a few connections, and PyMySQL builds a TLS context for
    # every one (~40 ms); the kit class and tests/storage/test_mysql.py run on every push.
    "mysql": [pytest.mark.mysql, pytest.mark.deep],
}


@pytest.fixture(
    params=[pytest.param(name, marks=_MARKS.get(name, [])) for name in BACKENDS],
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return {**BACKENDS, **OPT_IN}[request.param](tmp_path, request)


@pytest.fixture(params=["sync", "async"])
def harness(request: pytest.FixtureRequest, backend: Backend) -> Iterator[Harness]:
    h = Harness(backend, request.param == "async")
    yield h
    h.close()


@pytest.fixture
def store(harness: Harness) -> Client:
    return harness.client()
