"""The session envelope ``agentskit.chat.session`` v1 as frozen pydantic models.

Attributes are snake_case; wire keys are the reference's camelCase (docs/reference.md §1.1). Every
constructor validates exactly as the reference decoder does, and every model is deeply
immutable: sequences are tuples and a confirmation ``input`` is a :class:`FrozenDict`.

Speed: almost every rule runs inside pydantic-core (ASCII patterns, code-point lengths, strict
types). Lengths are UTF-16 in the reference; a code-point count equals it unless the string holds
astral characters, so one Python pass per snapshot re-checks UTF-16 lengths only when the caller
cannot vouch that the text has none (the decoder vouches via the validation context).
"""

from __future__ import annotations

import json
import weakref
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from ..errors import InvalidSessionSnapshot
from ._pydantic_compat import ModelMetaclass
from .bounded import FrozenDict, freeze_bounded_object, thaw
from .bounded import prints_like_javascript as _prints_like_javascript
from .enums import ConfirmationStatus, DecisionKind, TurnOutcome
from .js import (
    DATETIME_PATTERN,
    IDENTIFIER_PATTERN,
    MAX_SAFE_INTEGER,
    as_safe_int,
    escape_surrogates,
    has_surrogate,
    js_form,
    js_number_to_string,
    utf16_len,
)

__all__ = [
    "MAX_CONFIRMATIONS",
    "MAX_DECISIONS",
    "MAX_TERMINAL_TURNS",
    "PROTOCOL",
    "VERSION",
    "ActiveTurn",
    "ConfirmationBinding",
    "Conversation",
    "RouteDecision",
    "SessionSnapshot",
    "TerminalTurn",
]

PROTOCOL: Final = "agentskit.chat.session"
VERSION = 1
MAX_TERMINAL_TURNS = 64
MAX_CONFIRMATIONS = 1_000
MAX_DECISIONS = 1_000

INVALID_SNAPSHOT: Final = "SESSION_INVALID_SNAPSHOT"
PAYLOAD_INVALID: Final = "Session snapshot payload is invalid."

#: Validation-context key: the caller guarantees no string holds an astral character, so
#: code-point lengths (checked by pydantic-core) already are UTF-16 lengths.
BMP_ONLY = "akchat_bmp_only"


# --------------------------------------------------------------------------- field types
def _float_to_safe_int(value: float) -> int:
    out = as_safe_int(value)
    if out is None:
        raise PydanticCustomError("safe_int", "not a safe integer")
    return out


class _SafeInt:
    """A JS safe integer in ``[minimum, maximum]``: a strict int, or a whole float (``1E2``)."""

    def __init__(self, minimum: int, maximum: int = MAX_SAFE_INTEGER) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        whole = core_schema.int_schema(strict=True, ge=self.minimum, le=self.maximum)
        fractional_form = core_schema.no_info_after_validator_function(
            _float_to_safe_int,
            core_schema.float_schema(
                strict=True, ge=self.minimum, le=self.maximum, allow_inf_nan=False
            ),
        )
        return core_schema.union_schema([whole, fractional_form])

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        if self.minimum == self.maximum:
            return {"const": self.minimum}
        return {"type": "integer", "minimum": self.minimum, "maximum": self.maximum}


class _Omittable:
    """``X | None`` in Python, but on the wire the key is omitted when absent: ``null`` fails."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        (present,) = [arg for arg in get_args(source) if arg is not type(None)]
        return handler.generate_schema(present)


def _freeze_input(value: Any) -> FrozenDict:
    # Looked up at call time, so a test can count how many inputs a decode validates.
    return freeze_bounded_object(value)


class _BoundedObject:
    """Confirmation ``input``: a bounded JSON object, frozen (see :mod:`.bounded`)."""

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            _freeze_input,
            serialization=core_schema.plain_serializer_function_ser_schema(thaw),
        )

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {
            "type": "object",
            "description": "Bounded JSON object: <= 1000 nodes incl. root, depth <= 20, "
            "strings <= 16384 UTF-16 units, arrays <= 1000 items, <= 1000 keys of <= 256 "
            "UTF-16 units per object, finite numbers.",
        }


class _Capped:
    """``tuple[X, ...]`` of at most ``max_items`` items, refused *before* the items are checked.

    pydantic-core validates every item of a tuple, collecting an error for each, and only then
    compares the length: 10^6 empty objects under ``confirmations`` cost seconds and gigabytes
    before the limit bites. A list validator stops at item ``max_items + 1``, so validation runs
    as a list and the result is re-read as a tuple (the same validated instances, passed through:
    cheap), which also keeps tuple serialization and the JSON Schema's ``maxItems``.
    """

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        item = handler.generate_schema(get_args(source)[0])
        return core_schema.chain_schema(
            [
                core_schema.list_schema(item, max_length=self.max_items),
                core_schema.tuple_schema([item], variadic_item_index=0),
            ]
        )


class _JsText:
    """A free-form string: pydantic-core's strict ``str``, plus JavaScript's lone surrogates.

    pydantic-core cannot hold a ``str`` with a surrogate code point (``string_unicode``), and
    its JSON parser refuses a lone ``\\udXXX`` escape, so such text always takes the exact path
    (Python values), where this falls back to a Python check. The fast path keeps the plain
    Rust ``str`` schema. Lengths here are code points; UTF-16 units are re-checked per snapshot
    (see the module docstring), and exactly in the fallback.
    """

    def __init__(self, min_len: int, max_len: int) -> None:
        self.min_len = min_len
        self.max_len = max_len

    def _with_surrogates(self, value: Any) -> str:
        if not isinstance(value, str) or not has_surrogate(value):
            raise PydanticCustomError("session_rule", "not a string")
        text = js_form(str.__str__(value))
        if not self.min_len <= utf16_len(text) <= self.max_len:
            raise PydanticCustomError("session_rule", "string length out of bounds")
        return text

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        plain = core_schema.str_schema(
            strict=True, min_length=self.min_len, max_length=self.max_len
        )
        fallback = core_schema.no_info_plain_validator_function(self._with_surrogates)
        return core_schema.json_or_python_schema(
            json_schema=plain,
            python_schema=core_schema.union_schema([plain, fallback], mode="left_to_right"),
            serialization=core_schema.to_string_ser_schema(),
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "minLength": self.min_len, "maxLength": self.max_len}


def _text(min_len: int, max_len: int) -> Any:
    return Annotated[str, _JsText(min_len, max_len)]


Identifier = Annotated[str, Field(strict=True, pattern=IDENTIFIER_PATTERN)]
SafeNonNegativeInt = Annotated[int, _SafeInt(0)]
SafePositiveInt = Annotated[int, _SafeInt(1)]
StateName = _text(1, 128)
DecisionInput = _text(0, 16_384)
DecisionContent = _text(0, 65_536)
DateTimeText = Annotated[str, Field(strict=True, pattern=DATETIME_PATTERN)]


def _over(text: str, max_len: int, min_len: int = 0) -> bool:
    if text.isascii():
        return False  # pydantic-core already checked the code-point length
    return not min_len <= utf16_len(text) <= max_len


def _needs_utf16_check(info: ValidationInfo) -> bool:
    context = info.context
    return not (isinstance(context, dict) and context.get(BMP_ONLY))


def _invalid(what: str) -> PydanticCustomError:
    return PydanticCustomError("session_rule", "{what}", {"what": what})


# --------------------------------------------------------------------------- models
class _WireMeta(ModelMetaclass):
    """Translates constructor errors into our typed error.

    A metaclass ``__call__`` runs for ``Model(...)`` only, never for the instances pydantic-core
    builds while validating nested data, so the decoder keeps its all-Rust speed (overriding
    ``__init__`` would route every nested model through Python).
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        try:
            instance = super().__call__(*args, **kwargs)
        except InvalidSessionSnapshot:
            raise
        except Exception as exc:
            # ValidationError mostly; also whatever a hostile argument's own methods raise
            # while pydantic reads it (a str subclass whose __hash__ fails, ...).
            raise InvalidSessionSnapshot(INVALID_SNAPSHOT, PAYLOAD_INVALID) from exc
        check = getattr(instance, "_check_standalone", None)
        if check is not None and not check():
            raise InvalidSessionSnapshot(INVALID_SNAPSHOT, PAYLOAD_INVALID)
        return instance


class _Wire(BaseModel, metaclass=_WireMeta):
    model_config = ConfigDict(
        frozen=True,
        extra="ignore",
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=True,
        serialize_by_alias=True,
        hide_input_in_errors=True,
    )


class ConfirmationBinding(_Wire):
    """One persisted confirmation (docs/reference.md §1.1). No ``sessionId``: it is the
    envelope's."""

    token: Identifier
    action: Identifier
    input: Annotated[FrozenDict, _BoundedObject]
    tool_call_id: Identifier
    expires_at: SafeNonNegativeInt
    status: ConfirmationStatus


class RouteDecision(_Wire):
    """A cached deterministic route decision, replayed in order on resume.

    Its UTF-16 length bounds are enforced by the constructor and by the enclosing
    :class:`Conversation` (one pass over all decisions, not a Python call per decision).
    """

    message_id: Identifier
    input: DecisionInput  # type: ignore[valid-type]
    route_id: Identifier
    kind: DecisionKind
    content: DecisionContent  # type: ignore[valid-type]
    from_state: StateName  # type: ignore[valid-type]
    to_state: StateName  # type: ignore[valid-type]

    def _check_standalone(self) -> bool:
        return self.fits_utf16()

    def fits_utf16(self) -> bool:
        """Whether every bounded string fits its limit counted in UTF-16 code units."""
        return not (
            _over(self.input, 16_384)
            or _over(self.content, 65_536)
            or _over(self.from_state, 128, 1)
            or _over(self.to_state, 128, 1)
        )


class Conversation(_Wire):
    """The host statechart position and the decisions that led there."""

    state: StateName  # type: ignore[valid-type]
    decisions: Annotated[tuple[RouteDecision, ...], _Capped(MAX_DECISIONS)]

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> Conversation:
        if _needs_utf16_check(info) and (
            _over(self.state, 128, 1) or not all(d.fits_utf16() for d in self.decisions)
        ):
            raise _invalid("string longer than allowed (UTF-16 units)")
        if len({decision.message_id for decision in self.decisions}) != len(self.decisions):
            raise _invalid("duplicate decision messageId")
        return self


class ActiveTurn(_Wire):
    """The server turn lease; ``expires_at`` is epoch milliseconds."""

    turn_id: Identifier
    expires_at: SafeNonNegativeInt


class TerminalTurn(_Wire):
    """A finished turn, kept so a replayed turn id is refused."""

    turn_id: Identifier
    outcome: TurnOutcome


class SessionSnapshot(_Wire):
    """The v1 envelope. ``to_wire()`` equals the reference decoder's output for the same input.

    ``terminal_turns`` is emitted by ``to_wire()`` when non-empty, or when it was given
    explicitly (as the reference decoder keeps an explicit ``[]``); a snapshot built without
    it omits the key, as the reference writer does.
    """

    protocol: Literal["agentskit.chat.session"] = PROTOCOL
    version: Annotated[int, _SafeInt(1, 1)] = VERSION
    session_id: Identifier
    definition_id: Identifier
    definition_revision: SafePositiveInt
    updated_at: DateTimeText
    cursor: SafeNonNegativeInt
    active_turn: Annotated[ActiveTurn | None, _Omittable()] = None
    terminal_turns: Annotated[tuple[TerminalTurn, ...], _Capped(MAX_TERMINAL_TURNS)] = ()
    conversation: Annotated[Conversation | None, _Omittable()] = None
    confirmations: Annotated[tuple[ConfirmationBinding, ...], _Capped(MAX_CONFIRMATIONS)]

    @model_validator(mode="after")
    def _check_unique(self) -> SessionSnapshot:
        bindings = self.confirmations
        if len({b.token for b in bindings}) != len(bindings):
            raise _invalid("duplicate confirmation token")
        if len({b.tool_call_id for b in bindings}) != len(bindings):
            raise _invalid("duplicate confirmation toolCallId")
        turns = self.terminal_turns
        if len({t.turn_id for t in turns}) != len(turns):
            raise _invalid("duplicate terminal turnId")
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready wire object; optional keys are omitted when absent."""
        out = self._head()
        # Bindings by hand: pydantic-core cannot serialize an object key holding a lone
        # surrogate, which a confirmation input may have (ADR-0080).
        out["confirmations"] = [_binding_wire(binding) for binding in self.confirmations]
        return out

    def _head(self) -> dict[str, Any]:
        """Every wire key but ``confirmations`` (the last one), in the reference order."""
        # `warnings=False`: a validated instance never warns; one built without validation
        # (re-validated from this text by the decoder) would only add noise before its refusal.
        head: dict[str, Any] = self.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude={"confirmations"}, warnings=False
        )
        if not self.terminal_turns and "terminal_turns" not in self.model_fields_set:
            head.pop("terminalTurns", None)
        return head

    def to_json(self) -> str:
        """Compact JSON text, byte-equal to ``JSON.stringify`` of the reference's object.

        Keys keep the reference schema order (the order of :meth:`to_wire`); numbers inside
        confirmation inputs are written the way JavaScript prints them.
        """
        # Every number outside confirmation inputs is a safe integer, which Python and
        # JavaScript print alike, and the string escaping is the same, so the C encoder is exact
        # for everything but the inputs. Each binding's text is assembled from its frozen input's
        # text, computed once per input: a save re-encodes every binding of the envelope.
        text = json.dumps(self._head(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        # Each binding's text is computed once per binding instance (ADR-0116): a command
        # replaces one binding and carries the others over, so a save joins cached pieces.
        texts = _BINDING_TEXTS
        parts: list[str] = []
        for binding in self.confirmations:
            # `binding_text`, inlined: a hit is the common case and a call per binding is
            # most of what joining costs.
            entry = texts.get(id(binding))
            parts.append(
                entry[1] if entry is not None and entry[0]() is binding else binding_text(binding)
            )
        bindings = ",".join(parts)
        # `confirmations` is the last wire key (pinned against the JS-exact encoder by tests).
        # Lone surrogates become `\\uXXXX` escapes, as JSON.stringify writes them (ADR-0080).
        return escape_surrogates(f'{text[:-1]},"confirmations":[{bindings}]}}')

    @classmethod
    def from_wire(cls, obj: Any) -> SessionSnapshot:
        """Decode a JSON-shaped value; raise ``InvalidSessionSnapshot`` on failure."""
        from .decode import parse_session_snapshot

        return parse_session_snapshot(obj)

    @classmethod
    def from_json(cls, text: str | bytes) -> SessionSnapshot:
        """Decode JSON text; raise ``InvalidSessionSnapshot`` on failure."""
        from .decode import parse_session_snapshot

        return parse_session_snapshot(text)


def _input_json(value: Any) -> str:
    if _prints_like_javascript(value):
        return json.dumps(thaw(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _encode(thaw(value))


def _binding_wire(binding: ConfirmationBinding) -> dict[str, Any]:
    return {
        "token": binding.token,
        "action": binding.action,
        "input": thaw(binding.input),
        "toolCallId": binding.tool_call_id,
        "expiresAt": binding.expires_at,
        "status": binding.status.value,
    }


def _binding_json(binding: ConfirmationBinding) -> str:
    value = binding.input
    text = value.json_text(_input_json) if isinstance(value, FrozenDict) else _input_json(value)
    return (
        f'{{"token":{_encode_str(binding.token)},"action":{_encode_str(binding.action)},'
        f'"input":{text},"toolCallId":{_encode_str(binding.tool_call_id)},'
        f'"expiresAt":{binding.expires_at},"status":"{binding.status.value}"}}'
    )


_encode_str = json.encoder.encode_basestring

#: ``id(binding) -> (weak reference to it, its canonical text)`` (ADR-0116). Keyed by identity,
#: not by value: a frozen binding's text never changes, and a copy (``model_copy`` with or
#: without ``update``, ``copy``, ``deepcopy``, unpickling) is another object, so it can never
#: inherit a stale text. The weak reference both proves the entry is this object (an id is
#: reused only after its object died) and removes the entry when the binding goes away.
_BINDING_TEXTS: dict[int, tuple[weakref.ref[ConfirmationBinding], str]] = {}


def _forget(key: int, ref: weakref.ref[ConfirmationBinding]) -> None:
    entry = _BINDING_TEXTS.get(key)
    if entry is not None and entry[0] is ref:
        del _BINDING_TEXTS[key]


def binding_text(binding: ConfirmationBinding) -> str:
    """The canonical JSON text of ``binding`` (before surrogate escaping), cached per instance."""
    key = id(binding)
    entry = _BINDING_TEXTS.get(key)
    if entry is not None and entry[0]() is binding:
        return entry[1]
    text = _binding_json(binding)
    _BINDING_TEXTS[key] = (weakref.ref(binding, lambda ref: _forget(key, ref)), text)
    return text


def encode_js_json(value: Any) -> str:
    """``JSON.stringify`` of a plain JSON value (members in the order given), before
    surrogate escaping; the arguments digest prints its sorted value with it."""
    return _encode(value)


def _encode(value: Any) -> str:
    # `json.dumps` cannot print floats the JavaScript way, so this tiny encoder does. Depth is
    # bounded by the model (confirmation inputs are at most 20 deep).
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return str(_encode_str(value))
    if isinstance(value, int | float):
        return js_number_to_string(value)
    if isinstance(value, dict):
        return "{" + ",".join(_encode_str(k) + ":" + _encode(v) for k, v in value.items()) + "}"
    return "[" + ",".join(_encode(item) for item in value) + "]"
