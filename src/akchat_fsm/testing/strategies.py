"""Hypothesis strategies for the session envelope, shipped for hosts' own tests.

* :func:`session_snapshots` — valid :class:`SessionSnapshot` s: conversation or not, turn
  lease, terminal turns (omitted, explicit ``[]`` or filled), every confirmation status,
  unicode and astral text, strings at their exact UTF-16 limits.
* :func:`wire_session_objects` — their wire dicts (what the reference decoder returns).
* :func:`invalid_session_objects` — a valid wire dict with exactly one rule broken, paired with
  the name of the rule; the decoder must reject it with ``SESSION_INVALID_SNAPSHOT``.
* :func:`json_values`, :func:`identifiers`, :func:`updated_at_texts` and :data:`BAD_UPDATED_AT`
  for building your own.
* Re-exported from :mod:`.strategies_memory`: :func:`memory_records`,
  :func:`controlled_snapshots` and their ``invalid_*`` counterparts.

Requires the ``testing`` extra (Hypothesis).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from ..wire.enums import ConfirmationStatus, DecisionKind, TurnOutcome
from ..wire.js import MAX_SAFE_INTEGER
from ..wire.session import (
    ActiveTurn,
    ConfirmationBinding,
    Conversation,
    RouteDecision,
    SessionSnapshot,
    TerminalTurn,
)
from .strategies_memory import (
    controlled_snapshots,
    invalid_controlled_snapshots,
    invalid_memory_records,
    memory_records,
)

__all__ = [
    "BAD_IDENTIFIERS",
    "BAD_UPDATED_AT",
    "GOOD_UPDATED_AT",
    "controlled_snapshots",
    "identifiers",
    "invalid_controlled_snapshots",
    "invalid_memory_records",
    "invalid_session_objects",
    "json_values",
    "memory_records",
    "session_snapshots",
    "updated_at_texts",
    "utf16_texts",
    "wire_session_objects",
]

Json = Any
Mutation = Callable[[dict[str, Any]], None]

ASTRAL = "\U0001f600"  # two UTF-16 code units, one code point

#: Accepted by zod 4.4.3 ``datetime({ offset: true })`` (docs/reference.md §1.3, §8).
GOOD_UPDATED_AT = (
    "2026-07-11T00:00:00.000Z",
    "2026-07-11T00:00:00Z",
    "2026-07-11T00:00Z",
    "2026-07-11T23:59:59.123456789Z",
    "2026-07-11T00:00:00+02:00",
    "2026-07-11T00:00:00+14:00",
    "2026-07-11T00:00:00-00:00",
    "2026-07-11T00:00:00.5-23:59",
    "2000-02-29T00:00:00Z",
    "0000-02-29T00:00:00Z",
    "2024-02-29T12:30Z",
    "9999-12-31T23:59:59.999Z",
)

#: Rejected by the same rule.
BAD_UPDATED_AT = (
    "2026-07-11 00:00:00Z",
    "2026-07-11T00:00:00",
    "2026-07-11T00:00:00z",
    "2026-07-11t00:00:00Z",
    "2026-07-11T00:00:00+0200",
    "2026-07-11T00:00:00+02",
    "2026-02-30T00:00:00Z",
    "1900-02-29T00:00:00Z",
    "2023-02-29T00:00:00Z",
    "2026-04-31T00:00:00Z",
    "2026-07-11T24:00:00Z",
    "2026-07-11T00:00:60Z",
    "2026-07-11T00:60:00Z",
    "2026-07-11",
    "+02026-07-11T00:00:00Z",
    "20260-07-11T00:00:00Z",
    "2026-07-11T00:00:00+24:00",
    "2026-07-11T00:00:00+02:60",
    "2026-07-11T00:00:00.Z",
    "2026-07-11T0:00:00Z",
    "2026-7-11T00:00:00Z",
    "2026-07-11T00:00:00Z\n",
    " 2026-07-11T00:00:00Z",
    "２０２６-07-11T00:00:00Z",
    "",
)

#: Strings that are not SafeIdentifiers.
BAD_IDENTIFIERS = (
    "",
    "-leading-dash",
    ".leading-dot",
    "has space",
    "slash/inside",
    "tab\tinside",
    "trailing-newline\n",
    "é",
    "ａ",  # fullwidth a
    "١٢٣",  # Arabic-Indic digits: Unicode `\d`, not JavaScript's
    "a\u00b2",  # superscript two: `str.isdigit()` is true for it
    "trailing-cr\r",
    "\nleading-newline",
    "x" * 129,
)


def identifiers() -> st.SearchStrategy[str]:
    """SafeIdentifiers, including the 1- and 128-character extremes."""
    return st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,40}", fullmatch=True),
        st.sampled_from(["a", "Z" * 128, "0.:_-" + "9" * 123]),
    )


def utf16_texts(min_units: int, max_units: int) -> st.SearchStrategy[str]:
    """Unicode text (astral characters included) of ``min_units..max_units`` UTF-16 units."""
    small = st.text(
        st.characters(exclude_categories=["Cs"]), min_size=min_units, max_size=min(max_units, 40)
    ).filter(lambda s: min_units <= len(s.encode("utf-16-le")) // 2 <= max_units)
    edges = [ASTRAL * (max_units // 2) + "a" * (max_units % 2), "é" * max_units]
    if min_units == 0:
        edges.append("")
    return st.one_of(small, st.sampled_from(edges))


def updated_at_texts() -> st.SearchStrategy[str]:
    """Datetimes zod 4.4.3 accepts, from the whole calendar (years 0000-9999)."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        year = draw(st.integers(0, 9999))
        month = draw(st.integers(1, 12))
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][month - 1]
        day = draw(st.integers(1, days))
        hour, minute = draw(st.integers(0, 23)), draw(st.integers(0, 59))
        text = f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}"
        if draw(st.booleans()):
            text += f":{draw(st.integers(0, 59)):02d}"
            if draw(st.booleans()):
                text += "." + draw(st.from_regex(r"[0-9]{1,12}", fullmatch=True))
        if draw(st.booleans()):
            return text + "Z"
        sign = draw(st.sampled_from("+-"))
        return text + f"{sign}{draw(st.integers(0, 23)):02d}:{draw(st.integers(0, 59)):02d}"

    return st.one_of(build(), st.sampled_from(GOOD_UPDATED_AT))


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Json]:
    """Small JSON values within the bounded-JSON rules (finite numbers, short keys)."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(exclude_categories=["Cs"]), max_size=12),
    )
    keys = st.text(st.characters(exclude_categories=["Cs"]), max_size=10).filter(
        lambda k: k != "__proto__"
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def _json_objects() -> st.SearchStrategy[dict[str, Json]]:
    return st.dictionaries(
        st.text(max_size=10).filter(lambda k: k != "__proto__"), json_values(), max_size=4
    )


def _model(cls: Any, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    # Not `st.builds`: it would infer (pattern-less) strategies for the camelCase aliases.
    return st.fixed_dictionaries(fields).map(lambda kwargs: cls(**kwargs))


def confirmation_bindings() -> st.SearchStrategy[ConfirmationBinding]:
    return _model(
        ConfirmationBinding,
        token=identifiers(),
        action=identifiers(),
        input=_json_objects(),
        tool_call_id=identifiers(),
        expires_at=st.integers(0, MAX_SAFE_INTEGER),
        status=st.sampled_from(ConfirmationStatus),
    )


def route_decisions() -> st.SearchStrategy[RouteDecision]:
    return _model(
        RouteDecision,
        message_id=identifiers(),
        input=utf16_texts(0, 16_384),
        route_id=identifiers(),
        kind=st.sampled_from(DecisionKind),
        content=utf16_texts(0, 65_536),
        from_state=utf16_texts(1, 128),
        to_state=utf16_texts(1, 128),
    )


def conversations() -> st.SearchStrategy[Conversation]:
    return _model(
        Conversation,
        state=utf16_texts(1, 128),
        decisions=st.lists(route_decisions(), max_size=4, unique_by=lambda d: d.message_id),
    )


@st.composite
def session_snapshots(draw: st.DrawFn) -> SessionSnapshot:
    """Valid envelopes; every optional part is sometimes absent."""
    fields: dict[str, Any] = {
        "session_id": draw(identifiers()),
        "definition_id": draw(identifiers()),
        "definition_revision": draw(st.integers(1, MAX_SAFE_INTEGER)),
        "updated_at": draw(updated_at_texts()),
        "cursor": draw(st.integers(0, MAX_SAFE_INTEGER)),
        "confirmations": draw(
            st.lists(
                confirmation_bindings(),
                max_size=5,
                unique_by=(lambda c: c.token, lambda c: c.tool_call_id),
            )
        ),
    }
    if draw(st.booleans()):
        fields["active_turn"] = draw(
            _model(ActiveTurn, turn_id=identifiers(), expires_at=st.integers(0, MAX_SAFE_INTEGER))
        )
    turns = _model(TerminalTurn, turn_id=identifiers(), outcome=st.sampled_from(TurnOutcome))
    mode = draw(st.sampled_from(["omit", "list", "full"]))
    if mode == "list":
        fields["terminal_turns"] = draw(st.lists(turns, max_size=4, unique_by=lambda t: t.turn_id))
    elif mode == "full":
        fields["terminal_turns"] = [
            TerminalTurn(turn_id=f"turn-{i}", outcome=TurnOutcome.COMPLETED) for i in range(64)
        ]
    if draw(st.booleans()):
        fields["conversation"] = draw(conversations())
    return SessionSnapshot(**fields)


def wire_session_objects() -> st.SearchStrategy[dict[str, Any]]:
    """Wire dicts of valid envelopes, as the reference decoder would return them."""
    return session_snapshots().map(SessionSnapshot.to_wire)


# --------------------------------------------------------------------------- mutations
def _put(*path: Any, value: Any) -> Mutation:
    def apply(wire: dict[str, Any]) -> None:
        target: Any = wire
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return apply


def _drop(*path: Any) -> Mutation:
    def apply(wire: dict[str, Any]) -> None:
        target: Any = wire
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return apply


def _append_copy(*path: Any) -> Mutation:
    def apply(wire: dict[str, Any]) -> None:
        target: Any = wire
        for step in path:
            target = target[step]
        target.append(copy.deepcopy(target[0]))

    return apply


_BAD_INTS = (-1, 0.5, True, False, 2**53, float(2**60), "1", None, float("nan"), [1])
_BAD_POSITIVE = (0, *_BAD_INTS)


def _deep(depth: int) -> Json:
    value: Json = 1
    for _ in range(depth):
        value = [value]
    return value


_BAD_INPUTS: tuple[Json, ...] = (
    [],
    None,
    "text",
    {"deep": _deep(20)},  # the leaf sits at depth 21
    {f"k{i}": i for i in range(1_000)},  # 1,001 nodes with the root
    {"s": ASTRAL * 8_193},  # 16,386 UTF-16 units but 8,193 code points
    {"k" * 257: 1},
    {ASTRAL * 129: 1},  # key of 258 UTF-16 units
    {"items": list(range(1_001))},
    {"x": float("nan")},
    {"x": float("inf")},
    {"x": 10**400},  # beyond the double range: Infinity in JavaScript
    {"x": {1, 2}},
)


def _mutations(wire: dict[str, Any]) -> list[tuple[str, Mutation]]:
    """Every applicable single-rule breach of ``wire`` (a valid wire dict)."""
    out: list[tuple[str, Mutation]] = []
    for key in ("sessionId", "definitionId"):
        out += [(f"{key} not an identifier", _put(key, value=bad)) for bad in BAD_IDENTIFIERS]
        out += [(f"{key} missing", _drop(key)), (f"{key} null", _put(key, value=None))]
    out += [
        (f"definitionRevision={v!r}", _put("definitionRevision", value=v)) for v in _BAD_POSITIVE
    ]
    out += [(f"cursor={v!r}", _put("cursor", value=v)) for v in _BAD_INTS]
    out += [(f"updatedAt={v!r}", _put("updatedAt", value=v)) for v in (*BAD_UPDATED_AT, None, 0)]
    out += [
        ("protocol wrong", _put("protocol", value="agentskit.chat.other")),
        ("protocol missing", _drop("protocol")),
        ("version missing", _drop("version")),
        ("version string", _put("version", value="1")),
        ("version bool", _put("version", value=True)),
        ("confirmations missing", _drop("confirmations")),
        ("confirmations null", _put("confirmations", value=None)),
        ("confirmations object", _put("confirmations", value={})),
        ("activeTurn null", _put("activeTurn", value=None)),
        ("activeTurn array", _put("activeTurn", value=[])),
        ("terminalTurns null", _put("terminalTurns", value=None)),
        ("conversation null", _put("conversation", value=None)),
        ("too many confirmations", _put("confirmations", value=_many_confirmations(1_001))),
        (
            "too many terminal turns",
            _put(
                "terminalTurns",
                value=[{"turnId": f"t{i}", "outcome": "completed"} for i in range(65)],
            ),
        ),
    ]
    if "activeTurn" in wire:
        out += [
            (f"activeTurn.expiresAt={v!r}", _put("activeTurn", "expiresAt", value=v))
            for v in _BAD_INTS
        ]
        out += [("activeTurn.turnId bad", _put("activeTurn", "turnId", value="bad id"))]
    if wire.get("terminalTurns"):
        out += [
            ("duplicate terminal turnId", _append_copy("terminalTurns")),
            ("terminal outcome unknown", _put("terminalTurns", 0, "outcome", value="aborted")),
            ("terminal turnId null", _put("terminalTurns", 0, "turnId", value=None)),
        ]
    if wire["confirmations"]:
        c = ("confirmations", 0)
        out += [
            ("duplicate confirmation", _append_copy("confirmations")),
            ("status unknown", _put(*c, "status", value="cancelled")),
            ("status null", _put(*c, "status", value=None)),
            ("token bad", _put(*c, "token", value="confirm 1")),
            ("action bad", _put(*c, "action", value="")),
            ("toolCallId bad", _put(*c, "toolCallId", value="x" * 129)),
            ("input missing", _drop(*c, "input")),
        ]
        out += [(f"expiresAt={v!r}", _put(*c, "expiresAt", value=v)) for v in _BAD_INTS]
        out += [(f"input={str(v)[:40]}", _put(*c, "input", value=v)) for v in _BAD_INPUTS]
    conversation = wire.get("conversation")
    if conversation is not None:
        out += [
            ("state empty", _put("conversation", "state", value="")),
            ("state 129 units", _put("conversation", "state", value="s" * 129)),
            ("state 130 UTF-16 units", _put("conversation", "state", value=ASTRAL * 65)),
            ("decisions missing", _drop("conversation", "decisions")),
            ("too many decisions", _put("conversation", "decisions", value=_many_decisions(1_001))),
        ]
        if conversation["decisions"]:
            d = ("conversation", "decisions", 0)
            out += [
                ("duplicate messageId", _append_copy("conversation", "decisions")),
                ("kind agentic", _put(*d, "kind", value="agentic")),
                ("messageId bad", _put(*d, "messageId", value="msg 1")),
                ("routeId bad", _put(*d, "routeId", value="-r")),
                ("input too long", _put(*d, "input", value=ASTRAL * 8_193)),
                ("content too long", _put(*d, "content", value=ASTRAL * 32_769)),
                ("fromState empty", _put(*d, "fromState", value="")),
                ("toState too long", _put(*d, "toState", value=ASTRAL * 65)),
                ("input null", _put(*d, "input", value=None)),
            ]
    return out


def _many_confirmations(count: int) -> list[dict[str, Any]]:
    return [
        {
            "token": f"confirm-{i}",
            "action": "a",
            "input": {},
            "toolCallId": f"app-{i}",
            "expiresAt": 1,
            "status": "pending",
        }
        for i in range(count)
    ]


def _many_decisions(count: int) -> list[dict[str, Any]]:
    return [
        {
            "messageId": f"m{i}",
            "input": "",
            "routeId": "r",
            "kind": "deterministic",
            "content": "",
            "fromState": "a",
            "toState": "b",
        }
        for i in range(count)
    ]


@st.composite
def invalid_session_objects(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A valid wire dict with exactly one rule broken, and the rule's name."""
    wire = draw(wire_session_objects())
    rule, mutate = draw(st.sampled_from(_mutations(wire)))
    mutate(wire)
    return wire, rule
