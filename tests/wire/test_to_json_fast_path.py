"""``to_json`` uses the C encoder only when it prints exactly what the JS-exact one does."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.testing.strategies import session_snapshots
from akchat_fsm.wire.session import SessionSnapshot, _encode, _prints_like_javascript

NUMBERS = st.one_of(
    st.integers(-(2**60), 2**60),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, -0.0, 1e-5, 1e-4, 0.5, 1e15 + 0.5, 1e16, 1e21, 2.0**53, 123.456]),
)


def _with_input(snapshot: SessionSnapshot, value: object) -> SessionSnapshot:
    wire = snapshot.to_wire()
    wire["confirmations"] = [
        {
            "token": "confirm-1",
            "action": "a",
            "input": {"v": value},
            "toolCallId": "call-1",
            "expiresAt": 1,
            "status": "pending",
        }
    ]
    return SessionSnapshot.from_wire(wire)


@given(session_snapshots())
def test_to_json_equals_the_javascript_exact_encoder(snapshot: SessionSnapshot) -> None:
    assert snapshot.to_json() == _encode(snapshot.to_wire())


@given(session_snapshots(), st.lists(NUMBERS, max_size=4))
def test_numbers_in_inputs_print_like_javascript(snapshot: SessionSnapshot, numbers: list) -> None:
    made = _with_input(snapshot, numbers)
    assert made.to_json() == _encode(made.to_wire())
    assert json.loads(made.to_json()) == json.loads(_encode(made.to_wire()))


@pytest.mark.parametrize(
    ("value", "fast"),
    [(0.5, True), (123.456, True), (1.0, False), (1e-5, False), (1e16 + 2.0, False),
     (2**53 - 1, True), (2**53, False), ("x", True), (None, True), (True, True)],
)  # fmt: skip
def test_fast_path_predicate(value: object, fast: bool) -> None:
    assert _prints_like_javascript({"k": [value]}) is fast
