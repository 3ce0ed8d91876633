"""JSON text parsed the way JavaScript's ``JSON.parse`` accepts it.

Differences from a plain ``json.loads`` that matter for an exact port (docs/reference.md §8):

- ``NaN``, ``Infinity`` and ``-Infinity`` tokens are syntax errors (Python accepts them).
- Nesting depth is unbounded: the C scanner raises ``RecursionError`` beyond ~1,000 levels, so
  deep texts are re-parsed by an iterative parser with the same grammar.
- Numbers follow JavaScript: integer literals of more than 15 digits become the nearest double
  (``int`` when that double is a safe integer, ``float`` otherwise, ``inf`` on overflow), so a
  10,000-digit literal neither trips Python's int-digit limit nor changes the verdict.
- Lone surrogate escapes (``"\\ud800"``) are legal and give a one-code-unit ``str``.
"""

from __future__ import annotations

import json
import re
from json.decoder import scanstring  # type: ignore[attr-defined]
from typing import Any

from ..errors import InvalidInput
from .js import MAX_SAFE_INTEGER

__all__ = ["InvalidJsonText", "parse_json_text"]


class InvalidJsonText(InvalidInput):
    """The text is not JSON as ``JSON.parse`` defines it."""


def _reject_constant(token: str) -> Any:
    raise InvalidJsonText(f"{token} is not a JSON token")


def _js_int(literal: str) -> int | float:
    # 15 digits (plus sign) are always exact doubles; longer literals round like JS does.
    if len(literal) <= 16:
        return int(literal)
    number = float(literal)
    if number.is_integer() and abs(number) <= MAX_SAFE_INTEGER:
        return int(number)
    return number


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_js_int)


def parse_json_text(text: str) -> Any:
    """Parse ``text`` like ``JSON.parse``; raise :class:`InvalidJsonText` if it is not JSON."""
    try:
        return _DECODER.decode(text)
    except RecursionError:
        return _parse_iteratively(text)
    except InvalidJsonText:
        raise
    except (ValueError, TypeError) as exc:
        raise InvalidJsonText(str(exc)) from exc


# --------------------------------------------------------------------------- deep fallback
# Same grammar as the C scanner (RFC 8259), with an explicit stack instead of recursion.
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_LITERALS = {"null": None, "true": True, "false": False}


def _parse_iteratively(text: str) -> Any:
    try:
        return _Parser(text).run()
    except InvalidJsonText:
        raise
    except (ValueError, IndexError) as exc:
        raise InvalidJsonText(str(exc)) from exc


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        match = _WS.match(self.text, self.pos)
        assert match is not None  # the pattern matches the empty string
        self.pos = match.end()

    def _peek(self) -> str:
        self._skip()
        if self.pos >= len(self.text):
            raise InvalidJsonText("unexpected end of text")
        return self.text[self.pos]

    def _scalar(self) -> Any:
        ch = self.text[self.pos]
        if ch == '"':
            value, self.pos = scanstring(self.text, self.pos + 1, True)
            return value
        for word, value in _LITERALS.items():
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return value
        match = _NUMBER.match(self.text, self.pos)
        if match is None:
            raise InvalidJsonText(f"unexpected character at {self.pos}")
        self.pos = match.end()
        integer, frac, exp = match.groups()
        return float(integer + (frac or "") + (exp or "")) if frac or exp else _js_int(integer)

    def run(self) -> Any:
        # Each stack frame is a container being filled; a dict frame also holds the pending key.
        stack: list[tuple[Any, str | None]] = []
        while True:
            ch = self._peek()
            if ch == "[" or ch == "{":
                self.pos += 1
                container: Any = [] if ch == "[" else {}
                closer = "]" if ch == "[" else "}"
                if self._peek() == closer:
                    self.pos += 1
                    value: Any = container
                else:
                    stack.append((container, self._key() if ch == "{" else None))
                    continue
            else:
                value = self._scalar()
            # Attach the finished value, closing as many containers as the text closes.
            while True:
                if not stack:
                    self._skip()
                    if self.pos != len(self.text):
                        raise InvalidJsonText(f"extra data at {self.pos}")
                    return value
                container, key = stack[-1]
                if key is None:
                    container.append(value)
                else:
                    container[key] = value
                sep = self._peek()
                self.pos += 1
                if sep == ",":
                    if key is not None:
                        stack[-1] = (container, self._key())
                    break
                if sep != ("]" if key is None else "}"):
                    raise InvalidJsonText(f"unexpected {sep!r} at {self.pos - 1}")
                stack.pop()
                value = container

    def _key(self) -> str:
        if self._peek() != '"':
            raise InvalidJsonText(f"expected a key at {self.pos}")
        key, self.pos = scanstring(self.text, self.pos + 1, True)
        if self._peek() != ":":
            raise InvalidJsonText(f"expected ':' at {self.pos}")
        self.pos += 1
        return str(key)
