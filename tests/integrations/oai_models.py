"""A scripted openai-agents ``Model`` for the bridge tests: no network, no API key.

The reply is a pure function of the input the SDK sends, so every process that restores a
saved run gets the same answer: batch ``k`` of tool calls once ``k`` batches have been
answered, then one message listing every tool output in order (what the model "saw").
Call ids are derived from the user's prompt, so two runs in one session never share one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import agents.testing
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.testing import assistant_message, function_call
from agents.usage import Usage

Batch = Sequence[tuple[str, dict[str, Any]]]


def _items(input: Any) -> list[dict[str, Any]]:
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    return [i if isinstance(i, dict) else i.model_dump() for i in input]


class ScriptedModel(Model):
    """Emits ``batches`` of tool calls in turn, then ``"done: <output>; <output>..."``."""

    def __init__(self, batches: Sequence[Batch]) -> None:
        self.batches = [list(b) for b in batches]
        self.requests = 0  # model requests made in this process
        #: request numbers (1-based) that fail, as a provider outage would
        self.fail_on: set[int] = set()

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> ModelResponse:
        self.requests += 1
        if self.requests in self.fail_on:
            raise ConnectionError(f"scripted outage on request {self.requests}")
        items = _items(input)
        prompt = next(str(i.get("content")) for i in items if i.get("role") == "user")
        seed = hashlib.sha256(prompt.encode()).hexdigest()[:10]
        answered = sum(1 for i in items if i.get("type") == "function_call")
        done, k = 0, 0
        while k < len(self.batches) and done + len(self.batches[k]) <= answered:
            done += len(self.batches[k])
            k += 1
        if k < len(self.batches):
            output = [
                function_call(name, args, call_id=f"call_{seed}_{k}_{i}")
                for i, (name, args) in enumerate(self.batches[k])
            ]
        else:
            seen = [str(i["output"]) for i in items if i.get("type") == "function_call_output"]
            output = [assistant_message("done: " + "; ".join(seen))]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kw: Any
    ) -> AsyncIterator[Any]:
        """The same reply as :meth:`get_response`, streamed by the SDK's own test model."""
        reply = await self.get_response(system_instructions, input, *args, **kw)
        sdk_model = agents.testing.ScriptedModel([reply])
        sdk_model.set_default_usage(reply.usage)  # the usage the unstreamed reply reports
        async for event in sdk_model.stream_response(system_instructions, input, *args, **kw):
            yield event


def prompt_seed(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:10]


def dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
