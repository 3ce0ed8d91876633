"""Table tests for the exact envelope rules (docs/reference.md §1.1-1.3, §8)."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import pytest

from akchat_fsm.errors import InvalidSessionSnapshot
from akchat_fsm.testing.strategies import BAD_IDENTIFIERS, BAD_UPDATED_AT, GOOD_UPDATED_AT
from akchat_fsm.wire.decode import (
    INVALID_SNAPSHOT,
    UNSUPPORTED_VERSION,
    DecodeResult,
    decode_session_snapshot,
)
from akchat_fsm.wire.js import is_zod_datetime, js_number_to_string
from akchat_fsm.wire.session import (
    ActiveTurn,
    ConfirmationBinding,
    RouteDecision,
    SessionSnapshot,
)

NOT_JSON = "Session snapshot is not valid JSON."
PAYLOAD = "Session snapshot payload is invalid."
UNSUPPORTED = "Session snapshot uses an unsupported version."
ASTRAL = "\U0001f600"


def envelope(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "protocol": "agentskit.chat.session",
        "version": 1,
        "sessionId": "session",
        "definitionId": "support",
        "definitionRevision": 1,
        "updatedAt": "2026-07-11T00:00:00.000Z",
        "cursor": 2,
        "conversation": {
            "state": "collecting",
            "decisions": [
                {
                    "messageId": "user-1",
                    "input": "/start",
                    "routeId": "start",
                    "kind": "deterministic",
                    "content": "Name?",
                    "fromState": "idle",
                    "toState": "collecting",
                }
            ],
        },
        "confirmations": [
            {
                "token": "confirm-1",
                "action": "email.send",
                "input": {"to": "a@example.com"},
                "toolCallId": "call-1",
                "expiresAt": 99,
                "status": "pending",
            }
        ],
    }
    base.update(changes)
    return base


def with_input(value: Any) -> dict[str, Any]:
    wire = envelope()
    wire["confirmations"][0]["input"] = value
    return wire


def with_decision(**changes: Any) -> dict[str, Any]:
    wire = envelope()
    wire["conversation"]["decisions"][0].update(changes)
    return wire


def verdicts(raw: Any) -> list[DecodeResult]:
    """The decoder's result for the value and, when JSON can carry it, for its text."""
    results = [decode_session_snapshot(raw)]
    if isinstance(raw, bytes):
        return results
    if isinstance(raw, str):
        texts = [raw]
    else:
        try:
            texts = [json.dumps(raw, allow_nan=False), json.dumps(raw, ensure_ascii=False)]
        except (TypeError, ValueError):
            return results
        results += [decode_session_snapshot(text) for text in texts]
    for text in texts:
        with contextlib.suppress(UnicodeEncodeError):  # a lone surrogate: str only
            results.append(decode_session_snapshot(text.encode("utf-8")))
    return results


def accepted(raw: Any) -> SessionSnapshot:
    results = verdicts(raw)
    assert all(r.ok for r in results), [r.diagnostic for r in results]
    snapshots = [r.snapshot for r in results]
    assert all(s == snapshots[0] for s in snapshots)
    assert snapshots[0] is not None
    return snapshots[0]


def rejected(raw: Any, message: str = PAYLOAD) -> None:
    for result in verdicts(raw):
        assert not result.ok and result.snapshot is None
        assert result.diagnostic is not None
        assert result.diagnostic.message == message
        assert result.diagnostic.retryable is False
        code = UNSUPPORTED_VERSION if message == UNSUPPORTED else INVALID_SNAPSHOT
        assert result.diagnostic.code == code


# --------------------------------------------------------------------------- updatedAt
@pytest.mark.parametrize("text", GOOD_UPDATED_AT)
def test_updated_at_accepted(text: str) -> None:
    assert is_zod_datetime(text)
    assert accepted(envelope(updatedAt=text)).updated_at == text


@pytest.mark.parametrize("text", BAD_UPDATED_AT)
def test_updated_at_rejected(text: str) -> None:
    assert not is_zod_datetime(text)
    rejected(envelope(updatedAt=text))


# --------------------------------------------------------------------------- identifiers
@pytest.mark.parametrize("bad", BAD_IDENTIFIERS)
@pytest.mark.parametrize("where", ["sessionId", "definitionId", "token", "messageId"])
def test_identifier_rules(where: str, bad: str) -> None:
    if where in ("sessionId", "definitionId"):
        rejected(envelope(**{where: bad}))
    elif where == "token":
        wire = envelope()
        wire["confirmations"][0]["token"] = bad
        rejected(wire)
    else:
        rejected(with_decision(messageId=bad))


@pytest.mark.parametrize("good", ["a", "Z" * 128, "0.:_-x", "msg-1783761000000-1"])
def test_identifier_extremes_accepted(good: str) -> None:
    assert accepted(envelope(sessionId=good)).session_id == good


# --------------------------------------------------------------------------- integers
@pytest.mark.parametrize(("literal", "value"), [("1.0", 1), ("1E2", 100), ("2e0", 2), ("-0", 0)])
def test_whole_number_literals_are_integers(literal: str, value: int) -> None:
    text = json.dumps(envelope(cursor="@")).replace('"@"', literal)
    result = decode_session_snapshot(text)
    assert result.snapshot is not None and result.snapshot.cursor == value
    assert type(result.snapshot.cursor) is int


@pytest.mark.parametrize(
    "bad", [-1, 0.5, 1.0000001, True, False, 2**53, 2**53 + 1.0, float("nan"), float("inf"), "2"]
)
def test_cursor_rejects_non_safe_integers(bad: Any) -> None:
    rejected(envelope(cursor=bad))


def test_largest_safe_integer_accepted() -> None:
    assert accepted(envelope(cursor=2**53 - 1)).cursor == 2**53 - 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_definition_revision_is_positive(bad: Any) -> None:
    rejected(envelope(definitionRevision=bad))


# --------------------------------------------------------------------------- version gate
@pytest.mark.parametrize("version", [2, 9, 99, -1, 1.5, 2**60, float("nan"), float("inf")])
def test_numeric_versions_other_than_0_and_1_are_unsupported(version: Any) -> None:
    rejected(envelope(version=version), UNSUPPORTED)
    rejected({"version": version, "protocol": "x"}, UNSUPPORTED)


@pytest.mark.parametrize("text", ['{"version":1e400}', '{"version":-1e400}', '{"version":2.0}'])
def test_version_gate_on_text(text: str) -> None:
    rejected(text, UNSUPPORTED)


@pytest.mark.parametrize("version", ["1", None, True, [1], {"v": 1}])
def test_non_numeric_versions_are_invalid(version: Any) -> None:
    rejected(envelope(version=version))


@pytest.mark.parametrize("version", [0, 0.0, -0.0])
def test_version_zero_migrates(version: float) -> None:
    wire = envelope(version=version, protocol="anything")
    snapshot = accepted(wire)
    assert snapshot.to_wire() == envelope()


def test_version_zero_without_protocol_migrates() -> None:
    wire = envelope(version=0)
    del wire["protocol"]
    assert accepted(wire).to_wire() == envelope()


def test_version_one_needs_protocol_and_version() -> None:
    for key in ("protocol", "version"):
        wire = envelope()
        del wire[key]
        rejected(wire)


@pytest.mark.parametrize("raw", [None, [], [envelope()], 1, True, '"x"', "null", "[]", "1"])
def test_non_objects_are_invalid(raw: Any) -> None:
    rejected(raw)


# --------------------------------------------------------------------------- null / unknown keys
@pytest.mark.parametrize("key", ["activeTurn", "terminalTurns", "conversation", "confirmations"])
def test_null_is_not_absent(key: str) -> None:
    rejected(envelope(**{key: None}))


def test_unknown_keys_stripped_at_every_level() -> None:
    wire = envelope(future=1, activeTurn={"turnId": "t", "expiresAt": 5, "x": [1]})
    wire["terminalTurns"] = [{"turnId": "t0", "outcome": "completed", "y": None}]
    wire["conversation"]["z"] = {}
    wire["conversation"]["decisions"][0]["sessionId"] = "leak"
    wire["confirmations"][0]["sessionId"] = "leak"
    out = accepted(wire).to_wire()
    clean = envelope(activeTurn={"turnId": "t", "expiresAt": 5})
    clean["terminalTurns"] = [{"turnId": "t0", "outcome": "completed"}]
    assert out == clean
    assert list(out) == [
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


def test_snake_case_keys_are_unknown_on_the_wire() -> None:
    wire = envelope()
    wire["session_id"] = wire.pop("sessionId")
    rejected(wire)


def test_explicit_empty_terminal_turns_kept_absent_omitted() -> None:
    assert accepted(envelope(terminalTurns=[])).to_wire()["terminalTurns"] == []
    assert "terminalTurns" not in accepted(envelope()).to_wire()


# --------------------------------------------------------------------------- uniqueness, counts
def test_duplicate_tool_call_id_alone_is_invalid() -> None:
    wire = envelope()
    second = copy.deepcopy(wire["confirmations"][0])
    second["token"] = "confirm-2"
    wire["confirmations"].append(second)
    rejected(wire)
    second["toolCallId"] = "call-2"
    assert len(accepted(wire).confirmations) == 2


def test_duplicate_terminal_turn_is_invalid() -> None:
    turn = {"turnId": "t", "outcome": "completed"}
    rejected(envelope(terminalTurns=[turn, dict(turn, outcome="indeterminate")]))


def test_count_limits() -> None:
    turns = [{"turnId": f"t{i}", "outcome": "completed"} for i in range(64)]
    assert len(accepted(envelope(terminalTurns=turns)).terminal_turns) == 64
    rejected(envelope(terminalTurns=[*turns, {"turnId": "t64", "outcome": "completed"}]))
    one = envelope()["confirmations"][0]
    many = [dict(one, token=f"c{i}", toolCallId=f"k{i}") for i in range(1_000)]
    assert len(accepted(envelope(confirmations=many)).confirmations) == 1_000
    rejected(envelope(confirmations=[*many, dict(one, token="c-x", toolCallId="k-x")]))
    decision = envelope()["conversation"]["decisions"][0]
    decisions = [dict(decision, messageId=f"m{i}") for i in range(1_000)]
    wire = envelope(conversation={"state": "s", "decisions": decisions})
    conversation = accepted(wire).conversation
    assert conversation is not None and len(conversation.decisions) == 1_000
    wire["conversation"]["decisions"].append(dict(decision, messageId="m-x"))
    rejected(wire)


# --------------------------------------------------------------------------- UTF-16 lengths
_SNAKE = {"input": "input", "content": "content", "fromState": "from_state"}


@pytest.mark.parametrize(
    ("field", "limit"), [("input", 16_384), ("content", 65_536), ("fromState", 128)]
)
def test_lengths_count_utf16_units(field: str, limit: int) -> None:
    at_limit = ASTRAL * (limit // 2)
    conversation = accepted(with_decision(**{field: at_limit})).conversation
    assert conversation is not None
    assert getattr(conversation.decisions[0], _SNAKE[field]) == at_limit
    rejected(with_decision(**{field: at_limit + "a"}))
    assert accepted(with_decision(**{field: "é" * limit}))
    rejected(with_decision(**{field: "é" * (limit + 1)}))


def test_state_length_in_utf16_units() -> None:
    assert accepted(envelope(conversation={"state": ASTRAL * 64, "decisions": []}))
    rejected(envelope(conversation={"state": ASTRAL * 64 + "x", "decisions": []}))
    rejected(envelope(conversation={"state": "", "decisions": []}))


def test_escaped_surrogate_pairs_count_two_units() -> None:
    text = json.dumps(with_decision(fromState=ASTRAL * 64 + "x"))  # ensure_ascii escapes pairs
    assert "\\ud83d" in text
    rejected(text)
    assert decode_session_snapshot(json.dumps(with_decision(fromState=ASTRAL * 64))).ok


# --------------------------------------------------------------------------- bounded JSON input
def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ({}, True),
        ({f"k{i}": i for i in range(999)}, True),  # 1,000 nodes with the root
        ({f"k{i}": i for i in range(1_000)}, False),
        ({"a": list(range(998))}, True),  # root + array + 998 items = 1,000 nodes
        ({"a": list(range(999))}, False),
        (_nested(20), True),  # leaf at depth 20
        (_nested(21), False),
        ({"s": "x" * 16_384}, True),
        ({"s": "x" * 16_385}, False),
        ({"s": ASTRAL * 8_192}, True),
        ({"s": ASTRAL * 8_192 + "x"}, False),
        ({"k" * 256: 1}, True),
        ({"k" * 257: 1}, False),
        ({ASTRAL * 128: 1}, True),
        ({ASTRAL * 128 + "k": 1}, False),
        ({"n": 1.5, "m": -0.0, "b": True, "z": None}, True),
        ({"n": float("nan")}, False),
        ({"n": float("-inf")}, False),
        ({"n": 10**400}, False),
        ({"n": 2**60}, True),
        ([], False),
        (None, False),
        ("{}", False),
        (1, False),
    ],
)
def test_bounded_input(value: Any, ok: bool) -> None:
    if ok:
        accepted(with_input(value))
    else:
        rejected(with_input(value))


def _python_rejected(raw: Any) -> None:
    # Values only a Python caller can build (JSON text cannot carry them).
    result = decode_session_snapshot(raw)
    assert result.diagnostic is not None and result.diagnostic.message == PAYLOAD


def test_non_json_python_values_in_input_rejected() -> None:
    for bad in ({"s": {1, 2}}, {"b": b"x"}, {1: "int key"}, {"o": object()}):
        _python_rejected(with_input(bad))


def test_shared_references_rejected_but_equal_copies_accepted() -> None:
    shared: dict[str, Any] = {"x": 1}
    _python_rejected(with_input({"a": shared, "b": shared}))
    shared_list: list[Any] = [1]
    _python_rejected(with_input({"a": shared_list, "b": [shared_list]}))
    accepted(with_input({"a": {"x": 1}, "b": {"x": 1}, "s": "same", "t": "same"}))


def test_proto_key_dropped_at_input_top_only() -> None:
    snapshot = accepted(with_input({"__proto__": {"x": 1}, "a": {"__proto__": 2}}))
    assert snapshot.to_wire()["confirmations"][0]["input"] == {"a": {"__proto__": 2}}
    # The dropped key does not count towards the key limit.
    full = {f"k{i}": i for i in range(999)}
    accepted(with_input({**full, "__proto__": None}))


def test_input_numbers_follow_javascript() -> None:
    snapshot = accepted(with_input({"a": 1.0, "b": 2**60, "c": -0.0, "d": 0.1}))
    value = snapshot.confirmations[0].input
    assert type(value["a"]) is int and value["a"] == 1
    assert type(value["b"]) is float and value["b"] == float(2**60)
    assert type(value["c"]) is int and value["c"] == 0
    assert '"b":1152921504606847000' in snapshot.to_json()


def test_input_index_keys_come_first_as_in_javascript() -> None:
    snapshot = accepted(with_input({"b": 1, "10": 2, "2": 3, "02": 4, "a": 5}))
    assert list(snapshot.confirmations[0].input) == ["2", "10", "b", "02", "a"]
    assert '"input":{"2":3,"10":2,"b":1,"02":4,"a":5}' in snapshot.to_json()


# --------------------------------------------------------------------------- JSON text
@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "{",
        "{'a': 1}",
        '{"a":1,}',
        "\ufeff{}",
        '{"version": NaN}',
        '{"version": Infinity}',
        '{"version": -Infinity}',
        "NaN",
        '{"a": 01}',
        '{"a": "\x01"}',
        "{} {}",
    ],
)
def test_not_json(text: str) -> None:
    rejected(text, NOT_JSON)


def test_nan_token_under_an_unknown_key_is_still_not_json() -> None:
    text = json.dumps(envelope(future=0)).replace('"future": 0', '"future": NaN')
    rejected(text, NOT_JSON)


def test_invalid_utf8_bytes_are_not_json() -> None:
    for raw in (b"\xff", b'{"a": "\xc3"}', json.dumps(envelope()).encode("utf-16")):
        rejected(raw, NOT_JSON)


def test_surrounding_whitespace_accepted() -> None:
    assert decode_session_snapshot(" \n\t\r" + json.dumps(envelope()) + "\r\n ").ok


def test_deep_nesting_under_unknown_key_is_parsed_and_stripped() -> None:
    deep = "[" * 5_000 + "]" * 5_000
    text = json.dumps(envelope(future=0)).replace('"future": 0', f'"future": {deep}')
    result = decode_session_snapshot(text)
    assert result.snapshot is not None and result.snapshot.to_wire() == envelope()


def test_deep_array_alone_is_payload_invalid() -> None:
    rejected("[" * 5_000 + "]" * 5_000)
    rejected('{"a":' * 5_000 + "1" + "}" * 5_000)


def test_huge_integer_literals_do_not_crash() -> None:
    text = json.dumps(envelope(future=0)).replace('"future": 0', '"future": ' + "9" * 10_000)
    assert decode_session_snapshot(text).ok
    rejected(json.dumps(envelope(cursor=0)).replace('"cursor": 0', '"cursor": ' + "9" * 10_000))


LONE = ["\ud800", "\udfff", "a\ud83d", "\ude00b", "\udc00\ud800"]


@pytest.mark.parametrize("lone", LONE)
def test_lone_surrogates_are_accepted_as_the_reference_accepts_them(lone: str) -> None:
    # Legal JSON text and legal JavaScript strings: zod's `z.string()` takes them in every
    # free-form string, and a bounded JSON input takes them in any string or key (ADR-0080).
    assert decode_session_snapshot(json.dumps(envelope(future=lone))).ok
    for field in ("input", "content", "fromState", "toState"):
        snapshot = accepted(with_decision(**{field: lone}))
        assert snapshot.conversation is not None
        assert getattr(snapshot.conversation.decisions[0], _SNAKE.get(field, "to_state")) == lone
    state = accepted(envelope(conversation={"state": lone, "decisions": []})).conversation
    assert state is not None and state.state == lone
    value = accepted(with_input({"s": lone, lone: [lone]})).confirmations[0].input
    assert value == {"s": lone, lone: (lone,)}


def test_lone_surrogates_count_one_utf16_unit_each() -> None:
    accepted(with_decision(input="\ud800" * 16_384))
    rejected(with_decision(input="\ud800" * 16_385))
    accepted(with_decision(fromState="\udfff" * 128))
    rejected(with_decision(fromState="\udfff" * 129))
    accepted(with_input({"k" * 255 + "\ud800": 1}))
    rejected(with_input({"k" * 256 + "\ud800": 1}))


def test_lone_surrogates_never_reach_identifiers_or_updated_at() -> None:
    rejected(envelope(sessionId="a\ud800"))
    rejected(with_decision(messageId="m\udfff"))
    rejected(envelope(updatedAt="2026-07-11T00:00:00.000Z\ud800"))


def test_a_surrogate_pair_built_in_python_is_the_astral_character() -> None:
    # JavaScript strings are UTF-16: "\ud83d\ude00" and "😀" are the same string there.
    joined = accepted(with_decision(input="\ud83d\ude00", content="x"))
    assert joined.conversation is not None
    assert joined.conversation.decisions[0].input == ASTRAL
    assert accepted(with_input({"\ud83d\ude00": "\ud83d\ude00"})).confirmations[0].input == {
        ASTRAL: ASTRAL
    }


def test_to_json_writes_lone_surrogates_as_json_stringify_does() -> None:
    snapshot = accepted(with_decision(input="a\ud800", content=ASTRAL + "\udfff"))
    text = snapshot.to_json()
    # Lowercase `\\uXXXX` escapes for lone surrogates, astral characters raw, as in JS.
    assert '"input":"a\\ud800"' in text and f'"content":"{ASTRAL}\\udfff"' in text
    text.encode("utf-8")  # storable by every adapter
    assert decode_session_snapshot(text).snapshot == snapshot
    assert json.loads(text) == snapshot.to_wire()
    bound = accepted(with_input({"k\udc00": ["\ud800"]}))
    assert '"input":{"k\\udc00":["\\ud800"]}' in bound.to_json()
    assert bound.to_wire()["confirmations"][0]["input"] == {"k\udc00": ["\ud800"]}


def test_duplicate_keys_last_wins_like_json_parse() -> None:
    body = json.dumps(envelope())[1:-1]
    assert decode_session_snapshot('{"sessionId": "bad id", ' + body + "}").ok
    rejected("{" + body + ', "sessionId": "bad id"}')


# --------------------------------------------------------------------------- models
def test_models_are_deeply_immutable() -> None:
    snapshot = accepted(with_input({"a": [1, {"b": 2}]}))
    binding = snapshot.confirmations[0]
    with pytest.raises(TypeError):
        binding.input["a"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        binding.input["a"].append(2)
    with pytest.raises(TypeError):
        binding.input["a"][1]["b"] = 3
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        binding.status = "approved"  # type: ignore[misc,assignment]
    assert isinstance(snapshot.confirmations, tuple)
    assert hash(snapshot) == hash(decode_session_snapshot(snapshot.to_json()).snapshot)


def test_constructors_validate_with_typed_errors() -> None:
    with pytest.raises(InvalidSessionSnapshot) as caught:
        ActiveTurn(turn_id="bad id", expires_at=1)
    assert caught.value.code == INVALID_SNAPSHOT and caught.value.message == PAYLOAD
    with pytest.raises(InvalidSessionSnapshot):
        RouteDecision(
            message_id="m",
            input="",
            route_id="r",
            kind="deterministic",
            content="",
            from_state=ASTRAL * 65,  # 65 code points, 130 UTF-16 units
            to_state="b",
        )
    with pytest.raises(InvalidSessionSnapshot):
        ConfirmationBinding(
            token="t",
            action="a",
            input={"x": float("nan")},
            tool_call_id="c",
            expires_at=1,
            status="pending",
        )
    good = SessionSnapshot(
        session_id="s", definition_id="d", definition_revision=1, updated_at="2026-07-11T00:00Z",
        cursor=0, confirmations=[],
    )  # fmt: skip
    assert good.to_wire()["protocol"] == "agentskit.chat.session"
    with pytest.raises(InvalidSessionSnapshot):
        SessionSnapshot(**{**good.__dict__, "cursor": -1})


def test_to_json_is_pinned() -> None:
    wire = envelope(activeTurn={"turnId": "t", "expiresAt": 5})
    wire["confirmations"][0]["input"] = {"n": 1e21, "m": 1.5e-7, "k": 100.0, "s": "é\n\u2028"}
    expected = (
        '{"protocol":"agentskit.chat.session","version":1,"sessionId":"session",'
        '"definitionId":"support","definitionRevision":1,'
        '"updatedAt":"2026-07-11T00:00:00.000Z","cursor":2,'
        '"activeTurn":{"turnId":"t","expiresAt":5},'
        '"conversation":{"state":"collecting","decisions":[{"messageId":"user-1",'
        '"input":"/start","routeId":"start","kind":"deterministic","content":"Name?",'
        '"fromState":"idle","toState":"collecting"}]},'
        '"confirmations":[{"token":"confirm-1","action":"email.send",'
        '"input":{"n":1e+21,"m":1.5e-7,"k":100,"s":"é\\n\u2028"},"toolCallId":"call-1",'
        '"expiresAt":99,"status":"pending"}]}'
    )
    assert accepted(wire).to_json() == expected


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (2.0**60, "1152921504606847000"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (-2.5, "-2.5"),
        (123.456, "123.456"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (2**53 - 1, "9007199254740991"),
    ],
)
def test_js_number_to_string(number: float, text: str) -> None:
    assert js_number_to_string(number) == text


def test_from_json_and_from_wire_raise_typed_errors() -> None:
    with pytest.raises(InvalidSessionSnapshot) as caught:
        SessionSnapshot.from_json("{")
    assert caught.value.message == NOT_JSON
    with pytest.raises(InvalidSessionSnapshot) as caught:
        SessionSnapshot.from_wire({"version": 2})
    assert caught.value.code == UNSUPPORTED_VERSION
    assert SessionSnapshot.from_json(json.dumps(envelope())).to_wire() == envelope()
