"""A wrong-flavour ConfigError says what was detected, and whether anything was called.

Read from the definition (an ``async def`` method given to the sync API, or a plain ``def``
to the asyncio API): the message says so and that nothing was called. Only a call whose
*result* showed the flavour (a callable object returning an awaitable) says "returned an
awaitable".
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from akchat_fsm import (
    AsyncMemoryStorage,
    ChatDefinition,
    ConfigError,
    MemoryStorage,
    resume_chat_session,
    resume_chat_session_async,
)

DEFINITION = ChatDefinition("flavours")


def _message(call: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        call()
    return str(caught.value)


def test_an_async_def_port_on_the_sync_api_is_named_a_coroutine_function() -> None:
    message = _message(
        lambda: resume_chat_session(DEFINITION, session_id="s", storage=AsyncMemoryStorage())  # type: ignore[arg-type]
    )
    assert "storage.load is a coroutine function (async def)" in message
    assert "nothing was called" in message
    assert "returned an awaitable" not in message
    assert "resume_chat_session_async" in message


def test_a_plain_def_port_on_the_asyncio_api_is_named_a_plain_function() -> None:
    async def main() -> str:
        with pytest.raises(ConfigError) as caught:
            await resume_chat_session_async(DEFINITION, session_id="s", storage=MemoryStorage())  # type: ignore[arg-type]
        return str(caught.value)

    message = asyncio.run(main())
    assert "storage.load is a plain function (def, not async def)" in message
    assert "nothing was called" in message
    assert "did not return an awaitable" not in message
    assert "resume_chat_session (" in message


class _Method:
    """A callable object: its flavour shows only in what it returns."""

    def __init__(self, result: Any) -> None:
        self.result = result
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        return self.result() if callable(self.result) else self.result


def test_only_a_returned_awaitable_is_reported_as_one() -> None:
    async def stored() -> None:
        return None

    class Storage:
        load = _Method(stored)
        save = _Method(True)

    storage = Storage()
    message = _message(lambda: resume_chat_session(DEFINITION, session_id="s", storage=storage))  # type: ignore[arg-type]
    assert Storage.load.calls == 1  # the call was made: its result is what told
    assert "storage.load is asyncio (it returned an awaitable)" in message
    assert "coroutine function" not in message and "nothing was called" not in message


def test_only_a_returned_plain_value_is_reported_as_one() -> None:
    class Storage:
        load = _Method(None)
        save = _Method(True)

    async def main() -> str:
        with pytest.raises(ConfigError) as caught:
            await resume_chat_session_async(DEFINITION, session_id="s", storage=Storage())  # type: ignore[arg-type]
        return str(caught.value)

    message = asyncio.run(main())
    assert Storage.load.calls == 1
    assert "storage.load is synchronous (it did not return an awaitable)" in message
    assert "nothing was called" not in message


def test_the_sweep_says_what_it_read_from_the_definition() -> None:
    from akchat_fsm import reconcile_all, reconcile_all_async

    def never(session_id: str) -> None:
        raise AssertionError("the host was asked about a session")

    message = _message(lambda: reconcile_all(AsyncMemoryStorage(), never, older_than_ms=0))  # type: ignore[arg-type]
    assert "list_processing is a coroutine function (async def)" in message
    assert "nothing was called" in message and "use reconcile_all_async" in message

    async def main() -> str:
        with pytest.raises(ConfigError) as caught:
            await reconcile_all_async(MemoryStorage(), never, older_than_ms=0)  # type: ignore[arg-type]
        return str(caught.value)

    message = asyncio.run(main())
    assert "list_processing is a plain function (def, not async def)" in message
    assert "nothing was called" in message and "use reconcile_all " in message
