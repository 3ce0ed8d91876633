"""What a host declares: the chat definition and its optional conversation flow.

A conversation is a python-statemachine ``StateMachine`` subclass the host writes (its flow)
plus the routes that drive it: a route id names the event to send and, optionally, the states
in which the route is allowed. The conversation state stored in the envelope is the flow's
state *value* (which python-statemachine defaults to the state's id).

Replaying stored route decisions (docs/reference.md §1.4 step 5) runs the host's flow on a throwaway
box, one decision at a time, so a stored decision is accepted only if the flow itself would
make it again today: same from-state, route allowed there, event lands exactly on to-state.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statemachine import StateMachine
from statemachine.exceptions import StateMachineError, TransitionNotAllowed

from ..errors import ConfigError, IncompatibleSession
from ..wire.js import MAX_SAFE_INTEGER, is_identifier
from ..wire.session import Conversation, RouteDecision

__all__ = ["ChatDefinition", "ConversationFlow", "Route", "replay_conversation", "route_target"]

CONVERSATION_INCOMPATIBLE = (
    "Session conversation metadata is incompatible with this chat definition."
)
DEFINITION_INVALID = "Chat definition is invalid."
REVISION_INVALID = "Chat definition revision is invalid."


@dataclass(frozen=True)
class Route:
    """A deterministic route: ``id`` sends ``event`` to the flow, only in ``states`` if given."""

    id: str
    event: str
    states: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not is_identifier(self.id) or not isinstance(self.event, str) or not self.event:
            raise ConfigError(DEFINITION_INVALID)
        if self.states is not None:
            object.__setattr__(self, "states", frozenset(self.states))

    def allowed_in(self, state: str) -> bool:
        return self.states is None or state in self.states


@dataclass(frozen=True)
class ConversationFlow:
    """A host flow (``StateMachine`` subclass) and the routes that drive it."""

    flow: type[StateMachine]
    routes: tuple[Route, ...] = ()
    _by_id: dict[str, Route] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.flow, type) and issubclass(self.flow, StateMachine)):
            raise ConfigError(DEFINITION_INVALID)
        routes = tuple(self.routes)
        by_id = {route.id: route for route in routes}
        if len(by_id) != len(routes):
            raise ConfigError(DEFINITION_INVALID)
        object.__setattr__(self, "routes", routes)
        object.__setattr__(self, "_by_id", by_id)

    @property
    def initial_state(self) -> str:
        return str(self.flow.initial_state.value)

    def route(self, route_id: str) -> Route | None:
        return self._by_id.get(route_id)

    def has_state(self, state: str) -> bool:
        return state in self.flow.states_map


@dataclass(frozen=True)
class ChatDefinition:
    """Identity of a chat application: ``id``, ``revision`` (default 1), optional conversation.

    Stored sessions resume only under the same ``id`` and exactly the same ``revision``
    (docs/reference.md §1.4: strict equality, no range).
    """

    id: str
    revision: int = 1
    conversation: ConversationFlow | None = None

    def __post_init__(self) -> None:
        if not is_identifier(self.id):
            raise ConfigError(DEFINITION_INVALID)
        revision = self.revision
        if isinstance(revision, bool) or not isinstance(revision, int):
            raise ConfigError(REVISION_INVALID)
        if not 0 < revision <= MAX_SAFE_INTEGER:
            raise ConfigError(REVISION_INVALID)

    @classmethod
    def with_flow(
        cls,
        id: str,
        flow: type[StateMachine],
        routes: Iterable[Route],
        *,
        revision: int = 1,
    ) -> ChatDefinition:
        """Shorthand for a definition with a conversation."""
        return cls(id, revision, ConversationFlow(flow, tuple(routes)))


class _Box:
    """The mutable model the host flow runs on; the envelope itself stays frozen."""

    def __init__(self, state: str) -> None:
        self.state: Any = state


def route_target(conversation: ConversationFlow, state: str, route_id: str) -> str | None:
    """The state ``route_id`` moves the flow to from ``state``, or ``None`` if it may not."""
    route = conversation.route(route_id)
    if route is None or not route.allowed_in(state) or not conversation.has_state(state):
        return None
    box = _Box(state)
    try:
        conversation.flow(model=box).send(route.event)
    except (TransitionNotAllowed, StateMachineError):
        return None
    except Exception:
        # A host guard or action that raises refuses the route; the flow rolled back.
        return None
    return str(box.state)


def replay_conversation(
    definition: ChatDefinition, stored: Conversation | None
) -> tuple[str | None, Sequence[RouteDecision]]:
    """Replay stored decisions through the host flow; the resulting state and decisions.

    Raises :class:`IncompatibleSession` (the reference's message) when the snapshot carries
    a conversation the definition does not declare, a decision does not replay, or the replay
    does not end on the stored state. A definition with a conversation and a snapshot without
    one starts at the flow's initial state.
    """
    conversation = definition.conversation
    if conversation is None:
        if stored is not None:
            raise IncompatibleSession(CONVERSATION_INCOMPATIBLE)
        return None, ()
    state = conversation.initial_state
    if stored is None:
        return state, ()
    for decision in stored.decisions:
        if decision.from_state != state:
            raise IncompatibleSession(CONVERSATION_INCOMPATIBLE)
        target = route_target(conversation, state, decision.route_id)
        if target is None or target != decision.to_state:
            raise IncompatibleSession(CONVERSATION_INCOMPATIBLE)
        state = target
    if state != stored.state:
        raise IncompatibleSession(CONVERSATION_INCOMPATIBLE)
    return state, stored.decisions
