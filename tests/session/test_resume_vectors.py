"""The reference's resume-* vectors (docs/reference.md §6), run through resume_chat_session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.session import resume_chat_session
from akchat_fsm.storage.memory import MemoryStorage

from ._flows import definition_from_context

VECTORS = Path("/work/shared/reference/vectors")
if not VECTORS.is_dir():  # the repo's own copy, when the shared folder is not mounted
    VECTORS = Path(__file__).resolve().parents[2] / "reference" / "vectors"


def _vectors() -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(VECTORS.glob("resume-*.json"))]


class _Raw:
    """A storage whose load returns the vector input verbatim (any JSON shape or text)."""

    def __init__(self, raw: object) -> None:
        self.raw = raw
        self.saves: list[tuple[object, int | None]] = []

    def load(self, session_id: str) -> object:
        return self.raw

    def save(self, snapshot: object, expected_cursor: int | None) -> bool:
        self.saves.append((snapshot, expected_cursor))
        return True


def test_all_resume_vectors_are_present() -> None:
    assert len(_vectors()) == 10


@pytest.mark.parametrize("vector", _vectors(), ids=lambda v: v["name"])
def test_resume_vector(vector: dict[str, Any]) -> None:
    context = vector["context"]
    definition = definition_from_context(context)
    storage = _Raw(vector["input"])
    if vector["expect"] == "reject":
        with pytest.raises(ConfigError) as info:
            resume_chat_session(definition, session_id=context["sessionId"], storage=storage)
        assert info.value.message == vector["error"]["message"]
        assert str(info.value) == vector["error"]["message"]
        assert info.value.code == vector["error"]["code"]
        return
    session = resume_chat_session(definition, session_id=context["sessionId"], storage=storage)
    if vector.get("fresh"):
        assert session.exists is False and session.cursor == 0
        session.persist()
        assert storage.saves[-1][1] is None  # first save is create-only
        assert session.cursor == 1
        return
    assert session.exists is True
    assert session.snapshot.to_wire() == vector["migrated"]
    conversation = vector["migrated"].get("conversation")
    if conversation is not None:
        assert session.conversation_state == conversation["state"]


def test_replayable_vector_resumes_in_active_state_at_cursor_2() -> None:
    vector = json.loads((VECTORS / "resume-replayable-decision.json").read_text())
    session = resume_chat_session(
        definition_from_context(vector["context"]),
        session_id="shared",
        storage=_Raw(vector["input"]),
    )
    assert (session.conversation_state, session.cursor) == ("active", 2)


def test_stored_state_round_trips_through_a_real_adapter() -> None:
    vector = json.loads((VECTORS / "resume-default-revision-is-1.json").read_text())
    storage = MemoryStorage()
    definition = definition_from_context(vector["context"])
    first = resume_chat_session(definition, session_id="cross-client", storage=storage)
    first.persist()
    again = resume_chat_session(definition, session_id="cross-client", storage=storage)
    assert again.cursor == 1 and again.exists
