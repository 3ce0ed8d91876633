"""A host's bridge factory as ``akchat-fsm reconcile URL --all --bridge cli_bridges:bridge_for``
names it: a real pydantic-ai agent on its offline ``FunctionModel`` (no network, no key).

The agent asks for one approval call, ``send_email`` (id ``c1``), and then answers with the
tool result it was given. Every body that runs is appended to the file ``$AKCHAT_CLI_BODIES``
(one line per run), so "ran once" is counted outside the process; with ``$AKCHAT_CLI_KILL``
set, the body dies like a SIGKILLed process (a ``BaseException`` nothing catches) before it
has any effect.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.session import ChatDefinition
from akchat_fsm.session.sweep import SweepPorts

DEFINITION = ChatDefinition("cli-bridged")
BODIES = "AKCHAT_CLI_BODIES"
KILL = "AKCHAT_CLI_KILL"
NOT_CALLABLE = "a string, not a factory"  # what a bad --bridge spec may name


class Killed(BaseException):
    """The simulated death of the process running a tool body."""


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    results = [
        f"{part.tool_call_id}={part.content}"
        for message in messages
        for part in getattr(message, "parts", ())
        if isinstance(part, ToolReturnPart)
    ]
    if results:
        return ModelResponse(parts=[TextPart("; ".join(results))])
    return ModelResponse(parts=[ToolCallPart("send_email", {"to": "a@x"}, tool_call_id="c1")])


def make_agent() -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(FunctionModel(_model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        if os.environ.get(KILL):
            raise Killed
        with open(os.environ[BODIES], "a", encoding="utf-8") as log:
            log.write(f"send_email {to}\n")
        return f"sent to {to}"

    return agent


def bridge(session: Any, storage: Any, owner: str) -> PydanticAIBridge:
    return PydanticAIBridge(make_agent(), session, storage, owner=owner)


def bridge_for(session_id: str, storage: Any) -> SweepPorts | None:
    """The factory the CLI calls per listed session: this host's sessions start with ``b-``."""
    if not session_id.startswith("b-"):
        return None
    return SweepPorts(DEFINITION, bridge=lambda session: bridge(session, storage, "cli-sweep"))


def broken(session_id: str, storage: Any) -> SweepPorts:
    raise RuntimeError("the host's factory failed")
