"""The digest of a tool call's arguments: what a person was shown, as one short string.

A decision may carry the digest of the arguments the approver saw (ADR-0132); the claim is
refused when it differs from the stored call's. The digest must be the same in every language
that implements the envelope, so it is taken over a canonical text, not over whatever order a
writer happened to keep: the JSON Canonicalization Scheme (RFC 8785) as ``JSON.stringify``
writes each value —

* object members sorted by their keys' UTF-16 code units (not Python's code-point order: the
  two differ once a key holds a character above U+FFFF next to one in U+E000..U+FFFF);
* numbers as JavaScript prints them (``1`` for ``1.0``, ``1e+21``), strings with
  ``JSON.stringify``'s escapes, a lone surrogate as a lowercase ``\\udXXX`` escape;
* no whitespace; UTF-8 bytes; SHA-256; written ``sha256:`` and 64 lowercase hex digits.

Written here rather than taken from a package (measured with ``jcs`` 0.2.1 and
``canonicaljson`` 2.0.0): both raise on a lone surrogate, which a stored confirmation input
may hold (ADR-0080), and ``canonicaljson`` sorts by code point and prints ``1.0``; the envelope's
own JavaScript-exact encoder prints the sorted value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import LimitExceeded
from .bounded import BoundedJsonError, FrozenDict, freeze_bounded_object
from .js import escape_surrogates, js_form
from .session import encode_js_json

__all__ = [
    "DIGEST_PREFIX",
    "EditedArguments",
    "arguments_digest",
    "canonical_json",
    "edited_arguments",
]

#: The algorithm a digest names; a digest without it is not one of ours.
DIGEST_PREFIX = "sha256:"


def _utf16_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly as the code-unit sequences do.
    return key.encode("utf-16-be", "surrogatepass")


def _sorted(value: Any) -> Any:
    """``value`` as plain dicts and lists, members in RFC 8785 order, strings in their one
    JavaScript form; the envelope's own JavaScript-exact encoder then prints it."""
    if isinstance(value, str):
        return js_form(value)
    if isinstance(value, Mapping):
        if not all(isinstance(key, str) for key in value):
            raise TypeError("a JSON object's keys are strings")
        members = sorted(
            ((js_form(k), v) for k, v in value.items()), key=lambda m: _utf16_order(m[0])
        )
        return {k: _sorted(v) for k, v in members}
    if isinstance(value, list | tuple):
        return [_sorted(item) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """The RFC 8785 text of a JSON value (a binding's ``input``, frozen or plain).

    Raises ``TypeError`` for anything that is not a JSON value and ``ValueError`` for a
    number JSON cannot hold (NaN, an infinity). Depth is the caller's bound: a confirmation
    input is at most 20 deep.
    """
    return escape_surrogates(encode_js_json(_sorted(value)))


def arguments_digest(value: Any) -> str:
    """``sha256:`` and the hex SHA-256 of :func:`canonical_json` of ``value``'s UTF-8 bytes."""
    text = canonical_json(value)
    return DIGEST_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class EditedArguments:
    """A reviewer's new arguments for a call (ADR-0135): bounded JSON, frozen, and their
    :func:`arguments_digest` (the ``effectiveDigest`` the audit entry records)."""

    args: FrozenDict
    digest: str


def edited_arguments(args: object) -> EditedArguments:
    """``args`` as :class:`EditedArguments`, bounded like a proposed call's input (a JSON
    object of at most 1,000 nodes, depth 20, strings of 16,384 UTF-16 units, finite numbers);
    :class:`~akchat_fsm.LimitExceeded` otherwise, before anything is read or written."""
    try:
        frozen = freeze_bounded_object(args)
    except (BoundedJsonError, TypeError, ValueError, RecursionError) as exc:
        raise LimitExceeded(
            "Edited arguments are not a bounded JSON object.", limit="input"
        ) from exc
    return EditedArguments(frozen, arguments_digest(frozen))
