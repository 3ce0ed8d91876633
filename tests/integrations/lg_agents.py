"""A real langchain ``create_agent`` graph driven by an offline scripted chat model (no network).

The model is langchain-core's ``FakeMessagesListChatModel`` answering as a pure function of its
input (so it behaves the same after a resume, on another graph object or in another process):
with no tool result since the last human message it asks for the scripted calls, otherwise it
answers with every tool result it was given, by call id. Tool bodies and model requests are
counted in a :class:`Counts` (or a file, across processes), so "ran once" is counted.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware, hook_config
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from pydantic import Field

from akchat_fsm.integrations.langgraph import ToolBoundaryMiddleware

GATED = ("pay", "send_email")


@dataclass
class Counts:
    bodies: list[str] = field(default_factory=list)
    requests: int = 0
    #: How many answers (requests after a tool result) fail, as a provider going away would.
    fail_next_answer: int = 0
    #: Tools whose body raises (after it is counted), as a failed side effect would.
    failing_tools: set[str] = field(default_factory=set)
    #: A file every body appends a line to (bodies counted across processes).
    file: Path | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Called inside every body once it is counted (a long body, a sweep meanwhile).
    inside: Callable[[str], None] | None = None
    #: Every tool message the model was handed, as (tool-call id, text), request by request.
    handed: list[tuple[str, str]] = field(default_factory=list)

    def body(self, text: str) -> None:
        with self.lock:
            self.bodies.append(text)
            if self.file is not None:
                with self.file.open("a", encoding="utf-8") as out:
                    out.write(text + "\n")
        if self.inside is not None:
            self.inside(text)
        if text.partition(":")[0] in self.failing_tools:
            raise RuntimeError(f"{text} failed")


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    id: str


def answer(messages: Sequence[Any]) -> str:
    """The model's final text: every tool result it saw, by call id, in id order."""
    seen = {m.tool_call_id: m.text for m in messages if isinstance(m, ToolMessage)}
    return "; ".join(f"{k}={v}" for k, v in sorted(seen.items()))


class ScriptedModel(FakeMessagesListChatModel):
    """Asks for ``script`` first, then answers with the tool results (``bind_tools`` is a no-op:
    the script already names the tools)."""

    script: list[Any]
    #: The calls of later turns, one list per turn (asked after the previous turn's results).
    then: list[list[Any]] = Field(default_factory=list)
    counts: Any = None

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:  # fmt: skip
        failing = False
        if self.counts is not None:
            with self.counts.lock:
                self.counts.requests += 1
                self.counts.handed += [
                    (m.tool_call_id, m.text) for m in messages if isinstance(m, ToolMessage)
                ]
                failing = self.counts.fail_next_answer > 0 and any(
                    isinstance(m, ToolMessage) for m in messages
                )
                if failing:
                    self.counts.fail_next_answer -= 1
        if failing:
            raise ConnectionError("model provider went away")
        last_human = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        turn = sum(1 for m in messages[last_human:] if isinstance(m, AIMessage) and m.tool_calls)
        turns = [self.script, *self.then]
        if turn < len(turns):
            calls = [{"id": c.id, "name": c.tool, "args": c.args} for c in turns[turn]]
            message = AIMessage("", tool_calls=calls)
        else:
            message = AIMessage(answer(messages))
        return ChatResult(generations=[ChatGeneration(message=message)])


def tools(counts: Counts) -> list[StructuredTool]:
    def send_email(to: str) -> str:
        """Send an e-mail."""
        counts.body(f"send_email:{to}")
        return f"sent to {to}"

    def pay(amount: int) -> str:
        """Pay an amount."""
        counts.body(f"pay:{amount}")
        return f"paid {amount}"

    def lookup(order: str) -> str:
        """Look an order up (needs no approval)."""
        counts.body(f"lookup:{order}")
        return f"order {order} shipped"

    return [StructuredTool.from_function(f) for f in (send_email, pay, lookup)]


class JumpToTools(AgentMiddleware[Any, Any, Any]):
    """Another middleware's ``after_model`` jumping straight to the tools (the HITL bypass)."""

    @hook_config(can_jump_to=["tools"])
    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return {"jump_to": "tools"}


def build_graph(
    calls: Sequence[Call],
    counts: Counts,
    checkpointer: Any,
    *,
    mode: str = "per_call",
    extra: Sequence[Any] = (),
    then: Sequence[Sequence[Call]] = (),
) -> Any:
    hitl = HumanInTheLoopMiddleware(
        {name: True for name in GATED},
        interrupt_mode=mode,  # type: ignore[arg-type]
    )
    model = ScriptedModel(
        responses=[], script=list(calls), then=[list(t) for t in then], counts=counts
    )
    middleware = [hitl, *extra, ToolBoundaryMiddleware(hitl)]
    return create_agent(model, tools(counts), middleware=middleware, checkpointer=checkpointer)


def open_saver(spec: str) -> tuple[Any, Callable[[], None]]:
    """LangGraph's own checkpointer from ``sqlite:<path>`` or ``postgres:<url>|<schema>`` (a
    schema of its own, so its fixed table names meet no other test's), and its closer."""
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(rest, check_same_thread=False)
        return SqliteSaver(conn), conn.close
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    url, _, schema = rest.partition("|")
    pg = psycopg.connect(
        url, autocommit=True, row_factory=dict_row, options=f"-c search_path={schema}"
    )
    saver = PostgresSaver(pg)  # type: ignore[arg-type]
    saver.setup()
    return saver, pg.close


@contextlib.asynccontextmanager
async def open_async_saver(spec: str) -> AsyncIterator[Any]:
    """LangGraph's asyncio checkpointer on the same ``sqlite:`` / ``postgres:`` specs as
    :func:`open_saver` (``AsyncSqliteSaver`` / ``AsyncPostgresSaver``), closed on exit."""
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(rest) as saver:
            yield saver
        return
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    url, _, schema = rest.partition("|")
    pg = await psycopg.AsyncConnection.connect(
        url, autocommit=True, row_factory=dict_row, options=f"-c search_path={schema}"
    )
    try:
        saver = AsyncPostgresSaver(pg)  # type: ignore[arg-type]
        await saver.setup()
        yield saver
    finally:
        await pg.close()
