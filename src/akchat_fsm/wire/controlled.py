"""The controlled-chat snapshot: strict shell, then canonical messages (docs/reference.md §5.1,
§5.3).

Order matters and is the reference's: the **shell** is checked first and fails with
``InvalidControlledSnapshot(layer="shell")`` (the reference's ZodError); only a valid shell has
its ``messages`` validated, as the record ``{"version": 1, "messages": messages}`` with the
upstream memory rules, failing with ``layer="messages"`` and the reference's fixed text
"Serialized message record is invalid." (the reference's TypeError), whose ``__cause__`` is
the :class:`~akchat_fsm.errors.InvalidMemoryRecord` (the reference's ConfigError cause).

The shell is strict: exactly the six keys, no more, no fewer, except that a key literally
named ``__proto__`` at the top escapes the check, as in the reference (JavaScript's own
``__proto__`` property is not an unknown key to it): it is accepted, never read, and absent from
the output (ADR-0081). Inside ``error`` and ``usage`` it is an unknown key like any other.

Input is a JSON-shaped Python value, or JSON text as ``str`` / ``bytes`` (UTF-8). Text that
does not parse is a shell failure.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import InvalidControlledSnapshot, InvalidMemoryRecord
from ._fields import NonNegativeInt, StrictStr
from ._pydantic_compat import ModelMetaclass
from .js import as_safe_int, is_identifier, utf16_len
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


class _CheckedMeta(ModelMetaclass):
    """Constructors validate like the parser and raise only ``InvalidControlledSnapshot``.

    As for the session models (ADR-0007), a metaclass ``__call__`` runs for ``Model(...)``
    only; the parser builds its result with ``model_construct`` from values it already checked.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            instance = super().__call__(*args, **kwargs)
        except Exception as exc:
            raise InvalidControlledSnapshot(_layer_of(exc), _INVALID_FIELDS) from exc
        instance._recheck()
        return instance


_INVALID_FIELDS = "Controlled snapshot is invalid: its fields are invalid."


def _layer_of(exc: Exception) -> Literal["shell", "messages"]:
    # Shell first, as in the parser: "messages" only when every issue lies inside a message.
    if isinstance(exc, InvalidMemoryRecord):  # a message payload failed its bounded clone
        return "messages"
    if isinstance(exc, ValidationError):
        issues = exc.errors(include_url=False, include_input=False)
        if issues and all(issue["loc"][:1] == ("messages",) for issue in issues):
            inside = all(len(issue["loc"]) > 2 for issue in issues)  # messages.<i>.<field>
            return "messages" if inside else "shell"
    return "shell"


class _Frozen(BaseModel, metaclass=_CheckedMeta):
    model_config = ConfigDict(frozen=True)

    def _recheck(self) -> None:
        """Re-run the parser's rules on the wire form (cheap; constructors only)."""


class ControlledError(_Frozen):
    """The host's error banner. ``name`` mirrors the reference's hydrated ``Error.name``."""

    message: StrictStr
    code: StrictStr | None = None

    @property
    def name(self) -> str:
        return self.code if self.code is not None else "Error"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.message}
        if self.code is not None:
            out["code"] = self.code
        return out

    def _recheck(self) -> None:
        _error(self.to_wire())


class Usage(_Frozen):
    """Token usage as the host reports it; no arithmetic relation is enforced."""

    prompt_tokens: NonNegativeInt
    completion_tokens: NonNegativeInt
    total_tokens: NonNegativeInt

    def to_wire(self) -> dict[str, int]:
        return {
            "promptTokens": self.prompt_tokens,
            "completionTokens": self.completion_tokens,
            "totalTokens": self.total_tokens,
        }


class ControlledSnapshot(_Frozen):
    """A validated controlled snapshot, from :func:`parse_controlled_snapshot` or built here.

    Building one directly checks everything the parser checks (the message node budget too)
    and raises :class:`~akchat_fsm.errors.InvalidControlledSnapshot` with the parser's layer.
    """

    session_id: StrictStr
    messages: tuple[Message, ...]
    status: ChatStatus
    input: StrictStr
    error: ControlledError | None
    usage: Usage

    def _recheck(self) -> None:
        self.check()

    def check(self) -> None:
        """Raise ``InvalidControlledSnapshot`` unless every rule of the parser holds.

        For instances that skipped validation (``model_construct``, ``model_copy(update=...)``);
        :func:`~akchat_fsm.controlled.create_controlled_chat` calls it on every instance.
        """
        try:
            wire = self.to_wire()
        except Exception as exc:
            raise InvalidControlledSnapshot("shell", _INVALID_FIELDS) from exc
        parse_controlled_snapshot(wire)

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
        # `str(raw, "utf-8")` reads the buffer itself: a bytes subclass's `decode` never runs.
        text = str(raw, "utf-8") if isinstance(raw, bytes | bytearray) else str.__str__(raw)
        return parse_json_text(text)
    except (UnicodeDecodeError, InvalidJsonText):
        _shell("not valid JSON text")


def _string(value: Any, key: str, min_units: int, max_units: int) -> str:
    if not isinstance(value, str):
        _shell(f"{key} is not a string")
    text = str.__str__(value)  # an exact str: a subclass's own `len` is never called
    # UTF-16 units >= code points, so an over-long string fails before it is measured.
    if len(text) > max_units or not min_units <= utf16_len(text) <= max_units:
        _shell(f"{key} length is outside {min_units}..{max_units:,} UTF-16 units")
    return text


def _exact_keys(
    value: Any,
    key: str,
    required: tuple[str, ...],
    optional: tuple[str, ...],
    ignored: tuple[str, ...] = (),
) -> dict[Any, Any]:
    if type(value) is not dict:
        _shell(f"{key} is not an object")
    out: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str):
            _shell(f"{key} has a key that is not a string")
        name = str.__str__(name)  # an exact str before hashing or comparing it
        if name in ignored:
            continue
        if name not in required and name not in optional:
            _shell(f"{key} has unrecognized key {name!r}")
        out[name] = item
    for name in required:
        if name not in out:
            _shell(f"{key} is missing key {name!r}")
    return out


def _error(value: Any) -> ControlledError | None:
    if value is None:
        return None
    error = _exact_keys(value, "error", ("message",), ("code",))
    message = _string(error["message"], "error.message", 1, MAX_ERROR_MESSAGE_UNITS)
    if "code" not in error:
        return ControlledError.model_construct(message=message)
    code = error["code"]
    if not is_identifier(code):
        _shell("error.code is not a SafeIdentifier")
    return ControlledError.model_construct(message=message, code=str.__str__(code))


def _usage(value: Any) -> Usage:
    usage = _exact_keys(value, "usage", USAGE_KEYS, ())
    counts = []
    for key in USAGE_KEYS:
        count = as_safe_int(usage[key])
        if count is None or count < 0:
            _shell(f"usage.{key} is not a safe integer >= 0")
        counts.append(count)
    return Usage.model_construct(
        prompt_tokens=counts[0], completion_tokens=counts[1], total_tokens=counts[2]
    )


def _status(value: Any) -> ChatStatus:
    if not isinstance(value, str) or str.__str__(value) not in _STATUSES:
        _shell("status is not idle | streaming | complete | error")
    return ChatStatus(str.__str__(value))


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
    try:
        fields = _check_shell(raw)
    except InvalidControlledSnapshot:
        raise
    except Exception as exc:  # a hostile object's own method raised while it was read
        raise InvalidControlledSnapshot(
            "shell", "Controlled snapshot is invalid: it cannot be read."
        ) from exc
    try:
        record = validate_memory_record({"version": 1, "messages": fields.pop("messages")})
    except InvalidMemoryRecord as exc:
        failure = InvalidControlledSnapshot("messages", MESSAGES_INVALID)
        for note in getattr(exc, "__notes__", ()):
            failure.add_note(note)
        raise failure from exc
    return ControlledSnapshot.model_construct(messages=record.messages, **fields)


def _check_shell(raw: object) -> dict[str, Any]:
    """The strict shell, every key but the message items: the fields of the snapshot."""
    parsed = _text(raw) if isinstance(raw, str | bytes | bytearray) else raw
    # `__proto__` at the top passes the reference's strict check and is dropped (ADR-0081).
    shell = _exact_keys(parsed, "snapshot", SHELL_KEYS, (), ignored=("__proto__",))
    session_id = shell["sessionId"]
    if not is_identifier(session_id):
        _shell("sessionId is not a SafeIdentifier")
    messages = shell["messages"]
    if type(messages) is not list:
        _shell("messages is not an array")
    if len(messages) > MAX_SHELL_MESSAGES:
        _shell(f"more than {MAX_SHELL_MESSAGES:,} messages")
    return {
        "session_id": str.__str__(session_id),
        "messages": messages,
        "status": _status(shell["status"]),
        "input": _string(shell["input"], "input", 0, MAX_INPUT_UNITS),
        "error": _error(shell["error"]),
        "usage": _usage(shell["usage"]),
    }
