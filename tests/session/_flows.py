"""Host flows for tests: python-statemachine classes, including ones built from vector JSON."""

from __future__ import annotations

from typing import Any

from statemachine import State, StateMachine

from akchat_fsm.session import ChatDefinition, ConversationFlow, Route


def flow_from_declaration(declaration: dict[str, Any]) -> ConversationFlow:
    """Build a strict ``StateMachine`` subclass from a vector's conversation declaration."""
    states_decl: dict[str, Any] = declaration["states"]
    attrs: dict[str, Any] = {}
    for name, body in states_decl.items():
        outgoing = bool(body.get("on"))
        attrs[name] = State(initial=name == declaration["initial"], final=not outgoing)
    transitions: dict[str, Any] = {}
    for name, body in states_decl.items():
        for event, target in (body.get("on") or {}).items():
            t = attrs[name].to(attrs[target])
            transitions[event] = t if event not in transitions else transitions[event] | t
    attrs.update(transitions)
    flow = type("VectorFlow", (StateMachine,), attrs)
    routes = tuple(
        Route(r["id"], r["event"], frozenset(r["states"]) if r.get("states") else None)
        for r in declaration.get("routes", ())
    )
    return ConversationFlow(flow, routes)


def definition_from_context(context: dict[str, Any]) -> ChatDefinition:
    revision = context.get("definitionRevision")
    conversation = context.get("conversation") or None
    return ChatDefinition(
        context["definitionId"],
        1 if revision is None else revision,
        None if conversation is None else flow_from_declaration(conversation),
    )


class SupportFlow(StateMachine):
    """idle --start--> collecting --submit--> done; collecting --cancel--> idle."""

    idle = State(initial=True)
    collecting = State()
    done = State(final=True)

    start = idle.to(collecting)
    submit = collecting.to(done)
    cancel = collecting.to(idle)


SUPPORT_ROUTES = (
    Route("start", "start"),
    Route("submit", "submit", frozenset({"collecting"})),
    Route("cancel", "cancel"),
)
