"""Bounded JSON values (docs/reference.md §0) and their deeply immutable representation.

A confirmation ``input`` must be a JSON object within these bounds:

- at most 1,000 nodes, the root included; depth at most 20 (root at depth 0);
- strings of at most 16,384 UTF-16 code units; arrays of at most 1,000 items;
- objects of at most 1,000 keys, each key at most 256 UTF-16 code units;
- finite numbers only; no container appearing twice (shared references fail, not only cycles);
- nothing but ``None``, ``bool``, ``int``, ``float``, ``str``, lists and string-keyed dicts.

A string or key may hold lone surrogates, as a JavaScript string may (one UTF-16 unit each);
the stored JSON text carries them as ``\\uXXXX`` escapes (ADR-0080).

Accepted values are *frozen* in the same walk: objects become :class:`FrozenDict`, arrays become
``tuple``. Numbers are normalised to what JavaScript holds: an integral value within the safe
range is an ``int`` (``1.0`` → ``1``, ``-0.0`` → ``0``), anything else a ``float`` (an integer
literal beyond 2**53 becomes the nearest double, one beyond the double range is infinite and so
rejected). Object key order follows JavaScript's own-key order: array-index keys (``"0"``,
``"17"``) first in ascending order, then the others in insertion order.

``__proto__``: the reference's record parser drops a key literally named ``__proto__`` at the
top level of ``input`` before the size checks; deeper in the value it is an ordinary key. This
port does the same (see docs/wire-format.md). Shared references can only arise in values a
caller built in Python; they are detected by object identity.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .js import MAX_SAFE_INTEGER, js_form, utf16_len

__all__ = [
    "MAX_ARRAY_ITEMS",
    "MAX_DEPTH",
    "MAX_KEYS",
    "MAX_KEY_LENGTH",
    "MAX_NODES",
    "MAX_STRING_LENGTH",
    "BoundedJsonError",
    "FrozenDict",
    "freeze_bounded_object",
    "is_bounded_json_value",
    "prints_like_javascript",
    "thaw",
]

MAX_NODES = 1_000
MAX_DEPTH = 20
MAX_STRING_LENGTH = 16_384
MAX_ARRAY_ITEMS = 1_000
MAX_KEYS = 1_000
MAX_KEY_LENGTH = 256
_MAX_INDEX = 2**32 - 2  # the largest JS array index


class BoundedJsonError(ValueError):
    """Internal: the value breaks a bounded-JSON rule (becomes a validation error)."""


class FrozenDict(Mapping[str, Any]):
    """An immutable, hashable JSON object. Compares equal to a ``dict`` with the same items."""

    __slots__ = ("_data", "_hash", "_json")

    def __init__(self, data: Mapping[str, Any] = ()) -> None:  # type: ignore[assignment]
        self._data: dict[str, Any] = dict(data)
        self._hash: int | None = None
        self._json: str | None = None

    @classmethod
    def _wrap(cls, data: dict[str, Any]) -> FrozenDict:
        # Takes ownership of a fresh dict without copying it (internal use only).
        out = cls.__new__(cls)
        out._data = data
        out._hash = None
        out._json = None
        return out

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def json_text(self, encode: Callable[[Any], str]) -> str:
        """``encode(self)``, computed once: the value is frozen, and every save re-encodes it."""
        if self._json is None:
            self._json = encode(self)
        return self._json


def _is_index_key(key: str) -> bool:
    # Canonical array index: "0" or a digit string without a leading zero, below 2**32 - 1.
    return (
        key.isdigit()
        and key.isascii()
        and (key == "0" or key[0] != "0")
        and (len(key) <= 10 and int(key) <= _MAX_INDEX)
    )


def _js_key_order(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    index_items = [item for item in items if _is_index_key(item[0])]
    if not index_items:
        return items
    index_items.sort(key=lambda item: int(item[0]))
    return index_items + [item for item in items if not _is_index_key(item[0])]


def _number(value: int | float) -> int | float:
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return value
        try:
            value = float(value)
        except OverflowError:
            raise BoundedJsonError("number overflows a double") from None
    if not math.isfinite(value):
        raise BoundedJsonError("number is not finite")
    if value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return int(value)
    return value


def _js_text(text: str, limit: int) -> str:
    """A non-ASCII string or key checked against ``limit`` UTF-16 units, in its JS form.

    Lone surrogates are legal JavaScript (the reference accepts them, and ``to_json`` writes
    them as ``\\uXXXX`` escapes, as ``JSON.stringify`` does); a surrogate *pair* a Python
    caller built is joined into its astral character, the same JavaScript string.
    """
    try:
        units = len(text.encode("utf-16-le")) // 2
    except UnicodeEncodeError:  # surrogate code points: the uncommon path
        text = js_form(text)
        units = utf16_len(text)
    if units > limit:
        raise BoundedJsonError("string or key too long")
    return text


def _walk(value: Any, *, root_object: bool) -> Any:
    """Check and freeze ``value`` in one depth-first pass (a closure: this is the hot path)."""
    nodes = 0
    seen: set[int] = set()  # ids of the containers visited: a repeat is a shared reference
    wrap = FrozenDict._wrap

    def visit(item: Any, depth: int, root: bool) -> Any:
        # The decoder's hottest Python code: checks are ordered by how common each type is.
        nonlocal nodes
        nodes += 1
        if nodes > MAX_NODES or depth > MAX_DEPTH:
            raise BoundedJsonError("too many nodes or too deep")
        kind = type(item)
        if kind is str:
            if len(item) > MAX_STRING_LENGTH:
                raise BoundedJsonError("string too long")
            return item if item.isascii() else _js_text(item, MAX_STRING_LENGTH)
        if kind is int:
            return item if -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER else _number(item)
        if item is None or kind is bool:
            return item
        if kind is dict or kind is FrozenDict:
            if id(item) in seen:
                raise BoundedJsonError("shared reference")
            seen.add(id(item))
            out: dict[str, Any] = {}
            index_keys = False
            for key, child in item.items():
                if type(key) is not str:
                    raise BoundedJsonError("object key is not a string")
                if root and key == "__proto__":
                    continue  # dropped before any check, as the reference's record parser does
                if len(key) > MAX_KEY_LENGTH:
                    raise BoundedJsonError("key too long")
                if not key.isascii():
                    key = _js_text(key, MAX_KEY_LENGTH)
                if key[:1].isdigit():
                    index_keys = True
                out[key] = visit(child, depth + 1, False)
            if len(out) > MAX_KEYS:
                raise BoundedJsonError("too many keys")
            if index_keys:
                out = dict(_js_key_order(list(out.items())))
            return wrap(out)
        if kind is list or kind is tuple:
            if kind is list:  # tuples are this library's immutable arrays, not JS objects
                if id(item) in seen:
                    raise BoundedJsonError("shared reference")
                seen.add(id(item))
            if len(item) > MAX_ARRAY_ITEMS:
                raise BoundedJsonError("array too long")
            return tuple([visit(child, depth + 1, False) for child in item])
        if kind is float:
            return _number(item)
        raise BoundedJsonError(f"{kind.__name__} is not a JSON value")

    return visit(value, 0, root_object)


def _plain_scalar(item: Any, kind: type) -> bool:
    # A value the walk would return unchanged: short ASCII text, a safe integer, null, a bool.
    if kind is str:
        return len(item) <= MAX_STRING_LENGTH and bool(item.isascii())
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER)
    return item is None or kind is bool


def _freeze_shallow(value: dict[str, Any]) -> FrozenDict | None:
    """The common confirmation input, frozen without the recursive walk, or ``None``.

    Covers an object of plain keys (ASCII, not index-like, not ``__proto__``) whose values are
    plain scalars or arrays of them: what :func:`_walk` returns for it, in one flat loop (the
    decoder freezes every input of every envelope it reads, ADR-0111). Anything else, and any
    bound that might be reached, returns ``None`` and takes the full walk, which decides (and
    words) every refusal.
    """
    nodes = 1 + len(value)
    if len(value) > MAX_KEYS or nodes > MAX_NODES:
        return None
    out: dict[str, Any] = {}
    arrays: list[int] = []
    for key, child in value.items():
        if (
            type(key) is not str
            or len(key) > MAX_KEY_LENGTH
            or not key.isascii()
            or key[:1].isdigit()
            or key == "__proto__"
        ):
            return None
        kind = type(child)
        if kind is list:
            nodes += len(child)
            if nodes > MAX_NODES or len(child) > MAX_ARRAY_ITEMS:
                return None
            for item in child:
                if not _plain_scalar(item, type(item)):
                    return None
            arrays.append(id(child))
            out[key] = tuple(child)
        elif _plain_scalar(child, kind):
            out[key] = child
        else:
            return None
    if len(arrays) > 1 and len(set(arrays)) != len(arrays):
        return None  # one list under two keys: the walk refuses the shared reference
    return FrozenDict._wrap(out)


def freeze_bounded_object(value: Any) -> FrozenDict:
    """Validate a confirmation ``input`` and return its frozen form.

    Raises :class:`BoundedJsonError` (a ``ValueError``) when ``value`` is not a JSON object or
    breaks a bound. Never raises ``RecursionError``: depth is checked before descending.
    """
    if type(value) is not dict and type(value) is not FrozenDict:
        raise BoundedJsonError("not a JSON object")
    flat = _freeze_shallow(value) if type(value) is dict else None
    if flat is not None:
        return flat
    result = _walk(value, root_object=True)
    assert isinstance(result, FrozenDict)
    return result


def is_bounded_json_value(value: Any) -> bool:
    """Whether ``value`` (any JSON value, not only an object) satisfies docs/reference.md §0."""
    try:
        _walk(value, root_object=False)
    except BoundedJsonError:
        return False
    return True


def prints_like_javascript(value: Any) -> bool:
    """True when ``json.dumps`` prints every number in ``value`` exactly as JavaScript does.

    Python's ``repr`` and JavaScript print the same shortest round-trip digits; they lay them out
    alike for safe integers and for non-integral floats with ``1e-4 <= |x| < 1e16`` (Python
    switches to exponent notation outside that range, JavaScript outside ``[1e-6, 1e21)``, and
    Python writes ``1.0`` where JavaScript writes ``1``). Anything else takes the slow encoder.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) or item is None or isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                return False
        elif isinstance(item, float):
            if item.is_integer() or not 1e-4 <= abs(item) < 1e16:
                return False
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        else:
            stack.extend(item)
    return True


def thaw(value: Any) -> Any:
    """The plain ``dict`` / ``list`` form of a frozen value (for ``json`` and ``to_wire``)."""
    kind = type(value)
    if kind is FrozenDict:
        return {key: thaw(item) for key, item in value.items()}
    if kind is tuple:
        return [thaw(item) for item in value]
    return value
