"""The controlled-chat snapshot: strict shell, then canonical messages (REFERENCE §5.1, §5.3).

Order matters and is the reference's: the **shell** is checked first and fails with
``InvalidControlledSnapshot(layer="shell")`` (the reference's ZodError); only a valid shell has
its ``messages`` validated, as the record ``{"version": 1, "messages": messages}`` with the
upstream memory rules, failing with ``layer="messages"`` and the reference's fixed text
"Serialized message record is invalid." (the reference's TypeError), whose ``__cause__`` is
the :class:`~akchat_fsm.errors.InvalidMemoryRecord` (the reference's ConfigError cause).

The shell is strict: exactly the six keys, no more, no fewer. That includes a key literally
named ``__proto__``, which the reference lets through silently; we reject it like any other
unknown key (fail closed, ADR-0031).

Input is a JSON-shaped Python value, or JSON text as ``str`` / ``bytes`` (UTF-8). Text that
does not parse is a shell failure.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict

from ..errors import InvalidControlledSnapshot, InvalidMemoryRecord
from ._js import as_safe_int, is_identifier, utf16_len
from .jsontext import InvalidJsonText, parse_json_text
from .memory import Message, validate_memory_record

__all__ = [
    "MAX_ERROR_MESSAGE_UNITS",
    "MAX_INPUT_UNITS",
    "MAX_SHELL_MESSAGES",
    "MESSAGES_INVALID",
    "SHELL_KEYS",
    "ChatStatus",
    "ControlledError",
    "ControlledSnapshot",
    "Usage",
    "parse_controlled_snapshot",
]

SHELL_KEYS = ("sessionId", "messages", "status", "input", "error", "usage")
USAGE_KEYS = ("promptTokens", "completionTokens", "totalTokens")
MAX_SHELL_MESSAGES = 10_000  # unreachable in practice: the record node budget bites at 1,666
MAX_INPUT_UNITS = 100_000
MAX_ERROR_MESSAGE_UNITS = 4_096
MESSAGES_INVALID = "Serialized message record is invalid."


class ChatStatus(StrEnum):
    """The upstream ``StreamStatus`` of the whole chat."""

    IDLE = "idle"
    STREAMING = "streaming"
    COMPLETE = "complete"
    ERROR = "error"


_STATUSES = frozenset(status.value for status in ChatStatus)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ControlledError(_Frozen):
    """The host's error banner. ``name`` mirrors the reference's hydrated ``Error.name``."""

    message: str
    code: str | None = None

    @property
    def name(self) -> str:
        return self.code if self.code is not None else "Error"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if self.code is not None:
            out["code"] = self.code
        return out


class Usage(_Frozen):
    """Token usage as the host reports it; no arithmetic relation is enforced."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

    def to_wire(self) -> dict[str, int]:
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "totalTokens": self.total_tokens,
        }


class ControlledSnapshot(_Frozen):
    """A validated controlled snapshot. Build it with :func:`parse_controlled_snapshot`."""

    session_id: str
    messages: tuple[Message, ...]
    status: ChatStatus
    input: str
    error: ControlledError | None
    usage: Usage

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready snapshot: the canonical projection of what was accepted."""
        return {
            "sessionId": self.session_id,
            "messages": [message.to_wire() for message in self.messages],
            "status": self.status.value,
            "input": self.input,
            "error": None if self.error is None else self.error.to_wire(),
            "usage": self.usage.to_wire(),
        }


# --------------------------------------------------------------------------- shell


def _shell(reason: str) -> NoReturn:
    raise InvalidControlledSnapshot("shell", f"Controlled snapshot is invalid: {reason}.")


def _text(raw: str | bytes | bytearray) -> Any:
    # JSON.parse semantics (no NaN/Infinity, unbounded nesting, JS numbers): a deep text parses
    # and is then refused by the record bounds with layer "messages", as in the reference.
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        return parse_json_text(text)
    except (UnicodeDecodeError, InvalidJsonText):
        _shell("not valid JSON text")


def _string(value: Any, key: str, min_units: int, max_units: int) -> str:
    if not isinstance(value, str):
        _shell(f"{key} is not a string")
    if not min_units <= utf16_len(value) <= max_units:
        _shell(f"{key} length is outside {min_units}..{max_units:,} UTF-16 units")
    return str.__str__(value)


def _exact_keys(
    value: Any, key: str, required: tuple[str, ...], optional: tuple[str, ...]
) -> dict[Any, Any]:
    if type(value) is not dict:
        _shell(f"{key} is not an object")
    for name in value:
        if name not in required and name not in optional:
            _shell(f"{key} has unrecognized key {name!r}")
    for name in required:
        if name not in value:
            _shell(f"{key} is missing key {name!r}")
    return value


def _error(value: Any) -> ControlledError | None:
    if value is None:
        return None
    error = _exact_keys(value, "error", ("message",), ("code",))
    message = _string(error["message"], "error.message", 1, MAX_ERROR_MESSAGE_UNITS)
    if "code" not in error:
        return ControlledError(message=message)
    code = error["code"]
    if not is_identifier(code):
        _shell("error.code is not a SafeIdentifier")
    return ControlledError(message=message, code=str.__str__(code))


def _usage(value: Any) -> Usage:
    usage = _exact_keys(value, "usage", USAGE_KEYS, ())
    counts = []
    for key in USAGE_KEYS:
        count = as_safe_int(usage[key])
        if count is None or count < 0:
            _shell(f"usage.{key} is not a safe integer >= 0")
        counts.append(count)
    return Usage(prompt_tokens=counts[0], completion_tokens=counts[1], total_tokens=counts[2])


def _status(value: Any) -> ChatStatus:
    if not isinstance(value, str) or value not in _STATUSES:
        _shell("status is not idle | streaming | complete | error")
    return ChatStatus(value)


def parse_controlled_snapshot(raw: object) -> ControlledSnapshot:
    """Validate an untrusted controlled snapshot, failing closed before anything is built.

    Raises :class:`~akchat_fsm.errors.InvalidControlledSnapshot` (and nothing else);
    ``.layer`` is ``"shell"`` or ``"messages"``.

    >>> snap = parse_controlled_snapshot('{"sessionId": "s-1", "messages": [], '
    ...     '"status": "idle", "input": "", "error": null, '
    ...     '"usage": {"promptTokens": 0, "completionTokens": 0, "totalTokens": 0}}')
    >>> snap.session_id, snap.status.value
    ('s-1', 'idle')
    """
    parsed = _text(raw) if isinstance(raw, str | bytes | bytearray) else raw
    shell = _exact_keys(parsed, "snapshot", SHELL_KEYS, ())
    session_id = shell["sessionId"]
    if not is_identifier(session_id):
        _shell("sessionId is not a SafeIdentifier")
    messages = shell["messages"]
    if type(messages) is not list:
        _shell("messages is not an array")
    if len(messages) > MAX_SHELL_MESSAGES:
        _shell(f"more than {MAX_SHELL_MESSAGES:,} messages")
    status = _status(shell["status"])
    draft = _string(shell["input"], "input", 0, MAX_INPUT_UNITS)
    error = _error(shell["error"])
    usage = _usage(shell["usage"])
    try:
        record = validate_memory_record({"version": 1, "messages": messages})
    except InvalidMemoryRecord as exc:
        failure = InvalidControlledSnapshot("messages", MESSAGES_INVALID)
        for note in getattr(exc, "__notes__", ()):
            failure.add_note(note)
        raise failure from exc
    return ControlledSnapshot(
        session_id=str.__str__(session_id),
        messages=record.messages,
        status=status,
        input=draft,
        error=error,
        usage=usage,
    )
