"""A cancelled async ``save`` is never reported as "not applied", and leaves nothing open.

Cancellation is the asyncio way of giving up on a call whose fate we then do not know: the
adapter must let ``CancelledError`` through (never turn it into ``False`` or a definite
``StorageUnavailable``), must not reuse a connection interrupted mid-protocol, and must leave
the store settled by a plain re-read.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from storage_harness import snap

from akchat_fsm.storage.postgres import AsyncPostgresStorage
from akchat_fsm.storage.redis import AsyncRedisStorage
from akchat_fsm.storage.sqlite import AsyncSQLiteStorage, SQLiteStorage
from cleanup import drop_redis_prefix


@pytest.fixture
def table(pg_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}, {name}__records, {name}__pending")


async def _cancel_when(task: asyncio.Task[bool], ready: Any) -> BaseException | bool:
    """Cancel ``task`` once ``ready()`` (polled between loop turns) says it is in flight."""
    for _ in range(4000):
        if await ready():
            break
        await asyncio.sleep(0.002)
    else:
        pytest.fail("the save never got in flight")
    task.cancel()
    try:
        return await task
    except BaseException as exc:  # the point is which exception
        return exc


@pytest.mark.postgres
def test_postgres_cancelled_save_raises_cancelled_and_leaks_nothing(
    pg_url: str, table: str, unique_id: str
) -> None:
    async def scenario() -> None:
        st = AsyncPostgresStorage(pg_url, table=table)
        admin = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
        holder = await psycopg.AsyncConnection.connect(pg_url)
        try:
            assert await st.save(snap(unique_id, 1), None)
            assert st._conn is not None
            pid = st._conn.info.backend_pid
            await holder.execute(
                f"SELECT 1 FROM {table} WHERE session_id = %s FOR UPDATE", (unique_id,)
            )

            async def blocked() -> bool:
                cur = await admin.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
                )
                row = await cur.fetchone()
                return bool(row and row[0] == "Lock")

            outcome = await _cancel_when(
                asyncio.create_task(st.save(snap(unique_id, 2), 1)), blocked
            )
            assert isinstance(outcome, asyncio.CancelledError), outcome
            await holder.rollback()
            # The interrupted connection is never reused, and no transaction stays open.
            assert st.open_connections() == 0
            cur = await admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state <> 'idle'"
                " AND state IS NOT NULL",
                (pid,),
            )
            row = await cur.fetchone()
            assert row is not None and row[0] == 0
            # Settled by re-reading; the adapter works on a fresh connection.
            stored = json.loads(await st.load(unique_id) or "")["cursor"]
            assert stored in (1, 2)
            assert await st.save(snap(unique_id, stored + 1), stored) is True
        finally:
            await holder.close()
            await admin.close()
            await st.aclose()

    asyncio.run(scenario())


@pytest.mark.redis
def test_redis_cancelled_save_raises_cancelled_and_leaks_nothing(
    redis_url: str, unique_id: str
) -> None:
    prefix = f"akt:{uuid.uuid4().hex[:12]}:"
    admin = redis.Redis.from_url(redis_url)

    async def scenario() -> None:
        st = AsyncRedisStorage(redis_url, prefix=prefix)
        try:
            assert await st.save(snap(unique_id, 1), None)
            # CLIENT PAUSE WRITE holds every write (EVALSHA included) until unpaused.
            admin.client_pause(5_000, all=False)  # unpaused as soon as we cancel
            task = asyncio.create_task(st.save(snap(unique_id, 2), 1))

            async def held() -> bool:  # our EVALSHA reached the server and waits there
                return any(
                    c.get("cmd") == "evalsha" and "b" in c.get("flags", "")
                    for c in admin.client_list()
                )

            try:
                outcome = await _cancel_when(task, held)
            finally:
                admin.client_unpause()
            assert isinstance(outcome, asyncio.CancelledError), outcome
            assert st.open_connections() == 0  # the interrupted connection was dropped
            stored = json.loads(await st.load(unique_id) or "")["cursor"]
            assert stored in (1, 2)  # the script may have run: only a re-read can tell
            assert await st.save(snap(unique_id, stored + 1), stored) is True
        finally:
            await st.aclose()

    try:
        asyncio.run(scenario())
    finally:
        drop_redis_prefix(admin, prefix)
        admin.close()


def test_sqlite_cancelled_save_raises_cancelled_and_may_still_apply(
    tmp_path: Path, unique_id: str
) -> None:
    """The asyncio twin runs the blocking save in a thread, which cancellation cannot stop."""
    path = tmp_path / "c.db"

    async def scenario() -> None:
        st = AsyncSQLiteStorage(path, busy_timeout=10.0)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            assert await st.save(snap(unique_id, 1), None)
            holder.execute("BEGIN IMMEDIATE")  # the save below waits for this write lock
            task = asyncio.create_task(st.save(snap(unique_id, 2), 1))

            async def running() -> bool:
                await asyncio.sleep(0.05)  # ordering only: the worker thread has started
                return True

            outcome = await _cancel_when(task, running)
            assert isinstance(outcome, asyncio.CancelledError), outcome
            holder.execute("ROLLBACK")
        finally:
            holder.close()
            await st.aclose()  # waits for the save still running in its thread
        with SQLiteStorage(path) as again:
            stored = json.loads(again.load(unique_id) or "")["cursor"]
            assert stored in (1, 2)  # only a re-read can tell
            assert again.save(snap(unique_id, stored + 1), stored) is True

    asyncio.run(scenario())
