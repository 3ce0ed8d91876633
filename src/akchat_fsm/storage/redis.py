"""Redis adapter (redis-py, extra ``redis``): one Lua script is the whole compare-and-set.

Each session is a hash at ``prefix + session_id`` with fields ``cursor`` (a decimal string,
compared as a string: Lua numbers are doubles) and ``body`` (the canonical JSON text). The
script validates first and writes last, so an error inside it never leaves a partial write.

We drive a pooled connection ourselves (connect, send, read) instead of
``Redis.execute_command`` so that each failure is classified by *when* it happened: before the
command left (``StorageUnavailable``) or while waiting for its reply (``OutcomeUnknown`` for a
write: the script may have run). The asyncio twin cannot tell "not sent" from "buffered, sent
later", so its failed sends of a write are ``OutcomeUnknown`` too. Writes are never retried;
a ``NOSCRIPT`` reply (the script cache was flushed: nothing ran) is answered once with
``EVAL`` of the same script, which also re-caches it. Durability is Redis configuration
(``appendonly``/``appendfsync``).
"""

from __future__ import annotations

import hashlib
import select
from typing import Any, Literal

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.session import SessionSnapshot
from ._cas import check_session_id, loaded_text, prepare_save
from ._closing import AsyncClosing, Closing

__all__ = ["CAS_SCRIPT", "AsyncRedisStorage", "RedisStorage", "map_redis_error"]

DEFAULT_PREFIX = "akchat:session:"

#: KEYS[1] session hash; ARGV[1] expected cursor ("" = create-only), ARGV[2] new cursor,
#: ARGV[3] body. Returns 1 when written, 0 on a conflict. O(1).
CAS_SCRIPT = """\
local stored = redis.call('HGET', KEYS[1], 'cursor')
if ARGV[1] == '' then
  if stored then return 0 end
elseif stored ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'cursor', ARGV[2], 'body', ARGV[3])
return 1
"""
CAS_SHA = hashlib.sha1(CAS_SCRIPT.encode()).hexdigest()

Phase = Literal["connect", "send", "reply"]


def map_redis_error(exc: BaseException, *, phase: Phase, write: bool) -> StorageError:
    """Classify a redis-py error by the phase it happened in.

    ``connect``/``send``: the command never fully reached the server, nothing ran. ``reply``:
    an error *reply* (``BUSY``, ``OOM``, ``READONLY``…) means the script did not write;
    a timeout or a dropped connection while waiting means a write may have applied.
    """
    lost = isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError)
    if phase == "reply" and write and lost:
        return OutcomeUnknown(f"Redis write may have applied: {exc}")
    return StorageUnavailable(f"Redis: {exc}")


class _Plan:
    """Everything but the I/O: options, key naming, the commands to send."""

    def __init__(self, url: str, prefix: str, socket_timeout: float, connect_timeout: float):
        if not isinstance(url, str) or not url:
            raise ConfigError("url must be a redis:// URL.")
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError(f"Invalid key prefix {prefix!r}.")
        self.url = url
        self.prefix = prefix
        # No retries anywhere: a retried write could run twice (redis-py 8 retries by default).
        self.pool_kwargs: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry_on_timeout": False,
            "retry": Retry(NoBackoff(), 0),
        }

    def key(self, session_id: str) -> str:
        return self.prefix + check_session_id(session_id)

    def load_command(self, session_id: str) -> tuple[Any, ...]:
        return ("HMGET", self.key(session_id), "body", "cursor")

    def delete_command(self, session_id: str) -> tuple[Any, ...]:
        return ("DEL", self.key(session_id))

    def save_args(self, snapshot: Any, expected_cursor: Any) -> tuple[Any, ...]:
        """``1, key, expected, cursor, body``: what follows ``EVALSHA sha`` or ``EVAL src``."""
        p = prepare_save(snapshot, expected_cursor)
        expected = "" if p.expected is None else str(p.expected)
        return (1, self.prefix + p.session_id, expected, str(p.cursor), p.text)


def _peer_hung_up(conn: Any) -> bool:
    """Has the server closed this idle pooled connection (or sent something unasked)?

    redis-py's pool checks this too, but an asyncio connection only notices the hang-up
    once its event loop has read the socket; polling the socket itself catches it before
    we send a write whose fate would then be unknown. ``False`` when it cannot tell.
    """
    sock = getattr(conn, "_sock", None)
    if sock is None:
        writer = getattr(conn, "_writer", None)
        sock = writer.get_extra_info("socket") if writer is not None else None
    try:
        fd = sock.fileno() if sock is not None else -1
        if fd < 0:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _connected(pool: Any) -> int:
    """How many of a pool's connections hold a socket (the kit's leak check)."""
    conns = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]
    return sum(
        1
        for c in conns
        if getattr(c, "_sock", None) is not None or getattr(c, "is_connected", False)
    )


def _loaded(session_id: str, reply: Any) -> str | None:
    body, cursor = reply  # HMGET: [body, cursor], each None when absent
    return loaded_text(session_id, body, cursor)


def _text(reply: Any) -> str | None:
    return None if reply is None else bytes(reply).decode("utf-8")


class RedisStorage(Closing):
    """Compare-and-set storage in Redis hashes, via one Lua script.

    ``RedisStorage(url="redis://127.0.0.1:6379/0", *, prefix="akchat:session:",
    socket_timeout=5.0, connect_timeout=5.0)``

    Owns a connection pool (thread-safe; each call borrows one connection). A reply not
    received within ``socket_timeout`` seconds is ``OutcomeUnknown`` for a write.
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self._plan = _Plan(url, prefix, socket_timeout, connect_timeout)
        self.prefix = prefix
        self._closed = False
        try:
            self.pool = redis.ConnectionPool.from_url(url, **self._plan.pool_kwargs)
        except (ValueError, RedisError) as exc:
            raise ConfigError(f"Invalid Redis URL: {exc}") from exc

    def _call(self, command: tuple[Any, ...], *, write: bool, script: bool = False) -> Any:
        if self._closed:
            raise StorageUnavailable("RedisStorage is closed.")
        phase: Phase = "connect"
        try:
            conn: Any = self.pool.get_connection()
        except (RedisError, OSError) as exc:
            raise map_redis_error(exc, phase=phase, write=write) from exc
        try:
            if _peer_hung_up(conn):
                conn.disconnect()
                conn.connect()
        except BaseException as exc:
            self.pool.release(conn)  # a failed reconnect must not strand it "in use"
            if isinstance(exc, RedisError | OSError):
                raise map_redis_error(exc, phase=phase, write=write) from exc
            raise
        try:
            phase = "send"
            conn.send_command(*command)
            phase = "reply"
            try:
                return conn.read_response()
            except NoScriptError:
                if not script:
                    raise
                phase = "send"  # nothing ran: send the source once, which re-caches it
                conn.send_command("EVAL", CAS_SCRIPT, *command[2:])
                phase = "reply"
                return conn.read_response()
        except (RedisError, OSError) as exc:
            conn.disconnect()
            raise map_redis_error(exc, phase=phase, write=write) from exc
        except BaseException:
            conn.disconnect()  # interrupted mid-protocol: never reuse
            raise
        finally:
            self.pool.release(conn)

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        return _loaded(session_id, self._call(self._plan.load_command(session_id), write=False))

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        args = self._plan.save_args(snapshot, expected_cursor)
        return bool(self._call(("EVALSHA", CAS_SHA, *args), write=True, script=True) == 1)

    def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        self._call(self._plan.delete_command(session_id), write=True)

    def open_connections(self) -> int:
        """Pooled connections holding a socket (0 after ``close``)."""
        return _connected(self.pool)

    def close(self) -> None:
        """Disconnect every pooled connection; later calls raise ``StorageUnavailable``."""
        self._closed = True
        self.pool.disconnect()


class AsyncRedisStorage(AsyncClosing):
    """The asyncio twin of :class:`RedisStorage` (same arguments, ``redis.asyncio``)."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self._plan = _Plan(url, prefix, socket_timeout, connect_timeout)
        self.prefix = prefix
        self._closed = False
        kwargs = dict(self._plan.pool_kwargs, retry=AsyncRetry(NoBackoff(), 0))
        try:
            self.pool = redis.asyncio.ConnectionPool.from_url(url, **kwargs)
        except (ValueError, RedisError) as exc:
            raise ConfigError(f"Invalid Redis URL: {exc}") from exc

    async def _call(self, command: tuple[Any, ...], *, write: bool, script: bool = False) -> Any:
        if self._closed:
            raise StorageUnavailable("AsyncRedisStorage is closed.")
        phase: Phase = "connect"
        try:
            conn: Any = await self.pool.get_connection()  # type: ignore[no-untyped-call]
        except (RedisError, OSError) as exc:
            raise map_redis_error(exc, phase=phase, write=write) from exc
        try:
            if _peer_hung_up(conn):
                await conn.disconnect()
                await conn.connect()
        except BaseException as exc:
            await self.pool.release(conn)
            if isinstance(exc, RedisError | OSError):
                raise map_redis_error(exc, phase=phase, write=write) from exc
            raise
        try:
            # Unlike a blocking sendall, asyncio hands the command to the transport's buffer,
            # and closing the transport after a send timeout still flushes that buffer: the
            # server may receive the whole command after we gave up. So a failed async send
            # is classified like a lost reply (a write's outcome is unknown), never as
            # "nothing applied". (Measured: a 64 MB body sent to a busy server applied.)
            phase = "reply"
            await conn.send_command(*command)
            try:
                return await conn.read_response()
            except NoScriptError:
                if not script:
                    raise
                await conn.send_command("EVAL", CAS_SCRIPT, *command[2:])
                phase = "reply"
                return await conn.read_response()
        except (RedisError, OSError) as exc:
            await conn.disconnect()
            raise map_redis_error(exc, phase=phase, write=write) from exc
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await self.pool.release(conn)

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        reply = await self._call(self._plan.load_command(session_id), write=False)
        return _loaded(session_id, reply)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        args = self._plan.save_args(snapshot, expected_cursor)
        return bool(await self._call(("EVALSHA", CAS_SHA, *args), write=True, script=True) == 1)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id``; a missing session is not an error."""
        await self._call(self._plan.delete_command(session_id), write=True)

    def open_connections(self) -> int:
        """Pooled connections holding a socket (0 after ``aclose``)."""
        return _connected(self.pool)

    async def aclose(self) -> None:
        """Disconnect every pooled connection; later calls raise ``StorageUnavailable``."""
        self._closed = True
        await self.pool.aclose()
