"""The session envelope ``agentskit.chat.session`` v1 as frozen pydantic models.

Attributes are snake_case; wire keys are the reference's camelCase (REFERENCE §1.1).
SKELETON: the field set and names below are the contract other layers code against; the wire
layer issue completes validation to the reference's exact rules and adds the decoder.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ._js import Identifier, NonNegativeInt, PositiveInt, bounded_str
from .enums import ConfirmationStatus, DecisionKind, TurnOutcome

PROTOCOL = "agentskit.chat.session"
VERSION = 1


class _Wire(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="ignore", alias_generator=to_camel, populate_by_name=True
    )


class ConfirmationBinding(_Wire):
    token: Identifier
    action: Identifier
    input: dict[str, Any]
    tool_call_id: Identifier
    expires_at: NonNegativeInt
    status: ConfirmationStatus


class RouteDecision(_Wire):
    message_id: Identifier
    input: bounded_str(0, 16_384)  # type: ignore[valid-type]
    route_id: Identifier
    kind: DecisionKind
    content: bounded_str(0, 65_536)  # type: ignore[valid-type]
    from_state: bounded_str(1, 128)  # type: ignore[valid-type]
    to_state: bounded_str(1, 128)  # type: ignore[valid-type]


class Conversation(_Wire):
    state: bounded_str(1, 128)  # type: ignore[valid-type]
    decisions: tuple[RouteDecision, ...]


class ActiveTurn(_Wire):
    turn_id: Identifier
    expires_at: NonNegativeInt


class TerminalTurn(_Wire):
    turn_id: Identifier
    outcome: TurnOutcome


class SessionSnapshot(_Wire):
    protocol: str = PROTOCOL
    version: int = VERSION
    session_id: Identifier
    definition_id: Identifier
    definition_revision: PositiveInt
    updated_at: str
    cursor: NonNegativeInt
    active_turn: ActiveTurn | None = None
    terminal_turns: tuple[TerminalTurn, ...] = ()
    conversation: Conversation | None = None
    confirmations: tuple[ConfirmationBinding, ...]

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready wire object; optional keys are omitted when absent."""
        out = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not self.terminal_turns:
            out.pop("terminalTurns", None)
        return out
