"""The records capability and the processing index, on every adapter, sync and async.

Same harness as ``test_battery.py``: each body runs against memory, SQLite, PostgreSQL (both
isolations) and Redis, through the sync adapter and its asyncio twin. The in-place upgrade of
a table written by 0.1.0 runs on the SQL backends, the only ones with a schema.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

import pytest
from storage_harness import Client, Harness, snap

from akchat_fsm.errors import ConfigError
from akchat_fsm.storage import (
    AsyncProcessingIndex,
    AsyncRecordStorage,
    ProcessingIndex,
    ProcessingSession,
    RecordStorage,
)
from akchat_fsm.wire.session import SessionSnapshot


def envelope(session_id: str, cursor: int, *statuses: str) -> SessionSnapshot:
    """A v1 envelope with one confirmation per status (``approving`` is a processing one)."""
    return SessionSnapshot.from_wire(
        {
            "protocol": "agentskit.chat.session",
            "version": 1,
            "sessionId": session_id,
            "definitionId": "def-index",
            "definitionRevision": 1,
            "updatedAt": "2026-11-29T00:00:00.000Z",
            "cursor": cursor,
            "confirmations": [
                {
                    "token": f"tok-{i}",
                    "action": "refund",
                    # A decoy: an input may hold the same characters as a processing status.
                    "input": {"status": "approving"},
                    "toolCallId": f"call-{i}",
                    "expiresAt": 1_800_000_000_000,
                    "status": status,
                }
                for i, status in enumerate(statuses)
            ],
        }
    )


def listed(store: Client, **kwargs: Any) -> list[str]:
    rows = store.list_processing(**kwargs)
    assert all(isinstance(row, ProcessingSession) for row in rows)
    return [row.session_id for row in rows]


# --------------------------------------------------------------------------- records
def test_every_adapter_declares_both_capabilities(harness: Harness) -> None:
    adapter = harness.client().adapter
    if harness.is_async:
        assert isinstance(adapter, AsyncRecordStorage)
        assert isinstance(adapter, AsyncProcessingIndex)
    else:
        assert isinstance(adapter, RecordStorage)
        assert isinstance(adapter, ProcessingIndex)


def test_record_cas_follows_the_cursor_rule(store: Client, unique_id: str) -> None:
    assert store.load_record(unique_id, "call:a") is None
    assert store.save_record(unique_id, "call:a", '{"x":1}', 1) is False  # update of nothing
    assert store.save_record(unique_id, "call:a", '{"x":1}', None) is True
    assert store.save_record(unique_id, "call:a", '{"x":2}', None) is False  # create-only
    assert store.load_record(unique_id, "call:a") == (1, '{"x":1}')
    for stale in (0, 2, 7):
        assert store.save_record(unique_id, "call:a", '{"x":2}', stale) is False
    assert store.load_record(unique_id, "call:a") == (1, '{"x":1}')
    assert store.save_record(unique_id, "call:a", '{"x":2}', 1) is True
    assert store.save_record(unique_id, "call:a", '{"x":3}', 1) is False  # stale now
    assert store.save_record(unique_id, "call:a", '{"x":3}', 2) is True
    assert store.load_record(unique_id, "call:a") == (3, '{"x":3}')


def test_record_text_comes_back_exactly(store: Client, unique_id: str) -> None:
    text = '{"note":"café ☕ 𝄞 \\u0000","n":[1.5,null,true],"big":"' + "x" * 100_000 + '"}'
    assert store.save_record(unique_id, "run:r1", text, None)
    assert store.load_record(unique_id, "run:r1") == (1, text)


@pytest.mark.parametrize(
    "args",
    [
        ("", "{}", None),
        ("bad key", "{}", None),
        ("-leading", "{}", None),
        ("k", b"{}", None),
        ("k", "{}", -1),
        ("k", "{}", True),
        ("k", '{"a":"\x00"}', None),  # a raw NUL is not JSON text (PostgreSQL refuses it)
        ("k", '{"a":"\ud800"}', None),  # a lone surrogate cannot be encoded anywhere
    ],
)
def test_bad_record_arguments_are_config_errors_before_any_write(
    store: Client, unique_id: str, args: tuple[Any, ...]
) -> None:
    with pytest.raises(ConfigError):
        store.save_record(unique_id, *args)
    with pytest.raises(ConfigError):
        store.save_record("bad id", "k", "{}", None)
    assert store.list_records(unique_id) == []


def test_records_are_isolated_between_sessions_and_keys(store: Client, unique_id: str) -> None:
    other = f"{unique_id}-b"
    assert store.save_record(unique_id, "call:a", '"a"', None)
    assert store.save_record(unique_id, "call:b", '"b"', None)
    assert store.save_record(other, "call:a", '"other"', None)
    assert store.save_record(unique_id, "call:a", '"a2"', 1)
    assert store.load_record(unique_id, "call:a") == (2, '"a2"')
    assert store.load_record(unique_id, "call:b") == (1, '"b"')
    assert store.load_record(other, "call:a") == (1, '"other"')
    assert store.load(unique_id) is None  # records never create an envelope
    store.delete_record(unique_id, "call:a")
    assert store.load_record(unique_id, "call:a") is None
    assert store.load_record(other, "call:a") == (1, '"other"')
    store.delete_record(unique_id, "call:missing")  # not an error
    assert store.save_record(unique_id, "call:a", '"again"', None)  # re-created at version 1
    assert store.load_record(unique_id, "call:a") == (1, '"again"')


def test_list_records_filters_by_prefix_and_sorts(store: Client, unique_id: str) -> None:
    keys = ["run:2", "call:b", "call:a", "call:a:1", "callx", "Z", "a.b-c"]
    for key in keys:
        assert store.save_record(unique_id, key, "{}", None)
    assert store.save_record(f"{unique_id}-b", "call:zz", "{}", None)
    assert store.list_records(unique_id) == sorted(keys)
    assert store.list_records(unique_id, "call:") == ["call:a", "call:a:1", "call:b"]
    assert store.list_records(unique_id, "call") == ["call:a", "call:a:1", "call:b", "callx"]
    assert store.list_records(unique_id, "call:a") == ["call:a", "call:a:1"]
    assert store.list_records(unique_id, "run:") == ["run:2"]
    assert store.list_records(unique_id, "CALL") == []  # case matters
    assert store.list_records(unique_id, "%") == []  # no wildcard
    assert store.list_records(unique_id, "_all") == []
    assert store.list_records(unique_id, "call\x00") == []
    assert store.list_records(f"{unique_id}-none") == []


def test_delete_removes_the_envelope_and_every_record(store: Client, unique_id: str) -> None:
    other = f"{unique_id}-b"
    assert store.save(envelope(unique_id, 1, "approving"), None)
    for key in ("call:a", "call:b", "run:1"):
        assert store.save_record(unique_id, key, "{}", None, processing=True)
    assert store.save_record(other, "call:a", "{}", None, processing=True)
    store.delete(unique_id)
    assert store.load(unique_id) is None
    assert store.list_records(unique_id) == []
    assert store.load_record(unique_id, "call:a") is None
    assert listed(store) == [other]
    assert store.list_records(other) == ["call:a"]
    assert store.save_record(unique_id, "call:a", '"new"', None)  # a fresh start
    assert store.load_record(unique_id, "call:a") == (1, '"new"')


def test_delete_of_a_session_with_only_records(store: Client, unique_id: str) -> None:
    assert store.save_record(unique_id, "call:a", "{}", None, processing=True)
    store.delete(unique_id)
    assert store.list_records(unique_id) == []
    assert listed(store) == []


def test_exactly_one_record_creator_and_one_updater_among_eight(
    harness: Harness, unique_id: str
) -> None:
    created = harness.race(
        8, lambda c: c.save_record(unique_id, "call:a", '"x"', None, processing=True)
    )
    assert created.count(True) == 1
    texts = [f'"writer-{i}"' for i in range(8)]
    order = iter(range(8))
    lock = __import__("threading").Lock()

    def update(c: Client) -> tuple[bool, str]:
        with lock:
            text = texts[next(order)]
        return c.save_record(unique_id, "call:a", text, 1), text

    results = harness.race(8, update)
    winners = [text for ok, text in results if ok]
    assert len(winners) == 1
    assert harness.client().load_record(unique_id, "call:a") == (2, winners[0])


# --------------------------------------------------------------------------- index
def test_the_index_follows_envelope_saves(store: Client, unique_id: str) -> None:
    calm = f"{unique_id}-calm"
    assert store.save(envelope(calm, 1, "pending", "approved"), None)
    assert store.save(envelope(unique_id, 1, "pending"), None)
    assert listed(store) == []  # the decoy input does not count
    for cursor, status in enumerate(("approving", "rejecting", "expiring"), start=2):
        assert store.save(envelope(unique_id, cursor, "approved", status), cursor - 1)
        assert listed(store) == [unique_id]
    assert store.save(envelope(unique_id, 5, "approved", "expired"), 4)
    assert listed(store) == []
    assert store.save(envelope(unique_id, 5, "approving"), 4) is False  # a conflict writes nothing
    assert listed(store) == []
    store.delete(unique_id)
    assert store.save(envelope(unique_id, 1, "approving"), None)  # a create counts too
    assert listed(store) == [unique_id]


def test_the_index_follows_record_saves_and_deletes(store: Client, unique_id: str) -> None:
    assert store.save(snap(unique_id, 1), None)
    assert store.save_record(unique_id, "call:a", "{}", None)
    assert listed(store) == []
    assert store.save_record(unique_id, "call:a", "{}", 1, processing=True)
    assert store.save_record(unique_id, "call:b", "{}", None, processing=True)
    assert listed(store) == [unique_id]
    assert store.save_record(unique_id, "call:a", "{}", 2, processing=False)
    assert listed(store) == [unique_id]  # call:b still processing
    assert store.save_record(unique_id, "call:b", "{}", 5, processing=False) is False
    assert listed(store) == [unique_id]  # a refused save changes nothing
    store.delete_record(unique_id, "call:b")
    assert listed(store) == []
    # The envelope and the records count together: listed while either one is processing.
    assert store.save(envelope(unique_id, 2, "approving"), 1)
    assert store.save_record(unique_id, "call:c", "{}", None, processing=True)
    assert store.save(envelope(unique_id, 3, "approved"), 2)
    assert listed(store) == [unique_id]
    assert store.save_record(unique_id, "call:c", "{}", 1)
    assert listed(store) == []


def test_listing_is_oldest_first_and_filters_by_last_write(
    harness: Harness, unique_id: str
) -> None:
    store = harness.client()
    ids = [f"{unique_id}-{n}" for n in range(5)]
    for sid in ids:
        assert store.save(envelope(sid, 1, "approving"), None)
    assert store.save_record(ids[0], "call:a", "{}", None, processing=True)  # ids[0]: newest
    assert store.save(snap(f"{unique_id}-calm", 1), None)
    rows = store.list_processing()
    assert sorted(row.session_id for row in rows) == sorted(ids)
    assert rows == sorted(rows, key=lambda row: (row.last_write_ms, row.session_id))
    newest = max(row.last_write_ms for row in rows)
    assert next(row for row in rows if row.session_id == ids[0]).last_write_ms == newest
    for row in rows:
        before = store.list_processing(written_before_ms=row.last_write_ms)
        assert before == [r for r in rows if r.last_write_ms < row.last_write_ms]
    assert store.list_processing(written_before_ms=newest + 1) == rows
    assert store.list_processing(written_before_ms=0) == []
    assert store.list_processing(limit=2) == rows[:2]
    assert store.list_processing(limit=0) == []
    assert store.list_processing(written_before_ms=2**70, limit=2**70) == rows  # out of range
    assert store.list_processing(written_before_ms=-(2**70)) == []
    # Another client of the same store sees the same index.
    assert harness.client().list_processing() == rows
    with pytest.raises(ConfigError):
        store.list_processing(limit="10")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- upgrade
SQL_BACKENDS = ["sqlite"]
if os.environ.get("AKCHAT_STORAGE_SKIP_SERVERS") != "1":
    SQL_BACKENDS += [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-serializable", marks=pytest.mark.postgres),
    ]

OLD_SQLITE = (
    "CREATE TABLE akchat_sessions (session_id TEXT PRIMARY KEY NOT NULL,"
    " cursor INTEGER NOT NULL, body TEXT NOT NULL)"
)
OLD_POSTGRES = (
    "CREATE TABLE {t} (session_id text PRIMARY KEY, cursor bigint NOT NULL,"
    " body text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
)


def _write_old_table(harness: Harness, rows: list[SessionSnapshot]) -> None:
    """A table exactly as 0.1.0 created and wrote it."""
    extra = harness.backend.extra
    values = [(s.session_id, s.cursor, s.to_json()) for s in rows]
    if "path" in extra:
        with sqlite3.connect(extra["path"]) as conn:
            conn.execute(OLD_SQLITE)
            conn.executemany("INSERT INTO akchat_sessions VALUES (?, ?, ?)", values)
        return
    import psycopg

    with psycopg.connect(extra["pg_url"], autocommit=True) as conn:
        conn.execute(OLD_POSTGRES.format(t=extra["table"]))
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {extra['table']} (session_id, cursor, body) VALUES (%s, %s, %s)",
                values,
            )


@pytest.mark.parametrize("backend", SQL_BACKENDS, indirect=True)
def test_a_table_written_by_0_1_0_is_upgraded_in_place(harness: Harness, unique_id: str) -> None:
    stuck, calm, decoy = (f"{unique_id}-{n}" for n in ("stuck", "calm", "decoy"))
    _write_old_table(
        harness,
        [
            envelope(stuck, 3, "approved", "approving"),
            envelope(calm, 2, "approved"),
            envelope(decoy, 1, "pending"),  # "approving" appears in its input only
        ],
    )
    # Concurrent first connections: every one upgrades or finds it done, none fails.
    assert harness.race(4, lambda c: c.load(calm)) == [envelope(calm, 2, "approved").to_json()] * 4
    store = harness.client()
    assert listed(store) == [stuck]  # backfilled once, at the upgrade
    assert store.load(stuck) == envelope(stuck, 3, "approved", "approving").to_json()
    assert store.save(envelope(stuck, 4, "approved", "approved"), 3)
    assert store.save(envelope(calm, 3, "approving"), 2)
    assert listed(store) == [calm]
    assert store.save_record(decoy, "call:a", "{}", None, processing=True)
    assert sorted(listed(store)) == sorted([calm, decoy])
    store.delete(decoy)
    assert listed(store) == [calm]
