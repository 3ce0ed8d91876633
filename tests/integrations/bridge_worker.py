"""A bridge host in its own process, for the multi-process proofs (racing approvers, SIGKILL).

``python bridge_worker.py STORE SESSION LOG KILL ACTIONS [GO]``:

* ``STORE``: ``sqlite:<path>`` or ``postgres:<url>|<table>``;
* ``LOG``: the durable log outside the library: every tool body and every continuation model
  request appends one fsynced line (``O_APPEND``, one ``write``), so after any kill the log says
  what really happened;
* ``KILL``: ``none``, ``write:<n>:before|after`` (SIGKILL this process around its n-th storage
  write, envelope or record, counted from 1) or ``body:before|after`` (inside the tool body,
  around its side effect); prefixed ``stream:`` (``stream:none``, ``stream:event:<n>``, ...)
  the actions stream their continuations (``on_event=``), each pydantic-ai event an fsynced
  ``event <type>:<call id>`` line in the log, and ``event:<n>`` SIGKILLs on the n-th event;
* the continuation's model first calls ``note`` (a tool that needs no approval, call ``u1``),
  then answers;
* ``ACTIONS``: comma-separated ``approve:<call-id>`` / ``reject:<call-id>:<reason>``;
* ``GO``: a file to wait for before acting (lines the racers up).

The worker prints one JSON line: per action, the outcome (``run`` status) or the error type.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.errors import AkchatError
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

sys.path.insert(0, str(Path(__file__).parent))
from pai_agents import answer
from process_helpers import KillingStorage, append_line, open_store
from stream_helpers import streamed_function_model

DEFINITION = ChatDefinition("bridge-proof")
CALLS = (("send_email", {"to": "a@example.com"}, "c1"), ("refund", {"amount": 5}, "c2"))


def append(log: Path, line: str) -> None:
    append_line(log, f"{line} {os.getpid()}")


def read_log(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def build_agent(log: Path, kill: str = "none") -> Agent[None, Any]:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart(n, a, tool_call_id=i) for n, a, i in CALLS])
        said = answer(messages)
        if "u1=" not in said:  # the continuation's first request: an ungated call, then text
            append(log, "model continue")
            return ModelResponse(parts=[ToolCallPart("note", {"text": "done"}, tool_call_id="u1")])
        return ModelResponse(parts=[TextPart(said)])

    # The same script streamed when a run is (an unstreamed run calls ``model`` itself).
    agent: Agent[None, Any] = Agent(
        streamed_function_model(model), output_type=[str, DeferredToolRequests]
    )

    def side_effect(ctx: RunContext[None], what: str) -> str:
        if kill == "body:before":
            os.kill(os.getpid(), signal.SIGKILL)
        append(log, f"body {ctx.tool_call_id}")
        if kill == "body:after":
            os.kill(os.getpid(), signal.SIGKILL)
        return what

    @agent.tool(requires_approval=True)
    def send_email(ctx: RunContext[None], to: str) -> str:
        return side_effect(ctx, f"sent to {to}")

    @agent.tool(requires_approval=True)
    def refund(ctx: RunContext[None], amount: int) -> str:
        return side_effect(ctx, f"refunded {amount}")

    @agent.tool
    def note(ctx: RunContext[None], text: str) -> str:  # needs no approval
        return side_effect(ctx, f"noted {text}")

    return agent


def bridge_for(storage: Any, log: Path, kill: str = "none", **options: Any) -> PydanticAIBridge:
    session = resume_chat_session(DEFINITION, session_id="proof", storage=storage)
    return PydanticAIBridge(build_agent(log, kill), session, storage, **options)


def event_sink(log: Path, kill: str) -> Callable[[Any], None]:
    """A streamed action's sink: a log line per event, a SIGKILL on the ``event:<n>``-th."""
    target = int(kill.split(":")[1]) if kill.startswith("event:") else 0
    seen = [0]

    def sink(event: Any) -> None:
        seen[0] += 1
        part = getattr(event, "part", None)
        call_id = getattr(event, "tool_call_id", None) or getattr(part, "tool_call_id", "-")
        append(log, f"event {type(event).__name__}:{call_id}")
        if seen[0] == target:
            os.kill(os.getpid(), signal.SIGKILL)

    return sink


def run(argv: list[str]) -> dict[str, Any]:
    """Open the bridge, line up on ``GO``, perform the actions; what :func:`main` prints."""
    store, _session, log_name, kill, actions = argv[:5]
    go = Path(argv[5]) if len(argv) > 5 else None
    log = Path(log_name)
    streamed = kill.startswith("stream:")
    kill = kill.removeprefix("stream:")
    sink = event_sink(log, kill) if streamed else None
    storage = KillingStorage(open_store(store), kill)
    bridge = bridge_for(storage, log, kill)
    tokens = {b.tool_call_id: b.token for b in bridge.session.confirmations}
    while go is not None and not go.exists():
        time.sleep(0.001)
    results: list[str] = []
    for action in actions.split(","):
        verb, call_id, *rest = action.split(":")
        try:
            if verb == "approve":
                decided = bridge.approve(tokens[call_id], on_event=sink)
            else:
                reason = rest[0] if rest else None
                decided = bridge.reject(tokens[call_id], reason, on_event=sink)
            results.append(decided.run.status if decided.run else "none")
        except AkchatError as exc:
            results.append(type(exc).__name__)
    return {"results": results, "writes": storage.writes}


def main(argv: list[str]) -> None:
    print(json.dumps(run(argv)))


if __name__ == "__main__":
    main(sys.argv[1:])
