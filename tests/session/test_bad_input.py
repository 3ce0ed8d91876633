"""Bad input never raises anything but our typed errors, and never constructs a session."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from akchat_fsm.errors import AkchatError, ConfigError
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.session.definition import ConversationFlow

from ._flows import SUPPORT_ROUTES, SupportFlow

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)

VALID: dict[str, Any] = {
    "protocol": "agentskit.chat.session",
    "version": 1,
    "sessionId": "s",
    "definitionId": "support",
    "definitionRevision": 1,
    "updatedAt": "2026-07-11T00:00:00.000Z",
    "cursor": 1,
    "conversation": {"state": "idle", "decisions": []},
    "confirmations": [],
}
DEFINITION = ChatDefinition("support", 1, ConversationFlow(SupportFlow, SUPPORT_ROUTES))


class Stored:
    def __init__(self, raw: object) -> None:
        self.raw = raw

    def load(self, session_id: str) -> object:
        return self.raw

    def save(self, snapshot: object, expected_cursor: int | None) -> bool:
        raise AssertionError("resume must not save")


@given(raw=json_values | st.binary(max_size=30) | st.text(max_size=30))
def test_garbage_is_a_config_error(raw: object) -> None:
    try:
        resume_chat_session(DEFINITION, session_id="s", storage=Stored(raw))
    except ConfigError:
        return
    assert raw is None  # only "nothing stored" may start a session


@given(key=st.sampled_from(sorted(VALID)), value=json_values)
def test_one_mutated_field_is_accepted_or_a_typed_error(key: str, value: object) -> None:
    raw = {**VALID, key: value}
    try:
        session = resume_chat_session(DEFINITION, session_id="s", storage=Stored(raw))
    except AkchatError:
        return
    assert session.snapshot.session_id == "s" and session.definition is DEFINITION
