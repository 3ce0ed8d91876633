"""What a load does with stored bytes no save of ours could have written (issue 14).

Against the real servers (unique tables, databases and key prefixes per test):

- a body that is not UTF-8 is a ``ConfigError`` (never retryable: the same bytes fail again),
  from ``load`` itself and from ``resume_chat_session``, sync and async;
- a cursor column that disagrees with the body is ``StoredCursorMismatch`` naming both values
  (every later CAS would compare against the column, so each write would conflict forever);
- a snapshot that a storage adapter hands back without validation (``model_construct``) is
  re-validated, so a hostile one is refused and an honest one resumes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from akchat_fsm.errors import ConfigError, StorageError, StoredCursorMismatch
from akchat_fsm.session import ChatDefinition, resume_chat_session, resume_chat_session_async
from akchat_fsm.storage.cas import check_stored_cursor, loaded_text
from akchat_fsm.wire.session import SessionSnapshot

SID = "s-1"
DEFINITION = ChatDefinition("def", 1)
NOT_UTF8 = [b"\xff", b'{"cursor":1,"x":"\xc3"}', b"\xed\xa0\x80", b"\xc0\xaf"]


def snapshot(cursor: int = 1) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=SID,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=(),
    )


# --------------------------------------------------------------------------- one real store each
class Store:
    """One backend: its sync and async adapters, and raw writes behind their back."""

    def __init__(
        self,
        open_sync: Callable[[], Any],
        open_async: Callable[[], Any],
        set_body: Callable[[bytes], None],
        set_cursor: Callable[[int], None],
    ) -> None:
        self.open_sync, self.open_async = open_sync, open_async
        self.set_body, self.set_cursor = set_body, set_cursor

    def load(self, is_async: bool) -> Any:
        if not is_async:
            with self.open_sync() as adapter:
                return adapter.load(SID)

        async def run() -> Any:
            async with self.open_async() as adapter:
                return await adapter.load(SID)

        return asyncio.run(run())

    def resume(self, is_async: bool) -> Any:
        if not is_async:
            with self.open_sync() as adapter:
                return resume_chat_session(DEFINITION, session_id=SID, storage=adapter)

        async def run() -> Any:
            async with self.open_async() as adapter:
                return await resume_chat_session_async(DEFINITION, session_id=SID, storage=adapter)

        return asyncio.run(run())

    def seed(self) -> None:
        with self.open_sync() as adapter:
            assert adapter.save(snapshot(1), None)


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage

    path = tmp_path / "s.db"

    def run(sql: str, *args: object) -> None:
        with sqlite3.connect(path) as conn:
            conn.execute(sql, args)

    return Store(
        lambda: SQLiteStorage(path),
        lambda: AsyncSQLiteStorage(path),
        lambda body: run("UPDATE akchat_sessions SET body = ? WHERE session_id = ?", body, SID),
        lambda cursor: run(
            "UPDATE akchat_sessions SET cursor = ? WHERE session_id = ?", cursor, SID
        ),
    )


@pytest.fixture
def ascii_pg_url(pg_url: str) -> Iterator[str]:
    """A fresh SQL_ASCII database: the only kind of PostgreSQL database that holds such bytes."""
    import psycopg

    name = f"akchat_ascii_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
    parts = urlsplit(pg_url)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    import psycopg

    from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage

    url = request.getfixturevalue("ascii_pg_url")
    table = f"t_{uuid.uuid4().hex[:12]}"

    def set_body(body: bytes) -> None:
        literal = "".join(f"\\x{byte:02x}" for byte in body)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET body = E'{literal}' WHERE session_id = %s", (SID,))

    def set_cursor(cursor: int) -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"UPDATE {table} SET cursor = %s WHERE session_id = %s", (cursor, SID))

    return Store(
        lambda: PostgresStorage(url, table=table),
        lambda: AsyncPostgresStorage(url, table=table),
        set_body,
        set_cursor,
    )


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    import redis

    from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage

    url = request.getfixturevalue("redis_url")
    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    raw = redis.Redis.from_url(url)
    request.addfinalizer(lambda: (raw.delete(prefix + SID), raw.close()))
    return Store(
        lambda: RedisStorage(url, prefix=prefix),
        lambda: AsyncRedisStorage(url, prefix=prefix),
        lambda body: raw.hset(prefix + SID, "body", body),
        lambda cursor: raw.hset(prefix + SID, "cursor", str(cursor)),
    )


def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

    shared = MemoryStorage()

    def set_body(body: bytes) -> None:
        shared._rows[SID] = (shared._rows[SID][0], body.decode("utf-8", "surrogateescape"))

    def set_cursor(cursor: int) -> None:
        shared._rows[SID] = (cursor, shared._rows[SID][1])

    return Store(lambda: shared, lambda: AsyncMemoryStorage(shared), set_body, set_cursor)


STORES = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    "redis": _redis,
}
MARKS = {"postgres": [pytest.mark.postgres], "redis": [pytest.mark.redis]}


@pytest.fixture(params=[pytest.param(n, marks=MARKS.get(n, [])) for n in STORES])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    made = STORES[request.param](tmp_path, request)
    made.seed()
    return made


MODES = pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])


def _never_retryable(error: BaseException) -> None:
    assert isinstance(error, ConfigError)
    assert not isinstance(error, StorageError)
    assert getattr(error, "retryable", None) is False


@MODES
@pytest.mark.parametrize("body", NOT_UTF8, ids=lambda b: b.hex())
def test_a_body_that_is_not_utf8_is_a_config_error(
    store: Store, is_async: bool, body: bytes
) -> None:
    store.set_body(body)
    with pytest.raises(ConfigError) as loaded:
        store.load(is_async)
    _never_retryable(loaded.value)
    assert "not UTF-8" in str(loaded.value)
    with pytest.raises(ConfigError) as resumed:
        store.resume(is_async)
    _never_retryable(resumed.value)


@MODES
def test_a_cursor_column_that_disagrees_with_the_body_is_refused(
    store: Store, is_async: bool
) -> None:
    assert store.load(is_async) == snapshot(1).to_json()  # agreeing: loads as saved
    store.set_cursor(5)
    with pytest.raises(StoredCursorMismatch) as caught:
        store.load(is_async)
    assert (caught.value.column, caught.value.body) == (5, 1)
    assert "5" in str(caught.value) and "1" in str(caught.value)
    _never_retryable(caught.value)
    with pytest.raises(StoredCursorMismatch):
        store.resume(is_async)


def test_the_memory_adapter_applies_the_same_load_rules(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    made = _memory(tmp_path, request)
    made.seed()
    made.set_cursor(3)
    with pytest.raises(StoredCursorMismatch):
        made.load(False)


# --------------------------------------------------------------------------- the shared rule
@pytest.mark.parametrize(
    ("text", "column"),
    [
        ('{"cursor":1}', 2),
        ('{"a":"}","cursor":7,"b":1}', 1),
        ('{"x":{"cursor":1},"cursor":2}', 1),  # nested key first: parsed, the top-level one wins
        ('{"cursor":1,"cursor":3}', 1),  # duplicate key: JSON.parse keeps the last
        ('{ "cursor" : 4 }', 1),  # not canonical: parsed
        ('{"cursor":2.0}', 1),
        ('{"cursor":1}', None),
        ('{"cursor":1}', b"2"),
    ],
)
def test_check_stored_cursor_reads_the_top_level_key_as_json_parse_does(
    text: str, column: object
) -> None:
    with pytest.raises(StoredCursorMismatch):
        check_stored_cursor(SID, column, text)


@pytest.mark.parametrize(
    ("text", "column"),
    [
        ('{"cursor":1}', 1),
        ('{"cursor":1}', b"1"),
        ('{"x":{"cursor":9},"cursor":2}', 2),
        ('{"cursor":9,"cursor":2}', 2),
        ('{"cursor":"2"}', 1),  # not a number: left to the decoder, which refuses it
        ("not json", 1),
        ("[1]", 1),
        ('{"no":1}', 1),
    ],
)
def test_check_stored_cursor_accepts_agreement_and_leaves_garbage_to_the_decoder(
    text: str, column: object
) -> None:
    check_stored_cursor(SID, column, text)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=64), column=st.integers(0, 5))
def test_any_stored_bytes_load_as_text_or_a_config_error(body: bytes, column: int) -> None:
    try:
        text = loaded_text(SID, body, column)
    except ConfigError as error:
        _never_retryable(error)
        return
    assert text == body.decode("utf-8")


# --------------------------------------------------------------------------- unvalidated snapshots
class HandsBack:
    """A third-party adapter whose ``load`` returns a snapshot object, as the port allows."""

    def __init__(self, value: object) -> None:
        self.value = value

    def load(self, session_id: str) -> object:
        return self.value

    def save(self, snapshot: object, expected_cursor: int | None) -> bool:
        raise AssertionError("resume must not save")


HOSTILE = {
    "cursor -7": {"cursor": -7},
    "protocol x": {"protocol": "x"},
    "version 99": {"version": 99},
    "bad session id": {"session_id": "bad id"},
    "input not bounded": {"confirmations": ({"token": "t"},)},
    "missing fields": None,
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_snapshot_built_without_validation_is_refused(name: str) -> None:
    good = snapshot(1)
    if HOSTILE[name] is None:
        hostile = SessionSnapshot.model_construct(session_id=SID)
    else:
        hostile = SessionSnapshot.model_construct(**{**dict(good), **HOSTILE[name]})
    with pytest.raises(ConfigError) as caught:
        resume_chat_session(DEFINITION, session_id=SID, storage=HandsBack(hostile))
    _never_retryable(caught.value)


def test_an_honest_snapshot_object_still_resumes() -> None:
    built = SessionSnapshot.model_construct(**dict(snapshot(4)))
    session = resume_chat_session(DEFINITION, session_id=SID, storage=HandsBack(built))
    assert session.cursor == 4


# --------------------------------------------------------------------------- fuzz
ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = [
    "protocol",
    "version",
    "session_id",
    "definition_id",
    "definition_revision",
    "updated_at",
    "cursor",
    "active_turn",
    "terminal_turns",
    "conversation",
    "confirmations",
]


@settings(max_examples=200, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(FIELDS), ANY, max_size=3))
def test_a_hostile_snapshot_from_storage_resumes_only_if_it_is_valid(
    changes: dict[str, Any],
) -> None:
    hostile = SessionSnapshot.model_construct(**{**dict(snapshot(1)), **changes})
    try:
        session = resume_chat_session(DEFINITION, session_id=SID, storage=HandsBack(hostile))
    except ConfigError as error:
        _never_retryable(error)
        return
    # Resumed: then its wire text is a valid envelope on its own, validated from scratch.
    revalidated = SessionSnapshot.model_validate_json(session.snapshot.to_json())
    assert revalidated == session.snapshot


@settings(max_examples=40, deadline=None)
@given(body=st.binary(max_size=48) | st.text(max_size=24).map(str.encode), column=st.integers(0, 3))
def test_any_bytes_in_a_real_sqlite_row_load_as_text_or_a_config_error(
    tmp_path_factory: pytest.TempPathFactory, body: bytes, column: int
) -> None:
    from akchat_fsm.storage.sqlite import SQLiteStorage

    path = tmp_path_factory.mktemp("fuzz") / "s.db"
    with SQLiteStorage(path) as adapter:
        assert adapter.save(snapshot(1), None)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE akchat_sessions SET body = ?, cursor = ?", (body, column))
    with SQLiteStorage(path) as adapter:
        try:
            text = adapter.load(SID)
        except ConfigError as error:
            _never_retryable(error)
        else:
            assert text == body.decode("utf-8")
        try:
            resume_chat_session(DEFINITION, session_id=SID, storage=adapter)
        except ConfigError as error:
            _never_retryable(error)
