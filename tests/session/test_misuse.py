"""Misuse fails loudly and early, and never completes falsely (issue 13, item 4).

A port of the wrong flavour, a memory that is not a memory, or a reconcile that would need an
upstream it was not given: each is a ConfigError naming what to use, raised before anything is
saved, and never a terminal record for a call that did not run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.session import (
    ChatDefinition,
    UpstreamFailed,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import (
    AsyncRecordingChatMemory,
    AsyncRecordingUpstream,
    RecordingChatMemory,
    RecordingUpstream,
)

DEFINITION = ChatDefinition("misuse")
ASYNC_API = "resume_chat_session_async"
SYNC_API = r"resume_chat_session \("


def stored_cursor(storage: MemoryStorage) -> int | None:
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    return session.cursor if session.exists else None


def with_pending(storage: MemoryStorage, upstream: RecordingUpstream) -> str:
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    return session.confirmations_for(upstream).propose("email.send", {}).token


# --------------------------------------------------------------------------- storage


def test_async_storage_on_the_sync_api_names_the_async_function_and_saves_nothing() -> None:
    inner = MemoryStorage()
    with pytest.raises(ConfigError, match=ASYNC_API):
        resume_chat_session(DEFINITION, session_id="s", storage=AsyncMemoryStorage(inner))  # type: ignore[arg-type]
    assert inner.load("s") is None


def test_sync_storage_on_the_async_api_is_a_config_error_not_an_outage() -> None:
    async def main() -> None:
        with pytest.raises(ConfigError, match=SYNC_API):
            await resume_chat_session_async(DEFINITION, session_id="s", storage=MemoryStorage())  # type: ignore[arg-type]

    asyncio.run(main())


class _CallableLoad:
    """A storage whose methods are callable objects: their flavour shows only in the result."""

    def __init__(self, inner: AsyncMemoryStorage) -> None:
        self.load = _Forward(inner.load)
        self.save = _Forward(inner.save)


class _Forward:
    def __init__(self, target: Any) -> None:
        self.target = target

    def __call__(self, *args: Any) -> Any:
        return self.target(*args)


def test_an_awaitable_from_a_sync_storage_call_is_refused_and_never_awaited() -> None:
    inner = MemoryStorage()
    with pytest.raises(ConfigError, match=ASYNC_API):
        resume_chat_session(
            DEFINITION,
            session_id="s",
            storage=_CallableLoad(AsyncMemoryStorage(inner)),  # type: ignore[arg-type]
        )
    assert inner.load("s") is None


def test_a_storage_without_save_is_a_config_error() -> None:
    class LoadOnly:
        def load(self, session_id: str) -> None:
            return None

    with pytest.raises(ConfigError, match=r"no callable save\(\)"):
        resume_chat_session(DEFINITION, session_id="s", storage=LoadOnly())  # type: ignore[arg-type]


# --------------------------------------------------------------------------- upstream


def test_async_upstream_on_the_sync_api_is_refused_before_any_claim() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    with_pending(storage, upstream)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    before = stored_cursor(storage)
    with pytest.raises(ConfigError, match=ASYNC_API):
        session.confirmations_for(AsyncRecordingUpstream(sync=upstream))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=ASYNC_API):
        resume_chat_session(
            DEFINITION,
            session_id="s",
            storage=storage,
            upstream=AsyncRecordingUpstream(),  # type: ignore[arg-type]
        )
    assert stored_cursor(storage) == before and upstream.calls == []


def test_sync_upstream_on_the_async_api_is_refused_before_any_claim() -> None:
    async def main() -> None:
        session = await resume_chat_session_async(
            DEFINITION, session_id="s", storage=AsyncMemoryStorage()
        )
        with pytest.raises(ConfigError, match=SYNC_API):
            session.confirmations_for(RecordingUpstream())  # type: ignore[arg-type]

    asyncio.run(main())


class _AwaitableApprove:
    """A sync-looking upstream whose approve is a callable object returning a coroutine."""

    def __init__(self, real: RecordingUpstream) -> None:
        self.real = real
        self.started = False

        async def approve(tool_call_id: str) -> None:
            self.started = True
            real.approve(tool_call_id)

        self.approve = _Forward(approve)

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        return self.real.propose_tool_call(id, name, args)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.real.deny(tool_call_id, reason)


def test_an_awaitable_from_a_sync_upstream_call_never_becomes_a_terminal_record() -> None:
    """The claim was saved, the call never ran: the record stays approving, reconcile resumes."""
    storage, upstream = MemoryStorage(), RecordingUpstream()
    token = with_pending(storage, upstream)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    odd = _AwaitableApprove(upstream)
    with pytest.raises(ConfigError, match=ASYNC_API):
        session.confirmations_for(odd).approve(token)
    assert not odd.started and upstream.calls == []  # the coroutine was closed, never run
    (record,) = resume_chat_session(DEFINITION, session_id="s", storage=storage).confirmations
    assert record.status == "approving"  # not "approved": nothing ran
    (outcome,) = session.reconcile(RecordingChatMemory(upstream), upstream=upstream)
    assert (outcome.action, outcome.record.status) == ("resumed", "approved")
    assert upstream.calls_per_tool_call == {record.tool_call_id: 1}


def test_an_awaitable_from_a_sync_propose_is_refused_and_nothing_is_saved() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    session.persist()

    class AwaitablePropose(_AwaitableApprove):
        def __init__(self, real: RecordingUpstream) -> None:
            super().__init__(real)

            async def propose(id: str, name: str, args: Mapping[str, Any]) -> Any:
                return real.propose_tool_call(id, name, args)

            self.propose_tool_call = _Forward(propose)  # type: ignore[method-assign]

    with pytest.raises(ConfigError, match=ASYNC_API):
        session.confirmations_for(AwaitablePropose(upstream)).propose("email.send", {})
    assert upstream.proposed == [] and stored_cursor(storage) == 1


# --------------------------------------------------------------------------- memory


@pytest.mark.parametrize(
    "memory", [{"version": 1, "messages": []}, [], object()], ids=["dict", "list", "object"]
)
def test_a_memory_without_load_or_statuses_is_a_config_error_before_any_save(
    memory: Any,
) -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    token = with_pending(storage, upstream)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match=r"neither tool_call_statuses\(\) nor load\(\)"):
        session.reconcile(memory, upstream=upstream)
    with pytest.raises(ConfigError, match="ChatMemory"):
        resume_chat_session(DEFINITION, session_id="s", storage=storage, memory=memory)
    assert stored_cursor(storage) == 1 and token


def test_an_async_memory_on_the_sync_api_and_the_reverse_are_config_errors() -> None:
    storage, upstream = MemoryStorage(), RecordingUpstream()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match=ASYNC_API):
        session.reconcile(AsyncRecordingChatMemory(upstream))  # type: ignore[arg-type]

    async def main() -> None:
        twin = await resume_chat_session_async(
            DEFINITION, session_id="s", storage=AsyncMemoryStorage(storage)
        )
        with pytest.raises(ConfigError, match=SYNC_API):
            await twin.reconcile(RecordingChatMemory(upstream))  # type: ignore[arg-type]

    asyncio.run(main())


# --------------------------------------------------------------------------- reconcile


def test_reconcile_that_needs_an_upstream_it_lacks_is_refused_before_any_save() -> None:
    """Two processing records: one upstream acted on (completable without upstream), one it
    never saw (must be re-issued). Nothing is saved, not even the completable one."""
    storage, upstream = MemoryStorage(), RecordingUpstream()
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    first = coordinator.propose("email.send", {"n": 1})
    second = coordinator.propose("email.send", {"n": 2})
    for record in (first, second):
        upstream.fail_next = 1  # the claim is saved, the upstream call fails: approving
        with pytest.raises(UpstreamFailed):
            coordinator.approve(record.token)
    upstream.statuses[first.tool_call_id] = "complete"  # upstream acted on the first after all
    before = stored_cursor(storage)
    fresh = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(ConfigError, match="no upstream was given"):
        fresh.reconcile(RecordingChatMemory(upstream))
    assert stored_cursor(storage) == before
    assert [b.status for b in fresh.confirmations] == ["approving", "approving"]
    # Without the record that needs upstream, the same call settles without one.
    outcomes = fresh.reconcile(RecordingChatMemory(upstream), release_untouched=True)
    assert [(o.action, o.record.status) for o in outcomes] == [
        ("completed", "approved"),
        ("released", "pending"),
    ]
    assert upstream.calls == []
