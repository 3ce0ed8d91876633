"""``decode_session_snapshot``: the reference decoder, step by step (docs/reference.md §1.3).

1. Text (``str``, or ``bytes`` that must be UTF-8) is parsed as ``JSON.parse`` would.
2. Version gate: a dict whose ``version`` is a number other than 0 and 1 is *unsupported*.
3. v1 attempt; 4. v0 attempt, migrated explicitly to v1; 5. otherwise *invalid*.

The decoder never raises: any exception on the way (``MemoryError`` included) is the
"payload is invalid" diagnostic, which never echoes the payload or validator details.

Fast path: for text input, pydantic-core parses and validates in one pass. It is only trusted
when it *accepts*, and only for text where its JSON parser agrees with ``JSON.parse`` (no
``NaN``/``Infinity`` tokens can be present); any failure re-runs the exact path, so the fast
path changes speed, never verdicts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import ValidationError

from ..errors import InvalidSessionSnapshot
from .jsontext import InvalidJsonText, parse_json_text
from .session import (
    BMP_ONLY,
    INVALID_SNAPSHOT,
    MAX_CONFIRMATIONS,
    MAX_DECISIONS,
    MAX_TERMINAL_TURNS,
    PROTOCOL,
    SessionSnapshot,
)

__all__ = [
    "INVALID_SNAPSHOT",
    "UNSUPPORTED_VERSION",
    "DecodeResult",
    "Diagnostic",
    "decode_session_snapshot",
    "parse_session_snapshot",
]

UNSUPPORTED_VERSION: Final = "SESSION_UNSUPPORTED_VERSION"

DiagnosticCode = Literal["SESSION_INVALID_SNAPSHOT", "SESSION_UNSUPPORTED_VERSION"]


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """Why a snapshot did not decode, exactly as the reference reports it."""

    code: DiagnosticCode
    message: str
    retryable: bool = False


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """``ok`` with a ``snapshot``, or not ``ok`` with a ``diagnostic``."""

    ok: bool
    snapshot: SessionSnapshot | None = None
    diagnostic: Diagnostic | None = None


NOT_JSON = Diagnostic(INVALID_SNAPSHOT, "Session snapshot is not valid JSON.")
UNSUPPORTED = Diagnostic(UNSUPPORTED_VERSION, "Session snapshot uses an unsupported version.")
INVALID = Diagnostic(INVALID_SNAPSHOT, "Session snapshot payload is invalid.")

_NOT_JSON = DecodeResult(False, diagnostic=NOT_JSON)
_UNSUPPORTED = DecodeResult(False, diagnostic=UNSUPPORTED)
_INVALID = DecodeResult(False, diagnostic=INVALID)

# An escaped surrogate (half of an astral character, or a lone one).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abAB]")


def decode_session_snapshot(raw: Any) -> DecodeResult:
    """Decode an untrusted session snapshot. Never raises.

    ``raw`` is JSON text (``str``, or ``bytes`` in UTF-8), an already-parsed JSON-shaped
    value (dicts, lists, strings, numbers, booleans, ``None``), or a :class:`SessionSnapshot`,
    which is re-validated from its wire text (it may have been built without validation).
    """
    try:
        return _decode(raw)
    except Exception:  # the reference maps every failure on the way to "invalid"
        return _INVALID


def parse_session_snapshot(raw: Any) -> SessionSnapshot:
    """Like :func:`decode_session_snapshot`, but raise :class:`InvalidSessionSnapshot`."""
    result = decode_session_snapshot(raw)
    if result.snapshot is not None:
        return result.snapshot
    diagnostic = result.diagnostic or INVALID
    raise InvalidSessionSnapshot(
        diagnostic.code, diagnostic.message, retryable=diagnostic.retryable
    )


def _decode(raw: Any) -> DecodeResult:
    if isinstance(raw, SessionSnapshot):
        # Re-validated from its wire text: an instance may have been built without validation
        # (`model_construct`, `model_copy(update=...)`), and storage may hand one back.
        raw = raw.to_json()
    if isinstance(raw, bytes | bytearray | memoryview):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            return _NOT_JSON
    if isinstance(raw, str):
        fast = _fast_path(raw)
        if fast is not None:
            return DecodeResult(True, snapshot=fast)
        try:
            raw = parse_json_text(raw)
        except InvalidJsonText:
            return _NOT_JSON
    return _decode_value(raw)


def _fast_path(text: str) -> SessionSnapshot | None:
    # One-character `in` tests are memchr-fast; longer needles scan ~30x slower, so each
    # substring search is gated by a character it needs.
    if ("N" in text and "NaN" in text) or "Infinity" in text:
        return None  # pydantic-core would read these tokens; JSON.parse rejects them
    # No astral character, literal or escaped: code-point lengths are UTF-16 lengths.
    escaped = "\\" in text and _SURROGATE_ESCAPE.search(text) is not None
    bmp_only = not escaped and (text.isascii() or _utf16_units(text) == len(text))
    try:
        snapshot = SessionSnapshot.model_validate_json(
            text, context={BMP_ONLY: bmp_only}, by_alias=True, by_name=False
        )
    except ValidationError:
        return None
    return snapshot if _wire_complete(snapshot) else None


def _utf16_units(text: str) -> int:
    try:
        return len(text.encode("utf-16-le")) // 2
    except UnicodeEncodeError:  # a lone surrogate: not "BMP only" for our purpose
        return -1


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _decode_value(value: Any) -> DecodeResult:
    if not isinstance(value, dict):
        return _INVALID  # null, arrays, numbers, strings: never an envelope
    version = value.get("version")
    if _is_number(version) and version != 0 and version != 1:  # NaN != 0 and -0.0 == 0
        return _UNSUPPORTED
    if not _arrays_fit(value):
        return _INVALID  # before any item is validated: the same verdict, in O(1)
    snapshot = _validate(value)
    if snapshot is None and _is_number(version) and version == 0:
        # v0: the v1 field set with `version` 0 and any `protocol` ignored; migrate, re-validate.
        snapshot = _validate({**value, "protocol": PROTOCOL, "version": 1})
    if snapshot is None:
        return _INVALID
    return DecodeResult(True, snapshot=snapshot)


def _validate(candidate: dict[str, Any]) -> SessionSnapshot | None:
    try:
        snapshot = SessionSnapshot.model_validate(candidate, by_alias=True, by_name=False)
    except ValidationError:
        return None
    return snapshot if _wire_complete(snapshot) else None


def _wire_complete(snapshot: SessionSnapshot) -> bool:
    # The Python constructor defaults `protocol`/`version`; the wire requires both keys.
    fields = snapshot.model_fields_set
    return "protocol" in fields and "version" in fields


def _arrays_fit(value: dict[str, Any]) -> bool:
    # pydantic turns sets, deques and generators into tuples; a JSON-shaped value has lists
    # (tuples are accepted too: they are this library's own frozen form of an array). The
    # length limits are checked here, so a hostile array costs its parse and nothing more
    # (v0 has the same limits, so one check serves both attempts).
    arrays = [
        (value.get("terminalTurns", ()), MAX_TERMINAL_TURNS),
        (value.get("confirmations", ()), MAX_CONFIRMATIONS),
    ]
    conversation = value.get("conversation")
    if isinstance(conversation, Mapping):
        arrays.append((conversation.get("decisions", ()), MAX_DECISIONS))
    return all(isinstance(item, list | tuple) and len(item) <= cap for item, cap in arrays)
