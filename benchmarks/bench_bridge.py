"""Bridge benchmark (not a test): the pydantic-ai bridge's cost per approved tool call.

One approved call end to end through ``PydanticAIBridge.approve``: the resolution (two CAS of
the envelope, the audit entry before the claim), the call's decision record, the continuation
claim on the run record, the ledger's claim and outcome, the agent's continuation
(pydantic-ai with its offline ``FunctionModel``) and the run's persist. Baselines are measured
in the same run, interleaved (their order rotates), on the same SQLite file:

* the agent alone: the same continuation as a host that keeps the run's history in storage
  would run it without the bridge: parse the stored history JSON (``messages``), build the
  ``DeferredToolResults``, ``agent.run_sync`` with them, and dump the new history
  (``all_messages_json``). The parse and the dump are inside this baseline because a stored
  run cannot be continued without them (the bridge does exactly these two calls, no more);
  before ADR-0134 they were left out of it and counted as the bridge's own cost;
* the raw CAS saves the bridge performed for that call: each of its writes (envelope and
  records, same sizes, same count) replayed directly on the storage;
* for reading the result only, the agent alone with one pass-through tool hook (a capability
  whose ``wrap_tool_execute`` just awaits the handler): what pydantic-ai itself charges for
  the hook the bridge's ledger needs (it copies the run context per capability and per hook
  and orders the capabilities on every run). That cost stays in the bridge's own cost.

The bridge's own cost is ``approve - agent alone``; the ratio compares it to the raw saves.
Target: ratio <= 1.3 (the writes are the floor; reads and decisions must stay small).

    .venv/bin/python benchmarks/bench_bridge.py [--calls 200] [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge, messages
from akchat_fsm.storage.sqlite import SQLiteStorage

DEFINITION = ChatDefinition("bench-bridge")
#: ``--clock cpu``: this thread's CPU time, which a shared disk's fsync queue does not inflate
#: (it leaves out the writes' I/O wait, so it states the raw saves low: a conservative ratio).
CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}
clock = CLOCKS["wall"]


def build_agent() -> Agent[None, Any]:
    def model(history: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(history) == 1:
            prompt = str(history[0].parts[-1].content)  # type: ignore[union-attr]
            return ModelResponse(
                parts=[ToolCallPart("send_email", {"to": "a@x"}, tool_call_id=prompt)]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, Any] = Agent(FunctionModel(model), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        return f"sent to {to}"

    return agent


class PassThrough(AbstractCapability[Any]):
    """A tool hook that does nothing: what pydantic-ai charges for any hook."""

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        return await handler(args)


def continuation(agent: Agent[None, Any], snapshot: str, call_id: str, *hooks: Any) -> float:
    """The continuation a host keeping its history in storage runs: parse, run, dump."""
    start = clock()
    history = messages(snapshot)
    results = DeferredToolResults(approvals={call_id: True})
    kwargs = {"capabilities": list(hooks)} if hooks else {}
    result = agent.run_sync(message_history=history, deferred_tool_results=results, **kwargs)
    result.all_messages_json()
    return clock() - start


class Recording:
    """Passes every call through and remembers the writes (to replay them as raw saves)."""

    def __init__(self, inner: SQLiteStorage) -> None:
        self.inner = inner
        self.writes: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, snapshot: Any, expected: int | None) -> bool:
        self.writes.append(("save", snapshot))
        return self.inner.save(snapshot, expected)

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        self.writes.append(("record", (key, text, processing)))
        return self.inner.save_record(session_id, key, text, expected, processing=processing)


class RawReplay:
    """Replays recorded writes as raw CAS saves on a session of its own."""

    def __init__(self, storage: SQLiteStorage) -> None:
        self.storage = storage
        self.cursor = 0
        self.versions: dict[str, int] = {}

    def replay(self, writes: list[tuple[str, Any]], n: int) -> float:
        start = clock()
        for kind, payload in writes:
            if kind == "save":
                snapshot = payload.model_copy(
                    update={"session_id": "raw", "cursor": self.cursor + 1}
                )
                assert self.storage.save(snapshot, self.cursor or None)
                self.cursor += 1
            else:
                key, text, processing = payload
                key = f"{key}-raw{n}"
                expected = self.versions.get(key)
                assert self.storage.save_record("raw", key, text, expected, processing=processing)
                self.versions[key] = (expected or 0) + 1
        return clock() - start


def measure(calls: int, path: Path) -> None:
    inner = SQLiteStorage(path)
    storage = Recording(inner)
    agent = build_agent()
    session = resume_chat_session(DEFINITION, session_id="bench", storage=storage)
    bridge = PydanticAIBridge(agent, session, storage)
    raw = RawReplay(inner)
    approve_s: list[float] = []
    agent_s: list[float] = []
    hooked_s: list[float] = []
    raw_s: list[float] = []
    writes_per_call = 0
    for n in range(calls + 10):
        paused = bridge.run(f"call{n}", run_id=f"r{n}")
        token = paused.pending[0].token
        timed: dict[str, float] = {}
        storage.writes.clear()

        def approve(token: str = token) -> float:
            start = clock()
            decided = bridge.approve(token)
            elapsed = clock() - start
            assert decided.run is not None and decided.run.status == "completed"
            return elapsed

        steps = {
            "approve": approve,
            "alone": lambda s=paused.snapshot, c=f"call{n}": continuation(agent, s, c),
            "hooked": lambda s=paused.snapshot, c=f"call{n}": continuation(
                agent, s, c, PassThrough()
            ),
        }
        order = list(steps)
        for name in order[n % 3 :] + order[: n % 3]:  # rotate which of the three runs first
            timed[name] = steps[name]()
        writes = list(storage.writes)
        replayed = raw.replay(writes, n)
        if n >= 10:  # warm-up first
            approve_s.append(timed["approve"])
            agent_s.append(timed["alone"])
            hooked_s.append(timed["hooked"])
            raw_s.append(replayed)
            writes_per_call = len(writes)
    inner.close()
    approve, alone, saves = (statistics.median(x) for x in (approve_s, agent_s, raw_s))
    own = statistics.median(a - b for a, b in zip(approve_s, agent_s, strict=True))
    hook = statistics.median(h - b for h, b in zip(hooked_s, agent_s, strict=True))
    print(f"pydantic-ai bridge: one approved tool call, SQLite file, same run ({clock.__name__})")
    print(f"  calls            {calls}")
    print(
        f"  writes per call  {writes_per_call}  (audit entry, envelope CAS x2, decision record, "
        "run claim, ledger x2, persist)"
    )
    print(f"  approve          median {approve * 1e3:8.3f} ms  (resolution + continuation)")
    print(
        f"  agent alone      median {alone * 1e3:8.3f} ms  (the same continuation, no bridge: "
        "parse history, run, dump history)"
    )
    print(f"  raw CAS saves    median {saves * 1e3:8.3f} ms  (the bridge's writes, replayed)")
    print(f"  bridge own cost  median {own * 1e3:8.3f} ms  (approve - agent alone)")
    print(
        f"  of which hook    median {hook * 1e3:8.3f} ms  (pydantic-ai's cost of one "
        f"pass-through tool hook: {hook / saves:.2f}x the raw saves)"
    )
    print(f"  ratio            {own / saves:8.2f}x  (bridge own cost / raw saves; target <= 1.3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall")
    args = parser.parse_args()
    global clock
    clock = CLOCKS[args.clock]
    with tempfile.TemporaryDirectory() as tmp:
        measure(args.calls, Path(tmp) / "bridge.db")


if __name__ == "__main__":
    main()
