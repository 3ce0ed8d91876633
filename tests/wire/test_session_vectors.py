"""Every session-* reference vector, and the decoder's verdict on every resume-* vector."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import InvalidSessionSnapshot
from akchat_fsm.wire.decode import decode_session_snapshot, parse_session_snapshot
from akchat_fsm.wire.session import SessionSnapshot

# A verbatim copy of the reference's session-* and resume-* vectors (docs/reference.md §6).
VECTORS = Path(__file__).resolve().parent / "vectors"
SESSION = sorted(VECTORS.glob("session-*.json"))
RESUME = sorted(VECTORS.glob("resume-*.json"))


def _load(path: Path) -> dict[str, Any]:
    vector: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return vector


def _forms(raw: Any) -> list[Any]:
    """The vector input as given, and (for a parsed value) as JSON text and UTF-8 bytes."""
    if isinstance(raw, str):
        return [raw, raw.encode("utf-8")]
    text = json.dumps(raw, ensure_ascii=False)
    return [raw, text, text.encode("utf-8"), json.dumps(raw, indent=2)]


def test_all_vectors_are_present() -> None:
    assert len(SESSION) == 36 and len(RESUME) == 10


@pytest.mark.parametrize("path", SESSION, ids=lambda p: p.stem)
def test_session_vector(path: Path) -> None:
    vector = _load(path)
    for raw in _forms(vector["input"]):
        result = decode_session_snapshot(raw)
        if vector["expect"] == "accept":
            assert result.ok and result.diagnostic is None and result.snapshot is not None
            assert result.snapshot.to_wire() == vector["migrated"]
            assert json.loads(result.snapshot.to_json()) == vector["migrated"]
            assert SessionSnapshot.from_wire(vector["migrated"]) == result.snapshot
        else:
            expected = vector["diagnostic"]
            assert not result.ok and result.snapshot is None and result.diagnostic is not None
            got = result.diagnostic
            assert (got.code, got.message, got.retryable) == (
                expected["code"],
                expected["message"],
                expected["retryable"],
            )
            with pytest.raises(InvalidSessionSnapshot) as caught:
                parse_session_snapshot(raw)
            assert (caught.value.code, caught.value.message) == (got.code, got.message)
            assert caught.value.retryable is False


@pytest.mark.parametrize("path", RESUME, ids=lambda p: p.stem)
def test_resume_vector_decoder_verdict(path: Path) -> None:
    """Resume semantics are tested by the session layer; here only the decode step."""
    vector = _load(path)
    raw = vector["input"]
    if raw is None:  # "absent state": resume never decodes it
        assert vector["expect"] == "accept"
        return
    result = decode_session_snapshot(raw)
    decoder_messages = {
        "Session snapshot is not valid JSON.",
        "Session snapshot uses an unsupported version.",
        "Session snapshot payload is invalid.",
    }
    message = (vector.get("error") or {}).get("message")
    if message in decoder_messages:
        assert result.diagnostic is not None and result.diagnostic.message == message
    else:
        # Accepted, or rejected later (identity / replay): the envelope itself decodes.
        assert result.ok, result.diagnostic
