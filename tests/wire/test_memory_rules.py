"""validate_memory_record: the upstream pre-pass bounds and record rules (docs/reference.md §5.2,
§8)."""

from __future__ import annotations

import copy
import datetime as dt
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import pytest

from akchat_fsm.errors import InvalidMemoryRecord
from akchat_fsm.wire.memory import (
    MAX_NODES,
    MessageStatus,
    Role,
    ToolCallStatus,
    validate_memory_record,
)

ISO = "2026-07-14T00:00:00.000Z"


def message(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "m1",
        "role": "assistant",
        "content": "hi",
        "status": "complete",
        "createdAt": ISO,
    }
    base.update(extra)
    return base


def record(*messages: Any) -> dict[str, Any]:
    return {"version": 1, "messages": list(messages)}


def rejects(raw: object) -> InvalidMemoryRecord:
    with pytest.raises(InvalidMemoryRecord) as caught:
        validate_memory_record(raw)
    error = caught.value
    assert error.message == "Serialized message record is invalid."
    assert error.code == "AK_CONFIG_INVALID"
    assert error.__notes__, "the violated rule is attached as a note"
    return error


def nested(levels: int) -> Any:
    value: Any = []
    for _ in range(levels):
        value = [value]
    return value


# --------------------------------------------------------------------------- node budget


def test_node_budget_boundary_is_1666_six_field_messages() -> None:
    # root + version + messages array + 6 nodes per message: 3 + 6 * 1666 = 9,999.
    ok = record(*(message(id=f"m{i}") for i in range(1666)))
    assert len(validate_memory_record(ok).messages) == 1666
    error = rejects(record(*(message(id=f"m{i}") for i in range(1667))))
    assert "10,000" in error.__notes__[0]


def test_dropped_fields_count_against_the_budget() -> None:
    # 7 nodes per message with one unknown key: 3 + 7 * 1428 = 9,999 and 1429 -> 10,006.
    ok = validate_memory_record(record(*(message(future=1) for _ in range(1428))))
    assert "future" not in ok.to_wire()["messages"][0]
    rejects(record(*(message(future=1) for _ in range(1429))))


def test_unknown_top_level_record_keys_count_too() -> None:
    base = record(*(message() for _ in range(1666)))  # 9,999 nodes
    assert validate_memory_record({**base, "extra": True})  # 10,000: the bound itself
    rejects({**base, "extra": [True]})  # 10,001


def test_exactly_max_nodes_passes_and_one_more_fails() -> None:
    # root, version, messages, one message (6 nodes), metadata object, n null leaves.
    used = 3 + 6 + 1
    fits = {f"k{i}": None for i in range(MAX_NODES - used)}
    assert validate_memory_record(record(message(metadata=fits)))
    rejects(record(message(metadata={**fits, "one-more": None})))


# --------------------------------------------------------------------------- depth


def test_depth_32_passes_and_33_fails() -> None:
    # metadata is at depth 3; "a" at 4; each list level adds one.
    assert validate_memory_record(record(message(metadata={"a": nested(28)})))
    error = rejects(record(message(metadata={"a": nested(29)})))
    assert "deeper than 32" in error.__notes__[0]


def test_very_deep_values_never_raise_recursion_error() -> None:
    rejects(record(message(metadata={"a": nested(200_000)})))


def test_deep_value_in_a_dropped_field_still_fails() -> None:
    rejects(record(message(future=nested(40))))


# --------------------------------------------------------------------------- keys, numbers


def test_key_length_counts_utf16_units() -> None:
    assert validate_memory_record(record(message(metadata={"k" * 256: 1})))
    assert validate_memory_record(record(message(metadata={"😀" * 128: 1})))
    rejects(record(message(metadata={"k" * 257: 1})))
    rejects(record(message(metadata={"😀" * 129: 1})))


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), 10**400, -(10**309)], ids=repr
)
def test_non_finite_numbers_fail(value: object) -> None:
    rejects(record(message(metadata={"n": value})))


def test_large_but_finite_numbers_pass() -> None:
    out = validate_memory_record(record(message(metadata={"n": 10**300, "f": 1e308})))
    assert out.to_wire()["messages"][0]["metadata"] == {"n": 10**300, "f": 1e308}


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        {1, 2},
        b"bytes",
        object(),
        datetime(2026, 7, 14, tzinfo=UTC),
        OrderedDict(a=1),
        {1: "int key"},
        {None: "null key"},
    ],
    ids=lambda v: type(v).__name__,
)
def test_non_json_values_fail(value: object) -> None:
    rejects(record(message(metadata={"x": value})))


def test_cycles_and_shared_references_fail() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    rejects(record(message(metadata={"x": cyclic})))
    shared: dict[str, Any] = {"a": 1}
    rejects(record(message(metadata={"x": shared, "y": shared})))
    # equal but distinct containers are fine
    assert validate_memory_record(record(message(metadata={"x": {"a": 1}, "y": {"a": 1}})))


def test_container_over_10000_items_fails() -> None:
    rejects(record(message(metadata={"x": [None] * 10_001})))


# --------------------------------------------------------------------------- record shape


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "text",
        None,
        {"messages": []},
        {"version": 2, "messages": []},
        {"version": True, "messages": []},
        {"version": "1", "messages": []},
        {"version": 1},
        {"version": 1, "messages": {}},
        {"version": 1, "messages": None},
    ],
    ids=repr,
)
def test_record_shape(raw: object) -> None:
    rejects(raw)


def test_version_is_a_js_number() -> None:
    assert validate_memory_record({"version": 1.0, "messages": []}).to_wire() == record()


# --------------------------------------------------------------------------- message rules


@pytest.mark.parametrize(
    "change",
    [
        {"id": ""},
        {"id": 1},
        {"role": "owner"},
        {"role": "USER"},
        {"content": None},
        {"content": 1},
        {"status": "idle"},
        {"toolCallId": None},
        {"toolCallId": 1},
        {"parts": None},
        {"parts": {}},
        {"toolCalls": None},
        {"metadata": None},
        {"metadata": []},
        {"metadata": "x"},
    ],
    ids=repr,
)
def test_message_field_rules(change: dict[str, Any]) -> None:
    rejects(record(message(**change)))


@pytest.mark.parametrize("field", ["id", "role", "content", "status", "createdAt"])
def test_required_fields(field: str) -> None:
    broken = message()
    del broken[field]
    rejects(record(broken))


def test_ids_are_neither_patterned_nor_unique() -> None:
    out = validate_memory_record(record(message(id="any id!"), message(id="any id!")))
    assert [m.id for m in out.messages] == ["any id!", "any id!"]


@pytest.mark.parametrize(
    "text",
    [
        "2000-02-29T00:00:00.000Z",
        "0000-02-29T00:00:00.000Z",
        "9999-12-31T23:59:59.999Z",
        "2026-07-14T23:59:59.999Z",
    ],
)
def test_created_at_accepted(text: str) -> None:
    (out,) = validate_memory_record(record(message(createdAt=text))).messages
    assert out.created_at_iso == text
    assert out.to_wire()["createdAt"] == text


@pytest.mark.parametrize(
    "text",
    [
        "1900-02-29T00:00:00.000Z",
        "2026-02-30T00:00:00.000Z",
        "2026-04-31T00:00:00.000Z",
        "2026-00-10T00:00:00.000Z",
        "2026-13-10T00:00:00.000Z",
        "2026-07-00T00:00:00.000Z",
        "2026-07-14T24:00:00.000Z",
        "2026-07-14T23:60:00.000Z",
        "2026-07-14T23:59:60.000Z",
        "2026-07-14T00:00:00Z",
        "2026-07-14T00:00:00.0000Z",
        "2026-07-14T00:00:00.000+00:00",
        "2026-07-14t00:00:00.000Z",
        "2026-07-14T00:00:00.000z",
        "2026-07-14T00:00:00.000Z\n",
        " 2026-07-14T00:00:00.000Z",
        "+002026-07-14T00:00:00.000Z",
        "２026-07-14T00:00:00.000Z",
        "2026-07-14",
    ],
)
def test_created_at_rejected(text: str) -> None:
    rejects(record(message(createdAt=text)))


def test_created_at_hydrates_to_aware_utc() -> None:
    (out,) = validate_memory_record(record(message(createdAt="2026-07-14T01:02:03.045Z"))).messages
    assert out.created_at == datetime(2026, 7, 14, 1, 2, 3, 45_000, tzinfo=dt.UTC)
    assert out.created_at is not None and out.created_at.utcoffset() == dt.timedelta(0)


def test_year_zero_is_valid_but_not_a_python_datetime() -> None:
    (out,) = validate_memory_record(record(message(createdAt="0000-01-01T00:00:00.000Z"))).messages
    assert out.created_at is None
    assert out.created_at_iso == "0000-01-01T00:00:00.000Z"


# --------------------------------------------------------------------------- parts


@pytest.mark.parametrize(
    "part",
    [
        {"type": "text", "text": ""},
        {"type": "image", "source": "s"},
        {"type": "image", "source": "s", "mimeType": "image/png", "detail": "auto"},
        {"type": "audio", "source": "s", "durationSec": 0},
        {"type": "audio", "source": "s", "durationSec": 1.5},
        {"type": "video", "source": "s", "mimeType": "video/mp4", "durationSec": 10},
        {"type": "file", "source": "s", "filename": "a.txt"},
    ],
    ids=lambda p: p["type"] + str(len(p)),
)
def test_parts_accepted_round_trip(part: dict[str, Any]) -> None:
    out = validate_memory_record(record(message(parts=[part])))
    assert out.to_wire()["messages"][0]["parts"] == [part]


@pytest.mark.parametrize(
    "part",
    [
        {"type": "hologram", "source": "s"},
        {"source": "s"},
        {"type": "text"},
        {"type": "text", "text": None},
        {"type": "image"},
        {"type": "image", "source": "s", "detail": "max"},
        {"type": "image", "source": "s", "detail": None},
        {"type": "image", "source": "s", "detail": ["low", "high"]},
        {"type": "image", "source": "s", "detail": {"low": 1}},
        {"type": "image", "source": "s", "mimeType": 1},
        {"type": "audio", "source": "s", "durationSec": -1},
        {"type": "audio", "source": "s", "durationSec": True},
        {"type": "video", "source": "s", "durationSec": "1"},
        {"type": "file", "source": "s", "filename": None},
        "text",
    ],
    ids=repr,
)
def test_parts_rejected(part: Any) -> None:
    rejects(record(message(parts=[part])))


@pytest.mark.parametrize("detail", [["low"], [["auto"]], ["high", None][:1]], ids=repr)
def test_image_detail_quirk_keeps_arrays(detail: Any) -> None:
    # docs/reference.md §8: the reference stringifies before checking, and passes the array through.
    part = {"type": "image", "source": "s", "detail": detail}
    out = validate_memory_record(record(message(parts=[part])))
    assert out.to_wire()["messages"][0]["parts"][0]["detail"] == detail


def test_unknown_part_and_tool_call_keys_are_dropped() -> None:
    raw = message(
        future="drop",
        parts=[{"type": "text", "text": "t", "future": 1}],
        toolCalls=[{"id": "c", "name": "n", "args": {"keep": 1}, "status": "pending", "x": 2}],
        metadata={"keep": {"future": 1}, "__proto__": {"polluted": True}},
    )
    (out,) = validate_memory_record(record(raw)).to_wire()["messages"]
    assert out == {
        "id": "m1",
        "role": "assistant",
        "content": "hi",
        "status": "complete",
        "createdAt": ISO,
        "parts": [{"type": "text", "text": "t"}],
        "toolCalls": [{"id": "c", "name": "n", "args": {"keep": 1}, "status": "pending"}],
        "metadata": {"keep": {"future": 1}, "__proto__": {"polluted": True}},
    }


# --------------------------------------------------------------------------- tool calls


def tool(**change: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"id": "c1", "name": "act", "args": {}, "status": "pending"}
    base.update(change)
    return base


@pytest.mark.parametrize("status", [s.value for s in ToolCallStatus])
def test_every_tool_status_accepted(status: str) -> None:
    out = validate_memory_record(record(message(toolCalls=[tool(status=status, result="r")])))
    (call,) = out.messages[0].tool_calls or ()
    assert call.status is ToolCallStatus(status)
    assert call.result == "r"


@pytest.mark.parametrize(
    "change",
    [
        {"id": ""},
        {"name": ""},
        {"name": None},
        {"args": []},
        {"args": None},
        {"args": "x"},
        {"status": "approved"},
        {"status": "denied"},
        {"result": None},
        {"error": 1},
    ],
    ids=repr,
)
def test_tool_call_rules(change: dict[str, Any]) -> None:
    rejects(record(message(toolCalls=[tool(**change)])))


def test_enums_are_exposed() -> None:
    assert {r.value for r in Role} == {"user", "assistant", "system", "tool"}
    assert {s.value for s in MessageStatus} == {"pending", "streaming", "complete", "error"}
    assert "requires_confirmation" in {s.value for s in ToolCallStatus}


# --------------------------------------------------------------------------- isolation


def test_input_is_not_mutated_and_output_is_not_aliased() -> None:
    raw = record(message(metadata={"a": [1, {"b": 2}]}, toolCalls=[tool(args={"x": [1]})]))
    before = copy.deepcopy(raw)
    out = validate_memory_record(raw)
    assert raw == before
    raw["messages"][0]["metadata"]["a"].append(3)
    assert out.to_wire()["messages"][0]["metadata"] == {"a": [1, {"b": 2}]}
    wire = out.to_wire()
    wire["messages"][0]["toolCalls"][0]["args"]["x"].append(2)
    assert out.to_wire()["messages"][0]["toolCalls"][0]["args"] == {"x": [1]}


def test_models_and_payloads_are_frozen() -> None:
    (out,) = validate_memory_record(record(message(metadata={"a": [1]}))).messages
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        out.content = "changed"  # type: ignore[misc]
    assert out.metadata is not None
    with pytest.raises(TypeError):
        out.metadata["a"] = 2  # type: ignore[index]
    assert out.metadata["a"] == (1,)


def test_str_and_int_subclasses_are_normalised() -> None:
    out = validate_memory_record(record(message(role=Role.USER, status=MessageStatus.PENDING)))
    wire = out.to_wire()["messages"][0]
    assert type(wire["role"]) is str and wire["role"] == "user"
    assert out.messages[0].role is Role.USER
