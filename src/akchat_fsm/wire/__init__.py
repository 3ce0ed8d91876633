"""The wire layer: untrusted JSON in, validated immutable values out, and back. Pure, no I/O.

* :mod:`.session` / :mod:`.decode` — the ``agentskit.chat.session`` v1 envelope (v0 migrated).
* :mod:`.memory` — canonical chat-memory records (upstream ``validateMemoryRecord``).
* :mod:`.controlled` — the strict controlled-chat snapshot shell.
* :mod:`.digest` — the canonical (RFC 8785) digest of a call's arguments a decision carries.
* :mod:`.js` — the JavaScript-exact rules shared by all of them (public, ADR-0117).
* :mod:`.bounded`, :mod:`.jsontext` — bounded JSON values, and JSON text as ``JSON.parse`` reads it.
* :mod:`.schema` — JSON Schema export of the envelope and the controlled shell.
"""

from __future__ import annotations

from .controlled import ControlledSnapshot, parse_controlled_snapshot
from .decode import DecodeResult, Diagnostic, decode_session_snapshot, parse_session_snapshot
from .digest import arguments_digest
from .enums import ConfirmationStatus, DecisionKind, TurnOutcome
from .memory import MemoryRecord, Message, ToolCall, ToolCallStatus, validate_memory_record
from .session import (
    ActiveTurn,
    ConfirmationBinding,
    Conversation,
    RouteDecision,
    SessionSnapshot,
    TerminalTurn,
)

__all__ = [
    "ActiveTurn",
    "ConfirmationBinding",
    "ConfirmationStatus",
    "ControlledSnapshot",
    "Conversation",
    "DecisionKind",
    "DecodeResult",
    "Diagnostic",
    "MemoryRecord",
    "Message",
    "RouteDecision",
    "SessionSnapshot",
    "TerminalTurn",
    "ToolCall",
    "ToolCallStatus",
    "TurnOutcome",
    "arguments_digest",
    "decode_session_snapshot",
    "parse_controlled_snapshot",
    "parse_session_snapshot",
    "validate_memory_record",
]
