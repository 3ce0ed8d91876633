"""Hostile or corrupt stored bridge records fail cheaply with ``ConfigError`` (ADR-0103).

A record is written straight into each real store (memory, SQLite, PostgreSQL, Redis) through
the ``RecordStorage`` capability, as anything sharing the store could, then read by every bridge
reader: the operator view (``read_bridge_records``, sync and async), the tool ledger, a bridge's
own run reads, and ``akchat-fsm inspect``. 100,000 nested arrays used to raise
``RecursionError`` out of ``json.loads``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from akchat_fsm.cli import main
from akchat_fsm.errors import ConfigError
from akchat_fsm.integrations.ledger import AsyncToolLedger, ToolLedger
from akchat_fsm.integrations.records import read_bridge_records, read_bridge_records_async
from akchat_fsm.storage.checks import MAX_RECORD_CHARS
from akchat_fsm.wire.session import SessionSnapshot
from cleanup import drop_redis_prefix_at, sql_tables

SID = "s-hostile"
DEEP = "[" * 100_000 + "]" * 100_000
#: The deepest nesting a stored record may hold (docs/integrations/ledger.md, ADR-0103).
MAX_RECORD_DEPTH = 512


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _memory(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any], str]:
    from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

    shared = MemoryStorage()
    return shared, lambda: AsyncMemoryStorage(shared), ""


def _sqlite(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any], str]:
    from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage

    path = tmp_path / "hostile.db"
    return SQLiteStorage(path), lambda: AsyncSQLiteStorage(path), f"sqlite:///{path}"


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any], str]:
    import psycopg

    from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage

    url, table = request.getfixturevalue("pg_url"), f"t_hostile_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")

    request.addfinalizer(drop)
    return (
        PostgresStorage(url, table=table),
        lambda: AsyncPostgresStorage(url, table=table),
        f"{url}?table={table}",
    )


def _redis(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any], str]:

    from akchat_fsm.storage.redis import AsyncRedisStorage, RedisStorage

    url, prefix = request.getfixturevalue("redis_url"), f"akt:{uuid.uuid4().hex[:12]}:"

    request.addfinalizer(lambda: drop_redis_prefix_at(url, prefix))
    return (
        RedisStorage(url, prefix=prefix),
        lambda: AsyncRedisStorage(url, prefix=prefix),
        f"{url}?prefix={prefix}",
    )


STORES = {"memory": _memory, "sqlite": _sqlite, "postgres": _postgres, "redis": _redis}
MARKS = {"postgres": [pytest.mark.postgres], "redis": [pytest.mark.redis]}


@pytest.fixture(params=[pytest.param(n, marks=MARKS.get(n, [])) for n in STORES])
def store(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Any, Callable[[], Any], str]:
    sync, make_async, url = STORES[request.param](tmp_path, request)
    request.addfinalizer(sync.close)
    envelope = SessionSnapshot(
        session_id=SID,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-12-01T00:00:00.000Z",
        cursor=1,
        confirmations=(),
    )
    assert sync.save(envelope, None)
    return sync, make_async, url


def _typed(error: BaseException) -> None:
    assert isinstance(error, ConfigError) and error.retryable is False
    assert "nested deeper" in str(error)


@pytest.mark.parametrize("key", ["call:deep", "run:deep"])
def test_a_deeply_nested_record_is_a_config_error_for_every_reader(
    store: tuple[Any, Callable[[], Any], str], key: str
) -> None:
    sync, make_async, url = store
    assert sync.save_record(SID, key, DEEP, None)
    assert sync.load_record(SID, key) == (1, DEEP)  # the store holds it as written

    with pytest.raises(ConfigError) as caught:
        read_bridge_records(sync, SID)
    _typed(caught.value)

    async def read_async() -> None:
        storage = make_async()
        try:
            await read_bridge_records_async(storage, SID)
        finally:
            close = getattr(storage, "aclose", None)
            if close is not None:
                await close()

    with pytest.raises(ConfigError) as caught_async:
        asyncio.run(read_async())
    _typed(caught_async.value)

    if key.startswith("call:"):
        ledger = ToolLedger(sync, SID)
        for read in (lambda: ledger.get("deep"), ledger.entries, ledger.unknown):
            with pytest.raises(ConfigError) as from_ledger:
                read()
            _typed(from_ledger.value)
        with pytest.raises(ConfigError):
            asyncio.run(AsyncToolLedger(sync, SID).entries())

    if url:  # the operator's view: one line, exit 1, no traceback
        result = run("inspect", url, SID, "--ledger")
        assert result.exit_code == 1 and result.stdout == ""
        assert len(result.stderr.splitlines()) == 1
        assert "nested deeper" in result.stderr


def test_a_bridge_reading_its_own_deep_run_record_fails_typed(tmp_path: Path) -> None:
    from pai_agents import Call, Counts, build_agent

    from akchat_fsm import ChatDefinition, resume_chat_session
    from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
    from akchat_fsm.storage.memory import MemoryStorage

    storage = MemoryStorage()
    session = resume_chat_session(ChatDefinition("support"), session_id=SID, storage=storage)
    agent = build_agent([Call("send_email", {"to": "a@example.com"}, "c1")], Counts())
    bridge = PydanticAIBridge(agent, session, storage)
    paused = bridge.run("do it", run_id="r1")
    version, _ = storage.load_record(SID, "run:r1")  # type: ignore[misc]
    assert storage.save_record(SID, "run:r1", DEEP, version)
    with pytest.raises(ConfigError) as caught:
        bridge.approve(paused.pending[0].token)
    _typed(caught.value)


# --------------------------------------------------------------------------- the one parse point
class _OneStoredRecord:
    """A record store whose driver hands back ``stored`` as the text of one ledger entry: what
    a third-party adapter (or a row written by hand) may return, unchecked by any adapter."""

    def __init__(self, stored: object) -> None:
        self.stored = stored

    def load_record(self, session_id: str, key: str) -> Any:
        return (1, self.stored) if key == "call:c1" else None

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return ["call:c1"] if "call:c1".startswith(prefix) else []


def _read(stored: object) -> Any:
    """The operator's view of a session whose one ledger entry is stored as ``stored``."""
    return read_bridge_records(_OneStoredRecord(stored), SID)


@pytest.mark.parametrize(
    "text",
    [
        "[" * (MAX_RECORD_DEPTH + 1) + "]" * (MAX_RECORD_DEPTH + 1),
        '{"a":' * (MAX_RECORD_DEPTH + 1) + "1" + "}" * (MAX_RECORD_DEPTH + 1),
        "[" * 1_000_000,  # unbalanced: refused by depth, never parsed
    ],
    ids=["arrays", "objects", "unclosed"],
)
def test_nesting_beyond_the_bound_is_refused_before_parsing(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _read(text)
    _typed(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "[" * MAX_RECORD_DEPTH + "]" * MAX_RECORD_DEPTH,
        '{"s":"' + "[" * 5000 + '\\"' + "{" * 5000 + '"}',  # brackets inside a string
    ],
    ids=["at-the-bound", "brackets-in-strings"],
)
def test_nesting_at_the_bound_and_brackets_in_strings_parse(text: str) -> None:
    """Parsed, not refused for depth: the entry is then judged for what it is (not one)."""
    with pytest.raises(ConfigError) as caught:
        _read(text)
    assert "nested deeper" not in str(caught.value) and caught.value.retryable is False


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x" * (MAX_RECORD_CHARS + 1), "characters"),
        (b"\xff", "not UTF-8"),
        (7, "not text"),
        ("{nope", "not JSON"),
    ],
    ids=["too-long", "not-utf8", "not-text", "not-json"],
)
def test_other_corrupt_records_are_config_errors(text: Any, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _read(text)
    assert says in str(caught.value) and caught.value.retryable is False
