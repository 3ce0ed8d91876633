"""``open_storage(url, read_only=True)``: reads a store as it is and refuses every write.

A read-only adapter creates and upgrades nothing and refuses a write with ``ConfigError``
before any I/O, sync and asyncio, on every adapter with a store outside the process.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_harness import snap

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage.url import open_async_storage, open_storage
from cleanup import sql_tables


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return f"sqlite:///{tmp_path / 'ro.db'}"


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    import psycopg

    pg_url, table = request.getfixturevalue("pg_url"), f"ro_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")

    request.addfinalizer(drop)
    return f"{pg_url}?table={table}"


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return f"{request.getfixturevalue('redis_url')}?prefix=ro{uuid.uuid4().hex[:12]}:"


def _mysql(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    from storage_harness import drop_mysql_tables

    mysql_url, table = request.getfixturevalue("mysql_url"), f"ro_{uuid.uuid4().hex[:12]}"
    request.addfinalizer(lambda: drop_mysql_tables(mysql_url, table))
    return f"{mysql_url}?table={table}"


BACKENDS: dict[str, Callable[[Path, pytest.FixtureRequest], str]] = {
    "sqlite": _sqlite,
    "postgres": pytest.param(_postgres, marks=pytest.mark.postgres),  # type: ignore[dict-item]
    "redis": pytest.param(_redis, marks=pytest.mark.redis),  # type: ignore[dict-item]
    "mysql": pytest.param(_mysql, marks=pytest.mark.mysql),  # type: ignore[dict-item]
}


@pytest.fixture(params=list(BACKENDS.values()), ids=list(BACKENDS))
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield request.param(tmp_path, request)


def _written(url: str) -> str:
    """A store holding session s1 at cursor 1 and one processing record; its envelope."""
    with open_storage(url) as st:
        assert st.save(snap("s1", 1), None)
        assert st.save_record("s1", "call:a", "{}", None, processing=True)  # type: ignore[attr-defined]
        text = st.load("s1")
    assert text is not None
    return text


def test_a_read_only_adapter_reads_and_refuses_every_write(url: str) -> None:
    text = _written(url)
    with open_storage(url, read_only=True) as st:
        assert st.load("s1") == text
        assert st.load_record("s1", "call:a") == (1, "{}")  # type: ignore[attr-defined]
        assert st.list_records("s1") == ["call:a"]  # type: ignore[attr-defined]
        assert [p.session_id for p in st.list_processing()] == ["s1"]  # type: ignore[attr-defined]
        writes: list[Callable[[], object]] = [
            lambda: st.save(snap("s1", 2), 1),
            lambda: st.save(snap("s2", 1), None),
            lambda: st.delete("s1"),
            lambda: st.save_record("s1", "call:a", "[]", 1),  # type: ignore[attr-defined]
            lambda: st.delete_record("s1", "call:a"),  # type: ignore[attr-defined]
        ]
        for write in writes:
            with pytest.raises(ConfigError, match="read-only"):
                write()
    with open_storage(url) as st:
        assert st.load("s1") == text and st.load("s2") is None
        assert st.load_record("s1", "call:a") == (1, "{}")  # type: ignore[attr-defined]


def test_the_async_read_only_adapter_refuses_a_write(url: str) -> None:
    text = _written(url)

    async def run() -> None:
        async with open_async_storage(url, read_only=True) as st:
            assert await st.load("s1") == text
            with pytest.raises(ConfigError, match="read-only"):
                await st.save(snap("s1", 2), 1)

    asyncio.run(run())


def test_a_read_only_sqlite_adapter_never_creates_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with (
        open_storage(f"sqlite:///{path}", read_only=True) as st,
        pytest.raises(ConfigError, match="never creates"),
    ):
        st.load("s1")
    assert not list(tmp_path.iterdir())
