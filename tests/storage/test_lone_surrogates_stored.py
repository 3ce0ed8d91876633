"""Lone surrogates round-trip through every adapter as ``\\uXXXX`` escapes (ADR-0080).

A TypeScript client may save a decision whose ``input`` ends in half an emoji; ``JSON.stringify``
writes it as an escape, which is ASCII, so every store holds it. The battery's ``store``
fixture runs this against memory, SQLite, PostgreSQL (two isolations) and Redis, sync and async.
"""

from __future__ import annotations

from storage_harness import Client

from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.session import SessionSnapshot

TRUNCATED = "see you \U0001f600"[:-1] + "\ud83d"  # half an emoji, as JavaScript can hold it


def _snapshot(cursor: int) -> SessionSnapshot:
    wire = {
        "protocol": "agentskit.chat.session",
        "version": 1,
        "sessionId": "s-lone",
        "definitionId": "def",
        "definitionRevision": 1,
        "updatedAt": "2026-11-29T00:00:00.000Z",
        "cursor": cursor,
        "conversation": {
            "state": "s\udfff",
            "decisions": [
                {
                    "messageId": "m-1",
                    "input": TRUNCATED,
                    "routeId": "r",
                    "kind": "deterministic",
                    "content": "\udc00 ok \U0001f600",
                    "fromState": "a",
                    "toState": "s\udfff",
                }
            ],
        },
        "confirmations": [
            {
                "token": "t-1",
                "action": "email.send",
                "input": {"body": TRUNCATED, "k\ud800": ["\udfff"]},
                "toolCallId": "c-1",
                "expiresAt": 1,
                "status": "pending",
            }
        ],
    }
    result = decode_session_snapshot(wire)
    assert result.snapshot is not None, result.diagnostic
    return result.snapshot


def test_lone_surrogates_round_trip_through_the_adapter(store: Client) -> None:
    first = _snapshot(1)
    assert store.save(first, None)
    text = store.load("s-lone")
    assert isinstance(text, str) and text == first.to_json()
    assert "\\ud83d" in text and "\\udfff" in text and "\\ud800" in text
    loaded = decode_session_snapshot(text).snapshot
    assert loaded == first
    assert loaded is not None and loaded.conversation is not None
    assert loaded.conversation.decisions[0].input == TRUNCATED
    # And the session moves on: a CAS update over the same body works as any other.
    assert store.save(_snapshot(2), 1)
    assert decode_session_snapshot(store.load("s-lone")).snapshot == _snapshot(2)
