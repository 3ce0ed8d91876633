"""The shallow freeze of a common confirmation input is the full walk's result, or a fallback.

``_freeze_shallow`` exists for speed only (ADR-0111): whenever it answers, the answer must be
exactly what the recursive walk returns, and every refusal must stay the walk's.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.wire import bounded
from akchat_fsm.wire.bounded import (
    MAX_ARRAY_ITEMS,
    MAX_NODES,
    MAX_SAFE_INTEGER,
    BoundedJsonError,
    FrozenDict,
    freeze_bounded_object,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True),
    st.text(max_size=8),
)
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.dictionaries(st.text(), scalars))
keys = st.one_of(st.text(max_size=6), st.sampled_from(["0", "12", "__proto__", "01", "é"]))


def _walked(value: dict[str, Any]) -> Any:
    try:
        return bounded._walk(value, root_object=True)
    except BoundedJsonError:
        return "refused"


@given(st.dictionaries(keys, values, max_size=6))
def test_shallow_freeze_answers_exactly_as_the_walk(value: dict[str, Any]) -> None:
    shallow = bounded._freeze_shallow(value)
    if shallow is not None:
        walked = _walked(value)
        assert isinstance(walked, FrozenDict)
        assert list(shallow.items()) == list(walked.items())  # same keys, order and values
        assert all(type(shallow[k]) is type(walked[k]) for k in shallow)


def test_the_common_input_takes_the_shallow_path() -> None:
    value = {"to": "a@example.com", "priority": 2, "cc": ["ops", None, True]}
    frozen = bounded._freeze_shallow(value)
    assert frozen == {"to": "a@example.com", "priority": 2, "cc": ("ops", None, True)}


@pytest.mark.parametrize(
    "value",
    [
        {"n": MAX_SAFE_INTEGER + 1},  # normalised by the walk
        {"1": "x", "a": "y"},  # index keys are reordered by the walk
        {"__proto__": 1},  # dropped by the walk
        {"x": 1.5},
        {"x": "é"},
        {"x": {"y": 1}},
        {"x": list(range(MAX_NODES))},  # past the node bound
        {"x": [0] * (MAX_ARRAY_ITEMS + 1)},
    ],
)
def test_anything_uncommon_takes_the_walk(value: dict[str, Any]) -> None:
    assert bounded._freeze_shallow(value) is None


def test_a_shared_list_is_still_refused() -> None:
    shared = ["x"]
    assert bounded._freeze_shallow({"a": shared, "b": shared}) is None
    with pytest.raises(BoundedJsonError):
        freeze_bounded_object({"a": shared, "b": shared})
