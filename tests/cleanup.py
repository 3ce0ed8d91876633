"""What a test leaves on the shared servers, and how it finds and removes it.

The servers outlive every run: a developer's repeated runs, and CI after them, meet PostgreSQL,
MariaDB and Redis as the earlier runs left them. Two things made that expensive:

- **A scan at Redis' default ``COUNT``** (10) costs one round trip per ten keys of the *whole*
  keyspace, not of the prefix asked for. With 300,000 foreign keys on the server, two Redis
  test files (tests/storage/test_redis.py, tests/integrations/test_hostile_records.py) took
  517 s instead of 14 s. So every scan here asks for :data:`SCAN_COUNT` keys per round trip,
  and ``tests/test_ci_guard.py`` refuses a ``scan_iter`` without a large ``count`` anywhere in
  tests/, benchmarks/ or src/.
- **Leftovers**: a fixture that forgets its keys or a side table makes every later scan and
  catalog query a little slower. Every fixture that creates server state removes it with one
  of the functions below.
"""

from __future__ import annotations

import re
from typing import Any

#: Keys per SCAN round trip: a few round trips even on a server holding millions of keys.
SCAN_COUNT = 10_000
#: Keys per UNLINK (one bounded command, never one per key).
_BATCH = 1_000
#: The tables an SQL adapter derives from its session table's name.
_SQL_SUFFIXES = ("", "__records", "__pending", "__pending_build")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def redis_pattern(prefix: str) -> str:
    """The glob matching every key that starts with ``prefix`` (its glob characters escaped)."""
    return _GLOB_SPECIAL.sub(r"\\\1", prefix) + "*"


def redis_keys(client: Any, prefix: str) -> list[bytes]:
    """Every key of ``client``'s database that starts with ``prefix``, sorted."""
    return sorted(client.scan_iter(match=redis_pattern(prefix), count=SCAN_COUNT))


def drop_redis_prefix(client: Any, prefix: str) -> None:
    """Remove every key that starts with ``prefix``."""
    keys = redis_keys(client, prefix)
    for start in range(0, len(keys), _BATCH):
        client.unlink(*keys[start : start + _BATCH])


def drop_redis_prefix_at(url: str, prefix: str) -> None:
    """:func:`drop_redis_prefix` on a connection of its own to ``url``."""
    import redis

    with redis.Redis.from_url(url) as client:
        drop_redis_prefix(client, prefix)


def sql_tables(table: str) -> str:
    """``table`` and every table an SQL adapter derives from it, comma-separated for one
    ``DROP TABLE IF EXISTS``."""
    return ", ".join(table + suffix for suffix in _SQL_SUFFIXES)


def drop_pg_tables(url: str, *tables: str) -> None:
    """Drop each session table of ``tables`` and the tables derived from it on PostgreSQL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")
