"""A real pydantic-ai agent driven by its own offline ``FunctionModel`` (no network, no key).

The model asks for the calls a test scripts on its first request, then answers with every tool
result it was given, so a test reads what reached the model. Tool bodies and model requests are
counted in a :class:`Counts`, so "ran once" and "continued once" are counted, not assumed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import ExternalToolset


@dataclass
class Counts:
    bodies: list[str] = field(default_factory=list)
    requests: int = 0
    fail_next_answer: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    id: str


def answer(messages: Sequence[ModelMessage]) -> str:
    """The model's final text: every tool result it saw, by call id, in id order."""
    seen: dict[str, str] = {}
    for message in messages:
        for part in getattr(message, "parts", ()):
            if isinstance(part, ToolReturnPart | RetryPromptPart) and part.tool_call_id:
                seen[part.tool_call_id] = str(part.content)
    return "; ".join(f"{k}={v}" for k, v in sorted(seen.items()))


def build_agent(calls: Sequence[Call], counts: Counts) -> Agent[None, Any]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        with counts.lock:
            counts.requests += 1
            failing = counts.fail_next_answer > 0 and len(messages) > 1
            if failing:
                counts.fail_next_answer -= 1
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart(c.tool, c.args, tool_call_id=c.id) for c in calls]
            )
        if failing:
            raise ConnectionError("model provider went away")
        return ModelResponse(parts=[TextPart(answer(messages))])

    external = ExternalToolset(
        [
            ToolDefinition(
                name="lookup_order",
                parameters_json_schema={
                    "type": "object",
                    "properties": {"order": {"type": "string"}},
                },
            )
        ]
    )
    agent: Agent[None, Any] = Agent(
        FunctionModel(model), output_type=[str, DeferredToolRequests], toolsets=[external]
    )

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        with counts.lock:
            counts.bodies.append(f"send_email:{to}")
        return f"sent to {to}"

    @agent.tool_plain(requires_approval=True)
    async def refund(amount: int) -> dict[str, Any]:
        with counts.lock:
            counts.bodies.append(f"refund:{amount}")
        return {"refunded": amount}

    @agent.tool_plain(requires_approval=True)
    async def slow_report(pages: int) -> str:
        # Still running when a sibling call fails and pydantic-ai cancels the others.
        await asyncio.sleep(0.3)
        with counts.lock:
            counts.bodies.append(f"slow_report:{pages}")
        return f"{pages} pages"

    @agent.tool_plain
    def clock() -> str:
        return "noon"

    return agent
