"""The strict controlled shell: order of checks, JSON text, `__proto__`, exact bounds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from akchat_fsm.errors import InvalidControlledSnapshot
from akchat_fsm.testing.strategies import BAD_IDENTIFIERS
from akchat_fsm.wire.controlled import parse_controlled_snapshot


def base(**change: Any) -> dict[str, Any]:
    snapshot: dict[str, Any] = {
        "sessionId": "s-1",
        "messages": [],
        "status": "idle",
        "input": "",
        "error": None,
        "usage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0},
    }
    snapshot.update(change)
    return snapshot


def layer_of(raw: object) -> str:
    with pytest.raises(InvalidControlledSnapshot) as caught:
        parse_controlled_snapshot(raw)
    return caught.value.layer


def test_shell_is_checked_before_messages() -> None:
    assert layer_of(base(status="waiting", messages=[{"role": "owner"}])) == "shell"
    assert layer_of(base(messages=[{"role": "owner"}])) == "messages"


@pytest.mark.parametrize("value", [{}, None, 1, "x", [1, {"a": 2}], {"sessionId": "bad id"}])
def test_proto_key_at_the_top_is_accepted_and_dropped_as_in_the_reference(value: Any) -> None:
    expected = parse_controlled_snapshot(base()).to_wire()
    assert parse_controlled_snapshot(base(__proto__=value)).to_wire() == expected
    text = json.dumps(base()).replace(
        '{"sessionId"', '{"__proto__": ' + json.dumps(value) + ', "sessionId"'
    )
    parsed = parse_controlled_snapshot(text)
    assert parsed.to_wire() == expected and "__proto__" not in parsed.to_wire()
    assert parsed.session_id == "s-1"


def test_proto_key_does_not_stand_in_for_a_missing_key() -> None:
    shell = base()
    del shell["usage"]
    assert layer_of({**shell, "__proto__": {"usage": shell.get("usage")}}) == "shell"


def test_proto_key_inside_error_or_usage_is_an_unknown_key() -> None:
    assert layer_of(base(error={"message": "m", "__proto__": {}})) == "shell"
    usage = {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0, "__proto__": 1}
    assert layer_of(base(usage=usage)) == "shell"


def test_input_and_error_bounds_count_utf16_units() -> None:
    assert parse_controlled_snapshot(base(input="x" * 100_000)).input == "x" * 100_000
    assert parse_controlled_snapshot(base(input="😀" * 50_000)).input
    assert layer_of(base(input="😀" * 50_000 + "x")) == "shell"
    assert parse_controlled_snapshot(base(error={"message": "😀" * 2048})).error
    assert layer_of(base(error={"message": "😀" * 2048 + "x"})) == "shell"


def test_usage_accepts_js_whole_numbers_and_keeps_them_exact() -> None:
    usage = {"promptTokens": 1.0, "completionTokens": 2**53 - 1, "totalTokens": 0}
    parsed = parse_controlled_snapshot(base(usage=usage))
    assert parsed.usage.to_wire() == {
        "promptTokens": 1,
        "completionTokens": 2**53 - 1,
        "totalTokens": 0,
    }


@pytest.mark.parametrize(
    "text",
    [
        "",
        "NaN",
        "[1,]",
        json.dumps(base()).replace('"totalTokens": 0', '"totalTokens": NaN'),
        json.dumps(base()).replace('"totalTokens": 0', '"totalTokens": Infinity'),
        "[]",
        "null",
        '"snapshot"',
    ],
)
def test_json_text_failures_are_shell_failures(text: str) -> None:
    assert layer_of(text) == "shell"


def test_invalid_utf8_bytes_are_a_shell_failure() -> None:
    assert layer_of(b'{"sessionId": "\xff"}') == "shell"


def test_deep_json_text_inside_messages_is_a_messages_failure() -> None:
    deep = "[" * 5_000 + "]" * 5_000
    text = json.dumps(base()).replace('"messages": []', f'"messages": [{deep}]')
    assert layer_of(text) == "messages"


def test_surrounding_whitespace_is_fine() -> None:
    assert parse_controlled_snapshot("\n  " + json.dumps(base()) + "  \n").session_id == "s-1"


def test_messages_failure_keeps_the_reason_as_a_note() -> None:
    with pytest.raises(InvalidControlledSnapshot) as caught:
        parse_controlled_snapshot(base(messages=[{"id": "m"}]))
    assert caught.value.message == "Serialized message record is invalid."
    assert caught.value.__notes__


def test_shell_over_10000_messages_is_a_shell_failure() -> None:
    assert layer_of(base(messages=[None] * 10_001)) == "shell"
    assert layer_of(base(messages=[None] * 10_000)) == "messages"


def test_effective_message_limit_is_the_record_node_budget() -> None:
    message = {
        "id": "m",
        "role": "assistant",
        "content": "",
        "status": "complete",
        "createdAt": "2026-07-14T00:00:00.000Z",
    }
    fits = base(messages=[dict(message) for _ in range(1666)])
    assert len(parse_controlled_snapshot(fits).messages) == 1666
    # the same dict object repeated is a shared reference, refused like a cycle (ADR-0030)
    assert layer_of(base(messages=[message] * 2)) == "messages"
    assert layer_of(base(messages=[dict(message) for _ in range(1667)])) == "messages"


@pytest.mark.parametrize("bad", BAD_IDENTIFIERS)
def test_session_id_and_error_code_are_javascript_identifiers(bad: str) -> None:
    assert layer_of(base(sessionId=bad)) == "shell"
    assert layer_of(base(error={"message": "m", "code": bad})) == "shell"
    assert layer_of(json.dumps(base(sessionId=bad))) == "shell"


def test_identifier_extremes_pass() -> None:
    for good in ("a", "Z" * 128, "0.:_-"):
        assert parse_controlled_snapshot(base(sessionId=good)).session_id == good
