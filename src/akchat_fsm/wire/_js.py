"""JavaScript-exact primitives shared by every wire model.

The reference validates with zod on JavaScript values, so a Python port must count string
lengths in UTF-16 code units, match identifiers with ASCII-only, whole-string patterns, and
treat numbers as IEEE doubles: ``1.0`` is an integer, anything beyond 2**53 - 1 is not a safe
integer, and a boolean is never a number (REFERENCE §8).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, PlainValidator

MAX_SAFE_INTEGER = 2**53 - 1

# ASCII-only, whole-string: `$` in Python would accept a trailing newline, fullmatch does not.
_IDENTIFIER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII)


def utf16_len(text: str) -> int:
    """Length as JavaScript's ``String.prototype.length`` counts it."""
    # Astral characters take two code units; lone surrogates (legal in JS strings) take one.
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def is_identifier(value: object) -> bool:
    """The reference's SafeIdentifier: ``^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$``."""
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def as_safe_int(value: object) -> int | None:
    """The integer a JS number denotes if it is a safe integer, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else None
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
            return int(value)
    return None


def _identifier(value: Any) -> str:
    if not is_identifier(value):
        raise ValueError("not a SafeIdentifier")
    return str(value)


def _strict_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _safe_int(value: Any) -> int:
    out = as_safe_int(value)
    if out is None:
        raise ValueError("not a safe integer")
    return out


def bounded_str(min_len: int, max_len: int) -> Any:
    """A string type whose UTF-16 length lies in ``[min_len, max_len]``."""

    def check(value: str) -> str:
        n = utf16_len(value)
        if not min_len <= n <= max_len:
            raise ValueError(f"length {n} outside [{min_len}, {max_len}]")
        return value

    return Annotated[str, PlainValidator(_strict_str), AfterValidator(check)]


def safe_int(minimum: int) -> Any:
    """A JS safe integer ``>= minimum`` (``1.0`` accepted, ``True`` rejected)."""

    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"below {minimum}")
        return value

    return Annotated[int, PlainValidator(_safe_int), AfterValidator(check)]


Identifier = Annotated[str, PlainValidator(_identifier)]
StrictStr = Annotated[str, PlainValidator(_strict_str)]
NonNegativeInt = safe_int(0)
PositiveInt = safe_int(1)

__all__ = [
    "MAX_SAFE_INTEGER",
    "Identifier",
    "NonNegativeInt",
    "PositiveInt",
    "StrictStr",
    "as_safe_int",
    "bounded_str",
    "is_identifier",
    "safe_int",
    "utf16_len",
]
