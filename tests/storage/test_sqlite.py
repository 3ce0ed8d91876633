"""SQLite-specific behaviour: pragmas, busy lock mapping, processes, closing, URLs."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
from pathlib import Path

import pytest
from storage_harness import snap

from akchat_fsm.errors import ConfigError, StorageUnavailable
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.storage.url import open_async_storage, open_storage


def test_file_database_uses_wal_and_full_sync(tmp_path: Path) -> None:
    with SQLiteStorage(tmp_path / "a.db") as st:
        assert st.load("x") is None
        assert st._conn is not None
        assert st._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert st._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert st._conn.isolation_level is None


def test_a_held_write_lock_maps_to_storage_unavailable(tmp_path: Path, unique_id: str) -> None:
    path = tmp_path / "locked.db"
    with SQLiteStorage(path, busy_timeout=0.05) as st:
        assert st.save(snap(unique_id, 1), None)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(StorageUnavailable) as info:
                st.save(snap(unique_id, 2), 1)
            assert isinstance(info.value.__cause__, sqlite3.OperationalError)
            assert st._conn is not None and not st._conn.in_transaction
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # Nothing was applied, and the adapter works again once the lock is gone.
        assert json.loads(st.load(unique_id) or "")["cursor"] == 1
        assert st.save(snap(unique_id, 2), 1) is True


def test_close_releases_the_connection(tmp_path: Path, unique_id: str) -> None:
    st = SQLiteStorage(tmp_path / "c.db")
    assert st.save(snap(unique_id, 1), None)
    conn = st._conn
    assert conn is not None and not conn.in_transaction
    st.close()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")
    with pytest.raises(StorageUnavailable):
        st.load(unique_id)
    st.close()  # idempotent


def test_unopenable_path_is_storage_unavailable_until_it_opens(
    tmp_path: Path, unique_id: str
) -> None:
    folder = tmp_path / "missing-dir"
    with SQLiteStorage(folder / "x.db") as st:  # no I/O yet
        with pytest.raises(StorageUnavailable) as info:
            st.load(unique_id)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        with pytest.raises(StorageUnavailable):
            st.save(snap(unique_id, 1), None)
        assert st.open_connections() == 0
        folder.mkdir()
        assert st.save(snap(unique_id, 1), None) is True


def test_bad_table_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        SQLiteStorage(tmp_path / "x.db", table="x; DROP TABLE y")


def test_table_name_keeps_stores_apart(tmp_path: Path, unique_id: str) -> None:
    path = tmp_path / "two.db"
    with SQLiteStorage(path, table="a") as a, SQLiteStorage(path, table="b") as b:
        assert a.save(snap(unique_id, 1), None)
        assert b.load(unique_id) is None


def _count(path: str, session_id: str, n: int, barrier: object, out: object) -> None:
    acked = 0
    with open_storage(f"sqlite:///{path}") as st:
        barrier.wait()  # type: ignore[attr-defined]
        while acked < n:
            current = json.loads(str(st.load(session_id)))["cursor"]
            if st.save(snap(session_id, current + 1), current):
                acked += 1
    out.put(acked)  # type: ignore[attr-defined]


def test_four_processes_lose_no_update(tmp_path: Path, unique_id: str) -> None:
    path = str(tmp_path / "procs.db")
    with SQLiteStorage(path) as st:
        assert st.save(snap(unique_id, 1), None)
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_count, args=(path, unique_id, 25, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    acked = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    with SQLiteStorage(path) as st:
        assert json.loads(st.load(unique_id) or "")["cursor"] == 1 + sum(acked) == 101


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite://", ":memory:"),
        ("sqlite:///rel.db", "rel.db"),
        ("sqlite:////abs/x.db", "/abs/x.db"),
    ],
)
def test_sqlite_url_paths(url: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import akchat_fsm.storage.url as url_mod

    seen: dict[str, object] = {}
    monkeypatch.setattr(url_mod, "SQLiteStorage", lambda **kw: seen.update(kw) or "opened")
    opened: object = url_mod.open_storage(url + "?table=t1&busy_timeout=0.5")
    assert opened == "opened"
    assert seen == {"path": path, "table": "t1", "busy_timeout": 0.5, "read_only": False}


def test_url_opens_working_adapters(tmp_path: Path, unique_id: str) -> None:
    with open_storage(f"sqlite:///{tmp_path / 'u.db'}") as st:
        assert st.save(snap(unique_id, 1), None)
        assert json.loads(str(st.load(unique_id)))["cursor"] == 1
    with open_storage("memory://") as st:
        assert st.load(unique_id) is None


@pytest.mark.parametrize(
    "url",
    [
        "mysql://x",
        "nope",
        "memory://?x=1",
        "sqlite:///x.db?bogus=1",
        "sqlite:///x.db?busy_timeout=abc",
        "sqlite:///x.db?busy_timeout=-1",
        "sqlite://host/x.db",
        7,
    ],
)
def test_bad_urls_are_config_errors(url: object) -> None:
    with pytest.raises(ConfigError):
        open_storage(url)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        open_async_storage(url)  # type: ignore[arg-type]


def test_a_failing_commit_is_outcome_unknown_and_anything_earlier_is_not() -> None:
    from akchat_fsm.errors import OutcomeUnknown
    from akchat_fsm.storage.sqlite import map_sqlite_error

    exc = sqlite3.OperationalError("disk I/O error")
    assert isinstance(map_sqlite_error(exc, at_commit=True), OutcomeUnknown)
    assert isinstance(map_sqlite_error(exc), StorageUnavailable)


def test_a_held_write_lock_applies_no_record_write(tmp_path: Path, unique_id: str) -> None:
    path = tmp_path / "locked.db"
    with SQLiteStorage(path, busy_timeout=0.05) as st:
        assert st.save(snap(unique_id, 1), None)
        assert st.save_record(unique_id, "call:a", '"one"', None)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            for call in (
                lambda: st.save_record(unique_id, "call:a", '"two"', 1, processing=True),
                lambda: st.delete_record(unique_id, "call:a"),
                lambda: st.delete(unique_id),
            ):
                with pytest.raises(StorageUnavailable) as info:
                    call()
                assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert st.load_record(unique_id, "call:a") == (1, '"one"')
        assert st.load(unique_id) is not None
        assert st.list_processing() == []


def test_an_upgrade_that_cannot_take_the_lock_is_retried_on_the_next_call(
    tmp_path: Path, unique_id: str
) -> None:
    path = tmp_path / "old.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute(
        "CREATE TABLE akchat_sessions (session_id TEXT PRIMARY KEY NOT NULL,"
        " cursor INTEGER NOT NULL, body TEXT NOT NULL)"
    )
    old.execute("BEGIN IMMEDIATE")  # a 0.1.0 writer holds the lock while we first connect
    with SQLiteStorage(path, busy_timeout=0.05) as st:
        with pytest.raises(StorageUnavailable):
            st.list_processing()
        old.execute("ROLLBACK")
        assert st.save(snap(unique_id, 1), None)  # connects again, upgrades, saves
        assert st.list_processing() == []
    columns = {row[1] for row in old.execute("PRAGMA table_info(akchat_sessions)")}
    assert {"processing", "written_ms"} <= columns
    old.close()


def test_opening_a_rollback_journal_file_waits_for_a_writer_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Switching to WAL while another connection writes is refused at once by SQLite (no busy
    handler); the adapter retries within busy_timeout instead of reporting StorageUnavailable."""
    import threading

    from akchat_fsm.storage import sqlite as adapter

    path = tmp_path / "created-elsewhere.db"
    writer = sqlite3.connect(path, isolation_level=None)  # rollback journal, not WAL
    writer.execute("CREATE TABLE other (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO other VALUES (1)")
    retried = threading.Event()

    def pause() -> None:  # called only when the pragma met the lock
        retried.set()

    monkeypatch.setattr(adapter, "_pause", pause)
    box: dict[str, object] = {}
    store = SQLiteStorage(path, busy_timeout=30)
    thread = threading.Thread(target=lambda: box.setdefault("loaded", _load_or_error(store)))
    thread.start()
    try:
        assert retried.wait(timeout=30), f"the pragma never met the lock: {box}"
    finally:
        writer.execute("COMMIT")
        writer.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert box["loaded"] is None  # opened, table created, nothing stored: no error
    store.close()


def _load_or_error(store: SQLiteStorage) -> object:
    try:
        return store.load("s1")
    except Exception as exc:
        return exc
