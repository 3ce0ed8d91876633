"""Tool arguments as inert, bounded text (ADR-0130).

A tool call's arguments come from a model and may carry anything: markup, script, bidi overrides
that reorder what the approver reads, control characters, megabyte strings, deep nesting. This
module turns them into pretty JSON *text* that is bounded and that shows every invisible or
reordering character as a visible ``\\uXXXX`` escape. Jinja's autoescape then makes the text
inert markup; neither step alone is enough (escaping HTML does not stop a bidi override).
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..wire.bounded import thaw

#: Unicode categories never shown raw: controls, format characters (bidi overrides and
#: isolates, zero-width joiners, the BOM), surrogates, private use, unassigned, and the line
#: and paragraph separators.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


@dataclass(frozen=True, slots=True)
class Bounds:
    """How much of a hostile value is shown; past each bound a visible marker says what was cut."""

    max_string: int = 2_000
    max_depth: int = 8
    max_items: int = 200
    max_total: int = 100_000


DEFAULT_BOUNDS = Bounds()


def visible(text: str) -> str:
    """``text`` with every hidden character replaced by its ``\\uXXXX`` escape."""
    if all(unicodedata.category(ch) not in _HIDDEN for ch in text):
        return text
    return "".join(_escape(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


def editable_json(value: Any) -> str:
    """``value`` as pretty JSON a reviewer edits and sends back (ADR-0135): the whole value,
    uncut (the library bounds what may be sent), with every hidden character a visible
    ``\\uXXXX`` escape, which is the same string once parsed. Only the indentation's line
    breaks stay raw: ``json.dumps`` already escapes the ones inside strings."""
    text = json.dumps(thaw(value), indent=2, ensure_ascii=False)
    return "\n".join(visible(line) for line in text.split("\n"))


def bounded_text(text: str, limit: int) -> str:
    """``text`` shown inert (:func:`visible`) and cut at ``limit`` characters with a visible
    marker: a chat message, a reason or a principal read back from a shared store."""
    cut = len(text) - limit
    return visible(text[:limit]) + (f" … [{cut:,} more characters]" if cut > 0 else "")


def _escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON's spelling of an astral character: a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _string(text: str, bounds: Bounds) -> str:
    cut = len(text) - bounds.max_string
    shown = json.dumps(text[: bounds.max_string], ensure_ascii=False)
    shown = visible(shown)
    return f"{shown} … [{cut:,} more characters]" if cut > 0 else shown


def pretty_arguments(value: Any, bounds: Bounds = DEFAULT_BOUNDS) -> str:
    """Pretty JSON text of ``value``: escaped, bounded, every cut marked."""
    out: list[str] = []
    budget = [bounds.max_total]

    def emit(piece: str) -> bool:
        if budget[0] <= 0:
            return False
        out.append(piece[: budget[0]])
        budget[0] -= len(piece)
        return budget[0] > 0

    def walk(node: Any, depth: int, indent: str) -> None:
        inner = indent + "  "
        if isinstance(node, Mapping):
            items: list[tuple[str | None, Any]] = [(str(k), v) for k, v in node.items()]
            opening, closing = "{", "}"
        elif isinstance(node, Sequence) and not isinstance(node, str | bytes):
            items = [(None, v) for v in node]
            opening, closing = "[", "]"
        elif isinstance(node, str):
            emit(_string(node, bounds))
            return
        else:
            emit(visible(json.dumps(node)))
            return
        if not items:
            emit(opening + closing)
            return
        if depth >= bounds.max_depth:
            emit(f"{opening}…{closing} [nested deeper than {bounds.max_depth} levels]")
            return
        emit(opening + "\n")
        shown = items[: bounds.max_items]
        for index, (key, child) in enumerate(shown):
            if not emit(inner if key is None else f"{inner}{_string(key, bounds)}: "):
                return
            walk(child, depth + 1, inner)
            more = index < len(shown) - 1 or len(items) > len(shown)
            emit(",\n" if more else "\n")
        if len(items) > len(shown):
            emit(f"{inner}… [{len(items) - len(shown):,} more items]\n")
        emit(indent + closing)

    walk(value, 0, "")
    if budget[0] <= 0:
        out.append(f"\n… [cut at {bounds.max_total:,} characters]")
    return "".join(out)


def countdown(remaining_ms: int) -> str:
    """``"expires in 4m 10s"``, or ``"expired"`` once the time has come."""
    if remaining_ms <= 0:
        return "expired"
    seconds = -(-remaining_ms // 1000)  # a call due in 0.2 s has not expired: show 1s
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{hours}h"] if hours else []
    if hours or minutes:
        parts.append(f"{minutes}m")
    parts.append(f"{seconds}s")
    return "expires in " + " ".join(parts)


def utc_time(epoch_ms: int) -> str:
    """``"2026-12-03 14:25:57 UTC"``: an audit or ledger instant, to the second."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
