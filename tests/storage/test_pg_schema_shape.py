"""A PostgreSQL table of the wrong shape is a ConfigError naming the column, never retryable.

Only a store that cannot be reached is ``StorageUnavailable`` (a host retries that); a table
whose columns do not fit (a ``jsonb`` body, a missing ``cursor``, a column dropped or retyped
after connecting, someone else's NOT NULL column) fails the same way on every call, so a retry
loop around it would spin forever.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from storage_harness import snap

from akchat_fsm.errors import ConfigError, StorageUnavailable
from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage, map_pg_error
from akchat_fsm.storage.url import open_async_storage, open_storage

pytestmark = pytest.mark.postgres

_0_1_0_JSONB = (
    "(session_id text primary key, cursor bigint not null, body jsonb not null,"
    " updated_at timestamptz not null default now())"
)


@pytest.fixture
def table(pg_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}, {name}__records, {name}__pending")


def _admin(pg_url: str, sql: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql)


def _assert_names(exc: BaseException, *words: str) -> None:
    assert isinstance(exc, ConfigError), repr(exc)
    assert not isinstance(exc, StorageUnavailable)
    assert exc.retryable is False
    for word in words:
        assert word in str(exc), (word, str(exc))


def test_a_jsonb_body_is_a_config_error_naming_the_column(pg_url: str, table: str) -> None:
    _admin(pg_url, f"CREATE TABLE {table} {_0_1_0_JSONB}")
    with open_storage(f"{pg_url}?table={table}") as st:
        for call in (lambda: st.load("s1"), lambda: st.save(snap("s1", 1), None)):
            with pytest.raises(ConfigError) as info:
                call()
            _assert_names(info.value, "'body'", "jsonb", "text")
    # Nothing was created or altered on the way to the refusal.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass(%s)", (f"{table}__records",)).fetchone() == (None,)
        columns = conn.execute(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = %s", (table,)
        ).fetchone()
        assert columns == (4,)


def test_a_jsonb_body_is_a_config_error_for_the_async_adapter(pg_url: str, table: str) -> None:
    _admin(pg_url, f"CREATE TABLE {table} {_0_1_0_JSONB}")

    async def run() -> BaseException:
        async with open_async_storage(f"{pg_url}?table={table}") as st:
            try:
                await st.load("s1")
            except BaseException as exc:
                return exc
        raise AssertionError("load succeeded on a jsonb table")

    _assert_names(asyncio.run(run()), "'body'", "jsonb")


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_table_without_a_cursor_column_is_a_config_error(
    pg_url: str, table: str, asynchronous: bool
) -> None:
    _admin(pg_url, f"CREATE TABLE {table} (session_id text, body text)")
    if asynchronous:

        async def run() -> None:
            async with AsyncPostgresStorage(pg_url, table=table) as st:
                await st.load("s1")

        with pytest.raises(ConfigError) as info:
            asyncio.run(run())
    else:
        with PostgresStorage(pg_url, table=table) as st, pytest.raises(ConfigError) as info:
            st.load("s1")
    _assert_names(info.value, "'cursor'", "bigint")


def test_a_wrong_records_table_is_a_config_error(pg_url: str, table: str) -> None:
    _admin(pg_url, f"CREATE TABLE {table}__records (session_id text, key text, body jsonb)")
    with PostgresStorage(pg_url, table=table) as st, pytest.raises(ConfigError) as info:
        st.load("s1")
    _assert_names(info.value, f"{table}__records", "'version'")


def test_a_column_dropped_after_connecting_is_a_config_error(pg_url: str, table: str) -> None:
    with PostgresStorage(pg_url, table=table) as st:
        assert st.save(snap("s1", 1), None)
        _admin(pg_url, f"ALTER TABLE {table} DROP COLUMN written_ms")
        with pytest.raises(ConfigError) as info:
            st.save(snap("s1", 2), 1)
        _assert_names(info.value, "written_ms")


def test_someone_elses_not_null_column_is_a_config_error(pg_url: str, table: str) -> None:
    with PostgresStorage(pg_url, table=table) as st:
        assert st.load("s0") is None  # creates the tables
        _admin(pg_url, f"ALTER TABLE {table} ADD COLUMN owner text NOT NULL")
        with pytest.raises(ConfigError) as info:
            st.save(snap("s1", 1), None)
        _assert_names(info.value, "owner")


class _Reply(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"server said {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("state", ["42883", "42703", "42804", "42P01", "42501", "42601", "23502"])
@pytest.mark.parametrize("write", [False, True])
def test_every_schema_sqlstate_maps_to_config_error(state: str, write: bool) -> None:
    mapped = map_pg_error(_Reply(state), sent=True, write=write, broken=False)
    _assert_names(mapped or AssertionError("conflict"), state)


@pytest.mark.parametrize("state", ["08006", "57P01", "53300", "40001"])
def test_reachability_sqlstates_stay_retryable(state: str) -> None:
    mapped = map_pg_error(_Reply(state), sent=True, write=False, broken=False)
    assert isinstance(mapped, StorageUnavailable)
