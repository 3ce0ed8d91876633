"""Every controlled-* reference vector: verdict, layer and hydrated output (docs/reference.md
§6)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import InvalidControlledSnapshot, InvalidMemoryRecord
from akchat_fsm.wire.controlled import (
    MESSAGES_INVALID,
    ControlledSnapshot,
    parse_controlled_snapshot,
)

# A verbatim copy of the reference's controlled-* vectors (docs/reference.md §6), kept in the repo.
VECTORS = Path(__file__).resolve().parents[1] / "controlled" / "vectors"
CASES = sorted(VECTORS.glob("controlled-*.json"))
LAYER_OF_CLASS = {"ZodError": "shell", "TypeError": "messages"}


def _load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def _iso(moment: datetime) -> str:
    assert moment.tzinfo is UTC
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def hydrate(snapshot: ControlledSnapshot) -> dict[str, Any]:
    """Our view in the vectors' notation: ``$date`` for datetimes, ``$error`` for the error."""
    out = snapshot.to_wire()
    for wire, message in zip(out["messages"], snapshot.messages, strict=True):
        assert message.created_at is not None
        wire["createdAt"] = {"$date": _iso(message.created_at)}
    if snapshot.error is not None:
        out["error"] = {"$error": {"name": snapshot.error.name, "message": snapshot.error.message}}
    return out


def test_all_controlled_vectors_are_present() -> None:
    assert len(CASES) == 28


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_vector(path: Path) -> None:
    vector = _load(path)
    original = json.dumps(vector["input"], sort_keys=True)
    if vector["expect"] == "accept":
        snapshot = parse_controlled_snapshot(vector["input"])
        assert hydrate(snapshot) == vector["hydrated"]
    else:
        with pytest.raises(InvalidControlledSnapshot) as caught:
            parse_controlled_snapshot(vector["input"])
        assert caught.value.layer == LAYER_OF_CLASS[vector["error"]["class"]]
        if caught.value.layer == "messages":
            assert caught.value.message == vector["error"]["message"] == MESSAGES_INVALID
            cause = caught.value.__cause__
            assert isinstance(cause, InvalidMemoryRecord)
            assert cause.code == vector["error"]["cause"]["code"]
            assert cause.message == vector["error"]["cause"]["message"]
            assert cause.hint == "Pass a version 1 MemoryRecord produced by serializeMessages()."
    # The caller's input is never mutated (the reference test checks the createdAt string).
    assert json.dumps(vector["input"], sort_keys=True) == original


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_vector_as_json_text_gives_the_same_verdict(path: Path) -> None:
    vector = _load(path)
    text = json.dumps(vector["input"])
    for raw in (text, text.encode("utf-8")):
        if vector["expect"] == "accept":
            assert (
                parse_controlled_snapshot(raw).to_wire()
                == parse_controlled_snapshot(vector["input"]).to_wire()
            )
        else:
            with pytest.raises(InvalidControlledSnapshot) as caught:
                parse_controlled_snapshot(raw)
            assert caught.value.layer == LAYER_OF_CLASS[vector["error"]["class"]]
