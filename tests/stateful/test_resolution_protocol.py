"""The resolution protocol under interleaving, crashes, unknown outcomes and upstream failures.

One Hypothesis ``RuleBasedStateMachine`` (``_machine.ResolutionProtocol``) against every
adapter: in-memory and SQLite by default, PostgreSQL and Redis in the full matrix (they need
the servers; ``AKCHAT_REQUIRE_SERVERS=1`` turns a missing server into a failure). The example
count comes from the Hypothesis profile (``ci`` by default in CI, ``deep`` = 10x).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from cleanup import drop_pg_tables, drop_redis_prefix_at

from ._machine import ResolutionProtocol, pinned_program

#: A run must have exercised each of these at least once, or it proves nothing. The generated
#: run reaches them only by chance (it depends on the seed); ``pinned_program`` drives each one
#: on every run, so the floor only fails when the library made a point unreachable.
FLOOR = (
    "effect:CallApprove",
    "effect:CallDeny",
    "fault:unknown",
    "fault:unavailable",
    "fault:upstream",
    "fault:upstream-acted",
    "approve:ok",
    "approve:ResolutionInProgress",
    "reconcile:completed",
    "reconcile:resumed",
    "proposal:bound",
    "proposal:denied",
)


def run_protocol(
    make_storage: Callable[[], Any], *, intents: bool = False, **overrides: Any
) -> Counter[str]:
    coverage: Counter[str] = Counter()
    machine = type(
        "Protocol",
        (ResolutionProtocol,),
        {"make_storage": staticmethod(make_storage), "coverage": coverage, "intents": intents},
    )
    run_state_machine_as_test(machine, settings=settings(settings(), **overrides))
    print("coverage:", dict(sorted(coverage.items())))  # shown with -s
    pinned_program(machine)
    missing = [what for what in FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"
    assert sum(n for what, n in coverage.items() if what.startswith("crash-before:")) > 0
    return coverage


def test_protocol_in_memory() -> None:
    run_protocol(MemoryStorage)


def test_protocol_sqlite(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        run_protocol(lambda: store)
    finally:
        store.close()


#: With intents, a run must also have had reconciles leave a live proposer's intent alone
#: (``unknown``) and settle dead proposers' stale ones (``bound``), or it proves nothing
#: about the leases (ADR-0133).
INTENT_FLOOR = ("reconcile:unknown", "reconcile:bound")


def test_protocol_with_intents_and_live_proposers_in_memory() -> None:
    coverage = run_protocol(MemoryStorage, intents=True)
    missing = [what for what in INTENT_FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


def test_protocol_with_intents_and_live_proposers_sqlite(tmp_path: Path) -> None:
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        coverage = run_protocol(lambda: store, intents=True)
    finally:
        store.close()
    missing = [what for what in INTENT_FLOOR if not coverage[what]]
    assert not missing, f"the run never exercised {missing}: {sorted(coverage.items())}"


@pytest.mark.postgres
def test_protocol_postgres(pg_url: str) -> None:
    from akchat_fsm.storage.postgres import PostgresStorage

    table = f"sf_{uuid.uuid4().hex[:12]}"
    store = PostgresStorage(pg_url, table=table)
    try:
        run_protocol(lambda: store)
    finally:
        store.close()
        drop_pg_tables(pg_url, table)


@pytest.mark.redis
def test_protocol_redis(redis_url: str) -> None:
    from akchat_fsm.storage.redis import RedisStorage

    prefix = f"sf:{uuid.uuid4().hex[:12]}:"
    store = RedisStorage(redis_url, prefix=prefix)
    try:
        run_protocol(lambda: store)
    finally:
        store.close()
        drop_redis_prefix_at(redis_url, prefix)
