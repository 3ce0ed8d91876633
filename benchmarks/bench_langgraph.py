"""LangGraph bridge benchmark (not a test): its cost per approved call against LangGraph alone.

One approved tool call end to end. The graph is langchain's ``create_agent`` with
``HumanInTheLoopMiddleware`` in ``per_call`` mode and an offline scripted chat model (it asks
for one gated ``send_email`` call, then answers with its result), on one ``SqliteSaver`` file.
Measured in the same run, interleaved (the order alternates call by call), on the same saver
(the bridge's calls go ``--per-session`` to a chat session: its envelope keeps every
confirmation, so one session for every call would time a growing envelope too):

* the bridge: ``LangGraphBridge.approve(token)`` on a run the bridge paused; the decision
  (two CAS of the session envelope, its audit entry and index record), the run claim, the
  ledger's claim and outcome around the body, LangGraph's resume, the run's persist; the
  graph also lists the bridge's ``ToolBoundaryMiddleware`` after HITL;
* LangGraph alone: the same graph without the boundary, paused by ``graph.invoke`` on a thread
  of its own and resumed with ``graph.invoke(Command(resume={interrupt_id: {"type":
  "approve"}}))``, nothing else; the same ``durability`` (``"sync"``, the bridge's default).

The ratio is ``approve / LangGraph alone`` (medians of wall time). Target: ratio <= 1.5.
Printed too, for information: the same pairs in CPU time (the process's, every thread), the
writes each side makes (the bridge's to the session store, LangGraph's to its
saver: every one a durable commit), the floor those writes set (each of the bridge's writes
replayed as a raw ``save_record`` of the same size on a session of its own, interleaved too:
``(alone + raw writes) / alone``), and the pause (the bridge's ``run`` against
``graph.invoke``).

    .venv/bin/python benchmarks/bench_langgraph.py [--calls 200] [--per-session 20] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.langgraph import LangGraphBridge, ToolBoundaryMiddleware
from akchat_fsm.storage.sqlite import SQLiteStorage

DEFINITION = ChatDefinition("bench-langgraph")
DURABILITY = "sync"


class ScriptedModel(FakeMessagesListChatModel):
    """Asks for one ``send_email`` call (its id from the human's text), then answers."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if results:
            reply = AIMessage(f"done: {results[-1].text}")
        else:
            asked = [m for m in messages if isinstance(m, HumanMessage)][-1].text
            call = {"id": asked, "name": "send_email", "args": {"to": "a@x"}}
            reply = AIMessage("", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def send_email(to: str) -> str:
    """Send an e-mail."""
    return f"sent to {to}"


def build_graph(saver: SqliteSaver, *, bridged: bool) -> Any:
    hitl = HumanInTheLoopMiddleware({"send_email": True}, interrupt_mode="per_call")
    middleware: list[Any] = [hitl, ToolBoundaryMiddleware(hitl)] if bridged else [hitl]
    tools = [StructuredTool.from_function(send_email)]
    return create_agent(
        ScriptedModel(responses=[]), tools, middleware=middleware, checkpointer=saver
    )


class Counted:
    """The session store, remembering the size of each write (to replay them as raw saves)."""

    def __init__(self, inner: SQLiteStorage) -> None:
        self.inner = inner
        self.writes: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, snapshot: Any, expected: int | None) -> bool:
        self.writes.append(len(snapshot.model_dump_json()))
        return bool(self.inner.save(snapshot, expected))

    def save_record(self, session_id: str, key: str, text: str, expected: int | None,
                    *, processing: bool = False) -> bool:  # fmt: skip
        self.writes.append(len(text))
        return bool(self.inner.save_record(session_id, key, text, expected, processing=processing))


def count_saver_writes(saver: SqliteSaver) -> list[int]:
    """Counts LangGraph's checkpointer writes (``put``, ``put_writes``) in ``[0]``."""
    count = [0]
    for name in ("put", "put_writes"):
        write = getattr(saver, name)

        def counted(*args: Any, _write: Any = write, **kwargs: Any) -> Any:
            count[0] += 1
            return _write(*args, **kwargs)

        setattr(saver, name, counted)
    return count


def raw_writes(storage: SQLiteStorage, sizes: list[int], n: int) -> float:
    """The same number of durable writes, of the same sizes, as plain ``save_record`` calls."""
    start = time.perf_counter()
    for i, size in enumerate(sizes):
        assert storage.save_record("raw", f"k{n}-{i}", "x" * size, None)
    return time.perf_counter() - start


def ask(call_id: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": call_id}]}


def measure(calls: int, per_session: int, where: Path, profile: bool) -> None:
    conn = sqlite3.connect(where / "checkpoints.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver_writes = count_saver_writes(saver)
    inner = SQLiteStorage(where / "sessions.db")
    storage = Counted(inner)
    graph = build_graph(saver, bridged=True)
    bridges: dict[int, LangGraphBridge] = {}

    def bridge_for(n: int) -> LangGraphBridge:
        """The bridge over the session of call ``n``: ``per_session`` calls to a session."""
        key = n // per_session
        if key not in bridges:
            bridges.clear()
            session = resume_chat_session(DEFINITION, session_id=f"bench-{key}", storage=storage)
            bridges[key] = LangGraphBridge(graph, session, storage)
        return bridges[key]

    alone = build_graph(saver, bridged=False)
    profiler = cProfile.Profile() if profile else None
    approve_s: list[float] = []
    alone_s: list[float] = []
    run_s: list[float] = []
    invoke_s: list[float] = []
    raw_s: list[float] = []
    approve_cpu: list[float] = []
    alone_cpu: list[float] = []
    counts: dict[str, int] = {}

    def bridged(n: int) -> None:
        bridge = bridge_for(n)
        start = time.perf_counter()
        paused = bridge.run(ask(f"b{n}"), thread_id=f"b{n}", run_id=f"r{n}")
        ran = time.perf_counter() - start
        assert paused.status == "paused"
        token = paused.pending[0].token
        storage.writes.clear()
        saver_writes[0] = 0
        if profiler is not None:
            profiler.enable()
        start, cpu = time.perf_counter(), time.process_time()
        decided = bridge.approve(token)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        if profiler is not None:
            profiler.disable()
        assert decided.run is not None and decided.run.output == "done: sent to a@x"
        counts.update(bridge=len(storage.writes), bridge_saver=saver_writes[0])
        replayed = raw_writes(inner, list(storage.writes), n)
        if n >= 10:  # warm-up first
            run_s.append(ran)
            approve_s.append(elapsed)
            approve_cpu.append(cpu)
            raw_s.append(replayed)

    def plain(n: int) -> None:
        config = {"configurable": {"thread_id": f"a{n}"}}
        start = time.perf_counter()
        paused = alone.invoke(ask(f"a{n}"), config, version="v2", durability=DURABILITY)
        ran = time.perf_counter() - start
        (interrupt,) = paused.interrupts
        resume = Command(resume={interrupt.id: {"type": "approve"}})
        saver_writes[0] = 0
        start, cpu = time.perf_counter(), time.process_time()
        done = alone.invoke(resume, config, version="v2", durability=DURABILITY)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        counts.update(alone_saver=saver_writes[0])
        assert done.value["messages"][-1].text == "done: sent to a@x"
        if n >= 10:
            invoke_s.append(ran)
            alone_s.append(elapsed)
            alone_cpu.append(cpu)

    for n in range(calls + 10):
        first, second = (bridged, plain) if n % 2 else (plain, bridged)
        first(n)
        second(n)
    inner.close()
    conn.close()
    approve, resumed = statistics.median(approve_s), statistics.median(alone_s)
    ran, invoked, raw = (statistics.median(x) for x in (run_s, invoke_s, raw_s))
    own = statistics.median(a - b for a, b in zip(approve_s, alone_s, strict=True))
    b, bs, s = counts["bridge"], counts["bridge_saver"], counts["alone_saver"]
    print("LangGraph bridge: one approved tool call, SQLite session store + SqliteSaver, same run")
    print(f"  calls            {calls}  ({per_session} to a chat session)")
    print(f"  writes per call  bridge {b} to the session store + {bs} to the saver; alone {s}")
    print(f"  approve          median {approve * 1e3:8.3f} ms  (decision, claims, resume, persist)")
    print(f"  LangGraph alone  median {resumed * 1e3:8.3f} ms  (Command(resume=...), same graph)")
    print(f"  bridge own cost  median {own * 1e3:8.3f} ms  (approve - alone)")
    print(f"  raw writes       median {raw * 1e3:8.3f} ms  (the bridge's {b} writes, replayed)")
    print(f"  own / raw writes {own / raw:8.2f}x  (the bridge's cost beyond its writes; info)")
    print(f"  floor ratio      {(resumed + raw) / resumed:8.2f}x  ((alone + raw writes) / alone)")
    cpu = statistics.median(approve_cpu) / statistics.median(alone_cpu)
    print(f"  cpu ratio        {cpu:8.2f}x  (the same pairs in CPU time, every thread; info)")
    print(f"  pause: run       median {ran * 1e3:8.3f} ms  vs graph.invoke {invoked * 1e3:8.3f} ms")
    print(f"  pause ratio      {ran / invoked:8.2f}x  (bridge run / graph.invoke; info)")
    print(f"  ratio            {approve / resumed:8.2f}x  (approve / alone; target <= 1.5)")
    if profiler is not None:
        print("\nwhere approve spends its time (cumulative, top 30):")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--per-session",
        type=int,
        default=20,
        help="approved calls per chat session (its envelope keeps every confirmation)",
    )
    parser.add_argument("--profile", action="store_true", help="profile the approves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        measure(args.calls, args.per_session, Path(tmp), args.profile)


if __name__ == "__main__":
    main()
