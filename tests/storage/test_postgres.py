"""PostgreSQL under real faults: interleavings, isolation levels, timeouts, dropped backends."""

from __future__ import annotations

import json
import multiprocessing
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from storage_harness import Client, snap

from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageUnavailable
from akchat_fsm.storage.postgres import (
    WRITE_ATTEMPTS,
    AsyncPostgresStorage,
    PostgresStorage,
    map_pg_error,
    must_resend,
)
from akchat_fsm.storage.url import open_storage

pytestmark = pytest.mark.postgres


@pytest.fixture
def table(pg_url: str) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}, {name}__records, {name}__pending")


def _admin(pg_url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url, autocommit=True)


def _pid(st: PostgresStorage) -> int:
    assert st._conn is not None
    return st._conn.info.backend_pid


def _wait_until_blocked(admin: psycopg.Connection[Any], pid: int) -> None:
    """Wait until backend ``pid`` waits on a lock (no sleeps with fixed lengths)."""
    for _ in range(2000):
        row = admin.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row[0] == "Lock":
            return
        admin.execute("SELECT pg_sleep(0.005)")
    pytest.fail(f"backend {pid} never blocked on a lock")


def _wait_gone(admin: psycopg.Connection[Any], pid: int) -> None:
    """Wait until backend ``pid`` has exited."""
    query = "SELECT 1 FROM pg_stat_activity WHERE pid = %s"
    for _ in range(2000):
        if admin.execute(query, (pid,)).fetchone() is None:
            return
        admin.execute("SELECT pg_sleep(0.005)")
    pytest.fail(f"backend {pid} is still alive")


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=run)
    t.start()
    return t, box


@pytest.mark.parametrize("isolation", ["read_committed", "repeatable_read", "serializable"])
@pytest.mark.parametrize("winner", ["commit", "rollback"])
def test_blocked_loser_sees_the_winners_outcome(
    pg_url: str, table: str, unique_id: str, isolation: str, winner: str
) -> None:
    """s1.update(blocking) s2.cas s1.commit -> s2 False; s1.rollback -> s2 True."""
    with PostgresStorage(pg_url, table=table, isolation=isolation) as st, _admin(pg_url) as admin:
        assert st.save(snap(unique_id, 1), None)
        with psycopg.connect(pg_url) as holder:  # not autocommit: holds the row lock
            holder.execute(
                f"UPDATE {table} SET cursor = 2, body = 'other' WHERE session_id = %s",
                (unique_id,),
            )
            t, box = _in_thread(lambda: st.save(snap(unique_id, 2), 1))
            _wait_until_blocked(admin, _pid(st))
            holder.commit() if winner == "commit" else holder.rollback()
            t.join(timeout=30)
        assert "error" not in box, box
        assert box["result"] is (winner == "rollback")
        stored = st.load(unique_id)
        assert stored == "other" if winner == "commit" else json.loads(stored or "")["cursor"] == 2


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
def test_a_delete_that_loses_a_serialization_conflict_is_sent_again(
    pg_url: str, table: str, unique_id: str, isolation: str
) -> None:
    """s1.update(blocking) s2.delete s1.commit: s2 gets 40001 and must not report success
    with the row still there (the conformance kit's cross-instance history found this)."""
    with PostgresStorage(pg_url, table=table, isolation=isolation) as st, _admin(pg_url) as admin:
        assert st.save(snap(unique_id, 1), None)
        assert st.save_record(unique_id, "call:a", "{}", None)
        with psycopg.connect(pg_url) as holder:  # not autocommit: holds the row lock
            holder.execute(f"UPDATE {table} SET cursor = 2 WHERE session_id = %s", (unique_id,))
            t, box = _in_thread(lambda: st.delete(unique_id))
            _wait_until_blocked(admin, _pid(st))
            holder.commit()
            t.join(timeout=30)
        assert not t.is_alive()
        assert "error" not in box, box
        assert st.load(unique_id) is None
        assert st.load_record(unique_id, "call:a") is None


def test_a_real_serialization_failure_is_resent_never_a_conflict(pg_url: str, table: str) -> None:
    with _admin(pg_url) as a, psycopg.connect(pg_url) as b, psycopg.connect(pg_url) as c:
        a.execute(f"CREATE TABLE {table} (k int PRIMARY KEY, v int)")
        a.execute(f"INSERT INTO {table} VALUES (1, 0)")
        b.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        c.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        b.execute(f"SELECT v FROM {table} WHERE k = 1")
        c.execute(f"SELECT v FROM {table} WHERE k = 1")
        c.execute(f"UPDATE {table} SET v = 2 WHERE k = 1")
        c.commit()
        with pytest.raises(psycopg.errors.SerializationFailure) as info:
            b.execute(f"UPDATE {table} SET v = 1 WHERE k = 1")
        # Rolled back, nothing applied, and it does not say the compared cursor moved: the
        # adapter re-sends the statement; if refusals persist the call is StorageUnavailable.
        assert must_resend(info.value, write=True, attempt=0)
        assert not must_resend(info.value, write=False, attempt=0)
        assert not must_resend(info.value, write=True, attempt=WRITE_ATTEMPTS - 1)
        for write in (True, False):
            assert isinstance(
                map_pg_error(info.value, sent=True, write=write, broken=False), StorageUnavailable
            )


def _open(mode: str, pg_url: str, table: str, **kwargs: Any) -> Client:
    cls = AsyncPostgresStorage if mode == "async" else PostgresStorage
    return Client(cls(pg_url, table=table, **kwargs), mode == "async")


def _client_pid(c: Client) -> int:
    return int(c.adapter._conn.info.backend_pid)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_terminated_idle_connection_is_replaced_before_sending(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    c = _open(mode, pg_url, table)
    try:
        assert c.save(snap(unique_id, 1), None)
        old = _client_pid(c)
        with _admin(pg_url) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (old,))
            _wait_gone(admin, old)
        # The dead connection is noticed before anything is sent: the save runs on a new one.
        assert c.save(snap(unique_id, 2), 1) is True
        assert _client_pid(c) != old
        assert json.loads(c.load(unique_id) or "")["cursor"] == 2
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_backend_killed_while_the_save_is_in_flight_is_outcome_unknown(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    c = _open(mode, pg_url, table)
    try:
        assert c.save(snap(unique_id, 1), None)
        with _admin(pg_url) as admin, psycopg.connect(pg_url) as holder:
            holder.execute(f"SELECT 1 FROM {table} WHERE session_id = %s FOR UPDATE", (unique_id,))
            pid = _client_pid(c)
            t, box = _in_thread(lambda: c.save(snap(unique_id, 2), 1))
            _wait_until_blocked(admin, pid)
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            t.join(timeout=30)
            holder.rollback()
        assert isinstance(box.get("error"), OutcomeUnknown), box
        assert isinstance(box["error"].__cause__, psycopg.Error)
        # Settle by re-reading: here the statement died before committing.
        assert json.loads(c.load(unique_id) or "")["cursor"] == 1
        assert c.save(snap(unique_id, 2), 1) is True
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_statement_timeout_is_storage_unavailable_and_applies_nothing(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    c = _open(mode, pg_url, table, statement_timeout_ms=300)
    try:
        assert c.save(snap(unique_id, 1), None)
        with psycopg.connect(pg_url) as holder:
            holder.execute(f"SELECT 1 FROM {table} WHERE session_id = %s FOR UPDATE", (unique_id,))
            with pytest.raises(StorageUnavailable) as info:
                c.save(snap(unique_id, 2), 1)
            holder.rollback()
        assert getattr(info.value.__cause__, "sqlstate", None) == "57014"
        assert json.loads(c.load(unique_id) or "")["cursor"] == 1
    finally:
        c.close()


def test_lock_timeout_is_storage_unavailable(pg_url: str, table: str, unique_id: str) -> None:
    with PostgresStorage(pg_url, table=table) as st:
        assert st.save(snap(unique_id, 1), None)
        assert st._conn is not None
        st._conn.execute("SET lock_timeout = 50")
        with psycopg.connect(pg_url) as holder:
            holder.execute(f"SELECT 1 FROM {table} WHERE session_id = %s FOR UPDATE", (unique_id,))
            with pytest.raises(StorageUnavailable) as info:
                st.save(snap(unique_id, 2), 1)
            holder.rollback()
        assert getattr(info.value.__cause__, "sqlstate", None) == "55P03"
        assert json.loads(st.load(unique_id) or "")["cursor"] == 1


def test_statement_timeout_option_reaches_the_session(pg_url: str, table: str) -> None:
    with PostgresStorage(pg_url, table=table, statement_timeout_ms=1234) as st:
        assert st.load("x") is None
        assert st._conn is not None
        assert st._conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
        assert st._conn.execute("SHOW default_transaction_isolation").fetchone() == (
            "read committed",
        )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_error_raised_by_the_implicit_commit_is_definite_and_applies_nothing(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    """Autocommit: a deferred constraint trigger fails at COMMIT, after the UPDATE matched.

    The server replies with an error and rolls the transaction back, so this is
    ``StorageUnavailable`` (definite, retry is safe), never ``False`` and never success.
    """
    c = _open(mode, pg_url, table)
    try:
        assert c.save(snap(unique_id, 1), None)
        with _admin(pg_url) as admin:
            admin.execute(
                f"CREATE FUNCTION {table}_veto() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'vetoed at commit'; END $$"
            )
            admin.execute(
                f"CREATE CONSTRAINT TRIGGER veto AFTER UPDATE ON {table}"
                f" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {table}_veto()"
            )
            try:
                with pytest.raises(StorageUnavailable) as info:
                    c.save(snap(unique_id, 2), 1)
                assert getattr(info.value.__cause__, "sqlstate", None) == "P0001"
            finally:
                admin.execute(f"DROP TRIGGER veto ON {table}")
                admin.execute(f"DROP FUNCTION {table}_veto()")
        assert json.loads(c.load(unique_id) or "")["cursor"] == 1
        assert c.save(snap(unique_id, 2), 1) is True
    finally:
        c.close()


def test_racing_first_connections_create_the_table_once_without_errors(
    pg_url: str, unique_id: str
) -> None:
    """Eight adapters open on a table nobody created yet, released by one barrier.

    ``CREATE TABLE IF NOT EXISTS`` is not race-free in PostgreSQL (the losers can hit a
    unique violation in the catalog); the adapter must absorb that, every time.
    """
    for _ in range(3):
        table = f"t_{uuid.uuid4().hex[:12]}"
        barrier = threading.Barrier(8)
        adapters = [PostgresStorage(pg_url, table=table) for _ in range(8)]

        def first_call(st: PostgresStorage, barrier: threading.Barrier = barrier) -> Any:
            barrier.wait(timeout=30)
            return st.load(unique_id)

        try:
            runs = [_in_thread(lambda st=st: first_call(st)) for st in adapters]
            for t, _ in runs:
                t.join(timeout=60)
            assert [box for _, box in runs] == [{"result": None}] * 8
            assert adapters[0].save(snap(unique_id, 1), None) is True
            assert all(st.load(unique_id) is not None for st in adapters)
        finally:
            for st in adapters:
                st.close()
            with _admin(pg_url) as admin:
                admin.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


def test_unreachable_server_is_storage_unavailable(unique_id: str) -> None:
    with PostgresStorage("postgresql://127.0.0.1:1/test", connect_timeout=2) as st:
        with pytest.raises(StorageUnavailable):
            st.load(unique_id)
        with pytest.raises(StorageUnavailable):
            st.save(snap(unique_id, 1), None)


def test_close_leaves_no_connection_and_no_transaction(
    pg_url: str, table: str, unique_id: str
) -> None:
    st = PostgresStorage(pg_url, table=table)
    assert st.save(snap(unique_id, 1), None)
    assert st.load(unique_id) is not None
    assert st._conn is not None
    assert st._conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    pid = _pid(st)
    st.close()
    with _admin(pg_url) as admin:
        for _ in range(2000):
            if not admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone():
                break
        else:
            pytest.fail("the adapter's backend outlived close()")
    with pytest.raises(StorageUnavailable):
        st.load(unique_id)


@pytest.mark.parametrize(
    "kwargs",
    [{"table": "bad name"}, {"isolation": "chaos"}, {"statement_timeout_ms": -1}],
)
def test_bad_options_are_config_errors(pg_url: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        PostgresStorage(pg_url, **kwargs)


def _count(url: str, session_id: str, n: int, barrier: Any, out: Any) -> None:
    acked = 0
    with open_storage(url) as st:
        barrier.wait()
        while acked < n:
            current = json.loads(str(st.load(session_id)))["cursor"]
            if st.save(snap(session_id, current + 1), current):
                acked += 1
    out.put(acked)


@pytest.mark.parametrize("isolation", ["read_committed", "serializable"])
def test_four_processes_lose_no_update(
    pg_url: str, table: str, unique_id: str, isolation: str
) -> None:
    url = f"{pg_url}?table={table}&isolation={isolation}"
    with open_storage(url) as st:
        assert st.save(snap(unique_id, 1), None)
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_count, args=(url, unique_id, 10, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    acked = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    with open_storage(url) as st:
        assert json.loads(str(st.load(unique_id)))["cursor"] == 1 + sum(acked) == 41


# --------------------------------------------------------------------------- records
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_record_save_killed_in_flight_is_outcome_unknown(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    c = _open(mode, pg_url, table)
    try:
        assert c.save_record(unique_id, "call:a", '"one"', None)
        with _admin(pg_url) as admin, psycopg.connect(pg_url) as holder:
            holder.execute(
                f"SELECT 1 FROM {table}__records WHERE session_id = %s FOR UPDATE", (unique_id,)
            )
            pid = _client_pid(c)
            t, box = _in_thread(
                lambda: c.save_record(unique_id, "call:a", '"two"', 1, processing=True)
            )
            _wait_until_blocked(admin, pid)
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            t.join(timeout=30)
            holder.rollback()
        assert isinstance(box.get("error"), OutcomeUnknown), box
        assert isinstance(box["error"].__cause__, psycopg.Error)
        assert c.load_record(unique_id, "call:a") == (1, '"one"')  # it died before committing
        assert c.list_processing() == []
    finally:
        c.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_record_statement_timeout_is_storage_unavailable_and_applies_nothing(
    pg_url: str, table: str, unique_id: str, mode: str
) -> None:
    c = _open(mode, pg_url, table, statement_timeout_ms=300)
    try:
        assert c.save_record(unique_id, "call:a", '"one"', None)
        with psycopg.connect(pg_url) as holder:
            holder.execute(
                f"SELECT 1 FROM {table}__records WHERE session_id = %s FOR UPDATE", (unique_id,)
            )
            with pytest.raises(StorageUnavailable) as info:
                c.save_record(unique_id, "call:a", '"two"', 1, processing=True)
            with pytest.raises(StorageUnavailable):
                c.delete(unique_id)  # the cascade waits on the same row: nothing deleted
            holder.rollback()
        assert getattr(info.value.__cause__, "sqlstate", None) == "57014"
        assert c.load_record(unique_id, "call:a") == (1, '"one"')
        assert c.list_processing() == []
    finally:
        c.close()


def test_unreachable_server_is_storage_unavailable_for_records(unique_id: str) -> None:
    with PostgresStorage("postgresql://127.0.0.1:1/test", connect_timeout=2) as st:
        for call in (
            lambda: st.load_record(unique_id, "k"),
            lambda: st.save_record(unique_id, "k", "{}", None),
            lambda: st.list_records(unique_id),
            lambda: st.delete_record(unique_id, "k"),
            lambda: st.list_processing(),
        ):
            with pytest.raises(StorageUnavailable):
                call()


def test_long_table_names_derive_distinct_short_names(pg_url: str) -> None:
    long = "t" + uuid.uuid4().hex + "x" * 30  # 63 characters: "__records" would be truncated
    try:
        with PostgresStorage(pg_url, table=long) as st:
            assert st.save_record("s1", "call:a", "{}", None, processing=True)
            assert [row.session_id for row in st.list_processing()] == ["s1"]
            assert len(st._plan.records) <= 63 and st._plan.records != long
    finally:
        with _admin(pg_url) as admin:
            # every table it made starts with the unique head of its name (a derived one too)
            for (name,) in admin.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{long[:33]}%",)
            ).fetchall():
                admin.execute(f"DROP TABLE IF EXISTS {name}")
