"""Streaming twins of the offline test models, driven by the same script as their plain calls.

* :func:`streamed_function_model` is a pydantic-ai ``FunctionModel`` whose ``stream_function``
  streams what its ``function`` answers (text word by word, each tool call as one delta), so a
  streamed and an unstreamed run of one script ask for the same calls and say the same text;
* :func:`kinds` names a list of runtime events by class, for order assertions;
* :class:`Recorder` is a sink that keeps every event with a mark of when it came (before or
  after the bridge call returned).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from akchat_fsm import ChatDefinition

DEFINITION = ChatDefinition("streaming")
SID = "stream-1"
T0 = 1_000_000


def CLOCK() -> int:
    return T0


Script = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


def streamed_function_model(script: Script) -> FunctionModel:
    """``FunctionModel(script, stream_function=...)``: the stream says what ``script`` says."""

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response = script(messages, info)
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if calls:  # a stream is all text or all tool calls (pydantic-ai's rule)
            for i, part in enumerate(calls):
                args = json.dumps(part.args_as_dict())
                yield {i: DeltaToolCall(part.tool_name, args, tool_call_id=part.tool_call_id)}
            return
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        words = text.split(" ")
        for i, word in enumerate(words):
            yield word if i == 0 else " " + word

    return FunctionModel(script, stream_function=stream)


def kinds(events: Sequence[Any]) -> list[str]:
    return [type(e).__name__ for e in events]


@dataclass
class Recorder:
    """A sink keeping each event; ``returned`` is set by the test once the call returned."""

    events: list[Any] = field(default_factory=list)
    late: list[Any] = field(default_factory=list)
    returned: bool = False

    def __call__(self, event: Any) -> None:
        (self.late if self.returned else self.events).append(event)


# ------------------------------------------------------------- one scenario, two flavours

#: ``build(session, storage, is_async) -> bridge``: a runtime's bridge on a fresh session.
Build = Callable[[Any, Any, bool], Any]


def bridge_call(
    flavour: str, backend: Any, build: Build, method: str, *args: Any, **kwargs: Any
) -> Any:
    """``bridge.method(*args, **kwargs)`` on a fresh session (a new resume, as another
    process would make), with the sync bridge or the asyncio one (on its own loop)."""
    from akchat_fsm import resume_chat_session, resume_chat_session_async

    if flavour == "sync":
        storage = backend.sync()
        session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=CLOCK)
        return getattr(build(session, storage, False), method)(*args, **kwargs)

    async def go() -> Any:
        storage = backend.async_()
        session = await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=storage, clock=CLOCK
        )
        return await getattr(build(session, storage, True), method)(*args, **kwargs)

    return asyncio.run(go())


def stored_view(flavour: str, backend: Any, build: Build, run_id: str) -> dict[str, Any]:
    """What a run left in the store, without what differs between two runs of one script
    by construction (the claim nonce, the owner's clock): the run record, the confirmations
    and the ledger's entries. The runtime's snapshot is compared by the test."""
    record = bridge_call(flavour, backend, build, "run_record", run_id)
    body = json.loads(record.to_json())
    for volatile in ("claim", "updatedMs", "leaseUntilMs", "snapshot"):
        body.pop(volatile, None)
    storage = backend.sync()
    from akchat_fsm import resume_chat_session
    from akchat_fsm.integrations.ledger import ToolLedger

    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=CLOCK)
    confirmations = sorted(
        (
            b.tool_call_id,
            b.action,
            json.dumps(b.input, sort_keys=True, default=dict),
            b.status.value,
        )
        for b in session.confirmations
    )
    entries = sorted(
        (
            e.tool_call_id,
            e.tool,
            e.args_digest,
            e.state.value,
            json.dumps(e.result, sort_keys=True, default=dict),
        )
        for e in ToolLedger(storage, SID).entries()
    )
    return {"run": body, "confirmations": confirmations, "ledger": entries}


def count_processing(backend: Any) -> int:
    return len(backend.sync().list_processing())
