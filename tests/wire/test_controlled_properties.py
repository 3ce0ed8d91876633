"""Properties of the controlled snapshot and memory record validators (Hypothesis)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from akchat_fsm.errors import InvalidControlledSnapshot, InvalidMemoryRecord
from akchat_fsm.testing.strategies_memory import (
    controlled_snapshots,
    invalid_controlled_snapshots,
    invalid_memory_records,
    json_values,
    memory_records,
)
from akchat_fsm.wire.controlled import parse_controlled_snapshot
from akchat_fsm.wire.memory import validate_memory_record


@given(controlled_snapshots())
def test_snapshot_round_trip(wire: dict[str, Any]) -> None:
    parsed = parse_controlled_snapshot(wire)
    assert parsed.to_wire() == wire
    assert parse_controlled_snapshot(parsed.to_wire()) == parsed
    assert parse_controlled_snapshot(json.dumps(parsed.to_wire())) == parsed


@given(memory_records())
def test_memory_record_round_trip(wire: dict[str, Any]) -> None:
    record = validate_memory_record(wire)
    assert record.to_wire() == wire
    assert validate_memory_record(record.to_wire()) == record
    for message in record.messages:
        if message.created_at is not None:
            assert message.created_at.tzinfo is not None
            assert message.created_at.utcoffset() is not None
            assert not message.created_at.utcoffset()


@given(invalid_controlled_snapshots())
def test_single_mutation_rejected_with_its_layer(case: tuple[dict[str, Any], str, str]) -> None:
    snapshot, layer, mutation = case
    try:
        parse_controlled_snapshot(snapshot)
    except InvalidControlledSnapshot as exc:
        assert exc.layer == layer, mutation
    else:
        raise AssertionError(f"mutation {mutation!r} was accepted")


@given(invalid_memory_records())
def test_single_message_mutation_rejected(case: tuple[dict[str, Any], str]) -> None:
    record, mutation = case
    try:
        validate_memory_record(record)
    except InvalidMemoryRecord:
        pass
    else:
        raise AssertionError(f"mutation {mutation!r} was accepted")


def _only_typed(raw: object) -> None:
    """Either a value comes back or our typed error is raised; nothing else escapes."""
    with contextlib.suppress(InvalidControlledSnapshot):
        parse_controlled_snapshot(raw)
    with contextlib.suppress(InvalidMemoryRecord):
        validate_memory_record(raw)


@given(json_values(max_leaves=20))
def test_fuzz_arbitrary_json_values(raw: Any) -> None:
    _only_typed(raw)


@given(controlled_snapshots(max_messages=2), st.data())
def test_fuzz_values_spliced_into_valid_snapshots(
    wire: dict[str, Any], data: st.DataObject
) -> None:
    key = data.draw(st.sampled_from(sorted(wire)))
    wire[key] = data.draw(json_values())
    _only_typed(wire)
    messages = wire["messages"]
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        field = data.draw(st.sampled_from(["id", "role", "content", "parts", "toolCalls", "x"]))
        messages[0][field] = data.draw(json_values())
        _only_typed(wire)


@given(st.text() | st.binary())
@example("NaN")
@example('{"sessionId": Infinity}')
@example("[" * 100_000)
@example(b"\xff\xfe")
@example("1" * 5000)
def test_fuzz_arbitrary_text(raw: str | bytes) -> None:
    _only_typed(raw)


_PYTHON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=5)
    | st.binary(max_size=5)
    | st.datetimes(),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(st.integers(), max_size=2)
        | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_PYTHON_VALUES, controlled_snapshots(max_messages=1), st.data())
def test_fuzz_arbitrary_python_values(raw: Any, wire: dict[str, Any], data: st.DataObject) -> None:
    _only_typed(raw)
    key = data.draw(st.sampled_from(sorted(wire)))
    wire[key] = raw
    _only_typed(wire)
    _only_typed({"version": 1, "messages": [raw]})
