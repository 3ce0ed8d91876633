"""A reviewer's edited arguments (ADR-0135): bounded like a proposed input, digested the same
way, and absent from every entry that is not an edit (non-edited trails keep their bytes)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from akchat_fsm import LimitExceeded, arguments_digest
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.digest import edited_arguments

ENTRY_KEYS = {
    "nonce", "v", "token", "toolCallId", "action", "cursor", "intent", "claims", "principal",
    "via", "reason", "argsDigest", "at",
}  # fmt: skip


def test_edited_arguments_are_frozen_and_digested_as_javascript_holds_them() -> None:
    edited = edited_arguments({"b": 1.0, "a": [True, None, "x"]})
    assert dict(edited.args) == {"a": (True, None, "x"), "b": 1}
    assert edited.digest == arguments_digest({"a": [True, None, "x"], "b": 1})


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(
    "hostile",
    [
        ["not", "an", "object"],
        None,
        "text",
        {"n": float("inf")},
        {"s": "x" * 16_385},
        {str(i): i for i in range(1_000)},  # 1,001 nodes with the root
        _nested(21),
        {"k": {1, 2}},
        {1: "key is not a string"},
    ],
)
def test_hostile_edits_are_refused_by_the_input_bounds(hostile: Any) -> None:
    with pytest.raises(LimitExceeded):
        edited_arguments(hostile)


def test_an_entry_that_is_not_an_edit_keeps_its_fields() -> None:
    storage = MemoryStorage()
    session = resume_chat_session(ChatDefinition("support"), session_id="s", storage=storage)
    confirmations = session.confirmations_for(RecordingUpstream())
    record = confirmations.propose("email.send", {"to": "a@example.com"})
    confirmations.approve(record.token, decided_by="ana")
    (key,) = [k for k in storage.list_records("s") if k.startswith("audit:")]
    stored = storage.load_record("s", key)
    assert stored is not None and set(json.loads(stored[1])) == ENTRY_KEYS
