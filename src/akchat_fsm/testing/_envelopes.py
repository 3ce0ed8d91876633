"""Envelopes the kit writes, and decoding of whatever an adapter's ``load`` returns.

Every snapshot the kit saves carries a unique *marker* in ``conversation.state`` (free text,
1..128 characters, which no adapter has a reason to look at), so a later ``load`` tells
exactly which write it observes: that is what the linearizability model compares.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..wire.decode import decode_session_snapshot
from ..wire.session import (
    ConfirmationBinding,
    Conversation,
    RouteDecision,
    SessionSnapshot,
    TerminalTurn,
)

__all__ = [
    "Observed",
    "decode_loaded",
    "diff",
    "fresh_session_id",
    "make_snapshot",
    "observe",
]

#: What the kit compares after a load: ``None`` or ``(cursor, marker)``.
Observed = tuple[int, str] | None

UPDATED_AT = "2026-07-11T00:00:00.000Z"


def fresh_session_id(prefix: str = "ck") -> str:
    """A session id no earlier run on a shared database has used."""
    return f"{prefix}-{uuid.uuid4().hex}"


def make_snapshot(
    session_id: str,
    cursor: int,
    marker: str = "m",
    *,
    decisions: int = 0,
    confirmations: int = 0,
    text: str = "",
    long_decisions: int | None = None,
    terminal_turns: int = 0,
    processing: bool = False,
) -> SessionSnapshot:
    """A valid v1 envelope; ``decisions``/``confirmations``/``text`` make it large or unicode.

    Every decision, confirmation and terminal turn differs from the others (its index is in
    it), so a store that drops, reorders or truncates them is caught. Only the first
    ``long_decisions`` (default: all) decisions carry ``text`` as their content.
    ``processing``: the first confirmation is ``approving`` (a claimed, unsettled record).
    """
    long = decisions if long_decisions is None else long_decisions
    return SessionSnapshot(
        session_id=session_id,
        definition_id="conformance",
        definition_revision=1,
        updated_at=UPDATED_AT,
        cursor=cursor,
        conversation=Conversation(
            state=marker,
            decisions=tuple(
                RouteDecision(
                    message_id=f"msg-{i}",
                    input=f"{i}:{text[:16_000]}" if i < long else f"input {i}",
                    route_id="route",
                    kind="deterministic",
                    content=f"{i}:{text[: 65_536 - 6]}" if i < long else f"decision {i}",
                    from_state="a",
                    to_state="b",
                )
                for i in range(decisions)
            ),
        ),
        confirmations=tuple(
            ConfirmationBinding(
                token=f"confirm-{i}",
                action="email.send",
                input={"to": "a@example.com", "note": text[:256], "n": i},
                tool_call_id=f"call-{i}",
                expires_at=99,
                status="approving" if processing and i == 0 else "pending",
            )
            for i in range(max(confirmations, 1 if processing else 0))
        ),
        terminal_turns=tuple(
            TerminalTurn(turn_id=f"turn-{i}", outcome="completed" if i % 2 else "indeterminate")
            for i in range(terminal_turns)
        ),
    )


def decode_loaded(raw: object) -> SessionSnapshot | None:
    """Decode what ``load`` returned (snapshot, wire dict, JSON text or ``None``).

    Raises :class:`AssertionError` when the value does not decode: for the kit that is a
    failed check, not a crash.
    """
    if raw is None:
        return None
    # A SessionSnapshot is re-validated too: one built with model_construct is not trusted.
    result = decode_session_snapshot(raw)
    if not result.ok or result.snapshot is None:
        raise AssertionError(f"load returned an undecodable value: {result.diagnostic}")
    return result.snapshot


def observe(raw: object, session_id: str | None = None) -> Observed:
    """``(cursor, marker)`` of a loaded value, or ``None`` when nothing is stored.

    With ``session_id``: the value ``load(session_id)`` returned, which must be that
    session's envelope (a store that truncates, hashes or case-folds keys returns another's).
    """
    snapshot = decode_loaded(raw)
    if snapshot is None:
        return None
    if session_id is not None and snapshot.session_id != session_id:
        raise AssertionError(
            f"load({session_id!r}) returned the envelope of session {snapshot.session_id!r}: "
            "two session ids share one storage key (truncated, hashed or case-folded keys?)"
        )
    marker = snapshot.conversation.state if snapshot.conversation is not None else ""
    return (snapshot.cursor, marker)


def wire_of(snapshot: SessionSnapshot) -> dict[str, Any]:
    """The wire dict, for equality checks that ignore representation."""
    return snapshot.to_wire()


def diff(saved: Any, loaded: Any, path: str = "", limit: int = 6) -> list[str]:
    """Where two wire values differ, as ``path: saved ... loaded ...`` lines (at most ``limit``)."""
    out: list[str] = []
    _diff(saved, loaded, path or "envelope", out, limit)
    return out


def _diff(saved: Any, loaded: Any, path: str, out: list[str], limit: int) -> None:
    if len(out) >= limit or saved == loaded:
        return
    if isinstance(saved, dict) and isinstance(loaded, dict):
        for key in [*saved, *(k for k in loaded if k not in saved)]:
            if key not in loaded:
                out.append(f"{path}.{key}: saved, missing after load")
            elif key not in saved:
                out.append(f"{path}.{key}: not saved, present after load")
            else:
                _diff(saved[key], loaded[key], f"{path}.{key}", out, limit)
            if len(out) >= limit:
                return
        return
    if isinstance(saved, list | tuple) and isinstance(loaded, list | tuple):
        if len(saved) != len(loaded):
            out.append(f"{path}: {len(saved)} items saved, {len(loaded)} loaded")
        for i, (a, b) in enumerate(zip(saved, loaded, strict=False)):
            _diff(a, b, f"{path}[{i}]", out, limit)
            if len(out) >= limit:
                return
        return
    out.append(f"{path}: saved {_short(saved)}, loaded {_short(loaded)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"
