"""The resolution protocol with audited claims, two protocol versions deciding on one store.

``_machine.ResolutionProtocol`` (interleaving, crashes between any two steps, unknown and
unavailable outcomes on every save, the combined write included, and the history checker),
with every resolution audited: approvals decide by ADR-0141's combined write (entry and claim
in one atomic write), rejections and expiries by ADR-0132's protocol (the entry, then the
claim), as processes of two versions on one store would. Besides the machine's five
properties, after every step: every claimed call has an entry (a call proposed already settled
upstream is born terminal, with none), and the entry with the highest cursor is the claim that
applied (what it claimed is what the envelope holds).
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from hypothesis import settings
from hypothesis.stateful import invariant, run_state_machine_as_test

from akchat_fsm.session import audit_trail
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.wire.enums import ConfirmationStatus

from ._machine import ResolutionProtocol, mixed_versions_resolve, pinned_program

#: What the claim of each status wrote (a terminal status follows its processing one).
CLAIMED = {
    ConfirmationStatus.APPROVING: "approving",
    ConfirmationStatus.APPROVED: "approving",
    ConfirmationStatus.REJECTING: "rejecting",
    ConfirmationStatus.REJECTED: "rejecting",
    ConfirmationStatus.EXPIRING: "expiring",
    ConfirmationStatus.EXPIRED: "expiring",
}


class AuditedProtocol(ResolutionProtocol):
    resolve_plan = staticmethod(mixed_versions_resolve)

    def __init__(self) -> None:
        super().__init__()
        self.recording.counts = self.coverage

    @invariant()
    def the_highest_entry_is_the_claim_that_applied(self) -> None:
        snapshot = self.stored()
        if snapshot is None:
            return
        top: dict[str, Any] = {}
        for entry in audit_trail(self.recording.inner, self.session_id):
            if entry.token not in top or entry.cursor > top[entry.token].cursor:
                top[entry.token] = entry
        for binding in snapshot.confirmations:
            if binding.status is ConfirmationStatus.PENDING:
                continue
            entry = top.get(binding.token)
            if entry is None and binding.status.is_terminal:
                continue  # born settled: proposed for a call upstream had already handled
            self.coverage[f"entry:{binding.status.value}"] += 1
            assert entry is not None, f"{binding.token} is {binding.status} with no audit entry"
            assert entry.claims == CLAIMED[binding.status], (
                f"{binding.token} is {binding.status}, but its highest entry (cursor "
                f"{entry.cursor}, by {entry.principal}) claimed {entry.claims}"
            )
            self.coverage[f"decider:{entry.principal}"] += 1


def run_audited(make_storage: Any) -> Counter[str]:
    coverage: Counter[str] = Counter()
    machine = type(
        "Audited",
        (AuditedProtocol,),
        {"make_storage": staticmethod(make_storage), "coverage": coverage},
    )
    run_state_machine_as_test(machine, settings=settings(settings()))
    pinned_program(machine)
    # both versions decided, the combined write met faults and an old decider's entry at its
    # cursor, and claims were checked
    wanted = ("decider:new", "decider:old", "fault:unknown", "entry:approved")
    for what in (*wanted, "combined:refused-by-an-existing-entry"):
        assert coverage[what], f"the run never exercised {what}: {sorted(coverage.items())}"
    return coverage


def test_mixed_versions_in_memory() -> None:
    """Over 10 s on a server: the machine's generated programs (the profile's count), as
    test_resolution_protocol.py spends per store; the mixed versions need the same depth."""
    run_audited(MemoryStorage)


def test_mixed_versions_sqlite(tmp_path: Path) -> None:
    """Over 10 s on a server: the machine's generated programs (the profile's count), as
    test_resolution_protocol.py spends per store; the mixed versions need the same depth."""
    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        run_audited(lambda: store)
    finally:
        store.close()


@pytest.mark.postgres
def test_mixed_versions_postgres(pg_url: str) -> None:
    """Over 10 s on a server: the machine's generated programs (the profile's count), as
    test_resolution_protocol.py spends per store; the mixed versions need the same depth."""
    import psycopg

    from akchat_fsm.storage.postgres import PostgresStorage

    table = f"sf_{uuid.uuid4().hex[:12]}"
    store = PostgresStorage(pg_url, table=table)
    try:
        run_audited(lambda: store)
    finally:
        store.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")


@pytest.mark.redis
def test_mixed_versions_redis(redis_url: str) -> None:
    """Over 10 s on a server: the machine's generated programs (the profile's count), as
    test_resolution_protocol.py spends per store; the mixed versions need the same depth."""
    import redis

    from akchat_fsm.storage.redis import RedisStorage

    prefix = f"sf:{uuid.uuid4().hex[:12]}:"
    store = RedisStorage(redis_url, prefix=prefix)
    try:
        run_audited(lambda: store)
    finally:
        store.close()
        admin = redis.Redis.from_url(redis_url)
        keys = list(admin.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            admin.delete(*keys)
        admin.close()


@pytest.mark.mysql
def test_mixed_versions_mysql(mysql_url: str) -> None:
    """Over 10 s on a server: the machine's generated programs (the profile's count), as
    test_resolution_protocol.py spends per store; the mixed versions need the same depth."""
    import pymysql

    from akchat_fsm.storage.url import open_storage

    table = f"sf_{uuid.uuid4().hex[:12]}"
    store = open_storage(f"{mysql_url}?table={table}")
    try:
        run_audited(lambda: store)
    finally:
        store.close()
        parts = urlsplit(mysql_url)
        conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or "root"),
            password=unquote(parts.password or ""),
            database=unquote(parts.path.lstrip("/")),
            autocommit=True,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending,"
                    f" {table}__pending_build"
                )
        finally:
            conn.close()
