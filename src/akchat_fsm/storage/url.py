"""Open an adapter from a URL: ``open_storage(url)`` and ``open_async_storage(url)``.

================================  ==========================================================
URL                               adapter
================================  ==========================================================
``memory://``                     a new, private :class:`~.memory.MemoryStorage`
``sqlite:///relative/file.db``    :class:`~.sqlite.SQLiteStorage` (``sqlite:////abs/path``
                                  for an absolute path; ``sqlite:///:memory:`` or
                                  ``sqlite://`` for a private in-memory database)
``postgresql://…``/``postgres://…``  :class:`~.postgres.PostgresStorage` (extra ``postgres``)
``redis://…``/``rediss://…``      :class:`~.redis.RedisStorage` (extra ``redis``)
``redis+cluster://host:port/``    :class:`~.redis.RedisStorage` in cluster mode, any node as
                                  the seed (``rediss+cluster://`` for TLS; ADR-0089)
``mysql://…``/``mariadb://…``     :class:`~.mysql.MySQLStorage` (extra ``mysql``)
================================  ==========================================================

Query parameters that configure the adapter: ``table`` and ``busy_timeout`` (SQLite),
``table``, ``isolation`` (``read_committed``/``repeatable_read``/``serializable``) and
``statement_timeout`` (ms) (PostgreSQL; every other parameter goes to libpq unchanged),
``prefix`` (Redis; other parameters go to redis-py; in cluster mode also ``shards``,
``wait_replicas`` and ``wait_timeout`` (s)), ``table``, ``statement_timeout`` (ms)
and ``connect_timeout`` (s) (MySQL / MariaDB: ``mysql://user:pass@host:3306/db``). An
unknown scheme, an unknown parameter or a bad value raises
:class:`~akchat_fsm.errors.ConfigError`.

``read_only=True`` opens an adapter that never changes its store: SQLite through a
``mode=ro`` connection, PostgreSQL without DDL in read-only transactions, Redis with writes
refused before they are sent; none creates, upgrades or writes anything, and a write raises
``ConfigError``. ``memory://`` is a new private store either way.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from .memory import AsyncMemoryStorage, MemoryStorage
from .port import AsyncManagedSessionStorage, ManagedSessionStorage
from .sqlite import AsyncSQLiteStorage, SQLiteStorage

__all__ = ["open_async_storage", "open_storage"]

# Both drivers hold these as a C int of milliseconds.
_MAX_STATEMENT_TIMEOUT_MS = 2**31 - 1
_MAX_BUSY_TIMEOUT_S = (2**31 - 1) / 1000

_URL_HINT = (
    "Use memory://, sqlite:///path, postgresql://…, redis://… or mysql://… (see docs/adapters.md)."
)


def _split(url: str) -> tuple[str, Any, dict[str, str]]:
    if not isinstance(url, str):
        raise ConfigError(f"A storage URL must be a string, got {url!r}.", hint=_URL_HINT)
    try:
        parts = urlsplit(url)  # "postgresql://[::1/x" is a ValueError (unclosed IPv6 host)
    except ValueError as exc:
        raise ConfigError(f"Malformed storage URL {url!r}: {exc}.", hint=_URL_HINT) from exc
    try:
        query = dict(
            parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
        )
    except ValueError as exc:
        raise ConfigError(f"Bad query string in storage URL {url!r}.", hint=_URL_HINT) from exc
    return parts.scheme.lower(), parts, query


def _pop_float(query: dict[str, str], name: str, maximum: float) -> float | None:
    raw = query.pop(name, None)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {raw!r}.", hint=_URL_HINT) from exc
    if not 0 <= value <= maximum:  # also refuses NaN and infinities
        raise ConfigError(f"{name} must be in [0, {maximum:g}], got {raw!r}.", hint=_URL_HINT)
    return value


def _no_leftovers(query: dict[str, str], scheme: str) -> None:
    if query:
        names = ", ".join(sorted(query))
        raise ConfigError(f"Unknown {scheme} storage parameter(s): {names}.", hint=_URL_HINT)


def _sqlite_args(parts: Any, query: dict[str, str]) -> dict[str, Any]:
    # sqlite:///x.db -> path "/x.db" -> "x.db" (relative); sqlite:////abs -> "//abs" -> "/abs".
    path = unquote(parts.path)[1:] if parts.path.startswith("/") else unquote(parts.path)
    if parts.netloc:
        raise ConfigError("A sqlite URL has no host: use sqlite:///path.", hint=_URL_HINT)
    args: dict[str, Any] = {"path": path or ":memory:"}
    if "table" in query:
        args["table"] = query.pop("table")
    timeout = _pop_float(query, "busy_timeout", _MAX_BUSY_TIMEOUT_S)
    if timeout is not None:
        args["busy_timeout"] = timeout
    _no_leftovers(query, "sqlite")
    return args


def _postgres_args(parts: Any, query: dict[str, str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for name in ("table", "isolation"):
        if name in query:
            args[name] = query.pop(name)
    timeout = _pop_float(query, "statement_timeout", _MAX_STATEMENT_TIMEOUT_MS)
    if timeout is not None:
        args["statement_timeout_ms"] = int(timeout)
    args["conninfo"] = urlunsplit(parts._replace(query=urlencode(query)))
    return args


def _redis_args(parts: Any, query: dict[str, str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if "prefix" in query:
        args["prefix"] = query.pop("prefix")
    scheme = parts.scheme.lower()
    if scheme.endswith("+cluster"):
        args["cluster"] = True
        for name in ("shards", "wait_replicas"):
            if name in query:
                raw = query.pop(name)
                if not raw.isascii() or not raw.isdigit():
                    raise ConfigError(
                        f"{name} must be a whole number, got {raw!r}.", hint=_URL_HINT
                    )
                args[name] = int(raw)
        timeout = _pop_float(query, "wait_timeout", 3600)
        if timeout is not None:
            args["wait_timeout"] = timeout
        parts = parts._replace(scheme=scheme.removesuffix("+cluster"))
    args["url"] = urlunsplit(parts._replace(query=urlencode(query)))
    return args


def _mysql_args(parts: Any, query: dict[str, str]) -> dict[str, Any]:
    try:
        port = parts.port  # a non-numeric port is a ValueError
    except ValueError as exc:
        raise ConfigError(f"Bad port in MySQL URL: {exc}.", hint=_URL_HINT) from exc
    args: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": unquote(parts.path[1:] if parts.path.startswith("/") else parts.path),
    }
    if "table" in query:
        args["table"] = query.pop("table")
    timeout = _pop_float(query, "statement_timeout", _MAX_STATEMENT_TIMEOUT_MS)
    if timeout is not None:
        args["statement_timeout_ms"] = int(timeout)
    connect = _pop_float(query, "connect_timeout", _MAX_BUSY_TIMEOUT_S)
    if connect is not None:
        args["connect_timeout"] = connect
    _no_leftovers(query, "mysql")
    return args


def _extra(module: str, extra: str) -> Any:
    """Import an adapter module whose driver is an optional extra."""
    from importlib import import_module

    try:
        return import_module(module, __package__)
    except ImportError as exc:
        raise ConfigError(
            f"The {extra} adapter needs its driver: pip install 'akchat-fsm[{extra}]'.",
            hint=_URL_HINT,
        ) from exc


def _open(url: str, *, asyncio: bool, read_only: bool) -> Any:
    """The adapter for ``url`` in the flavour asked for: the one scheme table both use."""
    scheme, parts, query = _split(url)
    prefix = "Async" if asyncio else ""
    mode: dict[str, Any] = {"read_only": bool(read_only)}
    if scheme == "memory":
        _no_leftovers(query, "memory")
        return AsyncMemoryStorage() if asyncio else MemoryStorage()
    if scheme == "sqlite":
        sqlite = AsyncSQLiteStorage if asyncio else SQLiteStorage
        return sqlite(**_sqlite_args(parts, query), **mode)
    if scheme in ("postgresql", "postgres"):
        module = _extra(".postgres", "postgres")
        return getattr(module, f"{prefix}PostgresStorage")(**_postgres_args(parts, query), **mode)
    if scheme in ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster"):
        module = _extra(".redis", "redis")
        return getattr(module, f"{prefix}RedisStorage")(**_redis_args(parts, query), **mode)
    if scheme in ("mysql", "mariadb"):
        module = _extra(".mysql", "mysql")
        return getattr(module, f"{prefix}MySQLStorage")(**_mysql_args(parts, query), **mode)
    raise ConfigError(f"Unknown storage URL scheme {scheme!r}.", hint=_URL_HINT)


def open_storage(url: str, *, read_only: bool = False) -> ManagedSessionStorage:
    """A new adapter for ``url`` (see the module table). Close it when done (``close()``, or
    ``await aclose()`` for the asyncio flavour). ``read_only``: the adapter never changes the
    store (see the module docstring)."""
    return cast(ManagedSessionStorage, _open(url, asyncio=False, read_only=read_only))


def open_async_storage(url: str, *, read_only: bool = False) -> AsyncManagedSessionStorage:
    """A new adapter for ``url`` (see the module table). Close it when done (``close()``, or
    ``await aclose()`` for the asyncio flavour). ``read_only``: the adapter never changes the
    store (see the module docstring)."""
    return cast(AsyncManagedSessionStorage, _open(url, asyncio=True, read_only=read_only))
