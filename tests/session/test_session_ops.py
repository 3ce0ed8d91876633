"""Turn lease, route decisions through the host flow, the renderer check, and async parity."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from akchat_fsm.errors import (
    ConfigError,
    IllegalTransition,
    IncompatibleSession,
    SessionConflict,
)
from akchat_fsm.session import (
    AsyncChatSession,
    ChatDefinition,
    ChatSession,
    SessionEvent,
    SessionEventKind,
    resolve_chat_session,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session.definition import ConversationFlow
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.wire.session import SessionSnapshot

from ._flows import SUPPORT_ROUTES, SupportFlow

FLOW = ChatDefinition("support", 1, ConversationFlow(SupportFlow, SUPPORT_ROUTES))


def test_turn_lease_claim_refuse_release_replay() -> None:
    now = [1_000]
    session = resume_chat_session(
        ChatDefinition("d"), session_id="s", storage=MemoryStorage(), clock=lambda: now[0]
    )
    assert session.claim_turn("turn-1", 500) is True
    assert session.claim_turn("turn-2", 500) is False  # busy
    assert session.release_turn("turn-2") is False  # does not hold it
    assert session.release_turn("turn-1", "indeterminate") is True
    assert session.claim_turn("turn-1", 500) is False  # a replayed turn id
    assert session.claim_turn("turn-3", 500) is True
    now[0] += 500
    assert session.claim_turn("turn-4", 500) is True  # takes over the expired lease
    assert session.cursor == 4
    with pytest.raises(ConfigError, match=r"Turn claim is invalid\."):
        session.claim_turn("bad id", 500)


def test_a_turn_claim_that_meets_a_concurrent_save_re_decides_from_storage() -> None:
    storage = MemoryStorage()
    definition = ChatDefinition("d")
    resume_chat_session(definition, session_id="s", storage=storage).persist()
    a = resume_chat_session(definition, session_id="s", storage=storage)
    b = resume_chat_session(definition, session_id="s", storage=storage)
    c = resume_chat_session(definition, session_id="s", storage=storage)
    a.persist()  # b and c are now stale
    assert b.claim_turn("turn-1", 1_000) is True  # the conflict re-decided: still free
    # c's copy says "free", storage says "turn-1 holds it": c answers from storage, busy.
    assert c.claim_turn("turn-2", 1_000) is False
    assert c.snapshot.active_turn is not None and c.snapshot.active_turn.turn_id == "turn-1"
    assert a.release_turn("turn-1") is True  # a's stale copy has no lease; storage does
    assert resume_chat_session(definition, session_id="s", storage=storage).cursor == 4


def test_two_async_sessions_racing_for_one_turn_get_true_and_false() -> None:
    """Both read the free lease, then both save: the loser re-decides on storage, not a 409 loop."""

    async def main() -> list[bool]:
        storage = AsyncMemoryStorage(MemoryStorage())
        definition = ChatDefinition("d")
        first = await resume_chat_session_async(definition, session_id="s", storage=storage)
        await first.persist()
        a, b = [
            await resume_chat_session_async(definition, session_id="s", storage=storage)
            for _ in range(2)
        ]
        return list(
            await asyncio.gather(a.claim_turn("turn-a", 1_000), b.claim_turn("turn-b", 1_000))
        )

    assert sorted(asyncio.run(main())) == [False, True]


class _SaysConflictForever(MemoryStorage):
    """A broken adapter: every update is a 'conflict', yet nothing ever moves."""

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        return expected_cursor is None and super().save(snapshot, expected_cursor)


def test_a_failed_claim_is_not_kept_in_memory_and_a_stalled_storage_ends_the_retries() -> None:
    storage = _SaysConflictForever()
    definition = ChatDefinition("d")
    resume_chat_session(definition, session_id="s", storage=storage).persist()
    b = resume_chat_session(definition, session_id="s", storage=storage)
    with pytest.raises(SessionConflict):
        b.claim_turn("turn-1", 1_000)  # conflicts that show no progress are not retried forever
    assert b.snapshot.active_turn is None  # rolled back (gap §7.14 closed)


def test_route_decisions_follow_the_host_flow_and_replay_on_resume() -> None:
    storage = MemoryStorage()
    events: list[SessionEvent] = []
    session = resume_chat_session(FLOW, session_id="s", storage=storage, observers=[events.append])
    assert session.conversation_state == "idle"
    with pytest.raises(IllegalTransition):
        session.record_decision("msg-1", "submit")  # only allowed in "collecting"
    decision = session.record_decision("msg-1", "start", input="/start", content="Name?")
    assert (decision.from_state, decision.to_state) == ("idle", "collecting")
    session.record_decision("msg-2", "submit", input="Ada")
    assert [e.kind for e in events] == [SessionEventKind.DECISION] * 2
    resumed = resume_chat_session(FLOW, session_id="s", storage=storage)
    assert resumed.conversation_state == "done"
    assert [d.message_id for d in resumed.snapshot.conversation.decisions] == ["msg-1", "msg-2"]  # type: ignore[union-attr]
    assert "Ada" not in str([e for e in events])  # events carry ids, never message text


def test_decisions_that_no_longer_replay_are_rejected_before_a_session_exists() -> None:
    storage = MemoryStorage()
    session = resume_chat_session(FLOW, session_id="s", storage=storage)
    session.record_decision("msg-1", "start")
    narrower = ChatDefinition(
        "support",
        1,
        ConversationFlow(SupportFlow, (SUPPORT_ROUTES[0].__class__("start", "cancel"),)),
    )
    with pytest.raises(IncompatibleSession, match="conversation metadata is incompatible"):
        resume_chat_session(narrower, session_id="s", storage=storage)


def test_the_renderer_check_compares_identity_and_revision() -> None:
    session = resume_chat_session(ChatDefinition("d", 2), session_id="s", storage=MemoryStorage())
    assert resolve_chat_session(ChatDefinition("d", 2), session) is session
    for other in (ChatDefinition("d", 3), ChatDefinition("e", 2)):
        with pytest.raises(ConfigError, match="Prepared session is incompatible"):
            resolve_chat_session(other, session)


def test_invalid_identity_and_revision_use_the_reference_messages() -> None:
    with pytest.raises(ConfigError, match=r"Chat definition revision is invalid\."):
        ChatDefinition("d", 0)
    with pytest.raises(ConfigError, match=r"Chat session identity is invalid\."):
        resume_chat_session(ChatDefinition("d"), session_id="no spaces", storage=MemoryStorage())


def _script_sync(storage: MemoryStorage) -> list[Any]:
    session: ChatSession = resume_chat_session(
        FLOW, session_id="p", storage=storage, clock=lambda: 7
    )
    out: list[Any] = [session.persist(), session.claim_turn("t-1", 10)]
    out.append(session.record_decision("m-1", "start").to_state)
    out.append(session.release_turn("t-1"))
    return [*out, session.cursor, session.snapshot.to_wire()["conversation"]]


async def _script_async(storage: AsyncMemoryStorage) -> list[Any]:
    session: AsyncChatSession = await resume_chat_session_async(
        FLOW, session_id="p", storage=storage, clock=lambda: 7
    )
    out: list[Any] = [await session.persist(), await session.claim_turn("t-1", 10)]
    out.append((await session.record_decision("m-1", "start")).to_state)
    out.append(await session.release_turn("t-1"))
    return [*out, session.cursor, session.snapshot.to_wire()["conversation"]]


def test_sync_and_async_sessions_behave_the_same() -> None:
    sync_result = _script_sync(MemoryStorage())
    async_result = asyncio.run(_script_async(AsyncMemoryStorage(MemoryStorage())))
    assert sync_result == async_result
    assert sync_result[:5] == [1, True, "collecting", True, 4]


def test_async_observers_are_awaited() -> None:
    seen: list[SessionEventKind] = []

    async def observer(event: SessionEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event.kind)

    async def main() -> None:
        session = await resume_chat_session_async(
            ChatDefinition("d"),
            session_id="s",
            storage=AsyncMemoryStorage(MemoryStorage()),
            observers=[observer],
        )
        await session.persist()

    asyncio.run(main())
    assert seen == [SessionEventKind.PERSISTED]


def test_a_stored_session_without_conversation_starts_the_flow_at_its_initial_state() -> None:
    storage = MemoryStorage()
    resume_chat_session(ChatDefinition("support"), session_id="s", storage=storage).persist()
    session = resume_chat_session(FLOW, session_id="s", storage=storage)
    assert session.conversation_state == "idle"
    assert session.record_decision("msg-1", "start").to_state == "collecting"
    assert resume_chat_session(FLOW, session_id="s", storage=storage).conversation_state == (
        "collecting"
    )
