"""Hostile tool arguments as text: bounded, every cut marked, nothing hidden or reordering."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.inbox import Bounds, countdown, pretty_arguments


def test_a_megabyte_string_is_cut_with_a_marker() -> None:
    text = pretty_arguments({"s": "z" * 1_000_000})
    assert len(text) < 3_000 and "[998,000 more characters]" in text


def test_the_total_is_bounded_whatever_the_shape() -> None:
    wide = {f"k{i}": "v" * 2_000 for i in range(150)}
    text = pretty_arguments(wide, Bounds(max_total=10_000))
    assert len(text) <= 10_100 and text.endswith("[cut at 10,000 characters]")


def test_items_past_the_bound_are_counted() -> None:
    assert "[5 more items]" in pretty_arguments(list(range(10)), Bounds(max_items=5))


def test_nesting_past_the_depth_is_cut() -> None:
    deep: object = "bottom"
    for _ in range(50):
        deep = [deep]
    text = pretty_arguments(deep, Bounds(max_depth=3))
    assert "bottom" not in text and "nested deeper than 3 levels" in text


def test_keys_are_escaped_too() -> None:
    text = pretty_arguments({"\u202ekey\x07": 1})
    assert "\u202e" not in text and "\\u202e" in text and "\\u0007" in text


def test_astral_format_characters_become_surrogate_pair_escapes() -> None:
    assert pretty_arguments("\U000e0001") == '"\\udb40\\udc01"'  # LANGUAGE TAG (Cf)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
))  # fmt: skip
def test_within_the_bounds_it_is_json_of_the_same_value(value: object) -> None:
    text = pretty_arguments(value, Bounds(max_string=10**6, max_depth=100, max_items=10**6))
    assert json.loads(text) == value  # the visible escapes are JSON escapes of the same text
    assert not any(0xD800 <= ord(ch) <= 0xDFFF or (ord(ch) < 0x20 and ch != "\n") for ch in text)


def test_countdown_reads_like_a_person() -> None:
    assert countdown(250_000) == "expires in 4m 10s"
    assert countdown(3_700_000) == "expires in 1h 1m 40s"
    assert countdown(1) == "expires in 1s"
    assert countdown(0) == "expired"
