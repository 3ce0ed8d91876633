"""Hypothesis: round trips, single-rule mutations, and fuzzing of the session decoder."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from akchat_fsm.testing.strategies import (
    invalid_session_objects,
    json_values,
    session_snapshots,
    wire_session_objects,
)
from akchat_fsm.wire import decode as decode_module
from akchat_fsm.wire.decode import INVALID_SNAPSHOT, DecodeResult, decode_session_snapshot
from akchat_fsm.wire.js import utf16_len
from akchat_fsm.wire.jsontext import InvalidJsonText, parse_json_text
from akchat_fsm.wire.session import SessionSnapshot


def _exact_path(text: str) -> DecodeResult:
    """The decoder without its pydantic-core fast path (the reference steps only)."""
    try:
        value = parse_json_text(text)
    except InvalidJsonText:
        return decode_module._NOT_JSON
    return decode_module._decode_value(value)


def _same_verdict(a: DecodeResult, b: DecodeResult) -> bool:
    return a.ok == b.ok and a.snapshot == b.snapshot and a.diagnostic == b.diagnostic


@given(session_snapshots())
def test_round_trip_through_wire_and_json(snapshot: SessionSnapshot) -> None:
    wire = snapshot.to_wire()
    from_wire = decode_session_snapshot(wire)
    assert from_wire.snapshot == snapshot
    assert from_wire.snapshot.to_wire() == wire
    text = snapshot.to_json()
    # Parsed with JavaScript number semantics: "40690808766854020" is the double 4.069...e16.
    assert parse_json_text(text) == wire
    for raw in (text, text.encode("utf-8"), json.dumps(wire)):
        result = decode_session_snapshot(raw)
        assert result.ok and result.snapshot == snapshot
        assert result.snapshot.to_json() == text
    assert _same_verdict(decode_session_snapshot(text), _exact_path(text))


@given(wire_session_objects())
def test_wire_objects_keep_reference_key_order(wire: dict[str, Any]) -> None:
    order = [
        "protocol",
        "version",
        "sessionId",
        "definitionId",
        "definitionRevision",
        "updatedAt",
        "cursor",
        "activeTurn",
        "terminalTurns",
        "conversation",
        "confirmations",
    ]
    assert list(wire) == [key for key in order if key in wire]


@given(invalid_session_objects())
def test_every_single_rule_breach_is_rejected(case: tuple[dict[str, Any], str]) -> None:
    wire, rule = case
    result = decode_session_snapshot(wire)
    assert not result.ok, rule
    assert result.diagnostic is not None and result.diagnostic.code == INVALID_SNAPSHOT, rule
    try:
        text = json.dumps(wire)
    except (TypeError, ValueError):
        return  # only a Python caller can build this value
    from_text = decode_session_snapshot(text)
    assert from_text.diagnostic is not None and from_text.diagnostic.code == INVALID_SNAPSHOT
    assert _same_verdict(from_text, _exact_path(text)), rule


_ENVELOPE_KEYS = st.sampled_from(
    ["protocol", "version", "sessionId", "cursor", "confirmations", "conversation", "input"]
)
_ANY_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(_ENVELOPE_KEYS, st.text(max_size=5)), inner, max_size=5),
    ),
    max_leaves=20,
)


@given(_ANY_JSON)
def test_arbitrary_values_only_give_decode_results(value: Any) -> None:
    assert isinstance(decode_session_snapshot(value), DecodeResult)


@given(st.text())
@example("[" * 5_000 + "]" * 5_000)
@example('{"version":' + "9" * 5_000 + "}")
@example('{"version": NaN}')
@example('"\\ud800"')
@example('{"version":0,"x":"\\udc00"}')
def test_arbitrary_text_only_gives_decode_results(text: str) -> None:
    result = decode_session_snapshot(text)
    assert isinstance(result, DecodeResult)
    assert _same_verdict(result, _exact_path(text))


@given(st.binary())
@example(b"\xff\xfe")
@example(b'{"a": "\xed\xa0\x80"}')  # a UTF-8-encoded surrogate is invalid UTF-8
def test_arbitrary_bytes_only_give_decode_results(data: bytes) -> None:
    assert isinstance(decode_session_snapshot(data), DecodeResult)


@given(session_snapshots(), st.data())
def test_edited_valid_texts_agree_with_the_exact_path(
    snapshot: SessionSnapshot, data: st.DataObject
) -> None:
    text = snapshot.to_json()
    position = data.draw(st.integers(0, len(text)))
    edit = data.draw(st.sampled_from(["delete", "insert", "replace"]), label="edit")
    piece = data.draw(st.sampled_from(['"', "1", "-", ",", "{", "]", "NaN", "é", "\\u", " "]))
    if edit == "delete":
        text = text[:position] + text[position + 1 :]
    elif edit == "insert":
        text = text[:position] + piece + text[position:]
    else:
        text = text[:position] + piece + text[position + len(piece) :]
    result = decode_session_snapshot(text)
    assert _same_verdict(result, _exact_path(text))
    if result.snapshot is not None:
        again = decode_session_snapshot(result.snapshot.to_json())
        assert again.snapshot == result.snapshot


@given(json_values())
def test_bounded_json_values_survive_as_inputs(value: Any) -> None:
    snapshot = SessionSnapshot(
        session_id="s",
        definition_id="d",
        definition_revision=1,
        updated_at="2026-07-11T00:00:00.000Z",
        cursor=0,
        confirmations=[
            {
                "token": "t",
                "action": "a",
                "input": {"v": value},
                "tool_call_id": "c",
                "expires_at": 0,
                "status": "pending",
            }
        ],
    )
    assert parse_json_text(snapshot.to_json()) == snapshot.to_wire()
    assert decode_session_snapshot(snapshot.to_json()).snapshot == snapshot


def _deep_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "raw",
    [
        "[" * 100_000,
        "{" * 100_000,
        '{"a":' * 50_000 + "1" + "}" * 50_000,
        [[[[]]]],
        {"version": float("nan")},
        {"confirmations": [{"input": {"a": _deep_list(25)}}]},
        b"",
        bytearray(b"{}"),
        memoryview(b"null"),
    ],
)
def test_hostile_inputs_never_raise(raw: Any) -> None:
    result = decode_session_snapshot(raw)
    assert isinstance(result, DecodeResult) and not result.ok


def test_recursive_python_value_is_invalid_not_a_crash() -> None:
    loop: dict[str, Any] = {"version": 1}
    loop["future"] = loop
    item: dict[str, Any] = {"token": "t"}
    item["input"] = item
    for raw in (loop, {"confirmations": [item]}):
        result = decode_session_snapshot(raw)
        assert result.diagnostic is not None and result.diagnostic.code == INVALID_SNAPSHOT


_WITH_SURROGATES = st.lists(
    st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr), st.sampled_from('{}[]":,')),
    max_size=60,
).map("".join)


@given(_WITH_SURROGATES, st.sampled_from(["", "sessionId", "future", "input"]))
def test_text_with_raw_surrogates_agrees_with_the_exact_path(noise: str, key: str) -> None:
    text = '{"' + key + '": "' + noise + '", "version": 1}'
    for raw in (text, noise):
        result = decode_session_snapshot(raw)
        assert _same_verdict(result, _exact_path(raw))


@st.composite
def _datetime_like(draw: st.DrawFn) -> str:
    two = st.integers(0, 99).map(lambda n: f"{n:02d}")
    year = draw(st.sampled_from(["0000", "1900", "2000", "2023", "2024", "2100", "0004"]))
    text = f"{year}-{draw(two)}-{draw(two)}{draw(st.sampled_from('Tt '))}{draw(two)}:{draw(two)}"
    if draw(st.booleans()):
        text += f":{draw(two)}"
        if draw(st.booleans()):
            text += draw(st.sampled_from([".", ".5", ".123456789"]))
    zone = draw(st.sampled_from(["Z", "z", "", "+", "-", "+0"]))
    if zone in "+-" and zone:
        zone += draw(two) + draw(st.sampled_from([":", ""])) + draw(two)
    return text + zone


def _oracle(text: str) -> bool:
    """An independent, plain reading of zod 4.4.3 datetime({offset: true})."""
    import re

    match = re.fullmatch(
        r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.\d+)?)?(Z|[+-](\d\d):(\d\d))",
        text,
        re.ASCII,
    )
    if match is None:
        return False
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if not (1 <= month <= 12 and 1 <= day <= days[month - 1]):
        return False
    if hour > 23 or minute > 59 or second > 59:
        return False
    return match.group(8) is None or (int(match.group(8)) <= 23 and int(match.group(9)) <= 59)


@given(_datetime_like())
def test_datetime_rule_matches_an_independent_oracle(text: str) -> None:
    from akchat_fsm.wire.js import is_zod_datetime

    assert is_zod_datetime(text) == _oracle(text)


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
@example("\ud83d\ude00")  # a surrogate pair as two code points: two units, as in JavaScript
@example("\udfff\ud800")
def test_utf16_len_counts_like_javascript(text: str) -> None:
    # Oracle: a code point above the BMP is a surrogate pair; anything else (lone surrogates
    # included, which JavaScript strings may hold) is one code unit.
    assert utf16_len(text) == sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)
