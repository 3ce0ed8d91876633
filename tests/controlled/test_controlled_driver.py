"""create_controlled_chat: fail closed, frozen view, callbacks picked and passed through."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from controlled_helpers import RecordingActions, snapshot, vector

from akchat_fsm.controlled import (
    ACTION_NAMES,
    ControlledActions,
    ControlledChat,
    create_controlled_chat,
)
from akchat_fsm.errors import ConfigError, InvalidControlledSnapshot
from akchat_fsm.wire.controlled import ChatStatus, parse_controlled_snapshot


def test_view_projects_the_validated_snapshot() -> None:
    chat = create_controlled_chat(snapshot(), RecordingActions())
    assert chat.mode == "controlled"
    assert chat.session_id == "synthetic-session"
    assert chat.status is ChatStatus.IDLE
    assert chat.input == "draft"
    assert chat.error is None
    assert (chat.usage.prompt_tokens, chat.usage.completion_tokens) == (3, 2)
    assert chat.usage.total_tokens == 5
    assert isinstance(chat.messages, tuple)
    (message,) = chat.messages
    assert message.created_at == datetime(2026, 7, 14, tzinfo=UTC)


def test_error_fixture_hydrates_error_with_code_as_name() -> None:
    chat = create_controlled_chat(snapshot("controlled-fixture-error"), RecordingActions())
    assert chat.error is not None
    assert (chat.error.name, chat.error.code) == ("HOST_FAILED", "HOST_FAILED")
    assert chat.error.message == "Synthetic host failure."


def test_extra_action_attributes_never_override_state() -> None:
    chat = create_controlled_chat(snapshot(), RecordingActions())
    assert (chat.status, chat.session_id, chat.mode, chat.input) == (
        "idle",
        "synthetic-session",
        "controlled",
        "draft",
    )
    assert len(chat.messages) == 1


@pytest.mark.parametrize("name", ["controlled-private-status", "controlled-invalid-message-role"])
def test_fails_closed_before_reading_actions(name: str) -> None:
    touched: list[str] = []

    class Spy:
        def __getattr__(self, attr: str) -> Any:
            touched.append(attr)
            return lambda *a: None

    with pytest.raises(InvalidControlledSnapshot):
        create_controlled_chat(vector(name)["input"], Spy())
    assert touched == []


CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("send", ("hello",), {}),
    ("stop", (), {}),
    ("retry", (), {}),
    ("edit", ("assistant-1", "new"), {"regenerate": True}),
    ("regenerate", ("assistant-1",), {}),
    ("set_input", ("typed",), {}),
    ("clear", (), {}),
    ("propose_tool_call", ({"id": "app-1", "name": "act", "args": {}},), {}),
    ("approve", ("call-1",), {}),
    ("deny", ("call-1", "no"), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_each_callback_invoked_exactly_once_with_its_arguments(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    actions = RecordingActions()
    chat = create_controlled_chat(snapshot(), actions)
    before = chat.snapshot
    assert getattr(chat, name)(*args, **kwargs) == f"{name}-result"
    expected = dict(kwargs)
    if name == "regenerate" and not args:
        expected = {}
    assert actions.calls == [(name, args, expected)]
    # no optimistic state: the view is exactly what it was
    assert chat.snapshot is before
    assert chat.input == "draft"


def test_all_ten_callbacks_and_nothing_else() -> None:
    assert set(ACTION_NAMES) == {name for name, _, _ in CALLS}
    fields = {f.name for f in dataclasses.fields(ControlledChat)}
    assert fields == {*ACTION_NAMES, "snapshot", "mode"}


def test_actions_protocol_declares_exactly_the_ten_callbacks() -> None:
    declared = {
        name
        for name, value in vars(ControlledActions).items()
        if not name.startswith("_") and callable(value)
    }
    assert declared == set(ACTION_NAMES)


def test_callbacks_are_passed_through_unwrapped() -> None:
    actions = RecordingActions()
    chat = create_controlled_chat(snapshot(), actions)
    assert chat.send == actions.send  # the host's own bound method, not a wrapper


def test_errors_propagate_unwrapped() -> None:
    boom = RuntimeError("host failed")

    class Failing(RecordingActions):
        def retry(self) -> str:
            raise boom

    chat = create_controlled_chat(snapshot(), Failing())
    with pytest.raises(RuntimeError) as caught:
        chat.retry()
    assert caught.value is boom


def test_async_callbacks_are_supported() -> None:
    seen: list[str] = []

    class AsyncActions(RecordingActions):
        async def send(self, text: str) -> str:  # type: ignore[override]
            await asyncio.sleep(0)
            seen.append(text)
            return "sent"

    chat = create_controlled_chat(snapshot(), AsyncActions())
    assert asyncio.run(chat.send("hi")) == "sent"
    assert seen == ["hi"]


def test_mapping_of_callbacks_is_accepted() -> None:
    calls: list[str] = []
    actions = {name: (lambda *a, _n=name, **k: calls.append(_n)) for name in ACTION_NAMES}
    chat = create_controlled_chat(snapshot(), actions)
    chat.stop()
    assert calls == ["stop"]


@pytest.mark.parametrize("missing", ["deny", "set_input"])
def test_missing_callback_is_a_config_error(missing: str) -> None:
    actions = {name: (lambda *a: None) for name in ACTION_NAMES if name != missing}
    with pytest.raises(ConfigError, match=missing):
        create_controlled_chat(snapshot(), actions)


def test_non_callable_or_raising_callback_is_a_config_error() -> None:
    class NotCallable(RecordingActions):
        send = "nope"  # type: ignore[assignment]

    with pytest.raises(ConfigError):
        create_controlled_chat(snapshot(), NotCallable())

    class Raising(RecordingActions):
        @property
        def stop(self) -> Any:  # type: ignore[override]
            raise KeyError("secret")

    with pytest.raises(ConfigError) as caught:
        create_controlled_chat(snapshot(), Raising())
    assert isinstance(caught.value.__cause__, KeyError)


def test_view_is_frozen() -> None:
    chat = create_controlled_chat(snapshot(), RecordingActions())
    with pytest.raises(dataclasses.FrozenInstanceError):
        chat.send = print  # type: ignore[misc]
    with pytest.raises((AttributeError, TypeError)):
        chat.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        chat.messages[0] = chat.messages[0]  # type: ignore[index]


def test_duplicate_message_ids_are_kept_and_reported() -> None:
    chat = create_controlled_chat(
        snapshot("controlled-duplicate-message-ids-accepted"), RecordingActions()
    )
    assert [m.id for m in chat.messages] == ["assistant-1", "assistant-1"]
    assert chat.duplicate_message_ids == ("assistant-1",)
    assert create_controlled_chat(snapshot(), RecordingActions()).duplicate_message_ids == ()


def test_tool_calls_awaiting_confirmation() -> None:
    chat = create_controlled_chat(snapshot("controlled-fixture-confirmation"), RecordingActions())
    assert [c.id for c in chat.tool_calls_awaiting_confirmation()] == ["synthetic-call"]
    assert (
        create_controlled_chat(snapshot(), RecordingActions()).tool_calls_awaiting_confirmation()
        == ()
    )


def test_accepts_an_already_parsed_snapshot_and_json_text() -> None:
    parsed = parse_controlled_snapshot(snapshot())
    assert create_controlled_chat(parsed, RecordingActions()).snapshot is parsed

    text = json.dumps(snapshot())
    assert create_controlled_chat(text, RecordingActions()).snapshot == parsed
