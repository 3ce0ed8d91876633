"""An orphan intent the session can never admit is reported and kept; the pass goes on.

A crash can leave an intent whose call waits upstream while the session meanwhile reached
1,000 live confirmations (another proposer filled it): binding it is refused with
``LimitExceeded``, and no retry changes that until a record is decided. That refusal used to
escape ``reconcile``, so every intent after it in the same pass was never settled and the sweep
reported the whole session ``failed``. Now it is one outcome (``refused``, with the typed
error), the intent is kept (nothing is lost: the waiting call stays covered), every other
record is settled, and a later reconcile binds the call once there is room.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from akchat_fsm.errors import LimitExceeded
from akchat_fsm.session import (
    ChatDefinition,
    reconcile_all,
    reconcile_all_async,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.sweep import AsyncSweepPorts, SweepPorts
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingChatMemory,
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import SessionSnapshot

DEFINITION = ChatDefinition("orphans")
FULL, OTHER = "full-1", "other-1"
INTENTS = "propose-intent:"
LIVE_LIMIT = 1_000
NOW = 1_000
#: A reconcile's clock: an hour on, long after the dead proposers' intent leases (within one,
#: an intent whose call is not bound is left as it is: its proposer may be alive, ADR-0133).
LATER = NOW + 3_600_000


class Killed(BaseException):
    """The process died here: not an error any plan handles."""


class DiesAround(RecordingUpstream):
    """Dies inside ``propose_tool_call``: after creating the call, or before (``create``)."""

    def __init__(self, create: bool) -> None:
        super().__init__()
        self.create = create

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        if self.create:
            super().propose_tool_call(id, name, args)
        raise Killed(id)


def _seed(storage: MemoryStorage, session_id: str, statuses: list[str]) -> None:
    snapshot = SessionSnapshot.model_validate(
        {
            "sessionId": session_id,
            "definitionId": DEFINITION.id,
            "definitionRevision": DEFINITION.revision,
            "updatedAt": "2026-07-11T00:00:00.000Z",
            "cursor": 1,
            "confirmations": [
                {
                    "token": f"confirm-seed{i}",
                    "action": "email.send",
                    "input": {},
                    "toolCallId": f"seed{i}",
                    # Never due, not even on the sweep's wall clock: expiring 998 seeds one
                    # save each made the sweep tests 3 s (12 s under coverage) and proved nothing.
                    "expiresAt": 10**15,
                    "status": status,
                }
                for i, status in enumerate(statuses)
            ],
        }
    )
    assert storage.save(snapshot, None)


def _propose(storage: MemoryStorage, upstream: RecordingUpstream, suffix: str) -> None:
    session = resume_chat_session(DEFINITION, session_id=FULL, storage=storage, clock=lambda: NOW)
    coordinator = session.confirmations_for(upstream, ttl_ms=60_000, create_id=lambda: suffix)
    coordinator.propose("email.send", {"to": suffix})


def _full_session_with_two_orphans(storage: MemoryStorage, upstream: RecordingUpstream) -> str:
    """Two proposals die midway, then two more fill the session to its live limit.

    ``a``'s call waits upstream (it died after upstream created it); ``b`` died before upstream
    was asked, so memory does not know its call. Returns ``a``'s tool call id.
    """
    _seed(storage, FULL, ["pending"] * (LIVE_LIMIT - 2))
    for suffix, create in (("a", True), ("b", False)):
        with pytest.raises(Killed):
            _propose(storage, DiesAround(create), suffix)
    (waiting,) = _intents(storage, FULL)[:1]
    upstream.propose_tool_call(waiting, "email.send", {"to": "a"})  # the call a left upstream
    _propose(storage, upstream, "c")
    _propose(storage, upstream, "d")
    return waiting


def _intents(storage: MemoryStorage, session_id: str) -> list[str]:
    return [k.removeprefix(INTENTS) for k in storage.list_records(session_id, INTENTS)]


def _statuses(storage: MemoryStorage, session_id: str) -> dict[str, ConfirmationStatus]:
    session = resume_chat_session(DEFINITION, session_id=session_id, storage=storage)
    return {b.tool_call_id: b.status for b in session.confirmations}


def _reconcile_sync(storage: MemoryStorage, upstream: RecordingUpstream) -> Any:
    session = resume_chat_session(DEFINITION, session_id=FULL, storage=storage, clock=lambda: LATER)
    return session.reconcile(RecordingChatMemory(upstream), upstream=upstream)


def _reconcile_async(storage: MemoryStorage, upstream: RecordingUpstream) -> Any:
    async def main() -> Any:
        session = await resume_chat_session_async(
            DEFINITION, session_id=FULL, storage=AsyncMemoryStorage(storage), clock=lambda: LATER
        )
        async_upstream = AsyncRecordingUpstream(sync=upstream)
        return await session.reconcile(
            AsyncRecordingChatMemory(async_upstream), upstream=async_upstream
        )

    return asyncio.run(main())


RECONCILES: dict[str, Callable[[MemoryStorage, RecordingUpstream], Any]] = {
    "sync": _reconcile_sync,
    "asyncio": _reconcile_async,
}


@pytest.mark.parametrize("flavour", RECONCILES)
def test_a_refused_intent_is_reported_and_kept_and_the_next_intent_is_still_settled(
    flavour: str,
) -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    waiting = _full_session_with_two_orphans(storage, upstream)
    assert _intents(storage, FULL) == [waiting, "app-b"]
    before = _statuses(storage, FULL)
    assert len(before) == LIVE_LIMIT

    (outcome,) = RECONCILES[flavour](storage, upstream)

    # Reported: refused, and why (the typed error the core raised).
    assert (outcome.action, outcome.tool_call_id) == ("refused", waiting)
    assert isinstance(outcome.refused, LimitExceeded)
    assert outcome.refused.limit == "confirmations"
    assert outcome.before is ConfirmationStatus.PENDING  # what it would have been bound as
    # Kept: the waiting call stays covered by its intent (the session stays listed), nothing
    # was bound or denied. The pass went on: b's intent (no call upstream) was settled.
    assert _intents(storage, FULL) == [waiting]
    assert [s.session_id for s in storage.list_processing()] == [FULL]
    assert _statuses(storage, FULL) == before
    assert upstream.calls == []

    # Once a record is decided there is room: the next reconcile binds the call.
    session = resume_chat_session(DEFINITION, session_id=FULL, storage=storage, clock=lambda: NOW)
    session.confirmations_for(upstream).reject("confirm-seed0")
    (outcome,) = RECONCILES[flavour](storage, upstream)
    assert (outcome.action, outcome.tool_call_id, outcome.refused) == ("bound", waiting, None)
    assert _statuses(storage, FULL)[waiting] is ConfirmationStatus.PENDING
    assert _intents(storage, FULL) == [] and storage.list_processing() == []


def _sweep_sync(storage: MemoryStorage, upstream: RecordingUpstream, cutoff: int) -> Any:
    memory = RecordingChatMemory(upstream)
    return reconcile_all(
        storage,
        lambda sid: SweepPorts(DEFINITION, memory, upstream),
        older_than_ms=0,
        clock=lambda: cutoff,
    )


def _sweep_async(storage: MemoryStorage, upstream: RecordingUpstream, cutoff: int) -> Any:
    async_upstream = AsyncRecordingUpstream(sync=upstream)
    memory = AsyncRecordingChatMemory(async_upstream)
    return asyncio.run(
        reconcile_all_async(
            AsyncMemoryStorage(storage),
            lambda sid: AsyncSweepPorts(DEFINITION, memory, async_upstream),
            older_than_ms=0,
            clock=lambda: cutoff,
        )
    )


SWEEPS: dict[str, Callable[[MemoryStorage, RecordingUpstream, int], Any]] = {
    "sync": _sweep_sync,
    "asyncio": _sweep_async,
}


@pytest.mark.parametrize("flavour", SWEEPS)
def test_the_sweep_reports_a_refused_intent_unsettled_not_failed(flavour: str) -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    waiting = _full_session_with_two_orphans(storage, upstream)
    _seed(storage, OTHER, ["approving"])  # a claim a crash left in another session
    upstream.propose_tool_call("seed0", "email.send", {})
    upstream.approve("seed0")  # upstream acted on it: the sweep records the completion

    report = SWEEPS[flavour](storage, upstream, time.time_ns() // 1_000_000 + 600_000)

    swept = {s.session_id: s for s in report.sessions}
    assert report.ok and swept[FULL].status == "unsettled" and swept[OTHER].status == "settled"
    ((outcome,),) = [swept[FULL].outcomes]
    assert (outcome.action, outcome.tool_call_id) == ("refused", waiting)
    assert isinstance(outcome.refused, LimitExceeded)
    assert _intents(storage, FULL) == [waiting]  # b's intent was settled, a's kept
    assert _statuses(storage, OTHER) == {"seed0": ConfirmationStatus.APPROVED}
    assert [s.session_id for s in storage.list_processing()] == [FULL]
