"""One host process of the cross-process bridge tests: ``python oai_worker.py SPEC``.

``SPEC`` is JSON: ``store`` (``sqlite:<path>`` or ``postgres:<url>|<table>``), ``log`` (the
execution log), ``command`` (``start`` / ``approve`` / ``reject`` / ``settle`` /
``reconcile``), its arguments, and optionally ``go`` (a file to wait for, so racers start
together) and ``kill``: ``write:<n>:before|after`` (SIGKILL this process around its n-th
storage write, the shared :class:`process_helpers.KillingStorage`) or ``body:before|after`` (inside
the gated tool body, around its side effect) or, with ``stream`` true, ``event:<n>`` (on the
n-th streamed event). ``stream`` (optional, true): ``start`` / ``approve`` / ``reject``
stream their run (``on_event=``), each event an fsynced ``event:<type>`` line in the log.
Prints one JSON line: what the call returned or raised, and how many writes it made.

The execution log is the proof's ground truth: every tool body and every model request
appends a line with ``O_APPEND`` + ``fsync``, so it survives the SIGKILL of its writer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from agents import Agent, RunConfig, function_tool
from agents.tool_context import ToolContext
from oai_harness import DEFINITION, ExecutionLog
from oai_models import ScriptedModel
from process_helpers import KillingStorage, open_store

from akchat_fsm.errors import AkchatError
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge
from akchat_fsm.session import resume_chat_session

BATCHES = [[("send_email", {"to": "a@x"}), ("lookup", {"q": "z"}), ("send_email", {"to": "b@x"})]]


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class LoggedModel(ScriptedModel):
    def __init__(self, log: ExecutionLog) -> None:
        super().__init__(BATCHES)
        self.log = log

    async def get_response(self, system_instructions: Any, input: Any, *a: Any, **k: Any) -> Any:
        response = await super().get_response(system_instructions, input, *a, **k)
        self.log.append("model:" + ",".join(getattr(o, "call_id", "text") for o in response.output))
        return response


def agent_for(log: ExecutionLog, kill: str = "none") -> Agent[Any]:
    @function_tool(needs_approval=True)
    def send_email(ctx: ToolContext[Any], to: str) -> str:
        """Send an email."""
        if kill == "body:before":
            die()
        log.append(f"body:{ctx.tool_call_id}")
        if kill == "body:after":
            die()
        return f"sent to {to}"

    @function_tool
    def lookup(ctx: ToolContext[Any], q: str) -> str:
        """Look something up."""
        log.append(f"body:{ctx.tool_call_id}")
        return f"found {q}"

    return Agent(name="assistant", model=LoggedModel(log), tools=[send_email, lookup])


def open_bridge(spec: dict[str, Any]) -> tuple[OpenAIAgentsBridge, KillingStorage]:
    """The bridge a host process opens: SQLite, the scripted agent, the execution log."""
    log = ExecutionLog(Path(spec["log"]))
    kill = spec.get("kill", "none")
    storage = KillingStorage(open_store(spec["store"]), kill)
    session = resume_chat_session(DEFINITION, session_id="s1", storage=storage)
    agent = agent_for(log, kill)
    bridge = OpenAIAgentsBridge(
        agent, session, storage, run_config=RunConfig(tracing_disabled=True)
    )
    return bridge, storage


def event_sink(spec: dict[str, Any]) -> Any:
    """The streamed call's sink: a log line per event, a SIGKILL on the ``event:<n>``-th."""
    if not spec.get("stream"):
        return None
    log = ExecutionLog(Path(spec["log"]))
    kill = spec.get("kill", "none")
    target = int(kill.split(":")[1]) if kill.startswith("event:") else 0
    seen = [0]

    def sink(event: Any) -> None:
        seen[0] += 1
        log.append(f"event:{type(event).__name__}")
        if seen[0] == target:
            die()

    return sink


def perform(bridge: OpenAIAgentsBridge, spec: dict[str, Any]) -> Any:
    command = spec["command"]
    sink = event_sink(spec)
    if command == "start":
        return bridge.run(spec["prompt"], run_id=spec["run_id"], on_event=sink)
    if command == "approve":
        return bridge.approve(spec["token"], on_event=sink)
    if command == "reject":
        return bridge.reject(spec["token"], spec.get("reason"), on_event=sink)
    if command == "settle":
        return bridge.settle_execution(spec["call_id"], ran=spec["ran"], result=spec.get("result"))
    return bridge.reconcile()


def main(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("go"):
        while not os.path.exists(spec["go"]):  # a start line for racers, not a timing bound
            time.sleep(0.005)
    bridge, storage = open_bridge(spec)
    try:
        result = perform(bridge, spec)
    except AkchatError as exc:
        return {"error": type(exc).__name__, "message": str(exc), "writes": storage.writes}
    return {"result": describe(result), "writes": storage.writes}


def describe(result: Any) -> Any:
    if hasattr(result, "binding"):  # a decision, and its run when it went on to continue it
        return {"binding": describe(result.binding), "run": result.run and describe(result.run)}
    if hasattr(result, "runs"):  # a reconcile report
        return {
            "runs": [describe(r) for r in result.runs],
            "unknown": [e.tool_call_id for e in result.execution_unknown],
        }
    if hasattr(result, "run_id"):
        return {
            "run_id": result.run_id,
            "status": result.status,
            "output": result.output,
            "replayed": result.replayed,
            "pending": [[p.token, p.tool_call_id] for p in result.pending],
        }
    if hasattr(result, "token"):
        return {"binding": [result.token, result.tool_call_id, str(result.status)]}
    return {"entry": [result.tool_call_id, str(result.state)]}


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
