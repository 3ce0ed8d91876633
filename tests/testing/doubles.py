"""Small adapters used to test the kit itself: a correct one and deliberately broken ones.

They are test doubles of *adapters* (the kit's input), not of the servers the real adapters
talk to. Each broken adapter differs from :class:`DictStorage` (or, for the records and the
processing index, from :class:`MemoryStorage`) by one bug. ``shared(cls)`` is a factory whose
instances share one store, as instances over one database do; ``cls`` itself hands each
instance a private store.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any, TypeVar

from akchat_fsm.errors import OutcomeUnknown, StorageUnavailable
from akchat_fsm.storage import MemoryStorage
from akchat_fsm.storage.cas import prepare_record_save, prepare_save
from akchat_fsm.wire.session import SessionSnapshot

T = TypeVar("T")


class Store:
    """What instances of one store share: the data and its lock."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()


def shared(cls: Callable[[Store], T]) -> Callable[[], T]:
    """A factory whose instances all work on one store."""
    store = Store()
    return lambda: cls(store)


class DictStorage:
    """Correct: a dict of wire dicts behind one lock (private unless given a ``store``)."""

    def __init__(self, store: Store | None = None) -> None:
        store = store or Store()
        self._data = store.data
        self._lock = store.lock
        self.closed = False

    def load(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            stored = self._data.get(session_id)
            return copy.deepcopy(stored)

    def _matches(self, session_id: str, expected: int | None) -> bool:
        stored = self._data.get(session_id)
        current = None if stored is None else stored["cursor"]
        return current == expected

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            if not self._matches(snapshot.session_id, expected_cursor):
                return False
            self._data[snapshot.session_id] = snapshot.to_wire()
            return True

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)

    def open_connections(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


class AsyncDictStorage:
    """Correct asyncio twin: no await between compare and swap."""

    def __init__(self, store: Store | None = None) -> None:
        self._sync = DictStorage(store)

    async def load(self, session_id: str) -> dict[str, Any] | None:
        await asyncio.sleep(0)
        return self._sync.load(session_id)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        await asyncio.sleep(0)
        return self._sync.save(snapshot, expected_cursor)

    async def delete(self, session_id: str) -> None:
        await asyncio.sleep(0)
        self._sync.delete(session_id)


class SqliteStorage:
    """Correct and shared across processes: one row per session, BEGIN IMMEDIATE CAS."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        with self._conn() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS s (k TEXT PRIMARY KEY, c INT, body TEXT)")

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, isolation_level=None, timeout=30.0)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def load(self, session_id: str) -> str | None:
        row = self._conn().execute("SELECT body FROM s WHERE k=?", (session_id,)).fetchone()
        return None if row is None else str(row[0])

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        conn = self._conn()
        body = json.dumps(snapshot.to_wire())
        conn.execute("BEGIN IMMEDIATE")
        try:
            if expected_cursor is None:
                cur = conn.execute(
                    "INSERT INTO s VALUES (?,?,?) ON CONFLICT(k) DO NOTHING",
                    (snapshot.session_id, snapshot.cursor, body),
                )
            else:
                cur = conn.execute(
                    "UPDATE s SET c=?, body=? WHERE k=? AND c=?",
                    (snapshot.cursor, body, snapshot.session_id, expected_cursor),
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return cur.rowcount == 1

    def delete(self, session_id: str) -> None:
        self._conn().execute("DELETE FROM s WHERE k=?", (session_id,))

    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def close(self) -> None:
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self._local = threading.local()


class SqliteFactory:
    """Picklable factory for process racers."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self) -> SqliteStorage:
        return SqliteStorage(self.path)


# --------------------------------------------------------------------------- broken adapters


class LastWriteWins(DictStorage):
    def load(self, session_id: str) -> dict[str, Any] | None:
        stored = super().load(session_id)
        # A read takes a moment, as it does over any driver: without this, a worker can run
        # its whole read/save loop in one GIL slice and never race (the counter workload
        # then cannot see the lost updates it is there to catch).
        time.sleep(0.0002)
        return stored

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            self._data[snapshot.session_id] = snapshot.to_wire()
            return True


class AcceptsStaleCursor(DictStorage):
    """Compares with <= instead of ==: a stale expected cursor still writes."""

    def _matches(self, session_id: str, expected: int | None) -> bool:
        stored = self._data.get(session_id)
        if stored is None:
            return expected is None
        return expected is not None and expected <= stored["cursor"]


class CheckThenAct(DictStorage):
    """Reads, yields, then writes: the compare and the swap are not atomic."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            ok = self._matches(snapshot.session_id, expected_cursor)
        time.sleep(0.001)
        if not ok:
            return False
        with self._lock:
            self._data[snapshot.session_id] = snapshot.to_wire()
        return True


class LosesAcknowledgedWrite(DictStorage):
    """Acknowledges every 7th update without keeping it."""

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        self._n = 0

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            if not self._matches(snapshot.session_id, expected_cursor):
                return False
            self._n += 1
            if expected_cursor is None or self._n % 7:
                self._data[snapshot.session_id] = snapshot.to_wire()
            return True


class CreateOverwrites(DictStorage):
    """expected_cursor=None writes even when a record exists."""

    def _matches(self, session_id: str, expected: int | None) -> bool:
        if expected is None:
            return True
        return super()._matches(session_id, expected)


class RaisesOnConflict(DictStorage):
    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        if not super().save(snapshot, expected_cursor):
            raise RuntimeError("version mismatch")
        return True


class _FlakyDriver:
    """Stands in for a driver that times out on every third write, sometimes after commit."""

    def __init__(self) -> None:
        self.n = 0

    def maybe_timeout(self, applied: bool) -> None:
        self.n += 1
        if self.n % 3 == 0:
            raise TimeoutError(f"driver timeout (applied={applied})")


class TimeoutAsConflict(DictStorage):
    """Shares data with a healthy twin; maps driver timeouts to ``False`` (the Aerospike bug)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._driver = _FlakyDriver()

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        try:
            self._driver.maybe_timeout(applied=False)
        except TimeoutError:
            return False
        return super().save(snapshot, expected_cursor)


class MapsTimeouts(DictStorage):
    """Correct twin of :class:`TimeoutAsConflict`: timeouts become typed errors."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._driver = _FlakyDriver()
        self._after = False

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        try:
            self._driver.maybe_timeout(applied=False)
        except TimeoutError as exc:
            raise StorageUnavailable("timed out before sending") from exc
        ok = super().save(snapshot, expected_cursor)
        self._after = not self._after
        if self._after:
            try:
                self._driver.maybe_timeout(applied=True)
            except TimeoutError as exc:
                raise OutcomeUnknown("timed out after sending") from exc
        return ok


class LeaksDriverError(MapsTimeouts):
    """Lets the raw driver exception escape."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        self._driver.maybe_timeout(applied=False)
        return DictStorage.save(self, snapshot, expected_cursor)


class LeaksConnections(DictStorage):
    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        self._open = 0

    def load(self, session_id: str) -> dict[str, Any] | None:
        self._open += 1
        return super().load(session_id)

    def open_connections(self) -> int:
        return self._open


class StaleReads(DictStorage):
    """Every 4th load serves the previous version (a lagging replica or cache)."""

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        self._previous: dict[str, dict[str, Any]] = {}
        self._loads = 0

    def load(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            self._loads += 1
            if self._loads % 4 == 0 and session_id in self._previous:
                return copy.deepcopy(self._previous[session_id])
        return super().load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            current = self._data.get(snapshot.session_id)
            if not self._matches(snapshot.session_id, expected_cursor):
                return False
            if current is not None:
                self._previous[snapshot.session_id] = current
            self._data[snapshot.session_id] = snapshot.to_wire()
            return True


# --------------------------------------------------------------------------- cross-instance bugs


class PerInstanceCache(DictStorage):
    """Caches every envelope it loads or saves; another instance's write never invalidates it."""

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        self._cache: dict[str, dict[str, Any]] = {}

    def load(self, session_id: str) -> dict[str, Any] | None:
        if session_id in self._cache:
            return copy.deepcopy(self._cache[session_id])
        loaded = super().load(session_id)
        if loaded is not None:
            self._cache[session_id] = loaded
        return copy.deepcopy(loaded)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        ok = super().save(snapshot, expected_cursor)
        if ok:
            self._cache[snapshot.session_id] = snapshot.to_wire()
        return ok

    def delete(self, session_id: str) -> None:
        super().delete(session_id)
        self._cache.pop(session_id, None)


class SecondInstanceCreateOverwrites(DictStorage):
    """A create of a session this instance has not seen is an upsert (INSERT OR REPLACE)."""

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        self._seen: set[str] = set()

    def load(self, session_id: str) -> dict[str, Any] | None:
        loaded = super().load(session_id)
        if loaded is not None:
            self._seen.add(session_id)
        return loaded

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        sid = snapshot.session_id
        if expected_cursor is None and sid not in self._seen:
            with self._lock:
                self._data[sid] = snapshot.to_wire()
            self._seen.add(sid)
            return True
        ok = super().save(snapshot, expected_cursor)
        self._seen.add(sid)
        return ok


class _KeyedStorage(DictStorage):
    """Stores each envelope under ``storage_key(session_id)`` instead of the id itself."""

    def storage_key(self, session_id: str) -> str:
        raise NotImplementedError

    def load(self, session_id: str) -> dict[str, Any] | None:
        return super().load(self.storage_key(session_id))

    def _matches(self, session_id: str, expected: int | None) -> bool:
        return super()._matches(self.storage_key(session_id), expected)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        key = self.storage_key(snapshot.session_id)
        with self._lock:
            if not super()._matches(key, expected_cursor):
                return False
            self._data[key] = snapshot.to_wire()
            return True

    def delete(self, session_id: str) -> None:
        super().delete(self.storage_key(session_id))


class TruncatedKey36(_KeyedStorage):
    """A key column of 36 characters (a UUID's length) that silently truncates."""

    def storage_key(self, session_id: str) -> str:
        return session_id[:36]


class BucketedKey(_KeyedStorage):
    """Keys hashed into 4,096 buckets, one envelope per bucket."""

    def storage_key(self, session_id: str) -> str:
        return f"bucket-{zlib.crc32(session_id.encode()) % 4096}"


class CaseInsensitiveDelete(DictStorage):
    """delete matches ids case-insensitively (a ``lower(id) = lower(?)`` clause)."""

    def delete(self, session_id: str) -> None:
        with self._lock:
            for key in [k for k in self._data if k.lower() == session_id.lower()]:
                del self._data[key]


class KeepsFirstTenDecisions(DictStorage):
    """Stores only the first 10 route decisions of an envelope (a fixed-size child table)."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        wire = snapshot.to_wire()
        conversation = wire.get("conversation")
        if conversation is not None:
            conversation["decisions"] = conversation["decisions"][:10]
        with self._lock:
            if not self._matches(snapshot.session_id, expected_cursor):
                return False
            self._data[snapshot.session_id] = wire
            return True


# --------------------------------------------------------------------------- records and index


class _MemoryView(MemoryStorage):
    """A MemoryStorage instance over another one's data (instances over one database)."""

    def __init__(self, store: MemoryStorage) -> None:
        super().__init__()
        self._lock = store._lock
        self._rows = store._rows
        self._records = store._records
        self._index = store._index
        self._pending = store._pending
        self._audit = store._audit


def shared_memory(cls: Callable[[MemoryStorage], T]) -> Callable[[], T]:
    store = MemoryStorage()
    return lambda: cls(store)


class RecordLastWriteWins(_MemoryView):
    """save_record ignores the expected version: every record write wins."""

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        p = prepare_record_save(session_id, key, text, expected_version, processing)
        with self._lock:
            records = self._records.setdefault(p.session_id, {})
            old = records.get(p.key)
            records[p.key] = ((old[0] if old else 0) + 1, p.text, p.processing)
            envelope, busy, _ = self._index.get(p.session_id, (False, frozenset(), 0))
            busy = busy | {p.key} if p.processing else busy - {p.key}
            self._index[p.session_id] = (envelope, busy, p.written_ms)
        return True


class DeleteKeepsRecords(_MemoryView):
    """delete(session_id) forgets the envelope but leaves its records behind."""

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._rows.pop(session_id, None)
            self._index.pop(session_id, None)


class IndexNeverForgets(_MemoryView):
    """The processing index keeps a session once listed, even after it settled."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        prepared = prepare_save(snapshot, expected_cursor)
        was = self._index.get(prepared.session_id, (False, frozenset(), 0))[0]
        ok = super().save(snapshot, expected_cursor)
        if ok and was:
            with self._lock:
                _, busy, written = self._index[prepared.session_id]
                self._index[prepared.session_id] = (True, busy, written)
        return ok


class PendingOutsideTheCas(_MemoryView):
    """The pending rows are written before the compare-and-set, so a losing save changes them
    (an index kept by a second write instead of the envelope's own)."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        prepared = prepare_save(snapshot, expected_cursor)
        with self._lock:
            self._save_pending(prepared.session_id, prepared.pending, prepared.written_ms)
        return super().save(snapshot, expected_cursor)


class DeleteKeepsPending(_MemoryView):
    """delete(session_id) forgets the envelope and its records, not its pending rows."""

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._rows.pop(session_id, None)
            self._records.pop(session_id, None)
            self._index.pop(session_id, None)


class OffsetPages(_MemoryView):
    """Pages by position (``after`` is an offset into the sorted rows), not by key: a row that
    leaves before the cursor makes the next page skip one."""

    def list_pending(self, *, after: str | None = None, limit: int = 50, **query: Any) -> Any:
        from akchat_fsm.storage import PendingPage

        whole = super().list_pending(limit=1000, **query).items
        start = 0 if after is None else int(after.removeprefix("offset-"))
        items = whole[start : start + limit]
        more = start + limit < len(whole)
        return PendingPage(items, f"offset-{start + limit}" if more else None)


class AuditOutsideTheWrite(_MemoryView):
    """The audit index is stamped before the record's compare-and-set, so a create that
    loses (the key exists) moves the entry (an index kept by a second write)."""

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        if key.startswith("audit:"):
            # The second write's own clock, a second after the first's: it moves the entry.
            with self._lock:
                self._audit.setdefault(session_id, {})[key] = int(time.time() * 1000) + 1_000
        return super().save_record(session_id, key, text, expected_version, processing=processing)


class DeleteKeepsAudit(_MemoryView):
    """delete(session_id) forgets the envelope, its records and indexes, not its audit rows."""

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._rows.pop(session_id, None)
            self._records.pop(session_id, None)
            self._index.pop(session_id, None)
            self._pending.pop(session_id, None)


class OnlyInThisProcess:
    """A factory that pickles but cannot be rebuilt in another process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.store = Store()

    def __call__(self) -> DictStorage:
        return DictStorage(self.store)

    def __getstate__(self) -> dict[str, Any]:
        return {"pid": self.pid}

    def __setstate__(self, state: dict[str, Any]) -> None:
        if state["pid"] != os.getpid():
            raise RuntimeError("this factory only works in the process that made it")
        self.__dict__.update(state)


class ReturnsUnvalidatedSnapshots(DictStorage):
    """``load`` hands back a ``SessionSnapshot`` built without validation (protocol "x")."""

    def load(self, session_id: str) -> Any:
        with self._lock:
            stored = self._data.get(session_id)
        if stored is None:
            return None
        snapshot = SessionSnapshot.model_validate(stored)
        fields = {name: getattr(snapshot, name) for name in type(snapshot).model_fields}
        return SessionSnapshot.model_construct(**{**fields, "protocol": "x"})


# --------------------------------------------------------------------------- issue 27


class LaggingReplica(DictStorage):
    """Writes go to the primary (a correct CAS); reads come from a replica that has applied
    every write but the last ``LAG`` (deterministic: no clock, no sleep). Instances share one
    store and its replica, so nothing is private: the reads are stale."""

    LAG = 2

    def __init__(self, store: Store | None = None) -> None:
        super().__init__(store)
        store = store or Store()
        self._log: list[tuple[str, dict[str, Any] | None]] = store.__dict__.setdefault("log", [])

    def load(self, session_id: str) -> dict[str, Any] | None:
        with self._lock:
            applied = self._log[: max(0, len(self._log) - self.LAG)]
            for key, wire in reversed(applied):
                if key == session_id:
                    return copy.deepcopy(wire)
            return None

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            if not self._matches(snapshot.session_id, expected_cursor):
                return False
            wire = snapshot.to_wire()
            self._data[snapshot.session_id] = wire
            self._log.append((snapshot.session_id, copy.deepcopy(wire)))
            return True

    def delete(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)
            self._log.append((session_id, None))


class UntypedConflict(DictStorage):
    """A correct CAS, except that a conflict raises a plain ``ValueError`` instead of
    returning ``False`` (a driver's "version mismatch" let through)."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        with self._lock:
            if not self._matches(snapshot.session_id, expected_cursor):
                raise ValueError(f"version mismatch on {snapshot.session_id}")
            self._data[snapshot.session_id] = snapshot.to_wire()
            return True
