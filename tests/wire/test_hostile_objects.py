"""Hostile Python objects: every entry point ends in our typed outcome, whatever it is given.

JSON text can only produce plain values, but a Python caller can pass anything: subclasses whose
``__hash__`` / ``__len__`` / ``is_integer`` / ``decode`` raise, sets, recursive lists, dicts with
non-string keys, NaN. ``decode_session_snapshot`` must not raise at all; every other public call may
raise only its own typed error (docs/reference.md §0: "an exception thrown while walking the value
also fails").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.controlled import ACTION_NAMES, ControlledConfirmations, create_controlled_chat
from akchat_fsm.errors import (
    ConfigError,
    InvalidControlledSnapshot,
    InvalidMemoryRecord,
    InvalidSessionSnapshot,
)
from akchat_fsm.wire.bounded import FrozenDict
from akchat_fsm.wire.controlled import ControlledSnapshot, Usage, parse_controlled_snapshot
from akchat_fsm.wire.decode import DecodeResult, decode_session_snapshot, parse_session_snapshot
from akchat_fsm.wire.memory import Message, ToolCall, validate_memory_record
from akchat_fsm.wire.session import ConfirmationBinding, SessionSnapshot


class Boom(Exception):
    """Raised by the hostile objects' own methods; must never escape."""


class BadHash(str):
    def __hash__(self) -> int:
        raise Boom("hash")


class BadEq(str):
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        raise Boom("eq")


class BadLen(str):
    def __len__(self) -> int:
        raise Boom("len")


class BadIsInteger(float):
    def is_integer(self) -> bool:
        raise Boom("is_integer")


class BadCompare(int):
    def __le__(self, other: object) -> bool:
        raise Boom("le")

    def __ge__(self, other: object) -> bool:
        raise Boom("ge")


class BadDecode(bytes):
    def decode(self, *args: Any, **kwargs: Any) -> str:
        raise Boom("decode")


class BadItems(dict[str, Any]):
    def items(self) -> Any:
        raise Boom("items")

    def __iter__(self) -> Iterator[str]:
        raise Boom("iter")


class Huge(int):
    """10**5000, with a repr Hypothesis can print (``int`` refuses over 4,300 digits)."""

    def __repr__(self) -> str:
        return "Huge(10**5000)"


def _recursive() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


HOSTILE: list[Any] = [
    BadHash("idle"),
    BadEq("sessionId"),
    BadLen("x"),
    BadIsInteger(1.0),
    BadCompare(1),
    BadDecode(b"{}"),
    BadItems(a=1),
    _recursive(),
    {1, 2},
    float("nan"),
    bytearray(b"\xff"),
    object(),
    Huge(10**5000),
    {1: "non-str key"},
]

MESSAGE = {
    "id": "m",
    "role": "user",
    "content": "",
    "status": "complete",
    "createdAt": "2026-07-14T00:00:00.000Z",
}
SHELL = {
    "sessionId": "s",
    "messages": [MESSAGE],
    "status": "idle",
    "input": "",
    "error": None,
    "usage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
}
ENVELOPE = {
    "protocol": "agentskit.chat.session",
    "version": 1,
    "sessionId": "s",
    "definitionId": "d",
    "definitionRevision": 1,
    "updatedAt": "2026-07-11T00:00:00.000Z",
    "cursor": 0,
    "confirmations": [],
}
BINDING = {
    "token": "t",
    "action": "a",
    "input": {},
    "tool_call_id": "c",
    "expires_at": 0,
    "status": "pending",
}
CALLBACKS = {name: (lambda *args, **kwargs: None) for name in ACTION_NAMES}


def _typed(call: Callable[[], object], *errors: type[Exception]) -> None:
    """The call returns, or raises one of ``errors``; anything else fails the test."""
    with contextlib.suppress(*errors):
        call()


def _every_entry_point(value: Any) -> None:
    """Put ``value`` in every slot of every public entry point."""
    result = decode_session_snapshot(value)
    assert isinstance(result, DecodeResult) and not result.ok
    for key in ENVELOPE:
        raw = {**ENVELOPE, key: value}
        assert isinstance(decode_session_snapshot(raw), DecodeResult)
        _typed(lambda raw=raw: parse_session_snapshot(raw), InvalidSessionSnapshot)
        _typed(lambda raw=raw: SessionSnapshot.from_wire(raw), InvalidSessionSnapshot)
    confirmations = [{**ENVELOPE, "confirmations": [{**BINDING, "input": {"a": value}}]}]
    assert isinstance(decode_session_snapshot(confirmations[0]), DecodeResult)
    _typed(lambda: SessionSnapshot.from_json(value), InvalidSessionSnapshot)
    for field in BINDING:
        kwargs = {**BINDING, field: value}
        _typed(lambda kwargs=kwargs: ConfirmationBinding(**kwargs), InvalidSessionSnapshot)
    _typed(
        lambda: SessionSnapshot(
            session_id=value, definition_id="d", definition_revision=1,
            updated_at="2026-07-11T00:00:00.000Z", cursor=value, confirmations=[],
        ),
        InvalidSessionSnapshot,
    )  # fmt: skip
    _typed(lambda: validate_memory_record(value), InvalidMemoryRecord)
    for field in [*MESSAGE, "metadata", "parts", "toolCalls"]:
        record = {"version": 1, "messages": [{**MESSAGE, field: value}]}
        _typed(lambda record=record: validate_memory_record(record), InvalidMemoryRecord)
        message = {**MESSAGE, field: value}
        _typed(lambda message=message: Message(**message), InvalidMemoryRecord)
    _typed(
        lambda: ToolCall(id="c", name="n", args={"a": value}, status="pending"),
        InvalidMemoryRecord,
    )
    _typed(lambda: parse_controlled_snapshot(value), InvalidControlledSnapshot)
    for key in SHELL:
        shell = {**SHELL, key: value}
        _typed(lambda shell=shell: parse_controlled_snapshot(shell), InvalidControlledSnapshot)
        _typed(
            lambda shell=shell: create_controlled_chat(shell, CALLBACKS),
            InvalidControlledSnapshot,
        )
    for key in ("message", "code"):
        shell = {**SHELL, "error": {"message": "m", key: value}}
        _typed(lambda shell=shell: parse_controlled_snapshot(shell), InvalidControlledSnapshot)
    usage = {**SHELL, "usage": {**SHELL["usage"], "promptTokens": value}}  # type: ignore[dict-item]
    _typed(lambda: parse_controlled_snapshot(usage), InvalidControlledSnapshot)
    _typed(
        lambda: Usage(prompt_tokens=value, completion_tokens=0, total_tokens=0),
        InvalidControlledSnapshot,
    )
    _typed(lambda: create_controlled_chat(SHELL, value), ConfigError)


@pytest.mark.parametrize("value", HOSTILE, ids=lambda value: type(value).__name__)
def test_hostile_objects_only_give_typed_outcomes(value: Any) -> None:
    _every_entry_point(value)


def test_hostile_subclasses_are_read_as_their_base_value() -> None:
    # Exact reads (`str.__str__`, `int.__int__`, buffer decoding) keep verdicts right, too.
    assert parse_controlled_snapshot({**SHELL, "status": BadHash("idle")}).status == "idle"
    shell = {**SHELL, "usage": {**SHELL["usage"], "totalTokens": BadIsInteger(3.0)}}  # type: ignore[dict-item]
    assert parse_controlled_snapshot(shell).usage.total_tokens == 3
    assert parse_controlled_snapshot(BadDecode(json.dumps(SHELL).encode())).session_id == "s"
    record = validate_memory_record({"version": 1, "messages": [{**MESSAGE, BadLen("x"): 1}]})
    assert record.messages[0].id == "m"


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_direct_model_construction_never_recurses_without_bound() -> None:
    with pytest.raises(InvalidMemoryRecord):
        Message(**{**MESSAGE, "metadata": _deep(5_000)})
    with pytest.raises(InvalidMemoryRecord):
        ToolCall(id="c", name="n", args=_deep(5_000), status="pending")
    with pytest.raises(InvalidMemoryRecord):
        Message(**{**MESSAGE, "role": "robot"})
    call = ToolCall(id="c", name="n", args={"a": [1, {"b": 2}]}, status="pending")
    assert call.args == {"a": (1, {"b": 2})} and isinstance(call.args, FrozenDict)
    # A frozen payload from one model can be handed to another as is.
    assert ToolCall(id="d", name="n", args=call.args, status="pending").args == call.args


def test_controlled_snapshot_constructor_checks_every_parser_rule() -> None:
    good = parse_controlled_snapshot(SHELL)
    fields = dict(good)
    assert ControlledSnapshot(**fields) == good
    with pytest.raises(InvalidControlledSnapshot) as shell_error:
        ControlledSnapshot(**{**fields, "session_id": "not an id"})
    assert shell_error.value.layer == "shell"
    with pytest.raises(InvalidControlledSnapshot) as usage_error:
        Usage(prompt_tokens=-1, completion_tokens=0, total_tokens=0)
    assert usage_error.value.layer == "shell"
    many = good.messages * 1_667  # the record node budget bites at 1,667 six-field messages
    with pytest.raises(InvalidControlledSnapshot) as budget_error:
        ControlledSnapshot(**{**fields, "messages": many})
    assert budget_error.value.layer == "messages"
    with pytest.raises(InvalidControlledSnapshot) as message_error:
        ControlledSnapshot(**{**fields, "messages": [{**MESSAGE, "id": ""}]})
    assert message_error.value.layer == "messages"
    with pytest.raises(InvalidControlledSnapshot) as deep_error:
        ControlledSnapshot(**{**fields, "messages": [{**MESSAGE, "metadata": _deep(5_000)}]})
    assert deep_error.value.layer == "messages"


def test_driver_fails_closed_on_an_unvalidated_instance() -> None:
    good = parse_controlled_snapshot(SHELL)
    forged = good.model_copy(update={"session_id": "../../etc", "input": "x" * 100_001})
    with pytest.raises(InvalidControlledSnapshot) as caught:
        create_controlled_chat(forged, CALLBACKS)
    assert caught.value.layer == "shell"
    assert create_controlled_chat(good, CALLBACKS).snapshot is good


def test_proposed_args_may_be_frozen_or_hold_tuples_but_stay_bounded() -> None:
    async def propose(call: dict[str, Any]) -> dict[str, Any]:
        return {**call, "status": "requires_confirmation"}

    chat = create_controlled_chat(SHELL, {**CALLBACKS, "propose_tool_call": propose})
    confirmations = ControlledConfirmations(chat)
    frozen = FrozenDict({"to": "a@example.com", "cc": ("b", "c")})
    for args in (frozen, {"cc": ("b", "c")}):
        record = asyncio.run(confirmations.propose("email.send", args))
        assert dict(record.input)["cc"] == ("b", "c")
    for bad in (_deep(100), {"a": {1, 2}}, {"a": float("nan")}):
        with pytest.raises(ConfigError):
            asyncio.run(confirmations.propose("email.send", bad))


_ANY_OBJECT = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.binary(max_size=5)
    | st.integers(0, len(HOSTILE) - 1).map(lambda index: HOSTILE[index])  # never compared
    | st.builds(object),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(st.text(max_size=4) | st.integers() | st.none(), inner, max_size=3)
        | st.builds(FrozenDict, st.dictionaries(st.text(max_size=3), inner, max_size=2))
    ),
    max_leaves=10,
)


@given(_ANY_OBJECT)
def test_fuzz_any_python_object_in_every_entry_point(value: Any) -> None:
    _every_entry_point(value)
