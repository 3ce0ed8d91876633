"""Pydantic field types that apply the JavaScript-exact rules of :mod:`akchat_fsm.wire.js`.

Private to the wire package: the models use them; hosts use the models, or the plain
functions of :mod:`akchat_fsm.wire.js`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, PlainValidator

from .js import as_safe_int

__all__ = ["NonNegativeInt", "StrictStr"]


def _strict_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _safe_int(value: Any) -> int:
    out = as_safe_int(value)
    if out is None:
        raise ValueError("not a safe integer")
    return out


def _at_least(minimum: int) -> Any:
    def check(value: int) -> int:
        if value < minimum:
            raise ValueError(f"below {minimum}")
        return value

    return AfterValidator(check)


#: A ``str`` and nothing else (no coercion from numbers or bytes).
StrictStr = Annotated[str, PlainValidator(_strict_str)]
#: A JS safe integer ``>= 0`` (``1.0`` accepted, ``True`` rejected).
NonNegativeInt = Annotated[int, PlainValidator(_safe_int), _at_least(0)]
