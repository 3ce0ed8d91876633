"""The lifecycle scenarios of docs/reference.md §6, as plain tests (where we differ, it is by design
and documented: a loser gets a typed outcome instead of the reference's conflict)."""

from __future__ import annotations

import asyncio

import pytest

from akchat_fsm.errors import ConfigError, InvalidConfirmationToken, ResolutionInProgress
from akchat_fsm.session import (
    ChatDefinition,
    UpstreamFailed,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)

DEFINITION = ChatDefinition("support")


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def test_single_client_exactly_once() -> None:
    async def scenario() -> None:
        storage = AsyncMemoryStorage(MemoryStorage())
        upstream = AsyncRecordingUpstream()
        session = await resume_chat_session_async(
            DEFINITION, session_id="shared", storage=storage, clock=Clock(100)
        )
        coordinator = session.confirmations_for(upstream, create_id=lambda: "choice-1")
        record = await coordinator.propose("email.send", {"to": "a@example.com"})
        assert (record.token, record.tool_call_id, record.expires_at, record.status) == (
            "confirm-choice-1",
            "app-choice-1",
            300_100,
            "pending",
        )
        first, second = await asyncio.gather(
            coordinator.approve("confirm-choice-1"), coordinator.approve("confirm-choice-1")
        )
        assert first.status == second.status == "approved"
        assert upstream.sync.executed == {"app-choice-1": 1}

    asyncio.run(scenario())


def test_expired_at_the_boundary() -> None:
    clock = Clock(10)
    upstream = RecordingUpstream()
    session = resume_chat_session(
        DEFINITION, session_id="shared", storage=MemoryStorage(), clock=clock
    )
    coordinator = session.confirmations_for(upstream, ttl_ms=5)
    record = coordinator.propose("email.send", {})
    assert record.expires_at == 15
    clock.now = 15
    assert coordinator.approve(record.token).status == "expired"
    assert not upstream.executed
    assert upstream.denied == [(record.tool_call_id, "confirmation expired")]


def test_a_token_from_another_session_is_inert() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    mine = resume_chat_session(DEFINITION, session_id="mine", storage=storage)
    record = mine.confirmations_for(upstream).propose("email.send", {})
    theirs = resume_chat_session(DEFINITION, session_id="theirs", storage=storage)
    with pytest.raises(ConfigError, match="invalid for this session"):
        mine.confirmations_for(upstream).approve(record.token, session_id="theirs")
    with pytest.raises(InvalidConfirmationToken):
        theirs.confirmations_for(upstream).approve(record.token)
    assert not upstream.executed
    assert mine.confirmations[0].status == "pending"


def test_upstream_failure_keeps_an_accurate_processing_claim() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    token = coordinator.propose("email.send", {}).token
    upstream.fail_next = 1
    with pytest.raises(UpstreamFailed) as failed:
        coordinator.approve(token)
    assert failed.value.record.status == "approving"
    resumed = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert resumed.confirmations[0].status == "approving"  # stored, not a false completion
    with pytest.raises(ResolutionInProgress):
        resumed.confirmations_for(upstream).approve(token)
    assert not upstream.executed  # never retried behind the host's back
    # The gap the reference leaves (§7.2): reconcile settles it from memory, calling once.
    (outcome,) = resumed.reconcile(RecordingChatMemory(upstream), upstream=upstream)
    assert (outcome.action, outcome.record.status) == ("resumed", "approved")
    assert sum(upstream.executed.values()) == 1


def test_terminal_records_stay_inert_across_three_sessions() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    token = (
        resume_chat_session(DEFINITION, session_id="s", storage=storage)
        .confirmations_for(upstream)
        .propose("email.send", {})
        .token
    )
    for _ in range(3):
        session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
        assert session.confirmations_for(upstream).approve(token).status == "approved"
    assert sum(upstream.executed.values()) == 1
