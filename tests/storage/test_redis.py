"""Redis under real faults: script cache flushes, paused servers, killed connections."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import select
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio.retry
from hypothesis import settings, strategies
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from storage_harness import Client, snap

from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from akchat_fsm.storage.redis import (
    BACKFILL_SCRIPT,
    CAS_SHA,
    RECORD_SCRIPT,
    AsyncRedisStorage,
    RedisStorage,
    map_redis_error,
)
from cleanup import drop_redis_prefix_at, redis_keys

pytestmark = pytest.mark.redis
MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    value = f"akt:{uuid.uuid4().hex[:12]}:"
    yield value
    drop_redis_prefix_at(redis_url, value)


@pytest.fixture
def admin(redis_url: str) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(redis_url)
    yield r
    r.close()


def _open(mode: str, url: str, prefix: str, **kwargs: Any) -> Client:
    cls = AsyncRedisStorage if mode == "async" else RedisStorage
    return Client(cls(url, prefix=prefix, **kwargs), mode == "async")


@MODES
def test_stored_layout_is_a_hash_with_a_decimal_cursor(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(snap(unique_id, 41), None)
        assert c.save(snap(unique_id, 42), 41)
        stored = admin.hgetall(prefix + unique_id)
        assert stored[b"cursor"] == b"42"
        assert stored[b"body"] == c.load(unique_id).encode()
    finally:
        c.close()


@MODES
def test_script_cache_flush_is_recovered_without_a_second_write(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(snap(unique_id, 1), None)
        # Other clients of this shared server may re-cache the script at any time: flush
        # until it is gone (the window before our save is then a few microseconds).
        for _ in range(100):
            admin.script_flush()
            if admin.script_exists(CAS_SHA) == [False]:
                break
        else:
            pytest.fail("could not flush the script cache")
        assert c.save(snap(unique_id, 2), 1) is True  # NOSCRIPT -> EVAL once
        assert admin.script_exists(CAS_SHA) == [True]  # and cached again
        assert c.save(snap(unique_id, 2, note="late"), 1) is False
        assert json.loads(c.load(unique_id) or "")["cursor"] == 2
    finally:
        c.close()


@MODES
def test_unreachable_server_is_storage_unavailable(unique_id: str, mode: str) -> None:
    c = _open(mode, "redis://127.0.0.1:1/0", "p:", connect_timeout=1)
    try:
        for call in (
            lambda: c.load(unique_id),
            lambda: c.save(snap(unique_id, 1), None),
            lambda: c.delete(unique_id),
        ):
            with pytest.raises(StorageUnavailable) as info:
                call()
            assert isinstance(info.value.__cause__, redis.RedisError | OSError)
    finally:
        c.close()


@MODES
def test_killed_idle_connection_is_replaced_before_sending(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(snap(unique_id, 1), None)
        # Kill every connection this adapter's pool holds (found by their local ports).
        ports = _pool_ports(c.adapter)
        assert ports
        for port in ports:
            admin.client_kill(f"127.0.0.1:{port}")
        assert c.save(snap(unique_id, 2), 1) is True
        assert json.loads(c.load(unique_id) or "")["cursor"] == 2
    finally:
        c.close()


def _pool_ports(adapter: Any) -> list[int]:
    ports = []
    for conn in adapter.pool._available_connections:
        sock = getattr(conn, "_sock", None) or getattr(conn, "_writer", None)
        if sock is None:
            continue
        if hasattr(sock, "get_extra_info"):
            ports.append(sock.get_extra_info("sockname")[1])
        else:
            ports.append(sock.getsockname()[1])
    return ports


def _relay(redis_url: str) -> tuple[_Proxy, str]:
    parts = urlsplit(redis_url)
    proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    return proxy, f"redis://127.0.0.1:{proxy.port}{parts.path}"


@MODES
@pytest.mark.parametrize("query", ["", "?retry_on_timeout=true"])
def test_reply_timeout_on_a_write_is_outcome_unknown_and_did_apply(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str, query: str
) -> None:
    """The server runs our script, and the relay holds its reply until our timeout fires.

    The order is forced, not timed: the reply cannot arrive before we give up. Even when the
    URL asks redis-py to retry on timeouts: only the first reply is held, so a retried script
    would get its answer (a conflict: it finds its own write) and ``save`` would say False.
    """
    proxy, url = _relay(redis_url)
    # The timeout only ends the wait for the held reply; every other reply is a local hop,
    # given a second so that a loaded machine's scheduling cannot time it out.
    c = _open(mode, url + query, prefix, socket_timeout=1.0)
    try:
        assert c.save(snap(unique_id, 1), None)
        proxy.hold_next_reply()
        with pytest.raises(OutcomeUnknown) as info:
            c.save(snap(unique_id, 2), 1)
        assert isinstance(info.value.__cause__, redis.TimeoutError)
        assert proxy.held.wait(10)  # the reply we never got: the server did run the script
        # Settle by re-reading: the write did apply; a blind retry is a spurious conflict.
        assert admin.hget(prefix + unique_id, "cursor") == b"2"
        assert json.loads(c.load(unique_id) or "")["cursor"] == 2
        assert c.save(snap(unique_id, 2), 1) is False
    finally:
        proxy.shut()
        c.close()


@MODES
def test_a_key_of_another_type_is_a_config_error_and_writes_nothing(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    # A WRONGTYPE reply: the prefix holds data that is not the adapter's. Retrying cannot
    # mend it, so it must not be a retryable StorageUnavailable (a host's retry loop spins).
    admin.set(prefix + unique_id, "not a hash")
    c = _open(mode, redis_url, prefix)
    try:
        with pytest.raises(ConfigError, match="another type of value") as info:
            c.save(snap(unique_id, 1), None)
        assert not isinstance(info.value, StorageUnavailable)
        assert isinstance(info.value.__cause__, redis.ResponseError)
        assert admin.get(prefix + unique_id) == b"not a hash"
        with pytest.raises(ConfigError):
            c.load(unique_id)
    finally:
        c.close()


def test_other_error_replies_stay_storage_unavailable() -> None:
    busy = redis.ResponseError("BUSY Redis is busy running a script.")
    assert isinstance(map_redis_error(busy, phase="reply", write=True), StorageUnavailable)
    oom = redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")
    assert isinstance(map_redis_error(oom, phase="reply", write=False), StorageUnavailable)


def test_read_timeouts_are_never_unknown() -> None:
    exc = redis.TimeoutError("Timeout reading from socket")
    assert isinstance(map_redis_error(exc, phase="reply", write=False), StorageUnavailable)
    assert isinstance(map_redis_error(exc, phase="reply", write=True), OutcomeUnknown)
    assert isinstance(map_redis_error(exc, phase="send", write=True), StorageUnavailable)
    assert isinstance(map_redis_error(exc, phase="connect", write=True), StorageUnavailable)


@MODES
def test_prefixes_keep_stores_apart(redis_url: str, prefix: str, unique_id: str, mode: str) -> None:
    a = _open(mode, redis_url, prefix + "a:")
    b = _open(mode, redis_url, prefix + "b:")
    try:
        assert a.save(snap(unique_id, 1), None)
        assert b.load(unique_id) is None
        assert b.save(snap(unique_id, 1), None)
    finally:
        a.close()
        b.close()


def test_close_disconnects(redis_url: str, prefix: str, admin: redis.Redis, unique_id: str) -> None:
    st = RedisStorage(redis_url, prefix=prefix)
    assert st.save(snap(unique_id, 1), None)
    ports = _pool_ports(st)
    assert ports
    st.close()
    addrs = {client["addr"] for client in admin.client_list()}
    assert not any(addr.endswith(f":{port}") for addr in addrs for port in ports)


@pytest.mark.parametrize("query", ["", "?retry_on_timeout=true&retry_on_error=TimeoutError"])
def test_pool_has_no_retries(redis_url: str, query: str) -> None:
    # URL options override the pool's keyword arguments in redis-py: they must not bring
    # retries back either.
    st = RedisStorage(redis_url + query)
    assert st.pool.connection_kwargs["retry"].get_retries() == 0
    conn = st.pool.get_connection()  # what a call really uses, not just the pool's defaults
    try:
        assert conn.retry.get_retries() == 0
    finally:
        st.pool.release(conn)
        st.close()


def test_async_pool_has_no_retries(redis_url: str) -> None:
    async def check() -> None:
        st = AsyncRedisStorage(redis_url)
        conn = await st.pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            assert isinstance(conn.retry, redis.asyncio.retry.Retry)
            assert conn.retry.get_retries() == 0
            assert not conn.retry_on_timeout
        finally:
            await st.pool.release(conn)
            await st.aclose()

    asyncio.run(check())


@pytest.mark.parametrize(
    ("url", "prefix"), [("", "p:"), ("redis://x", "a\x00b"), ("http://nope", "p:")]
)
def test_bad_options_are_config_errors(url: str, prefix: str) -> None:
    with pytest.raises(ConfigError):
        RedisStorage(url, prefix=prefix)


class _BigSnapshot:
    """A duck-typed snapshot whose JSON text is far larger than the loopback socket buffers."""

    def __init__(self, session_id: str, cursor: int, size: int) -> None:
        self.session_id = session_id
        self.cursor = cursor
        self._text = json.dumps({"cursor": cursor, "pad": "p" * size})

    def to_json(self) -> str:
        return self._text


@MODES
def test_send_timeout_on_a_write_is_never_reported_as_nothing_applied(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    """The server stops reading (a relay we pause); our 64 MB write times out while being sent.

    Sync: the unsent bytes never reach the kernel, the command is incomplete, nothing runs,
    and ``StorageUnavailable`` is the truth. Async: the rest of the command sits in asyncio's
    transport buffer, which closing the transport still flushes, so the script may run later:
    anything but ``OutcomeUnknown`` would be a lie. (Regression: async said "nothing applied"
    and the write applied.)
    """
    parts = urlsplit(redis_url)
    proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    url = f"redis://127.0.0.1:{proxy.port}{parts.path}"
    c = _open(mode, url, prefix, socket_timeout=0.2)
    try:
        assert c.save(snap(unique_id, 1), None)
        proxy.reading.clear()  # the "server" stops reading: the next send fills the buffers
        with pytest.raises(StorageError) as info:
            c.save(_BigSnapshot(unique_id, 2, 64_000_000), 1)  # type: ignore[arg-type]
        if mode == "sync":
            assert "writing" in str(info.value.__cause__), info.value.__cause__  # the premise
            assert isinstance(info.value, StorageUnavailable)
        else:
            # asyncio may buffer the whole command and time out reading instead (Python 3.12+
            # does): whichever phase timed out, the write may still land.
            assert isinstance(info.value, OutcomeUnknown)
        c.close()
        proxy.reading.set()  # whatever was sent now reaches the real server
        if mode == "sync":
            # The relay forwards everything it got, then the hang-up: an incomplete command.
            # The server reads a connection's bytes before its hang-up, so once it has dropped
            # the relay's connections, whatever they carried has run (or never will).
            proxy.wait_until_the_server_dropped(admin)
            assert admin.hget(prefix + unique_id, "cursor") == b"1"
    finally:
        proxy.reading.set()
        proxy.shut()
        c.close()


class _Proxy:
    """A TCP relay to the real server that we can shut down: the server "goes away"."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = [self.listener]
        #: The relay's own addresses as the server sees them (``CLIENT LIST``'s ``addr``).
        self.upstream_addresses: list[str] = []
        #: Cleared: the relay stops reading what the client sends (a server that stopped reading).
        self.reading = threading.Event()
        self.reading.set()
        #: Set once the server's reply armed by ``hold_next_reply`` has reached the relay (so the
        #: server did run the command); that reply is never passed on.
        self.held = threading.Event()
        self._hold = threading.Lock()
        self._armed = False
        self._released = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def wait_until_the_server_dropped(self, admin: redis.Redis) -> None:
        for _ in range(2000):
            connected = {client["addr"] for client in admin.client_list()}
            if not connected.intersection(self.upstream_addresses):
                return
            time.sleep(0.005)  # polling a condition: the verdict does not depend on it
        pytest.fail(f"the server still has the relay's connections {self.upstream_addresses}")

    def hold_next_reply(self) -> None:
        """The next bytes any server connection sends back are kept from the client."""
        with self._hold:
            self._armed = True

    def _take_hold(self) -> bool:
        with self._hold:
            armed, self._armed = self._armed, False
        return armed

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            host, port = upstream.getsockname()[:2]
            self.upstream_addresses.append(f"{host}:{port}")
            for a, b, gate in ((client, upstream, self.reading), (upstream, client, None)):
                threading.Thread(target=self._pipe, args=(a, b, gate), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, gate: threading.Event | None) -> None:
        try:
            while True:
                if gate is not None:
                    gate.wait()
                data = src.recv(65536)
                if not data:
                    break
                if gate is None and self._take_hold():
                    self.held.set()
                    self._released.wait()  # until shut: the client never gets this reply
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def shut(self) -> None:
        self._released.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@MODES
def test_a_failed_reconnect_is_unavailable_and_strands_no_connection(
    redis_url: str, prefix: str, unique_id: str, mode: str
) -> None:
    """The server goes away between calls: the hang-up is noticed, the reconnect is refused."""
    parts = urlsplit(redis_url)
    proxy = _Proxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    c = _open(mode, f"redis://127.0.0.1:{proxy.port}{parts.path}", prefix)
    try:
        assert c.save(snap(unique_id, 1), None)
        proxy.shut()
        for _ in range(2000):  # wait until the pooled socket has seen the hang-up
            if _readable(_pooled(c.adapter)):
                break
            time.sleep(0.005)
        with pytest.raises(StorageUnavailable):
            c.save(snap(unique_id, 2), 1)
        assert not c.adapter.pool._in_use_connections
    finally:
        proxy.shut()
        c.close()


def _pooled(adapter: Any) -> Any:
    return next(iter(adapter.pool._available_connections))


def _readable(conn: Any) -> bool:
    """Has the pooled connection's socket seen the proxy hang up (sync or asyncio client)?"""
    sock = getattr(conn, "_sock", None)
    if sock is None:
        sock = conn._writer.get_extra_info("socket")
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


@MODES
def test_connection_dropped_while_waiting_for_the_reply_is_outcome_unknown(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    """Our script ran, and the connection drops while we wait for its reply: never "nothing
    applied" (``False`` or ``StorageUnavailable`` would invite a blind retry of a write that
    did run). The order is forced: the relay holds the reply and drops the connection only
    once the server has answered."""
    proxy, url = _relay(redis_url)
    c = _open(mode, url, prefix)
    dropper = threading.Thread(target=lambda: proxy.held.wait(10) and proxy.shut())
    try:
        assert c.save(snap(unique_id, 1), None)
        proxy.hold_next_reply()
        dropper.start()
        with pytest.raises(OutcomeUnknown) as info:
            c.save(snap(unique_id, 2), 1)
        assert isinstance(info.value.__cause__, redis.ConnectionError)
        assert proxy.held.is_set()
        assert admin.hget(prefix + unique_id, "cursor") == b"2"  # settled by re-reading
    finally:
        proxy.shut()
        dropper.join(timeout=10)
        c.close()
    assert not dropper.is_alive()


# --------------------------------------------------------------------------- records
@MODES
def test_records_and_the_index_layout(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(snap(unique_id, 1), None)
        assert c.save_record(unique_id, "call:a", '"x"', None, processing=True)
        assert c.save_record(unique_id, "call:b", '"y"', None, processing=True)
        records = admin.hgetall(prefix + unique_id + "#records")
        assert records[b"v:call:a"] == b"1" and records[b"b:call:a"] == b'"x"'
        assert records[b"#processing"] == b"2"
        [(member, score)] = admin.zrange(prefix + "#processing", 0, -1, withscores=True)
        assert member.decode() == unique_id
        assert c.list_processing()[0].last_write_ms == int(score)
        assert admin.hget(prefix + unique_id, "processing") == b"0"
        c.delete_record(unique_id, "call:a")
        assert c.save_record(unique_id, "call:b", '"z"', 1)  # settled
        assert b"#processing" not in admin.hgetall(prefix + unique_id + "#records")
        assert admin.zcard(prefix + "#processing") == 0
        c.delete(unique_id)
        assert admin.exists(prefix + unique_id, prefix + unique_id + "#records") == 0
    finally:
        c.close()


@MODES
def test_record_script_cache_flush_is_recovered(
    redis_url: str, prefix: str, admin: redis.Redis, unique_id: str, mode: str
) -> None:
    sha = hashlib.sha1(RECORD_SCRIPT.encode()).hexdigest()
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save_record(unique_id, "call:a", '"one"', None)
        for _ in range(100):
            admin.script_flush()
            if admin.script_exists(sha) == [False]:
                break
        else:
            pytest.fail("could not flush the script cache")
        assert c.save_record(unique_id, "call:a", '"two"', 1, processing=True) is True
        assert admin.script_exists(sha) == [True]
        assert c.save_record(unique_id, "call:a", '"late"', 1) is False
        assert c.load_record(unique_id, "call:a") == (2, '"two"')
        assert [row.session_id for row in c.list_processing()] == [unique_id]
    finally:
        c.close()


@MODES
def test_unreachable_server_is_storage_unavailable_for_records(unique_id: str, mode: str) -> None:
    c = _open(mode, "redis://127.0.0.1:1/0", "p:", connect_timeout=1)
    try:
        for call in (
            lambda: c.load_record(unique_id, "k"),
            lambda: c.save_record(unique_id, "k", "{}", None),
            lambda: c.list_records(unique_id),
            lambda: c.delete_record(unique_id, "k"),
            lambda: c.list_processing(),
        ):
            with pytest.raises(StorageUnavailable):
                call()
    finally:
        c.close()


# --------------------------------------------------------------------------- the pending index
# (ADR-0029, ADR-0088): the CAS script writes the rows, a losing save changes no byte, delete
# removes them, a store written before the index is backfilled once, read-only never writes.


def _pending_snap(sid: str, cursor: int, *pending: tuple[str, int], status: str = "pending") -> Any:
    from akchat_fsm import ConfirmationBinding, SessionSnapshot

    return SessionSnapshot(
        session_id=sid,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=tuple(
            ConfirmationBinding(
                token=f"tok-{sid}-{n}",
                action="pay" if n % 2 else "ship",
                input={"n": n},
                tool_call_id=f"call-{n}",
                expires_at=expires,
                status=status,
            )
            for n, expires in pending
        ),
    )


def _dump(admin: redis.Redis, prefix: str) -> dict[bytes, bytes | None]:
    return {key: admin.dump(key) for key in redis_keys(admin, prefix)}


@MODES
def test_a_losing_save_leaves_every_pending_key_byte_identical(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(_pending_snap("s-a", 0, (1, 100), (2, 200)), None)
        assert c._call("list_pending").items  # the backfill marker is written: keys settle
        before = _dump(admin, prefix)
        assert any(b"#pending" in key for key in before)
        assert not c.save(_pending_snap("s-a", 0, (3, 300)), None)  # create-only, exists
        assert not c.save(_pending_snap("s-a", 6, (1, 100), status="approving"), 5)  # stale
        assert _dump(admin, prefix) == before
    finally:
        c.close()


# Redis never rolls a script back: each write script checks every argument (and stored row) it
# parses before its first write, so a call that fails to parse late leaves the store as it was.
def _mangled_save(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    *head, _ = s._plan.save_command(_pending_snap("s-m", 1, (4, 400), (5, 500)), 0)
    return (*head, "soon")  # the last row's expiry: the first row is listed before it is read


def _short_save(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    return s._plan.save_command(_pending_snap("s-m", 1, (4, 400), (5, 500)), 0)[:-1]


def _bad_written_ms(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    command = list(s._plan.save_command(_pending_snap("s-m", 1, (4, 400)), 0))
    command[7], command[12] = "later", "1"  # ARGV[1] (the index's score), ARGV[6] processing
    return tuple(command)


def _bad_stored_count(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    admin.hset(prefix + "s-m#records", "#processing", "many")
    return s._plan.save_command(_pending_snap("s-m", 1, (4, 400)), 0)


def _bad_backfill_row(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    rows = ("tok-4", "call-4", "pay", "0000000000000400", "tok-5", "call-5", "pay", "soon")
    ns = s._plan.pending
    return s._plan._script(BACKFILL_SCRIPT, "s-m", 0, "0", "", "", "", ns, "0" * 16, *rows)


def _bad_record_ms(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    command = list(s._plan.save_record_command("s-m", "k", '"x"', None, True))
    command[7] = "later"
    return tuple(command)


def _bad_count_on_record_delete(
    s: RedisStorage, admin: redis.Redis, prefix: str
) -> tuple[Any, ...]:
    assert s.save_record("s-m", "k", '"x"', None, processing=True)
    admin.hset(prefix + "s-m#records", "#processing", "many")
    return s._plan.delete_record_command("s-m", "k")


def _bad_stored_row_on_delete(s: RedisStorage, admin: redis.Redis, prefix: str) -> tuple[Any, ...]:
    admin.hset(prefix + "s-m#pending", "tok-z", "not a row at all")
    return s._plan.delete_command("s-m")


@pytest.mark.parametrize(
    "mangle",
    [
        _mangled_save,
        _short_save,
        _bad_written_ms,
        _bad_stored_count,
        _bad_backfill_row,
        _bad_record_ms,
        _bad_count_on_record_delete,
        _bad_stored_row_on_delete,
    ],
)
def test_a_script_that_fails_to_parse_late_leaves_the_store_byte_identical(
    redis_url: str, prefix: str, admin: redis.Redis, mangle: Any
) -> None:
    s = RedisStorage(redis_url, prefix=prefix)
    try:
        assert s.save(_pending_snap("s-m", 0, (1, 100), (2, 200)), None)
        command = mangle(s, admin, prefix)
        before = _dump(admin, prefix)
        with pytest.raises(StorageUnavailable, match="akchat: "):  # the check's own reply
            s._call(command, write=True)
        assert _dump(admin, prefix) == before
    finally:
        s.close()


@MODES
def test_delete_leaves_no_pending_trace_of_the_session(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(_pending_snap("s-gone", 0, (1, 100), (2, 200)), None)
        assert c.save(_pending_snap("s-kept", 0, (3, 300)), None)
        c.delete("s-gone")
        assert not admin.exists(prefix + "s-gone#pending")
        for key in redis_keys(admin, f"{prefix}#pending:"):
            if admin.type(key) == b"zset":
                members = admin.zrange(key, 0, -1)
                assert not [m for m in members if b"s-gone" in m], key
        assert c._call("find_token", "tok-s-kept-3") == "s-kept"
        assert c._call("find_token", "tok-s-gone-1") is None
    finally:
        c.close()


def _write_old_envelope(admin: redis.Redis, prefix: str, snapshot: Any) -> None:
    """A session exactly as 0.1.0 (no processing field, no pending rows) stored it."""
    admin.hset(
        prefix + snapshot.session_id,
        mapping={"cursor": snapshot.cursor, "body": snapshot.to_json()},
    )


@MODES
def test_a_store_written_before_the_index_is_backfilled_once(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    c = _open(mode, redis_url, prefix)
    try:
        assert c.save(_pending_snap("s-new", 0, (1, 100)), None)  # indexed by its own save
        _write_old_envelope(admin, prefix, _pending_snap("s-old", 4, (2, 200), (3, 300)))
        _write_old_envelope(admin, prefix, _pending_snap("s-done", 1, (4, 50), status="expired"))
        # Not a valid envelope (yet it holds the marker text): left for load to report.
        admin.hset(prefix + "s-bad", mapping={"cursor": 1, "body": '{"status":"pending"'})
        page = c._call("list_pending")
        assert [i.token for i in page.items] == ["tok-s-new-1", "tok-s-old-2", "tok-s-old-3"]
        assert admin.exists(prefix + "#pending:backfilled")
        since = {i.token: i.pending_since_ms for i in page.items}
        # Another instance: the marker is there, so nothing is scanned or rewritten again...
        _write_old_envelope(admin, prefix, _pending_snap("s-later", 0, (5, 10)))
        d = _open(mode, redis_url, prefix)
        try:
            again = d._call("list_pending")
            assert {i.token: i.pending_since_ms for i in again.items} == since
            assert d._call("find_token", "tok-s-later-5") is None
            # ...and the backfilled session's next save keeps its rows' since.
            assert d.save(_pending_snap("s-old", 5, (2, 200)), 4)
            kept = d._call("list_pending", session_id="s-old").items
            assert [(i.token, i.pending_since_ms) for i in kept] == [
                ("tok-s-old-2", since["tok-s-old-2"])
            ]
        finally:
            d.close()
    finally:
        c.close()


@MODES
def test_a_read_only_adapter_refuses_an_unbackfilled_index_and_writes_nothing(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    _write_old_envelope(admin, prefix, _pending_snap("s-old", 1, (1, 100)))
    before = _dump(admin, prefix)
    c = _open(mode, redis_url, prefix, read_only=True)
    try:
        # The index lacks s-old's binding: an empty page would be a silent wrong answer.
        for call in (lambda: c._call("list_pending"), lambda: c._call("find_token", "tok-s-old-1")):
            with pytest.raises(ConfigError, match="backfill") as info:
                call()
            assert "writable" in (info.value.hint or "")
        with pytest.raises(ConfigError):
            c.save(_pending_snap("s-x", 0, (2, 200)), None)
        assert _dump(admin, prefix) == before
    finally:
        c.close()


@MODES
def test_a_read_only_adapter_lists_a_store_with_nothing_to_backfill(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    r = _open(mode, redis_url, prefix, read_only=True)
    try:
        assert r._call("list_pending").items == ()  # an empty store: nothing can be missing
    finally:
        r.close()
    w = _open(mode, redis_url, prefix)
    try:  # saved with the index (and no index read yet, so no marker)
        assert w.save(_pending_snap("s-new", 0, (1, 100)), None)
        _write_old_envelope(admin, prefix, _pending_snap("s-old", 1, (2, 50), status="expired"))
    finally:
        w.close()
    before = _dump(admin, prefix)
    assert prefix.encode() + b"#pending:backfilled" not in before
    r = _open(mode, redis_url, prefix, read_only=True)
    try:
        assert [i.token for i in r._call("list_pending").items] == ["tok-s-new-1"]
        assert _dump(admin, prefix) == before
    finally:
        r.close()


@MODES
def test_a_filter_on_the_other_instant_pages_within_the_scan_budget(
    redis_url: str, prefix: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from akchat_fsm.storage import redis as adapter

    monkeypatch.setattr(adapter, "PENDING_SCAN_BUDGET", 4)
    c = _open(mode, redis_url, prefix)
    try:
        for s in range(3):
            rows = [(10 * s + k, 1_000 + (7 * (10 * s + k)) % 30) for k in range(10)]
            assert c.save(_pending_snap(f"s-{s}", 0, *rows), None)
        whole = c._call("list_pending", order="newest", limit=1000).items
        want = [i for i in whole if i.expires_at_ms < 1_010]
        assert 0 < len(want) < len(whole)
        seen: list[Any] = []
        after, short = None, 0
        for _ in range(100):
            page = c._call(
                "list_pending", order="newest", expiring_before_ms=1_010, limit=3, after=after
            )
            seen += page.items
            short += page.next_after is not None and len(page.items) < 3
            after = page.next_after
            if after is None:
                break
        assert seen == want
        assert short  # the budget did end some pages early, and the walk went on
    finally:
        c.close()


@MODES
def test_an_unvalidated_snapshot_repeating_a_token_leaves_no_stray_member(
    redis_url: str, prefix: str, admin: redis.Redis, mode: str
) -> None:
    from akchat_fsm import SessionSnapshot

    c = _open(mode, redis_url, prefix)
    try:
        valid = _pending_snap("s-dup", 0, (1, 100), (2, 200))
        twice = (
            valid.confirmations[0],
            valid.confirmations[0].model_copy(update={"expires_at": 7}),
        )
        fields = {name: getattr(valid, name) for name in type(valid).model_fields}
        assert c.save(SessionSnapshot.model_construct(**{**fields, "confirmations": twice}), None)
        assert [i.expires_at_ms for i in c._call("list_pending").items] == [100]
        assert c.save(_pending_snap("s-dup", 1), 0)  # nothing pending any more
        assert c._call("list_pending").items == ()
        left = [k for k in redis_keys(admin, f"{prefix}#pending:") if b"backfilled" not in k]
        assert left == []  # every sorted set emptied (Redis drops an empty key)
    finally:
        c.close()


# --------------------------------------------------------------------------- the model
_SESSIONS = ["s-a", "s-b", "s-c"]
_STATUSES = ["pending", "pending", "approving", "expired", "rejected"]
_BINDINGS = strategies.lists(
    strategies.tuples(
        strategies.integers(0, 5), strategies.sampled_from(_STATUSES), strategies.integers(0, 3)
    ),
    max_size=4,
    unique_by=lambda b: b[0],
)


class PendingAgreesWithMemory(RuleBasedStateMachine):
    """The same saves and deletes through Redis and the memory reference: the same rows
    (their since aside, two clocks), in order, the same pages, the same ``find_token``."""

    redis_url: str = ""

    def __init__(self) -> None:
        super().__init__()
        from akchat_fsm.storage import MemoryStorage

        self.prefix = f"akt:{uuid.uuid4().hex[:12]}:"
        self.redis = RedisStorage(self.redis_url, prefix=self.prefix)
        self.memory = MemoryStorage()
        self.cursors: dict[str, int] = {}

    def _snap(self, sid: str, cursor: int, bindings: list[tuple[int, str, int]]) -> Any:
        from akchat_fsm import ConfirmationBinding, SessionSnapshot

        return SessionSnapshot(
            session_id=sid,
            definition_id="def",
            definition_revision=1,
            updated_at="2026-11-29T00:00:00.000Z",
            cursor=cursor,
            confirmations=tuple(
                ConfirmationBinding(
                    token=f"tok-{n}",  # shared across sessions: find_token's smallest id
                    action="pay" if n % 2 else "ship",
                    input={},
                    tool_call_id=f"call-{n}",
                    expires_at=1_000 + expires,
                    status=status,
                )
                for n, status, expires in bindings
            ),
        )

    @rule(sid=strategies.sampled_from(_SESSIONS), bindings=_BINDINGS)
    def save(self, sid: str, bindings: list[tuple[int, str, int]]) -> None:
        was = self.cursors.get(sid)
        snapshot = self._snap(sid, 0 if was is None else was + 1, bindings)
        assert self.redis.save(snapshot, was) is self.memory.save(snapshot, was) is True
        self.cursors[sid] = snapshot.cursor

    @rule(sid=strategies.sampled_from(_SESSIONS), bindings=_BINDINGS)
    def losing_save(self, sid: str, bindings: list[tuple[int, str, int]]) -> None:
        was = self.cursors.get(sid)
        # A cursor from the future; for a session that does not exist, any update loses.
        expected = 3 if was is None else was + 7
        snapshot = self._snap(sid, expected + 1, bindings)
        assert self.redis.save(snapshot, expected) is self.memory.save(snapshot, expected) is False
        if was is not None:  # a create of a session that exists loses too
            again = self._snap(sid, 0, bindings)
            assert self.redis.save(again, None) is self.memory.save(again, None) is False

    @rule(sid=strategies.sampled_from(_SESSIONS))
    def delete(self, sid: str) -> None:
        self.redis.delete(sid)
        self.memory.delete(sid)
        self.cursors.pop(sid, None)

    @invariant()
    def the_same_rows_pages_and_tokens(self) -> None:
        for query in ({}, {"action": "pay"}, {"session_id": "s-b"}, {"expiring_before_ms": 1_002}):
            want = [_no_since(i) for i in self.memory.list_pending(limit=1000, **query).items]
            got = [_no_since(i) for i in self.redis.list_pending(limit=1000, **query).items]
            assert got == want, query
            walked, after = [], None
            for _ in range(20):
                page = self.redis.list_pending(limit=2, after=after, **query)
                walked += [_no_since(i) for i in page.items]
                after = page.next_after
                if after is None:
                    break
            assert walked == want, query
        newest = self.redis.list_pending(order="newest", limit=1000).items
        keys = [(i.pending_since_ms, i.session_id, i.tool_call_id) for i in newest]
        assert keys == sorted(keys, reverse=True)
        assert sorted(map(_no_since, newest)) == sorted(
            map(_no_since, self.memory.list_pending(limit=1000).items)
        )
        for n in range(6):
            assert self.redis.find_token(f"tok-{n}") == self.memory.find_token(f"tok-{n}")

    def teardown(self) -> None:
        drop_redis_prefix_at(self.redis_url, self.prefix)
        self.redis.close()


def _no_since(item: Any) -> tuple[Any, ...]:
    return (item.session_id, item.token, item.tool_call_id, item.action, item.expires_at_ms)


def test_the_pending_index_agrees_with_the_memory_reference(redis_url: str) -> None:
    machine = type("Machine", (PendingAgreesWithMemory,), {"redis_url": redis_url})
    run_state_machine_as_test(
        machine, settings=settings(max_examples=40, stateful_step_count=12, deadline=None)
    )
