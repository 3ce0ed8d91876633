"""open_storage / open_async_storage for the server adapters (construction does no I/O)."""

from __future__ import annotations

import asyncio
import sys

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage import (
    AsyncManagedSessionStorage,
    ManagedSessionStorage,
    open_async_storage,
    open_storage,
)
from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage
from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
def test_postgres_url_splits_our_parameters_from_libpq_ones(scheme: str) -> None:
    url = f"{scheme}://u@127.0.0.1:5/db?table=abc&isolation=serializable&statement_timeout=250&sslmode=disable"
    st = open_storage(url)
    assert isinstance(st, PostgresStorage)
    assert st.table == "abc"
    assert st._plan.conninfo == f"{scheme}://u@127.0.0.1:5/db?sslmode=disable"
    assert st._plan.setup == [
        "SET default_transaction_isolation = 'serializable'",
        "SET statement_timeout = 250",
    ]
    st.close()
    ast = open_async_storage(url)
    assert isinstance(ast, AsyncPostgresStorage) and ast.table == "abc"
    asyncio.run(ast.aclose())


def test_redis_url_takes_the_prefix() -> None:
    st = open_storage("redis://127.0.0.1:6379/3?prefix=app:s:")
    assert isinstance(st, RedisStorage) and st.prefix == "app:s:"
    assert st.pool.connection_kwargs["db"] == 3
    st.close()
    ast = open_async_storage("redis://127.0.0.1:6379/3?prefix=app:s:")
    assert isinstance(ast, AsyncRedisStorage) and ast.prefix == "app:s:"
    asyncio.run(ast.aclose())


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://h/db?isolation=chaos",
        "postgresql://h/db?table=1bad",
        "postgresql://h/db?statement_timeout=x",
        "redis://h?prefix=a%00b",
    ],
)
def test_bad_server_parameters_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        open_storage(url)
    with pytest.raises(ConfigError):
        open_async_storage(url)


def test_every_opened_adapter_satisfies_the_managed_protocols(tmp_path: object) -> None:
    for url in ("memory://", "sqlite://", "postgresql://h/db", "redis://h"):
        st = open_storage(url)
        assert isinstance(st, ManagedSessionStorage)
        st.close()
        ast = open_async_storage(url)
        assert isinstance(ast, AsyncManagedSessionStorage)
        asyncio.run(ast.aclose())


@pytest.mark.parametrize(
    ("url", "extra"),
    [
        ("postgresql://127.0.0.1/test", "postgres"),
        ("redis://127.0.0.1:6379/0", "redis"),
    ],
)
def test_a_missing_driver_extra_is_a_config_error_naming_the_extra(
    url: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A module set to None in sys.modules cannot be imported: what a missing driver looks like.
    monkeypatch.setitem(sys.modules, f"akchat_fsm.storage.{extra}", None)
    for opener in (open_storage, open_async_storage):
        with pytest.raises(ConfigError, match=rf"pip install 'akchat-fsm\[{extra}\]'") as refused:
            opener(url)
        assert isinstance(refused.value.__cause__, ImportError)
