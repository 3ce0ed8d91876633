"""Canonical chat-memory records: the upstream ``validateMemoryRecord`` (docs/reference.md §5.2).

Theory of operation. Validation runs in two passes, like the reference:

1. **Pre-pass** (:func:`clone_bounded_json`) over the *whole* record, including fields the
   projection later drops: at most 10,000 nodes (every value, the root too), depth at most 32
   with the record at 0, containers of at most 10,000 items or keys, keys of at most 256 UTF-16
   units, finite numbers, JSON-shaped values only (``dict`` / ``list`` / ``str`` / ``int`` /
   ``float`` / ``bool`` / ``None``, exactly as ``json.loads`` returns them), and no container
   reached twice (cycles *and* shared references). It walks with an explicit stack, so no
   input can raise ``RecursionError``, and it returns a fresh clone: the caller's value is never
   aliased or mutated.
2. **Record rules** on the clone, through the frozen models below. Unknown keys on messages,
   parts and tool calls are dropped (the canonical projection); an optional key given as
   ``null`` is rejected (``null`` is never "absent", docs/reference.md §8).

Every failure raises :class:`~akchat_fsm.errors.InvalidMemoryRecord` whose message is the
reference's fixed text; the specific rule is attached as an exception note (``__notes__``).

Decisions (ADR-0030): ``createdAt`` keeps its wire text (``created_at_iso``) and hydrates to an
aware UTC ``datetime`` through :attr:`Message.created_at`, which is ``None`` only for year
``0000`` (valid on the wire, not representable by ``datetime``). JSON payloads (``args``,
``metadata``, an image ``detail``) are deep-frozen into the same form as confirmation inputs:
objects become ``FrozenDict`` and arrays tuples; ``to_wire()`` thaws them back to ``dict`` /
``list``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel

from ..errors import InvalidMemoryRecord
from ._fields import StrictStr
from ._pydantic_compat import ModelMetaclass
from .bounded import FrozenDict, thaw
from .js import utf16_len

__all__ = [
    "MAX_CONTAINER_ITEMS",
    "MAX_DEPTH",
    "MAX_KEY_UNITS",
    "MAX_NODES",
    "AudioPart",
    "FilePart",
    "ImagePart",
    "MemoryRecord",
    "Message",
    "MessageStatus",
    "Part",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolCallStatus",
    "VideoPart",
    "clone_bounded_json",
    "freeze_json",
    "thaw_json",
    "validate_memory_record",
]

MAX_NODES = 10_000
MAX_DEPTH = 32
MAX_CONTAINER_ITEMS = 10_000
MAX_KEY_UNITS = 256


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    TOOL = "tool"


class MessageStatus(StrEnum):
    PENDING = "pending"
    STREAMING = "streaming"
    COMPLETE = "complete"
    ERROR = "error"


class ToolCallStatus(StrEnum):
    """Upstream tool-call status. There is no "approved"/"denied": a denial is ``error``."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETE = "complete"
    ERROR = "error"
    REQUIRES_CONFIRMATION = "requires_confirmation"


# --------------------------------------------------------------------------- pre-pass


class _Reject(Exception):
    """Internal: a rule failed; the text becomes the public error's note."""


def _reject(reason: str) -> NoReturn:
    raise _Reject(reason)


def clone_bounded_json(value: object, *, python_forms: bool = False) -> Any:
    """Clone a JSON-shaped value under the upstream record bounds, iteratively.

    Raises ``InvalidMemoryRecord`` (and nothing else) when a bound is broken or the value
    cannot be read. The clone contains only exact ``dict`` / ``list`` / ``str`` / ``int`` /
    ``float`` / ``bool`` / ``None``. With ``python_forms``, any ``Mapping`` (a ``FrozenDict``
    from a validated model, say) is read as an object and a ``tuple`` as an array: for values a
    Python caller built, not for records that must be JSON-shaped.
    """
    try:
        return _clone(value, python_forms=python_forms)
    except _Reject as exc:
        raise _invalid(str(exc)) from None
    except Exception as exc:  # a hostile object's own method raised: it cannot be cloned
        raise _invalid(f"value cannot be read ({type(exc).__name__})") from exc


def _clone(root: object, *, python_forms: bool = False) -> Any:
    # Not merged with ``bounded._walk`` on purpose: the rules differ (10,000 nodes / depth 32
    # here against 1,000 / 20 there, no string bound, ``__proto__`` kept, plain-dict clone for
    # the model pass rather than a frozen value with JS numbers and key order), and that walk
    # is the session decoder's hot path, specialised for it.
    holder: list[Any] = [None]
    # Each entry: (value, depth, container to write the clone into, index or key there).
    stack: list[tuple[object, int, Any, Any]] = [(root, 0, holder, 0)]
    seen: set[int] = set()
    nodes = 0
    while stack:
        value, depth, parent, slot = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            _reject(f"more than {MAX_NODES:,} values")
        if depth > MAX_DEPTH:
            _reject(f"nested deeper than {MAX_DEPTH}")
        if value is None or value is True or value is False:
            parent[slot] = value
        elif isinstance(value, str):
            parent[slot] = str.__str__(value)  # an exact str, even from a subclass
        elif isinstance(value, int):
            number = int.__int__(value)  # exact int: a subclass's own methods are never called
            try:
                float(number)  # rounds like JSON.parse; beyond the double range it is Infinity
            except OverflowError:
                _reject("number is not finite")
            parent[slot] = number
        elif isinstance(value, float):
            real = float.__float__(value)
            if not math.isfinite(real):
                _reject("number is not finite")
            parent[slot] = real
        elif type(value) is list or (python_forms and type(value) is tuple):
            assert isinstance(value, list | tuple)
            _enter(value, len(value), nodes, seen)
            copy: list[Any] = [None] * len(value)
            parent[slot] = copy
            for index in range(len(value) - 1, -1, -1):
                stack.append((value[index], depth + 1, copy, index))
        elif type(value) is dict or (python_forms and isinstance(value, Mapping)):
            assert isinstance(value, Mapping)
            _enter(value, len(value), nodes, seen)
            items = [(_key(key), child) for key, child in value.items()]
            mapping: dict[str, Any] = dict.fromkeys(key for key, _ in items)
            parent[slot] = mapping
            for key, child in reversed(items):
                stack.append((child, depth + 1, mapping, key))
        else:
            _reject(f"{type(value).__name__} is not a JSON value")
    return holder[0]


def _enter(container: object, size: int, nodes: int, seen: set[int]) -> None:
    if id(container) in seen:
        _reject("the same container appears twice (cycle or shared reference)")
    seen.add(id(container))
    if size > MAX_CONTAINER_ITEMS:
        _reject(f"container over {MAX_CONTAINER_ITEMS:,} items")
    if nodes + size > MAX_NODES:  # every child is at least one more node
        _reject(f"more than {MAX_NODES:,} values")


def _key(key: object) -> str:
    if not isinstance(key, str):
        _reject("object key is not a string")
    key = str.__str__(key)  # an exact str first: a subclass may override len / hash / eq
    # Fast path: a key of <= 128 code points is at most 256 UTF-16 units.
    if len(key) > MAX_KEY_UNITS // 2 and utf16_len(key) > MAX_KEY_UNITS:
        _reject(f"object key longer than {MAX_KEY_UNITS} UTF-16 units")
    return key


def freeze_json(value: Any) -> Any:
    """Deep-freeze a cloned JSON value into the wire layer's one frozen form.

    Objects become :class:`~akchat_fsm.wire.bounded.FrozenDict` and arrays tuples, as in a
    confirmation ``input``; :func:`thaw_json` (the same function as ``bounded.thaw``) reverses
    it. Only called on pre-pass clones, whose depth is at most 32.
    """
    if type(value) is dict:
        return FrozenDict._wrap({k: freeze_json(v) for k, v in value.items()})
    if type(value) is list:
        return tuple(freeze_json(v) for v in value)
    return value


#: Inverse of :func:`freeze_json`: fresh ``dict`` / ``list`` the caller may mutate.
thaw_json = thaw


# --------------------------------------------------------------------------- field rules
# Depth is bounded by the pre-pass (32), so the small recursive helpers here cannot overflow.

_CREATED_AT = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z", re.ASCII)
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _created_at(value: Any) -> str:
    """The exact ``toISOString`` form of a real instant (proleptic Gregorian, year 0000 ok)."""
    match = _CREATED_AT.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError("createdAt is not YYYY-MM-DDTHH:mm:ss.sssZ")
    year, month, day, hour, minute, second, _ = (int(g) for g in match.groups())
    if not 1 <= month <= 12:
        raise ValueError("createdAt month is not 01..12")
    days = 29 if month == 2 and _is_leap(year) else _MONTH_DAYS[month - 1]
    if not (1 <= day <= days and hour < 24 and minute < 60 and second < 60):
        raise ValueError("createdAt does not round-trip through Date")
    return str(value)


def _non_empty(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("not a non-empty string")
    return value


def _plain_object(value: Any) -> Mapping[str, Any]:
    if type(value) is not dict and type(value) is not FrozenDict:
        raise ValueError("not a plain object")
    # Cloned again (bounded, iterative) because a model built directly, not through
    # `validate_memory_record`, gets no pre-pass: no input may reach the recursive freeze.
    frozen: Mapping[str, Any] = freeze_json(clone_bounded_json(value, python_forms=True))
    return frozen


def _duration(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("durationSec is not a number")
    if not math.isfinite(value) or value < 0:
        raise ValueError("durationSec is not a finite number >= 0")
    return value


def js_string(value: Any) -> str:
    """JavaScript ``String(value)`` for a JSON value (only what the ``detail`` quirk needs)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, Mapping):
        return "[object Object]"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value)


def _detail(value: Any) -> Any:
    # Reference quirk kept for parity (docs/reference.md §8): the check stringifies first, so
    # ["low"] passes and is passed through still as an array.
    value = clone_bounded_json(value, python_forms=True)  # bounded before any recursion
    if js_string(value) not in ("low", "high", "auto"):
        raise ValueError("detail is not low | high | auto")
    return freeze_json(value)


def _enum(cls: type[StrEnum]) -> Any:
    values = {member.value: member for member in cls}

    def check(value: Any) -> StrEnum:
        if not isinstance(value, str) or value not in values:
            raise ValueError(f"not one of {sorted(values)}")
        return values[value]

    return PlainValidator(check, json_schema_input_type=str)


NonEmptyStr = Annotated[str, PlainValidator(_non_empty, json_schema_input_type=str)]
CreatedAt = Annotated[str, PlainValidator(_created_at, json_schema_input_type=str)]
PlainObject = Annotated[
    Mapping[str, Any], PlainValidator(_plain_object, json_schema_input_type=dict[str, Any])
]
Duration = Annotated[int | float, PlainValidator(_duration, json_schema_input_type=float)]
Detail = Annotated[Any, PlainValidator(_detail, json_schema_input_type=str)]


class _RecordMeta(ModelMetaclass):
    """``Model(...)`` raises ``InvalidMemoryRecord`` with the rule as a note (cf. ADR-0007).

    Only direct construction goes through here; :func:`validate_memory_record` uses
    ``model_validate`` and reports the failing message index itself.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except InvalidMemoryRecord:
            raise
        except ValidationError as exc:
            raise _invalid(_first_issue(cls.__name__, exc)) from exc
        except Exception as exc:  # a hostile argument's own method raised
            raise _invalid(f"{cls.__name__}: value cannot be read") from exc


class _Projection(BaseModel, metaclass=_RecordMeta):
    """Frozen, lenient projection: unknown keys dropped, ``null`` never stands for absent."""

    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )

    @model_validator(mode="before")
    @classmethod
    def _null_is_not_absent(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                key = field.alias or name
                if key in data and data[key] is None:
                    raise ValueError(f"{key} is null")
        return data


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = thaw_json(value)


class TextPart(_Projection):
    type: Literal["text"]
    text: StrictStr

    def to_wire(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


class _SourcePart(_Projection):
    source: StrictStr
    mime_type: StrictStr | None = None

    def _wire(self, type_: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": type_, "source": self.source}
        _put(out, "mimeType", self.mime_type)
        return out


class ImagePart(_SourcePart):
    type: Literal["image"]
    detail: Detail = None

    def to_wire(self) -> dict[str, Any]:
        out = self._wire(self.type)
        _put(out, "detail", self.detail)
        return out


class _TimedPart(_SourcePart):
    """Audio and video share every rule; only the ``type`` tag differs."""

    type: str
    duration_sec: Duration | None = None

    def to_wire(self) -> dict[str, Any]:
        out = self._wire(self.type)
        _put(out, "durationSec", self.duration_sec)
        return out


class AudioPart(_TimedPart):
    type: Literal["audio"]


class VideoPart(_TimedPart):
    type: Literal["video"]


class FilePart(_SourcePart):
    type: Literal["file"]
    filename: StrictStr | None = None

    def to_wire(self) -> dict[str, Any]:
        out = self._wire(self.type)
        _put(out, "filename", self.filename)
        return out


Part = Annotated[
    TextPart | ImagePart | AudioPart | VideoPart | FilePart, Field(discriminator="type")
]
_PART_TYPES = ("text", "image", "audio", "video", "file")


class ToolCall(_Projection):
    """An upstream tool call as recorded in chat memory."""

    id: NonEmptyStr
    name: NonEmptyStr
    args: PlainObject
    status: Annotated[ToolCallStatus, _enum(ToolCallStatus)]
    result: StrictStr | None = None
    error: StrictStr | None = None

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "args": thaw_json(self.args),
            "status": self.status.value,
        }
        _put(out, "result", self.result)
        _put(out, "error", self.error)
        return out


class Message(_Projection):
    """One canonical chat message. Optional fields are ``None`` when absent on the wire."""

    id: NonEmptyStr
    role: Annotated[Role, _enum(Role)]
    content: StrictStr
    status: Annotated[MessageStatus, _enum(MessageStatus)]
    created_at_iso: CreatedAt = Field(alias="createdAt")
    tool_call_id: StrictStr | None = None
    parts: tuple[Part, ...] | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    metadata: PlainObject | None = None

    @property
    def created_at(self) -> datetime | None:
        """``createdAt`` as an aware UTC datetime; ``None`` only for year 0000 (ADR-0030)."""
        text = self.created_at_iso
        year = int(text[:4])
        if year < 1:
            return None
        return datetime(
            year,
            int(text[5:7]),
            int(text[8:10]),
            int(text[11:13]),
            int(text[14:16]),
            int(text[17:19]),
            int(text[20:23]) * 1000,
            tzinfo=UTC,
        )

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready projection; ``createdAt`` is the exact ISO text."""
        out: dict[str, Any] = {
            "id": self.id,
            "role": self.role.value,
            "content": self.content,
            "status": self.status.value,
            "createdAt": self.created_at_iso,
        }
        _put(out, "toolCallId", self.tool_call_id)
        if self.parts is not None:
            out["parts"] = [part.to_wire() for part in self.parts]
        if self.tool_calls is not None:
            out["toolCalls"] = [call.to_wire() for call in self.tool_calls]
        _put(out, "metadata", self.metadata)
        return out


class MemoryRecord(BaseModel, metaclass=_RecordMeta):
    """A validated version-1 memory record (the output of :func:`validate_memory_record`)."""

    model_config = ConfigDict(frozen=True)

    version: Literal[1] = 1
    messages: tuple[Message, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"version": 1, "messages": [m.to_wire() for m in self.messages]}


# --------------------------------------------------------------------------- entry point


def _invalid(reason: str) -> InvalidMemoryRecord:
    error = InvalidMemoryRecord()
    error.add_note(reason)
    return error


def _first_issue(prefix: str, exc: ValidationError) -> str:
    """``messages[3].toolCalls.0.status: not one of [...]`` from pydantic's first issue."""
    issue = exc.errors(include_url=False, include_input=False)[0]
    where = "".join(f".{part}" for part in issue["loc"])
    if issue["type"] == "union_tag_invalid":  # pydantic's text quotes the input's tag
        return f"{prefix}{where}.type: not one of {sorted(_PART_TYPES)}"
    return f"{prefix}{where}: {issue['msg'].removeprefix('Value error, ')}"


def validate_memory_record(raw: object) -> MemoryRecord:
    """Validate ``{"version": 1, "messages": [...]}`` exactly as upstream does.

    Raises :class:`~akchat_fsm.errors.InvalidMemoryRecord` (and nothing else) on any
    violation; ``error.__notes__`` names the rule.

    >>> record = validate_memory_record({"version": 1, "messages": [{"id": "m1",
    ...     "role": "user", "content": "hi", "status": "complete",
    ...     "createdAt": "2026-07-14T00:00:00.000Z", "future": 1}]})
    >>> record.messages[0].created_at.isoformat()
    '2026-07-14T00:00:00+00:00'
    >>> record.to_wire()["messages"][0]["createdAt"]
    '2026-07-14T00:00:00.000Z'
    """
    try:
        clone = clone_bounded_json(raw)
        if type(clone) is not dict:
            _reject("record is not an object")
        version = clone.get("version")
        if isinstance(version, bool) or not isinstance(version, int | float) or version != 1:
            _reject("version is not 1")
        messages = clone.get("messages")
        if type(messages) is not list:
            _reject("messages is not an array")
        out: list[Message] = []
        for index, message in enumerate(messages):
            try:
                out.append(Message.model_validate(message))
            except ValidationError as exc:
                raise _invalid(_first_issue(f"messages[{index}]", exc)) from exc
        return MemoryRecord(messages=tuple(out))
    except _Reject as exc:
        raise _invalid(str(exc)) from None
