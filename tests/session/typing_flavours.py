"""Checked by mypy (tests/session/test_typing.py), never run: each wrong flavour is an error.

Every line that misuses a port carries ``# type: ignore[<code>]``; mypy runs with
``--warn-unused-ignores``, so if it stopped flagging a misuse the ignore would be unused and
the check would fail. The lines without an ignore are the right usage and must stay clean.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from akchat_fsm import (
    ChatDefinition,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.storage import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingChatMemory,
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)

DEFINITION = ChatDefinition("typing")


class StatusesOnly:
    """A ToolCallStatusMemory without ``load``: fine for reconcile."""

    def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Mapping[str, str]:
        return {}


class NoLoad:
    def read(self) -> object:
        return None


def sync_api() -> None:
    upstream = RecordingUpstream()
    memory = RecordingChatMemory(upstream)
    session = resume_chat_session(DEFINITION, session_id="s", storage=MemoryStorage())
    session.confirmations_for(upstream)
    session.reconcile(memory, upstream=upstream)
    session.reconcile(memory.load_only())
    session.reconcile(StatusesOnly())
    # Wrong flavours and non-ports, each flagged:
    resume_chat_session(DEFINITION, session_id="s", storage=AsyncMemoryStorage())  # type: ignore[arg-type]
    session.confirmations_for(AsyncRecordingUpstream())  # type: ignore[arg-type]
    session.reconcile(AsyncRecordingChatMemory(upstream))  # type: ignore[arg-type]
    session.reconcile({"version": 1, "messages": []})  # type: ignore[arg-type]
    session.reconcile(NoLoad())  # type: ignore[arg-type]
    session.reconcile(memory, upstream=AsyncRecordingUpstream())  # type: ignore[arg-type]
    resume_chat_session(DEFINITION, session_id="s", storage=MemoryStorage(), memory={})  # type: ignore[arg-type]


async def async_api() -> None:
    upstream = AsyncRecordingUpstream()
    memory = AsyncRecordingChatMemory(upstream)
    storage = AsyncMemoryStorage()
    session = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
    session.confirmations_for(upstream)
    await session.reconcile(memory, upstream=upstream)
    await session.reconcile(memory.load_only())
    # Wrong flavours, each flagged:
    await resume_chat_session_async(DEFINITION, session_id="s", storage=MemoryStorage())  # type: ignore[arg-type]
    session.confirmations_for(RecordingUpstream())  # type: ignore[arg-type]
    await session.reconcile(RecordingChatMemory(upstream))  # type: ignore[arg-type]
    await session.reconcile(memory, upstream=RecordingUpstream())  # type: ignore[arg-type]
