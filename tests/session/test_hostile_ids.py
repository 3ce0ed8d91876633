"""A hostile ``str`` subclass as an id never escapes as an untyped exception.

The entry points take an exact ``str`` copy of a session id (and the coordinators of a token
and session id) once it passed the SafeIdentifier check, so a subclass's own ``__eq__``,
``__ne__``, ``__hash__``, ``__len__``, ``__str__`` or ``encode`` never runs inside the
library: no ``RuntimeError`` from a comparison, and no storage "outage" from an adapter
calling ``str()``. A subclass holding an invalid id is a ``ConfigError``, as a plain one is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from akchat_fsm import (
    AkchatError,
    AsyncMemoryStorage,
    ChatDefinition,
    ConfigError,
    InvalidConfirmationToken,
    MemoryStorage,
    SQLiteStorage,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.testing.doubles import RecordingUpstream

DEFINITION = ChatDefinition("hostile")


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("hostile str subclass method ran")


def _hostile(*methods: str, **extra: Any) -> type[str]:
    attrs: dict[str, Any] = {name: _boom for name in methods}
    attrs.update(extra)
    if "__eq__" in methods and "__hash__" not in attrs:
        attrs["__hash__"] = str.__hash__
    name = "_".join(m.strip("_") for m in methods) or "lies"
    return type(f"Hostile_{name}", (str,), attrs)


HOSTILE: list[type[str]] = [
    _hostile("__eq__", "__ne__"),
    _hostile("__ne__"),
    _hostile("__hash__"),
    _hostile("__str__", "__repr__", "__format__"),
    _hostile("__len__", "__iter__", "__getitem__"),
    _hostile("encode", "__radd__", "__add__", "__mod__", "__rmod__"),
    _hostile(__len__=lambda self: 1, __eq__=lambda self, other: True, __hash__=lambda self: 0),
]
IDS = [cls.__name__ for cls in HOSTILE]

Store = Callable[[], Any]


@pytest.mark.parametrize("store", [MemoryStorage, SQLiteStorage], ids=["memory", "sqlite"])
@pytest.mark.parametrize("hostile", HOSTILE, ids=IDS)
def test_resume_takes_a_plain_copy_of_a_hostile_session_id(
    hostile: type[str], store: Store
) -> None:
    storage = store()
    resume_chat_session(DEFINITION, session_id="session-1", storage=storage).persist()
    session = resume_chat_session(DEFINITION, session_id=hostile("session-1"), storage=storage)
    assert type(session.session_id) is str and session.session_id == "session-1"
    assert session.exists and session.cursor == 1  # the stored one, not a fresh one
    upstream = RecordingUpstream()
    coordinator = session.confirmations_for(upstream)
    token = coordinator.propose("email.send", {}).token
    approved = coordinator.approve(hostile(token), session_id=hostile("session-1"))
    assert approved.status == "approved" and upstream.executed[approved.tool_call_id] == 1
    session.persist()
    session.reload()


@pytest.mark.parametrize("hostile", HOSTILE, ids=IDS)
def test_the_asyncio_resume_takes_a_plain_copy_too(hostile: type[str]) -> None:
    async def main() -> None:
        storage = AsyncMemoryStorage()
        await (
            await resume_chat_session_async(DEFINITION, session_id="session-1", storage=storage)
        ).persist()
        session = await resume_chat_session_async(
            DEFINITION, session_id=hostile("session-1"), storage=storage
        )
        assert type(session.session_id) is str and session.cursor == 1
        await session.persist()

    asyncio.run(main())


@pytest.mark.parametrize("hostile", HOSTILE, ids=IDS)
def test_a_hostile_invalid_session_id_is_a_config_error(hostile: type[str]) -> None:
    with pytest.raises(ConfigError, match="Chat session identity is invalid"):
        resume_chat_session(DEFINITION, session_id=hostile("not an id"), storage=MemoryStorage())


class _ClaimsToBeAStr:
    """Not a str at all, but ``isinstance(x, str)`` says it is (through ``__class__``)."""

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return str


def test_an_object_faking_str_is_a_config_error_not_a_type_error() -> None:
    fake: Any = _ClaimsToBeAStr()
    assert isinstance(fake, str)
    with pytest.raises(ConfigError, match="Chat session identity is invalid"):
        resume_chat_session(DEFINITION, session_id=fake, storage=MemoryStorage())
    session = resume_chat_session(DEFINITION, session_id="session-1", storage=MemoryStorage())
    coordinator = session.confirmations_for(RecordingUpstream())
    token = coordinator.propose("email.send", {}).token
    with pytest.raises(InvalidConfirmationToken):
        coordinator.approve(fake)
    with pytest.raises(InvalidConfirmationToken):
        coordinator.approve(token, session_id=fake)


@pytest.mark.parametrize("hostile", HOSTILE, ids=IDS)
def test_a_hostile_id_for_another_session_is_an_inert_token_error(hostile: type[str]) -> None:
    session = resume_chat_session(DEFINITION, session_id="session-1", storage=MemoryStorage())
    coordinator = session.confirmations_for(RecordingUpstream())
    token = coordinator.propose("email.send", {}).token
    with pytest.raises(AkchatError) as caught:
        coordinator.approve(token, session_id=hostile("session-2"))
    assert isinstance(caught.value, InvalidConfirmationToken)
    with pytest.raises(InvalidConfirmationToken):
        coordinator.approve(hostile("confirm-unknown"))
