"""PostgreSQL text encodings at the adapter's edge (ADR-0086), against the real server.

- a connection whose client encoding cannot carry the text (``client_encoding=LATIN1``) is
  switched to UTF-8 on connect, so emoji and every script round-trip;
- a ``SQL_ASCII`` database stores the text as UTF-8 bytes, envelopes and records alike;
- a database whose encoding cannot store every JSON text is refused on connect;
- an encoding error on a later call (the server's ``22P05``/``22021``, psycopg's
  ``UnicodeEncodeError``) is a ``ConfigError``, never a retryable ``StorageUnavailable``.

Each test uses its own table or a fresh database, dropped after.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import pytest

from akchat_fsm.errors import ConfigError, StorageError
from akchat_fsm.storage.postgres import (
    AsyncPostgresStorage,
    PostgresStorage,
    encoding_setup,
    map_pg_error,
)
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.session import SessionSnapshot

pytestmark = pytest.mark.postgres
psycopg = pytest.importorskip("psycopg")

SID = "s-enc"
TEXT = "caf\u00e9 \u20ac \U0001f600 \u65e5\u672c"  # Latin-1, outside Latin-1, astral, CJK
RECORD = '{"note":"' + TEXT + '"}'
MODES = pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])


def snapshot(cursor: int = 1, state: str = TEXT) -> SessionSnapshot:
    wire = {
        "protocol": "agentskit.chat.session",
        "version": 1,
        "sessionId": SID,
        "definitionId": "def",
        "definitionRevision": 1,
        "updatedAt": "2026-12-01T00:00:00.000Z",
        "cursor": cursor,
        "conversation": {"state": state, "decisions": []},
        "confirmations": [],
    }
    result = decode_session_snapshot(wire)
    assert result.snapshot is not None, result.diagnostic
    return result.snapshot


def with_query(url: str, **query: str) -> str:
    parts = urlsplit(url)
    extra = urlencode(query)
    return urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


@pytest.fixture
def database(pg_url: str) -> Iterator[Callable[[str], str]]:
    """Create fresh databases of a given encoding; all dropped after the test."""
    made: list[str] = []

    def create(encoding: str) -> str:
        name = f"akchat_enc_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'"
                " TEMPLATE template0"
            )
        made.append(name)
        return urlunsplit(urlsplit(pg_url)._replace(path=f"/{name}"))

    yield create
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name in made:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def table(pg_url: str) -> Iterator[str]:
    name = f"t_enc_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}, {name}__records, {name}__pending")


def round_trip(url: str, table: str, is_async: bool) -> tuple[Any, Any]:
    """Save an envelope and a record holding ``TEXT``; what a fresh adapter loads back (and
    lists: the record's key, the session in the processing index)."""
    if not is_async:
        with PostgresStorage(url, table=table) as adapter:
            assert adapter.save(snapshot(), None)
            assert adapter.save_record(SID, "note", RECORD, None, processing=True)
        with PostgresStorage(url, table=table) as adapter:
            assert adapter.list_records(SID) == ["note"]
            assert [p.session_id for p in adapter.list_processing()] == [SID]
            return adapter.load(SID), adapter.load_record(SID, "note")

    async def run() -> tuple[Any, Any]:
        async with AsyncPostgresStorage(url, table=table) as adapter:
            assert await adapter.save(snapshot(), None)
            assert await adapter.save_record(SID, "note", RECORD, None, processing=True)
        async with AsyncPostgresStorage(url, table=table) as adapter:
            assert await adapter.list_records(SID) == ["note"]
            assert [p.session_id for p in await adapter.list_processing()] == [SID]
            return await adapter.load(SID), await adapter.load_record(SID, "note")

    return asyncio.run(run())


def _never_retryable(error: BaseException) -> None:
    assert isinstance(error, ConfigError)
    assert not isinstance(error, StorageError)
    assert error.retryable is False


# --------------------------------------------------------------------------- what works
@MODES
def test_a_latin1_client_encoding_is_switched_to_utf8(
    pg_url: str, table: str, is_async: bool
) -> None:
    url = with_query(pg_url, client_encoding="LATIN1")
    with psycopg.connect(url) as raw:  # the server really honours the request
        assert raw.info.encoding == "iso8859-1"
    assert round_trip(url, table, is_async) == (snapshot().to_json(), (1, RECORD))


@MODES
def test_a_sql_ascii_database_stores_any_text_as_utf8(
    database: Callable[[str], str], is_async: bool
) -> None:
    url = database("SQL_ASCII")
    table = "t_enc"
    assert round_trip(url, table, is_async) == (snapshot().to_json(), (1, RECORD))
    with psycopg.connect(url, autocommit=True) as raw:  # stored as UTF-8 bytes
        stored = raw.execute(f"SELECT body FROM {table}__records").fetchone()
    assert stored == (RECORD.encode("utf-8"),)


@MODES
def test_a_record_that_is_not_utf8_in_sql_ascii_is_a_config_error(
    database: Callable[[str], str], is_async: bool
) -> None:
    url = database("SQL_ASCII")
    with PostgresStorage(url, table="t_enc") as adapter:
        assert adapter.save_record(SID, "note", "{}", None)
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute('UPDATE t_enc__records SET body = E\'{"a":"\\xff"}\'')

    async def load_async() -> Any:
        async with AsyncPostgresStorage(url, table="t_enc") as adapter:
            return await adapter.load_record(SID, "note")

    with pytest.raises(ConfigError) as caught:
        if is_async:
            asyncio.run(load_async())
        else:
            with PostgresStorage(url, table="t_enc") as adapter:
                adapter.load_record(SID, "note")
    _never_retryable(caught.value)
    assert "not UTF-8" in str(caught.value)


# --------------------------------------------------------------------------- what is refused
@MODES
def test_a_database_that_cannot_store_every_text_is_refused_on_connect(
    database: Callable[[str], str], is_async: bool
) -> None:
    url = database("LATIN1")

    async def load_async() -> None:
        adapter = AsyncPostgresStorage(url, table="t_enc")
        try:
            await adapter.load(SID)
        finally:
            assert adapter.open_connections() == 0  # never kept open
            await adapter.aclose()

    with pytest.raises(ConfigError) as caught:
        if is_async:
            asyncio.run(load_async())
        else:
            adapter = PostgresStorage(url, table="t_enc")
            try:
                adapter.load(SID)
            finally:
                assert adapter.open_connections() == 0
                adapter.close()
    _never_retryable(caught.value)
    assert "LATIN1" in str(caught.value) and "UTF8" in caught.value.hint


@MODES
def test_a_utf8_read_of_invalid_bytes_is_a_config_error_22021(
    database: Callable[[str], str], is_async: bool
) -> None:
    # A SQL_ASCII database read over a UTF-8 connection: the server refuses the bytes (22021).
    url = with_query(database("SQL_ASCII"), client_encoding="UTF8")
    with PostgresStorage(url, table="t_enc") as adapter:
        assert adapter.save(snapshot(state="d"), None)
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("UPDATE t_enc SET body = replace(body, '\"d\"', E'\"\\xff\"')")

    async def load_async() -> Any:
        async with AsyncPostgresStorage(url, table="t_enc") as adapter:
            return await adapter.load(SID)

    with pytest.raises(ConfigError) as caught:
        if is_async:
            asyncio.run(load_async())
        else:
            with PostgresStorage(url, table="t_enc") as adapter:
                adapter.load(SID)
    _never_retryable(caught.value)
    assert "22021" in repr(caught.value.__cause__.sqlstate)  # type: ignore[union-attr]


def _behind_the_back(adapter: Any, statement: str) -> None:
    """Run ``statement`` on the adapter's own open connection (what a pooler might do)."""
    conn = adapter._conn
    assert conn is not None
    result = conn.execute(statement)
    if asyncio.iscoroutine(result):
        raise AssertionError("use the sync helper only with the sync adapter")


def test_an_encoding_changed_under_the_adapter_is_a_config_error_both_ways(
    pg_url: str, table: str
) -> None:
    with PostgresStorage(pg_url, table=table) as adapter:
        assert adapter.save(snapshot(), None)
        _behind_the_back(adapter, "SET client_encoding = 'LATIN1'")
        with pytest.raises(ConfigError) as read:  # the server: 22P05 untranslatable
            adapter.load(SID)
        _never_retryable(read.value)
        assert read.value.__cause__.sqlstate == "22P05"  # type: ignore[union-attr]
        with pytest.raises(ConfigError) as write:  # psycopg: UnicodeEncodeError, nothing sent
            adapter.save_record(SID, "note", RECORD, None)
        _never_retryable(write.value)
        assert isinstance(write.value.__cause__, UnicodeEncodeError)
        _behind_the_back(adapter, "SET client_encoding = 'UTF8'")
        assert adapter.load_record(SID, "note") is None  # the refused write did not apply
        assert adapter.load(SID) == snapshot().to_json()  # and the connection still works


def test_an_encoding_changed_under_the_async_adapter_is_a_config_error(
    pg_url: str, table: str
) -> None:
    async def run() -> None:
        async with AsyncPostgresStorage(pg_url, table=table) as adapter:
            assert await adapter.save(snapshot(), None)
            assert adapter._conn is not None
            await adapter._conn.execute("SET client_encoding = 'LATIN1'")
            with pytest.raises(ConfigError) as read:
                await adapter.load(SID)
            _never_retryable(read.value)
            with pytest.raises(ConfigError) as write:
                await adapter.save_record(SID, "note", RECORD, None)
            _never_retryable(write.value)
            await adapter._conn.execute("SET client_encoding = 'UTF8'")
            assert await adapter.load_record(SID, "note") is None

    asyncio.run(run())


# --------------------------------------------------------------------------- the decisions
def test_encoding_errors_with_a_reply_are_config_errors_for_reads_and_writes(
    pg_url: str,
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as raw:
        raw.execute("SET client_encoding = 'LATIN1'")
        with pytest.raises(psycopg.Error) as untranslatable:
            raw.execute("SELECT convert_from('\\xe282ac'::bytea, 'UTF8')").fetchone()
    assert untranslatable.value.sqlstate == "22P05"
    for write in (False, True):
        mapped = map_pg_error(untranslatable.value, sent=True, write=write, broken=False)
        assert mapped is not None
        _never_retryable(mapped)
    # A lost connection stays what it was: the write may have applied.
    lost = map_pg_error(untranslatable.value, sent=True, write=True, broken=True)
    assert isinstance(lost, StorageError)


@pytest.mark.parametrize(
    ("server", "client", "statements"),
    [
        ("UTF8", "utf-8", []),
        ("UTF8", "ascii", []),
        ("UTF8", "iso8859-1", ["SET client_encoding = 'UTF8'"]),
        ("SQL_ASCII", "ascii", []),
        ("SQL_ASCII", "cp1252", ["SET client_encoding = 'UTF8'"]),
    ],
)
def test_encoding_setup_keeps_utf8_carrying_connections(
    server: str, client: str, statements: list[str]
) -> None:
    assert encoding_setup(server, client) == statements


@pytest.mark.parametrize("server", ["LATIN1", "WIN1252", "EUC_JP", None])
def test_encoding_setup_refuses_databases_that_cannot_store_every_text(server: str | None) -> None:
    with pytest.raises(ConfigError) as caught:
        encoding_setup(server, "utf-8")
    _never_retryable(caught.value)
