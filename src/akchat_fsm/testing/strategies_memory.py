"""Hypothesis strategies for canonical memory records and controlled snapshots.

Valid values are JSON-ready wire dicts (what a host would send). The ``invalid_*`` strategies
draw a valid value and apply exactly one mutation, returning ``(value, layer, mutation)``
where ``layer`` is the :class:`~akchat_fsm.errors.InvalidControlledSnapshot` layer the
mutation must be rejected with (``"shell"`` or ``"messages"``).

Sizes stay small (a handful of messages, shallow JSON payloads) so the record bounds of
docs/reference.md §5.2 (10,000 nodes, depth 32) are never reached by accident.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "controlled_snapshots",
    "created_at_texts",
    "invalid_controlled_snapshots",
    "invalid_memory_records",
    "json_values",
    "memory_records",
    "messages",
    "parts",
    "tool_calls",
]

Json = Any
_IDENTIFIER = r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z"


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Json]:
    """Small JSON values (finite numbers, any strings, nested arrays and objects)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**53) + 1, 2**53 - 1)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=8)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )


def _objects() -> st.SearchStrategy[dict[str, Json]]:
    return st.dictionaries(st.text(max_size=6), json_values(), max_size=3)


def created_at_texts() -> st.SearchStrategy[str]:
    """Valid ``createdAt`` texts, year 0000 included (leap day too)."""
    regular = st.datetimes().map(
        lambda m: (
            f"{m.year:04d}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:"
            f"{m.second:02d}.{m.microsecond // 1000:03d}Z"
        )
    )
    return regular | st.sampled_from(["0000-01-01T00:00:00.000Z", "0000-02-29T23:59:59.999Z"])


def parts() -> st.SearchStrategy[dict[str, Json]]:
    """One part of any of the five types, with any subset of its optional fields."""
    text = st.text(max_size=10)
    duration = st.integers(0, 10_000) | st.floats(0, 1e6, allow_nan=False)

    def source(kind: str, **extra: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Json]]:
        return st.fixed_dictionaries(
            {"type": st.just(kind), "source": text},
            optional={"mimeType": text, **extra},
        )

    return st.one_of(
        st.fixed_dictionaries({"type": st.just("text"), "text": text}),
        source("image", detail=st.sampled_from(["low", "high", "auto"])),
        source("audio", durationSec=duration),
        source("video", durationSec=duration),
        source("file", filename=text),
    )


def tool_calls() -> st.SearchStrategy[dict[str, Json]]:
    """A tool call with every status, including ``requires_confirmation``."""
    name = st.text(min_size=1, max_size=10)
    return st.fixed_dictionaries(
        {
            "id": name,
            "name": name,
            "args": _objects(),
            "status": st.sampled_from(
                ["pending", "running", "complete", "error", "requires_confirmation"]
            ),
        },
        optional={"result": st.text(max_size=10), "error": st.text(max_size=10)},
    )


def messages() -> st.SearchStrategy[dict[str, Json]]:
    """A canonical message with any subset of the optional fields."""
    return st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=10),
            "role": st.sampled_from(["user", "assistant", "system", "tool"]),
            "content": st.text(max_size=20),
            "status": st.sampled_from(["pending", "streaming", "complete", "error"]),
            "createdAt": created_at_texts(),
        },
        optional={
            "toolCallId": st.text(max_size=10),
            "parts": st.lists(parts(), max_size=3),
            "toolCalls": st.lists(tool_calls(), max_size=2),
            "metadata": _objects(),
        },
    )


def memory_records(max_messages: int = 4) -> st.SearchStrategy[dict[str, Json]]:
    """Valid ``{"version": 1, "messages": [...]}`` records."""
    return st.fixed_dictionaries(
        {"version": st.just(1), "messages": st.lists(messages(), max_size=max_messages)}
    )


def controlled_snapshots(max_messages: int = 4) -> st.SearchStrategy[dict[str, Json]]:
    """Valid controlled snapshots (all six shell keys)."""
    count = st.integers(0, 2**53 - 1)
    error = st.none() | st.fixed_dictionaries(
        {"message": st.text(min_size=1, max_size=20)},
        optional={"code": st.from_regex(_IDENTIFIER)},
    )
    return st.fixed_dictionaries(
        {
            "sessionId": st.from_regex(_IDENTIFIER),
            "messages": st.lists(messages(), max_size=max_messages),
            "status": st.sampled_from(["idle", "streaming", "complete", "error"]),
            "input": st.text(max_size=20),
            "error": error,
            "usage": st.fixed_dictionaries(
                {"promptTokens": count, "completionTokens": count, "totalTokens": count}
            ),
        }
    )


# --------------------------------------------------------------------------- mutations

Mutation = Callable[[dict[str, Json]], None]


def _set(path: tuple[Any, ...], value: Json) -> Mutation:
    def apply(target: dict[str, Json]) -> None:
        node: Any = target
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value

    return apply


def _drop(path: tuple[Any, ...]) -> Mutation:
    def apply(target: dict[str, Json]) -> None:
        node: Any = target
        for step in path[:-1]:
            node = node[step]
        del node[path[-1]]

    return apply


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


_SHELL_MUTATIONS: dict[str, Mutation] = {
    "unknown shell key": _set(("transport",), "private"),
    "__proto__ key inside usage": _set(("usage", "__proto__"), 0),
    "missing sessionId": _drop(("sessionId",)),
    "missing error": _drop(("error",)),
    "missing usage": _drop(("usage",)),
    "sessionId with a space": _set(("sessionId",), "bad id"),
    "sessionId too long": _set(("sessionId",), "s" * 129),
    "sessionId not a string": _set(("sessionId",), 7),
    "messages not an array": _set(("messages",), {}),
    "status not in enum": _set(("status",), "private-state"),
    "status null": _set(("status",), None),
    "input not a string": _set(("input",), ["x"]),
    "input too long": _set(("input",), "x" * 100_001),
    "error not an object": _set(("error",), "boom"),
    "error extra key": _set(("error",), {"message": "x", "stack": "private"}),
    "error message empty": _set(("error",), {"message": ""}),
    "error message too long": _set(("error",), {"message": "😀" * 2049}),
    "error code null": _set(("error",), {"message": "x", "code": None}),
    "error code not identifier": _set(("error",), {"message": "x", "code": "HOST FAILED"}),
    "usage negative": _set(("usage", "promptTokens"), -1),
    "usage fractional": _set(("usage", "completionTokens"), 1.5),
    "usage boolean": _set(("usage", "totalTokens"), True),
    "usage unsafe": _set(("usage", "totalTokens"), 2**53),
    "usage extra key": _set(("usage", "costUsd"), 0),
    "usage missing key": _drop(("usage", "totalTokens")),
}

_MESSAGE_MUTATIONS: dict[str, Mutation] = {
    "id empty": _set(("id",), ""),
    "id missing": _drop(("id",)),
    "role not in enum": _set(("role",), "owner"),
    "content not a string": _set(("content",), 3),
    "status idle": _set(("status",), "idle"),
    "createdAt without millis": _set(("createdAt",), "2026-07-14T00:00:00Z"),
    "createdAt impossible": _set(("createdAt",), "2026-02-30T00:00:00.000Z"),
    "createdAt offset": _set(("createdAt",), "2026-07-14T00:00:00.000+00:00"),
    "createdAt trailing newline": _set(("createdAt",), "2026-07-14T00:00:00.000Z\n"),
    "createdAt non-ascii digit": _set(("createdAt",), "２026-07-14T00:00:00.000Z"),
    "toolCallId null": _set(("toolCallId",), None),
    "metadata array": _set(("metadata",), ["x"]),
    "metadata not finite": _set(("metadata",), {"x": float("nan")}),
    "parts not an array": _set(("parts",), {}),
    "part unknown type": _set(("parts",), [{"type": "hologram", "source": "x"}]),
    "part text missing": _set(("parts",), [{"type": "text"}]),
    "part detail bad": _set(("parts",), [{"type": "image", "source": "x", "detail": "max"}]),
    "part duration negative": _set(
        ("parts",), [{"type": "audio", "source": "x", "durationSec": -1}]
    ),
    "tool args array": _set(
        ("toolCalls",), [{"id": "c", "name": "n", "args": [], "status": "pending"}]
    ),
    "tool status approved": _set(
        ("toolCalls",), [{"id": "c", "name": "n", "args": {}, "status": "approved"}]
    ),
    "tool name empty": _set(
        ("toolCalls",), [{"id": "c", "name": "", "args": {}, "status": "error"}]
    ),
    "tool result null": _set(
        ("toolCalls",), [{"id": "c", "name": "n", "args": {}, "status": "complete", "result": None}]
    ),
    # metadata sits at depth 3 (record, messages, message); this puts a value at depth 33.
    "too deep": _set(("metadata",), {"a": _nested(29)}),
    "not JSON": _set(("metadata",), {"a": {1, 2}}),
}
_NOT_AN_OBJECT = "message not an object"


@st.composite
def invalid_controlled_snapshots(draw: st.DrawFn) -> tuple[dict[str, Json], str, str]:
    """``(snapshot, layer, mutation)``: a valid snapshot broken by exactly one mutation."""
    snapshot = copy.deepcopy(draw(controlled_snapshots()))
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(_SHELL_MUTATIONS)))
        _SHELL_MUTATIONS[name](snapshot)
        return snapshot, "shell", name
    broken, name = draw(_broken_messages(snapshot["messages"]))
    snapshot["messages"] = broken
    return snapshot, "messages", name


@st.composite
def _broken_messages(draw: st.DrawFn, valid: list[Json]) -> tuple[list[Json], str]:
    """Insert one message broken by exactly one mutation among ``valid`` ones."""
    out = copy.deepcopy(valid)
    index = draw(st.integers(0, len(out)))
    name = draw(st.sampled_from([_NOT_AN_OBJECT, *sorted(_MESSAGE_MUTATIONS)]))
    message = copy.deepcopy(draw(messages()))
    if name == _NOT_AN_OBJECT:
        out.insert(index, "text")
    else:
        _MESSAGE_MUTATIONS[name](message)
        out.insert(index, message)
    return out, name


@st.composite
def invalid_memory_records(draw: st.DrawFn) -> tuple[dict[str, Json], str]:
    """``(record, mutation)``: a valid record broken by exactly one message mutation."""
    record = draw(memory_records())
    broken, name = draw(_broken_messages(record["messages"]))
    return {"version": 1, "messages": broken}, name
