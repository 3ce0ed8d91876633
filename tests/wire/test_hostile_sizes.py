"""Arrays far past their limits are refused before their items are validated (issue 14).

Work is bounded by counts, never by time: how many confirmation inputs a decode validates (the
one per-item Python validator), how many errors pydantic-core collects, and whether the exact
path reads an item at all. The timing and memory of the same inputs are in
``benchmarks/bench_hostile.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from pydantic import ValidationError

from akchat_fsm.wire import session as session_module
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.session import (
    MAX_CONFIRMATIONS,
    MAX_DECISIONS,
    MAX_TERMINAL_TURNS,
    Conversation,
    SessionSnapshot,
)

N = 20_000  # far past every limit; before the fix each item cost one error, three times over
LIMITS = {
    "confirmations": MAX_CONFIRMATIONS,
    "terminalTurns": MAX_TERMINAL_TURNS,
    "decisions": MAX_DECISIONS,
}


def base(version: int = 1) -> dict[str, Any]:
    out: dict[str, Any] = {
        "protocol": "agentskit.chat.session",
        "version": version,
        "sessionId": "s",
        "definitionId": "d",
        "definitionRevision": 1,
        "updatedAt": "2026-07-11T00:00:00.000Z",
        "cursor": 1,
        "confirmations": [],
    }
    if version == 0:
        del out["protocol"]
    return out


def hostile(field: str, items: list[Any], version: int = 1) -> dict[str, Any]:
    out = base(version)
    if field == "decisions":
        out["conversation"] = {"state": "a", "decisions": items}
    else:
        out[field] = items
    return out


class CountingItem(Mapping[str, Any]):
    """An array item that counts every read: the exact path must not read one."""

    reads = 0

    def __getitem__(self, key: str) -> Any:
        CountingItem.reads += 1
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        CountingItem.reads += 1
        return iter(())

    def __len__(self) -> int:
        CountingItem.reads += 1
        return 0


@pytest.mark.parametrize("version", [1, 0])
@pytest.mark.parametrize("field", sorted(LIMITS))
def test_text_past_a_limit_validates_at_most_limit_items(field: str, version: int) -> None:
    text = json.dumps(hostile(field, [{}] * N, version))
    with pytest.raises(ValidationError) as caught:
        SessionSnapshot.model_validate_json(text, by_alias=True, by_name=False)
    # One error for the whole array, not one per item (version 0 adds its own "protocol" one).
    kinds = [error["type"] for error in caught.value.errors()]
    assert "too_long" in kinds and len(kinds) <= 2 + (version == 0), kinds[:5]
    assert not decode_session_snapshot(text).ok


@pytest.mark.parametrize("version", [1, 0])
def test_decode_validates_at_most_limit_confirmation_inputs(
    version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = session_module.freeze_bounded_object

    def counting(value: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(value)

    monkeypatch.setattr(session_module, "freeze_bounded_object", counting)
    text = json.dumps(hostile("confirmations", [{"input": {}}] * N, version))
    assert not decode_session_snapshot(text).ok
    # Fast path: at most the limit plus the one item that breaks it; exact path and v0: none.
    assert 0 < calls <= MAX_CONFIRMATIONS + 1
    calls = 0
    assert not decode_session_snapshot(json.loads(text)).ok
    assert calls == 0


@pytest.mark.parametrize("version", [1, 0])
@pytest.mark.parametrize("field", sorted(LIMITS))
def test_exact_path_reads_no_item_of_an_array_past_its_limit(field: str, version: int) -> None:
    CountingItem.reads = 0
    item = CountingItem()
    assert not decode_session_snapshot(hostile(field, [item] * N, version)).ok
    assert CountingItem.reads == 0
    # At the limit the items are read (so the counter can see reads), and refused.
    assert not decode_session_snapshot(hostile(field, [item] * LIMITS[field], version)).ok
    assert CountingItem.reads > 0


def test_constructors_stop_at_the_limit() -> None:
    with pytest.raises(ValidationError) as caught:
        Conversation.model_validate({"state": "a", "decisions": [{}] * N})
    assert [error["type"] for error in caught.value.errors()] == ["too_long"]


def test_limits_still_accept_the_maximum_and_keep_tuples() -> None:
    turns = [{"turnId": f"t{i}", "outcome": "completed"} for i in range(MAX_TERMINAL_TURNS)]
    result = decode_session_snapshot(json.dumps({**base(), "terminalTurns": turns}))
    assert result.snapshot is not None
    assert type(result.snapshot.terminal_turns) is tuple
    assert len(result.snapshot.terminal_turns) == MAX_TERMINAL_TURNS
    assert result.snapshot.to_wire()["terminalTurns"] == turns
