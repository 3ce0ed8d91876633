"""Nothing strands (issue 22, "waiting on expiry"): a bridged run paused on a confirmation
nobody decided is continued by one ``reconcile_all(..., bridge=...)`` once that confirmation is
past its expiry, with the expired answer (the tool never runs); one not yet due is left alone.

Real pydantic-ai on its scripted offline model (``pai_agents``); memory, SQLite and the real
PostgreSQL server; sync and asyncio.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bridge_harness import BACKENDS, RecordsBackend
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, reconcile_all, reconcile_all_async, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge, PydanticAIBridge
from akchat_fsm.session.audit import audit_trail
from akchat_fsm.session.sweep import AsyncSweepPorts, SweepPorts

DEFINITION = ChatDefinition("support")
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
FIVE_MINUTES = 5 * 60_000
DAY = 24 * 60 * 60_000
#: What the model reads for a call whose confirmation expired (the bridge's answer).
EXPIRED = "c1=The approval request for this tool call expired; it was not run."


def later() -> int:
    """Ten minutes on: past the bridges' default five minutes to decide."""
    return time.time_ns() // 1_000_000 + 10 * 60_000


def _postgres(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    from akchat_fsm.storage.postgres import AsyncPostgresStorage, PostgresStorage

    url, table = request.getfixturevalue("pg_url"), f"sx_{uuid.uuid4().hex[:12]}"
    opened: list[Any] = []

    def sync() -> Any:
        if not opened:
            opened.append(PostgresStorage(url, table=table))
        return opened[0]

    def drop() -> None:
        import psycopg

        for storage in opened:
            storage.close()
        with psycopg.connect(url, autocommit=True) as conn:
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{table}%",)
            ).fetchall():
                conn.execute(f"DROP TABLE IF EXISTS {name}")

    request.addfinalizer(drop)
    return RecordsBackend("postgres", sync, lambda: AsyncPostgresStorage(url, table=table))


MAKERS: dict[str, Callable[[Path, pytest.FixtureRequest], RecordsBackend]] = {
    **BACKENDS,
    "postgres": _postgres,
}


@pytest.fixture(params=sorted(MAKERS))
def backend(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    return MAKERS[request.param](tmp_path, request)


def _sid() -> str:
    return f"chat-{uuid.uuid4().hex[:12]}"


def _bridge(storage: Any, agent: Any, sid: str, **options: Any) -> PydanticAIBridge:
    session = resume_chat_session(DEFINITION, session_id=sid, storage=storage)
    return PydanticAIBridge(agent, session, storage, **options)


def _paused(storage: Any, agent: Any, sid: str, **options: Any) -> None:
    """A run paused on ``c1``; the person who should decide never does."""
    paused = _bridge(storage, agent, sid, **options).run("do it", run_id="r1")
    assert [b.tool_call_id for b in paused.pending] == ["c1"]


def _sweep(storage: Any, agent: Any) -> Any:
    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, bridge=lambda s: PydanticAIBridge(agent, s, storage))

    return reconcile_all(storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later)


def _left_for_the_sweep(storage: Any, sid: str, at: int) -> tuple[set[str], tuple[Any, ...]]:
    """What the sweep could still finish: the session listed as processing, and its
    confirmations due at ``at``."""
    listed = {row.session_id for row in storage.list_processing()} & {sid}
    return listed, storage.list_pending(session_id=sid, expiring_before_ms=at).items


def test_a_run_waiting_on_an_expired_confirmation_continues_with_that_answer(
    backend: RecordsBackend,
) -> None:
    counts, sid = Counts(), _sid()
    storage = backend.sync()
    agent = build_agent([EMAIL], counts)
    _paused(storage, agent, sid)
    [swept] = _sweep(storage, agent).sessions
    assert (swept.status, swept.expired, swept.waiting) == ("expired", ("c1",), ()), swept
    run = _bridge(storage, agent, sid).run_record("r1")
    assert run is not None and run.state == "completed" and run.output == EXPIRED
    assert counts.bodies == [] and counts.requests == 2  # never ran; the model continued once
    [binding] = _bridge(storage, agent, sid).session.snapshot.confirmations
    assert binding.status.value == "expired"
    trail = audit_trail(storage, sid)
    assert [(e.intent, e.via) for e in trail if e.decided] == [("expire", "sweep")]
    # Nothing is left that the sweep could finish; the next sweep visits nobody.
    assert _left_for_the_sweep(storage, sid, later()) == (set(), ())
    assert _sweep(storage, agent).sessions == ()
    assert counts.requests == 2


def test_a_run_whose_confirmation_is_not_due_is_left_waiting(backend: RecordsBackend) -> None:
    counts, sid = Counts(), _sid()
    storage = backend.sync()
    agent = build_agent([EMAIL], counts)
    _paused(storage, agent, sid, ttl_ms=DAY)
    [swept] = _sweep(storage, agent).sessions
    assert swept.status == "waiting" and swept.expired == ()
    [(run_id, next_step)] = swept.waiting
    assert run_id == "r1" and "c1" in next_step
    [binding] = _bridge(storage, agent, sid).session.snapshot.confirmations
    assert binding.status.value == "pending" and counts.requests == 1


def test_the_async_sweep_continues_the_run_the_same_way(backend: RecordsBackend) -> None:
    counts, sid = Counts(), _sid()
    agent = build_agent([EMAIL], counts)
    _paused(backend.sync(), agent, sid)

    async def sweep() -> Any:
        storage = backend.async_()
        try:
            return await reconcile_all_async(
                storage,
                lambda session_id: AsyncSweepPorts(
                    DEFINITION, bridge=lambda s: AsyncPydanticAIBridge(agent, s, storage)
                ),
                older_than_ms=FIVE_MINUTES,
                clock=later,
            )
        finally:
            close = getattr(storage, "aclose", None)
            if close is not None:
                await close()

    [swept] = asyncio.run(sweep()).sessions
    assert (swept.status, swept.expired) == ("expired", ("c1",)), swept
    run = _bridge(backend.sync(), agent, sid).run_record("r1")
    assert run is not None and run.state == "completed" and run.output == EXPIRED
    assert counts.bodies == [] and counts.requests == 2
    assert asyncio.run(sweep()).sessions == ()
