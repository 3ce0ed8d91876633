"""Reconcile at any chat length (issue 13, item 2).

Reconcile needs a few tool calls' statuses, not the whole validated chat. A memory that
answers ``tool_call_statuses(ids)`` is asked exactly for the processing records' ids and never
loaded; a memory with only ``load`` is read for those ids alone, so the memory record's bounds
(10,000 JSON values, about 700 tool-call messages) no longer make long chats unreconcilable.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from akchat_fsm.errors import InvalidMemoryRecord
from akchat_fsm.session import ChatDefinition, resume_chat_session, resume_chat_session_async
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingChatMemory,
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)

DEFINITION = ChatDefinition("long-chat")
MESSAGES = 100_000


def long_chat(n: int = MESSAGES) -> list[dict[str, Any]]:
    """``n`` messages, every tenth an assistant message with a settled tool call of its own."""
    chat: list[dict[str, Any]] = []
    for i in range(n):
        message: dict[str, Any] = {
            "id": f"m-{i}",
            "role": "assistant" if i % 2 else "user",
            "content": f"message {i}",
            "status": "complete",
            "createdAt": "2026-07-14T00:00:00.000Z",
        }
        if i % 10 == 1:
            message["toolCalls"] = [
                {"id": f"old-{i}", "name": "search", "args": {"q": i}, "status": "complete"}
            ]
        chat.append(message)
    return chat


def stuck_session(storage: MemoryStorage, upstream: RecordingUpstream) -> list[str]:
    """Three processing records: upstream acted on two, never saw the third's call."""
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    tokens = [coordinator.propose("email.send", {"n": n}).token for n in range(3)]
    for token in tokens:
        upstream.fail_next = 1
        with pytest.raises(Exception, match="processing status"):
            coordinator.approve(token)
    calls = [b.tool_call_id for b in session.confirmations]
    upstream.statuses[calls[0]] = "complete"
    upstream.statuses[calls[1]] = "running"
    return calls


EXPECTED = [("completed", "approved"), ("completed", "approved"), ("resumed", "approved")]


def test_a_status_memory_is_asked_for_the_processing_ids_only_and_never_loaded() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    calls = stuck_session(storage, upstream)
    memory = RecordingChatMemory(upstream, messages=long_chat())
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    outcomes = session.reconcile(memory, upstream=upstream)
    assert [(o.action, o.record.status) for o in outcomes] == EXPECTED
    assert memory.status_queries == [tuple(calls)] and memory.loads == 0


def test_a_load_only_memory_of_100_000_messages_is_reconciled_from_the_whole_record() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    stuck_session(storage, upstream)
    memory = RecordingChatMemory(upstream, messages=long_chat())
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert len(memory.load()["messages"]) > MESSAGES  # far over the record's 10,000 values
    outcomes = session.reconcile(memory.load_only(), upstream=upstream)
    assert [(o.action, o.record.status) for o in outcomes] == EXPECTED
    assert not [b for b in session.confirmations if b.status.is_processing]


def test_the_async_twin_reconciles_a_long_chat_both_ways() -> None:
    async def main() -> None:
        for use_statuses in (True, False):
            sync_storage, upstream = MemoryStorage(), RecordingUpstream()
            stuck_session(sync_storage, upstream)
            memory = AsyncRecordingChatMemory(upstream, messages=long_chat(20_000))
            port: Any = memory if use_statuses else memory.load_only()
            session = await resume_chat_session_async(
                DEFINITION, session_id="s", storage=AsyncMemoryStorage(sync_storage)
            )
            outcomes = await session.reconcile(port, upstream=AsyncRecordingUpstream(sync=upstream))
            assert [(o.action, o.record.status) for o in outcomes] == EXPECTED
            assert (memory.sync.loads == 0) is use_statuses

    asyncio.run(main())


def test_a_bare_message_list_is_read_too() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    stuck_session(storage, upstream)
    full = RecordingChatMemory(upstream)

    class BareList:
        def load(self) -> list[dict[str, Any]]:
            return list(full.load()["messages"])

    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    outcomes = session.reconcile(BareList(), upstream=upstream)
    assert [(o.action, o.record.status) for o in outcomes] == EXPECTED


@pytest.mark.parametrize(
    "answer",
    [{"version": 2, "messages": []}, {"version": 1}, "not a record", {"version": 1, "messages": 3}],
)
def test_a_record_without_the_shape_reconcile_reads_is_invalid_and_nothing_is_saved(
    answer: Any,
) -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    stuck_session(storage, upstream)

    class Broken:
        def load(self) -> Any:
            return answer

    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    before = session.cursor
    with pytest.raises(InvalidMemoryRecord):
        session.reconcile(Broken(), upstream=upstream)
    assert resume_chat_session(DEFINITION, session_id="s", storage=storage).cursor == before


def test_an_unknown_status_from_a_status_memory_is_invalid_and_a_missing_id_is_unknown() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    calls = stuck_session(storage, upstream)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(InvalidMemoryRecord):
        session.reconcile(RecordingChatMemory({calls[0]: "exploded"}), upstream=upstream)
    outcomes = session.reconcile(RecordingChatMemory({calls[0]: "complete"}), upstream=upstream)
    assert [o.action for o in outcomes] == ["completed", "unknown", "unknown"]
