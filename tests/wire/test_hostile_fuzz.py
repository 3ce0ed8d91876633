"""Fuzz classes from issue 14: arrays far past their limits, and lone surrogates anywhere.

Arrays: whatever the items, the version (v1 or v0) and the form (text or parsed value), an
array past its limit is refused, and no more confirmation inputs are validated than the limit
allows (work bounded by a count). Surrogates: free-form strings and bounded inputs holding
lone surrogates decode, round-trip through ``to_wire`` / ``to_json`` / UTF-8 bytes, and agree
between the fast and exact paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from akchat_fsm.testing.strategies import session_snapshots
from akchat_fsm.wire import session as session_module
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.js import js_form
from akchat_fsm.wire.session import (
    MAX_CONFIRMATIONS,
    MAX_DECISIONS,
    MAX_TERMINAL_TURNS,
    SessionSnapshot,
)

LIMITS = {
    "confirmations": MAX_CONFIRMATIONS,
    "terminalTurns": MAX_TERMINAL_TURNS,
    "decisions": MAX_DECISIONS,
}
ITEMS = {
    "confirmations": {
        "token": "t",
        "action": "a",
        "input": {},
        "toolCallId": "c",
        "expiresAt": 1,
        "status": "pending",
    },
    "terminalTurns": {"turnId": "t", "outcome": "completed"},
    "decisions": {
        "messageId": "m",
        "input": "",
        "routeId": "r",
        "kind": "deterministic",
        "content": "",
        "fromState": "a",
        "toState": "b",
    },
}


@contextmanager
def counting_inputs() -> Iterator[list[int]]:
    real = session_module.freeze_bounded_object
    calls = [0]

    def counting(value: Any) -> Any:
        calls[0] += 1
        return real(value)

    session_module.freeze_bounded_object = counting  # type: ignore[assignment]
    try:
        yield calls
    finally:
        session_module.freeze_bounded_object = real


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(sorted(LIMITS)),
    extra=st.integers(1, 30_000),
    item=st.sampled_from(["empty", "valid", "input only", "garbage"]),
    version=st.sampled_from([0, 1, 1.0]),
    as_text=st.booleans(),
)
def test_arrays_past_their_limit_are_refused_with_bounded_work(
    field: str, extra: int, item: str, version: float, as_text: bool
) -> None:
    one: Any = {
        "empty": {},
        "valid": ITEMS[field],
        "input only": {"input": {"k": "v"}},
        "garbage": [1, None],
    }[item]
    wire: dict[str, Any] = {
        "protocol": "agentskit.chat.session",
        "version": version,
        "sessionId": "s",
        "definitionId": "d",
        "definitionRevision": 1,
        "updatedAt": "2026-07-11T00:00:00.000Z",
        "cursor": 1,
        "confirmations": [],
    }
    items = [one] * (LIMITS[field] + extra)
    if field == "decisions":
        wire["conversation"] = {"state": "a", "decisions": items}
    else:
        wire[field] = items
    raw: Any = json.dumps(wire) if as_text else wire
    with counting_inputs() as calls:
        result = decode_session_snapshot(raw)
    assert not result.ok
    assert calls[0] <= MAX_CONFIRMATIONS + 1


# --------------------------------------------------------------------------- lone surrogates
LONE = st.integers(0xD800, 0xDFFF).map(chr)
JS_TEXT = st.lists(st.one_of(st.characters(), LONE), max_size=20).map("".join).map(js_form)


@settings(max_examples=150, deadline=None)
@given(session_snapshots(), JS_TEXT, JS_TEXT, JS_TEXT, st.sampled_from(["input", "content"]))
def test_lone_surrogates_round_trip(
    snapshot: SessionSnapshot, text: str, key: str, value: str, field: str
) -> None:
    wire = snapshot.to_wire()
    wire["conversation"] = {
        "state": "s" + text[:100],
        "decisions": [
            {
                "messageId": "m-1",
                "input": "",
                "routeId": "r",
                "kind": "fallback",
                "content": "",
                "fromState": "a",
                "toState": text[:100] or "b",
                field: text,
            }
        ],
    }
    if wire["confirmations"]:
        wire["confirmations"][0]["input"] = {key or "k": [value], "n": 1}
    result = decode_session_snapshot(wire)
    assert result.snapshot is not None, result.diagnostic
    decoded = result.snapshot
    assert decoded.to_wire() == wire
    out = decoded.to_json()
    stored = out.encode("utf-8")  # every lone surrogate is an escape: storable anywhere
    for raw in (out, stored, json.dumps(wire), json.dumps(wire, ensure_ascii=False)):
        again = decode_session_snapshot(raw)
        assert again.snapshot == decoded
        assert again.snapshot is not None and again.snapshot.to_json() == out
