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
)

__all__ = ["Observed", "decode_loaded", "fresh_session_id", "make_snapshot", "observe"]

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
) -> SessionSnapshot:
    """A valid v1 envelope; ``decisions``/``confirmations``/``text`` make it large or unicode."""
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
                    input=text[:16_384],
                    route_id="route",
                    kind="deterministic",
                    content=text,
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
                status="pending",
            )
            for i in range(confirmations)
        ),
    )


def decode_loaded(raw: object) -> SessionSnapshot | None:
    """Decode what ``load`` returned (snapshot, wire dict, JSON text or ``None``).

    Raises :class:`AssertionError` when the value does not decode: for the kit that is a
    failed check, not a crash.
    """
    if raw is None:
        return None
    if isinstance(raw, SessionSnapshot):
        return raw
    result = decode_session_snapshot(raw)
    if not result.ok or result.snapshot is None:
        raise AssertionError(f"load returned an undecodable value: {result.diagnostic}")
    return result.snapshot


def observe(raw: object) -> Observed:
    """``(cursor, marker)`` of a loaded value, or ``None`` when nothing is stored."""
    snapshot = decode_loaded(raw)
    if snapshot is None:
        return None
    marker = snapshot.conversation.state if snapshot.conversation is not None else ""
    return (snapshot.cursor, marker)


def wire_of(snapshot: SessionSnapshot) -> dict[str, Any]:
    """The wire dict, for equality checks that ignore representation."""
    return snapshot.to_wire()
