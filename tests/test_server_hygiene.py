"""The shared servers stay cheap to use however many runs came before (tests/cleanup.py).

A Redis ``SCAN`` walks the whole keyspace whatever ``MATCH`` says, ten keys per round trip by
default: one forgotten ``count=`` turned a teardown into thousands of round trips once earlier
runs and benchmarks had left a few hundred thousand keys, and made CI twice as slow. So no code
here scans with a small count, and the cleanup helpers remove exactly their prefix.
"""

from __future__ import annotations

import ast
import uuid
from pathlib import Path

import pytest

from cleanup import SCAN_COUNT, drop_redis_prefix, redis_keys, redis_pattern, sql_tables

ROOT = Path(__file__).resolve().parent.parent
#: Where a scan may run: the library, its tests, benchmarks and scripts.
SCANNED = ("src", "tests", "benchmarks", "scripts")
#: The smallest ``count=`` a scan may ask for.
MIN_COUNT = 1_000


def small_scans(source: str, filename: str = "<source>") -> list[str]:
    """Each ``scan_iter(...)`` / ``.scan(...)`` call in ``source`` whose ``count`` is missing or
    below :data:`MIN_COUNT` (``SCAN_COUNT`` by name is fine), as ``file:line``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in ("scan_iter", "scan"):
            continue
        count = next((k.value for k in node.keywords if k.arg == "count"), None)
        large = (isinstance(count, ast.Name) and count.id == "SCAN_COUNT") or (
            isinstance(count, ast.Constant)
            and isinstance(count.value, int)
            and count.value >= MIN_COUNT
        )
        if not large:
            found.append(f"{filename}:{node.lineno}")
    return found


def test_no_scan_walks_the_keyspace_a_few_keys_at_a_time() -> None:
    offenders = [
        hit
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for hit in small_scans(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert offenders == [], f"scan with count >= {MIN_COUNT} (tests/cleanup.py): {offenders}"


def test_the_check_finds_a_default_and_a_small_count_and_passes_a_large_one() -> None:
    source = (
        "r.scan_iter(match='p*')\n"
        "r.scan_iter(match='p*', count=100)\n"
        "r.scan(0, match='p*')\n"
        "r.scan_iter(match='p*', count=SCAN_COUNT)\n"
        "r.scan_iter(match='p*', count=10_000)\n"
    )
    assert small_scans(source) == ["<source>:1", "<source>:2", "<source>:3"]
    assert SCAN_COUNT >= MIN_COUNT


def test_a_prefix_is_matched_literally() -> None:
    assert redis_pattern("a[b]:") == "a\\[b\\]:*"
    assert redis_pattern("x*?\\") == "x\\*\\?\\\\*"
    assert redis_pattern("akt:0f3a:") == "akt:0f3a:*"


def test_every_derived_sql_table_is_dropped() -> None:
    assert sql_tables("t_1") == "t_1, t_1__records, t_1__pending, t_1__pending_build"


@pytest.mark.redis
def test_dropping_a_prefix_removes_exactly_its_keys(redis_url: str) -> None:
    import redis

    tag = uuid.uuid4().hex[:12]
    mine, neighbour = f"hy:{tag}:[a]:", f"hy:{tag}:a:"  # the glob `[a]` would match `a`
    with redis.Redis.from_url(redis_url) as client:
        try:
            client.mset({f"{mine}{n}": "1" for n in range(2_500)})
            client.set(f"{neighbour}kept", "1")
            assert len(redis_keys(client, mine)) == 2_500
            drop_redis_prefix(client, mine)
            assert redis_keys(client, mine) == []
            assert redis_keys(client, neighbour) == [f"{neighbour}kept".encode()]
        finally:
            drop_redis_prefix(client, f"hy:{tag}:")
