"""``SaveWithRecords`` (ADR-0141): the envelope's CAS and create-only records, all or nothing.

The kit's ``save_with_records`` check certifies the shipped adapters (tests/testing/
test_real_adapters.py runs it on every real server); here: it fails a store that writes one
half then the other (either order), the arguments are refused before any I/O, and on every
store that offers it each outcome of the combined write is one of the port's (applied,
refused with nothing written, or typed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from akchat_fsm import AlreadyResolved
from akchat_fsm.errors import ConfigError
from akchat_fsm.session import ChatDefinition, audit_trail, resume_chat_session
from akchat_fsm.storage import MemoryStorage, SaveWithRecords
from akchat_fsm.storage.capabilities import saves_with_records
from akchat_fsm.testing import check_session_storage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.session import ConfirmationBinding, SessionSnapshot


def make_snapshot(
    sid: str, cursor: int, marker: str = "m", *, confirmations: int = 0, processing: bool = False
) -> SessionSnapshot:
    """A valid envelope of ``sid`` at ``cursor`` (``marker``: its conversation state, which tells
    stored envelopes apart); ``processing``: its first confirmation is ``approving``."""
    return SessionSnapshot(
        session_id=sid,
        definition_id="swr",
        definition_revision=1,
        updated_at="2026-12-04T00:00:00.000Z",
        cursor=cursor,
        conversation={"state": marker, "decisions": []},
        confirmations=tuple(
            ConfirmationBinding(
                token=f"confirm-{i}",
                action="email.send",
                input={"n": i},
                tool_call_id=f"call-{i}",
                expires_at=99,
                status="approving" if processing and i == 0 else "pending",
            )
            for i in range(max(confirmations, 1 if processing else 0))
        ),
    )


_BROKEN = "save_with_records must write the envelope's compare-and-set and every record's create"


class _Forwarding:
    """A store over :class:`MemoryStorage`, its methods spelled out (no ``__getattr__``)."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        return self.inner.save(snapshot, expected_cursor)

    def delete(self, session_id: str) -> None:
        self.inner.delete(session_id)

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        return self.inner.save_record(session_id, key, text, *args, **kw)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return self.inner.list_records(session_id, prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)


class EnvelopeThenRecords(_Forwarding):
    """Broken: the CAS, then each record's create as its own write (a key that exists is
    found only after the envelope moved)."""

    def save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        if not self.inner.save(snapshot, expected):
            return False
        return all(self.inner.save_record(snapshot.session_id, k, t, None) for k, t in records)


class RecordsThenEnvelope(_Forwarding):
    """Broken: the creates first (ADR-0132's order), then the CAS: a stale cursor leaves
    records behind."""

    def save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        if not all(self.inner.save_record(snapshot.session_id, k, t, None) for k, t in records):
            return False
        return self.inner.save(snapshot, expected)


@pytest.mark.parametrize("broken", [EnvelopeThenRecords, RecordsThenEnvelope])
def test_the_kit_fails_a_store_that_writes_one_half_then_the_other(broken: type) -> None:
    inner = MemoryStorage()
    report = check_session_storage(lambda: broken(inner), only=["save_with_records"])
    (outcome,) = report.results
    assert outcome.status == "failed", outcome
    assert outcome.detail.startswith(_BROKEN), outcome.detail


def test_the_kit_passes_the_memory_store_and_skips_a_store_without_the_capability() -> None:
    inner = MemoryStorage()
    assert check_session_storage(lambda: inner, only=["save_with_records"]).ok
    (outcome,) = check_session_storage(
        lambda: _Forwarding(inner), only=["save_with_records"]
    ).results
    assert outcome.status == "skipped" and "SaveWithRecords" in outcome.detail


def test_the_capability_is_told_by_the_one_check() -> None:
    assert saves_with_records(MemoryStorage()) and isinstance(MemoryStorage(), SaveWithRecords)
    assert not saves_with_records(_Forwarding(MemoryStorage()))
    # a save_with_records without the records capability is not the capability
    assert not saves_with_records(type("Half", (), {"save_with_records": lambda *_: True})())


@pytest.mark.parametrize(
    "records",
    [
        [],
        (),
        "audit:a",
        [("k:1", "{}"), ("k:1", "{}")],
        [("bad key", "{}")],
        [("k:1", 7)],
        [["k:1", "{}"]],
        [("k:1", "{}", "x")],
        [(f"k:{i}", "{}") for i in range(17)],
        [("k:1", "\x00")],
    ],
    ids=repr,
)
def test_bad_records_are_refused_before_anything_is_written(records: Any) -> None:
    storage = MemoryStorage()
    sid = f"s-{uuid.uuid4().hex}"
    with pytest.raises(ConfigError):
        storage.save_with_records(make_snapshot(sid, 1), None, records)
    assert storage.load(sid) is None and storage.list_records(sid) == []


# --------------------------------------------------------------------------- every store
def _stores(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    kind = request.param
    if kind == "memory":
        store = MemoryStorage()
        yield store, store
        return
    if kind == "sqlite":
        from akchat_fsm.storage import SQLiteStorage

        a, b = SQLiteStorage(tmp_path / "s.db"), SQLiteStorage(tmp_path / "s.db")
    elif kind.startswith("postgres"):
        from akchat_fsm.storage.postgres import PostgresStorage

        pg_url = request.getfixturevalue("pg_url")
        table = f"t_{uuid.uuid4().hex[:12]}"
        isolation = "serializable" if kind.endswith("serializable") else "read_committed"
        a = PostgresStorage(pg_url, table=table, isolation=isolation)
        b = PostgresStorage(pg_url, table=table, isolation=isolation)
        request.addfinalizer(lambda: _drop_pg(pg_url, table))
    elif kind == "redis":
        from akchat_fsm.storage.redis import RedisStorage

        redis_url = request.getfixturevalue("redis_url")
        prefix = f"akt:{uuid.uuid4().hex[:12]}:"
        a, b = RedisStorage(redis_url, prefix=prefix), RedisStorage(redis_url, prefix=prefix)
        request.addfinalizer(lambda: _drop_redis(redis_url, prefix))
    else:
        from akchat_fsm.storage.url import open_storage

        mysql_url = request.getfixturevalue("mysql_url")
        table = f"t_{uuid.uuid4().hex[:12]}"
        a = open_storage(f"{mysql_url}?table={table}")
        b = open_storage(f"{mysql_url}?table={table}")
        request.addfinalizer(lambda: _drop_mysql(mysql_url, table))
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _drop_pg(pg_url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


def _drop_redis(redis_url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def _drop_mysql(mysql_url: str, table: str) -> None:
    from storage_harness import drop_mysql_tables

    drop_mysql_tables(mysql_url, table)


STORES = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-serializable", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("redis", marks=pytest.mark.redis),
]


@pytest.fixture(params=STORES)
def two(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[Any, Any]]:
    """Two clients of one store (the same object for the in-memory one)."""
    yield from _stores(request, tmp_path)


def _audit(sid: str, cursor: int) -> str:
    return f"audit:tok-{sid[-6:]}:{cursor:016d}"


def test_an_existing_entry_key_refuses_the_claim_and_writes_nothing(two: tuple[Any, Any]) -> None:
    """Mixed versions: a decider of ADR-0132's protocol created the entry at cursor 1; the
    combined write of another decider at 1 must apply nothing, whichever client asks."""
    a, b = two
    sid = f"s-{uuid.uuid4().hex}"
    assert a.save(make_snapshot(sid, 1, "one"), None) is True
    assert b.save_record(sid, _audit(sid, 1), '{"by":"old"}', None) is True
    claim = make_snapshot(sid, 2, "claimed", processing=True)
    assert a.save_with_records(claim, 1, [(_audit(sid, 1), '{"by":"new"}')]) is False
    assert '"state":"one"' in b.load(sid)
    assert b.load_record(sid, _audit(sid, 1)) == (1, '{"by":"old"}')
    assert sid not in {row.session_id for row in b.list_processing(limit=1000)}


def test_the_combined_write_moves_the_indexes_with_the_envelope(two: tuple[Any, Any]) -> None:
    """Applied: the envelope, its processing and pending rows, the entry and its audit row,
    all visible to another client at once; version 1, like ``save_record(..., None)``."""
    a, b = two
    sid = f"s-{uuid.uuid4().hex}"
    assert a.save(make_snapshot(sid, 1, "one", confirmations=2), None) is True
    assert b.find_token("confirm-0") is not None
    claim = make_snapshot(sid, 2, "claimed", processing=True, confirmations=2)
    key = _audit(sid, 1)
    assert a.save_with_records(claim, 1, [(key, '{"by":"new"}')]) is True
    assert '"state":"claimed"' in b.load(sid)
    assert b.load_record(sid, key) == (1, '{"by":"new"}')
    assert sid in {row.session_id for row in b.list_processing(limit=1000)}
    pending = b.list_pending(session_id=sid).items
    assert [p.token for p in pending] == ["confirm-1"]  # confirm-0 is claimed now
    listed = b.list_audit(limit=1000)
    keys: list[tuple[str, str]] = [(r.session_id, r.key) for r in listed.items]
    after = listed.next_after
    while after is not None:
        page = b.list_audit(after=after, limit=1000)
        keys += [(r.session_id, r.key) for r in page.items]
        after = page.next_after
    assert (sid, key) in keys


def test_a_stale_cursor_creates_no_record(two: tuple[Any, Any]) -> None:
    a, b = two
    sid = f"s-{uuid.uuid4().hex}"
    assert a.save(make_snapshot(sid, 1), None) is True
    assert a.save(make_snapshot(sid, 2), 1) is True
    assert b.save_with_records(make_snapshot(sid, 2), 1, [(_audit(sid, 1), "{}")]) is False
    assert a.load_record(sid, _audit(sid, 1)) is None


# --------------------------------------------------------------------------- the session
class Store:
    """A session's store over ``inner`` that counts its durable writes; ``atomic=False``
    hides ``save_with_records`` (a process of ADR-0132's protocol, or a store without the
    capability). ``before_claim``: called once, before the first claim (a save that holds a
    processing binding) is forwarded."""

    def __init__(
        self, inner: Any, *, atomic: bool, before_claim: Callable[[], None] | None = None
    ) -> None:
        self.inner, self.writes, self.before_claim = inner, 0, before_claim
        if atomic:
            self.save_with_records = self._save_with_records

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        hook, self.before_claim = self.before_claim, None
        if hook is not None and any(b.status.is_processing for b in snapshot.confirmations):
            hook()
        elif hook is not None:
            self.before_claim = hook
        self.writes += 1
        return bool(self.inner.save(snapshot, expected_cursor))

    def _save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        self.writes += 1
        return bool(self.inner.save_with_records(snapshot, expected, records))

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        self.writes += 1
        return bool(self.inner.save_record(session_id, key, text, *args, **kw))

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return list(self.inner.list_records(session_id, prefix))

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)


DEFINITION = ChatDefinition("support")
ARGS = {"to": "a@example.com", "amount": 12.5}


def _coordinator(store: Any, sid: str, upstream: RecordingUpstream) -> Any:
    return resume_chat_session(DEFINITION, session_id=sid, storage=store).confirmations_for(
        upstream
    )


@pytest.mark.parametrize("atomic", [True, False], ids=["SaveWithRecords", "ADR-0132"])
def test_an_approve_is_two_durable_writes_where_the_store_saves_with_records(
    two: tuple[Any, Any], atomic: bool
) -> None:
    a, _ = two
    sid, upstream = f"s-{uuid.uuid4().hex}", RecordingUpstream()
    store = Store(a, atomic=atomic)
    token = _coordinator(store, sid, upstream).propose("email.send", ARGS).token
    store.writes = 0
    assert _coordinator(store, sid, upstream).approve(token, decided_by="ana").status == "approved"
    assert store.writes == (
        2 if atomic else 3
    )  # (entry + claim), terminal | entry, claim, terminal
    (entry,) = audit_trail(a, sid)
    assert (entry.principal, entry.decided) == ("ana", True)
    assert len(upstream.calls) == 1


def test_a_decider_of_the_old_protocol_holding_the_cursor_is_fenced(
    two: tuple[Any, Any],
) -> None:
    """Mixed versions, the old process first: it created its entry at C and is about to
    send its claim at C when a new process decides. The combined write at C is refused (the
    key exists), the new decider fences C and claims at C + 1; the old claim then loses."""
    a, b = two
    sid, upstream = f"s-{uuid.uuid4().hex}", RecordingUpstream()
    token = _coordinator(Store(a, atomic=True), sid, upstream).propose("email.send", ARGS).token
    new = _coordinator(Store(b, atomic=True), sid, upstream)
    decided: list[str] = []

    def new_decides() -> None:
        decided.append(new.approve(token, decided_by="new").status)

    old = _coordinator(Store(a, atomic=False, before_claim=new_decides), sid, upstream)
    with pytest.raises(AlreadyResolved):
        old.reject(token, reason="no", decided_by="old")
    assert decided == ["approved"]
    trail = audit_trail(b, sid)
    assert [(e.principal, e.decided) for e in trail] == [("old", False), ("new", True)]
    assert trail[1].cursor == trail[0].cursor + 1  # the fence moved the cursor
    assert [call[0] for call in upstream.calls] == ["approve"]


def test_a_decider_of_the_old_protocol_behind_a_combined_write_loses(
    two: tuple[Any, Any],
) -> None:
    """Mixed versions, the new process first: its entry and claim applied at C together, so
    the old process, which read C, finds the key taken and re-reads a decided call."""
    a, b = two
    sid, upstream = f"s-{uuid.uuid4().hex}", RecordingUpstream()
    token = _coordinator(Store(a, atomic=True), sid, upstream).propose("email.send", ARGS).token
    old = _coordinator(Store(b, atomic=False), sid, upstream)  # read the call pending at C
    _coordinator(Store(a, atomic=True), sid, upstream).approve(token, decided_by="new")
    with pytest.raises(AlreadyResolved):
        old.reject(token, reason="no", decided_by="old")
    assert [(e.principal, e.decided) for e in audit_trail(b, sid)] == [("new", True)]
    assert len(upstream.calls) == 1


def test_a_failed_commit_of_the_combined_write_is_unknown_and_leaves_neither_half(
    tmp_path: Any,
) -> None:
    """SQLite checks a deferred foreign key at ``COMMIT``: a host trigger on the records table
    that writes a dangling reference makes the combined write's ``COMMIT`` fail. The adapter
    cannot tell from the error whether it reached the disk: ``OutcomeUnknown``, never
    "nothing applied"; rolled back, the store holds neither the envelope nor the record."""
    import sqlite3

    from akchat_fsm.errors import OutcomeUnknown
    from akchat_fsm.storage import SQLiteStorage

    path = tmp_path / "fk.db"
    sid = f"s-{uuid.uuid4().hex}"
    with SQLiteStorage(path) as storage:
        assert storage.save(make_snapshot(sid, 1, "one"), None)
        side = sqlite3.connect(path, isolation_level=None)
        side.executescript(
            """
            CREATE TABLE audit_parent (id INTEGER PRIMARY KEY);
            CREATE TABLE audit_log (parent INTEGER
                REFERENCES audit_parent (id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TRIGGER every_record AFTER INSERT ON akchat_sessions__records
                BEGIN INSERT INTO audit_log (parent) VALUES (-1); END;
            """
        )
        side.close()
        assert storage._conn is not None
        storage._conn.execute("PRAGMA foreign_keys = ON")  # enforced per connection
        with pytest.raises(OutcomeUnknown) as unknown:
            storage.save_with_records(make_snapshot(sid, 2, "two"), 1, [(_audit(sid, 1), "{}")])
        assert isinstance(unknown.value.__cause__, sqlite3.IntegrityError)
        assert '"state":"one"' in storage.load(sid)
        assert storage.load_record(sid, _audit(sid, 1)) is None
        storage._conn.execute("PRAGMA foreign_keys = OFF")
        assert storage.save_with_records(make_snapshot(sid, 2, "two"), 1, [(_audit(sid, 1), "{}")])
