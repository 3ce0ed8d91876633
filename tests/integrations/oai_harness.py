"""One facade over both bridge flavours, so each test body exists once.

:class:`Host` opens a fresh session and bridge per call (as another process would) and runs
the asyncio flavour on a private event loop. Tool bodies append to an execution log (a list,
or a file for tests that cross processes): the log, not the library, says what ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, RunConfig, function_tool
from oai_models import Batch, ScriptedModel
from process_helpers import append_line

from akchat_fsm.integrations.openai_agents import AsyncOpenAIAgentsBridge, OpenAIAgentsBridge
from akchat_fsm.session import ChatDefinition, resume_chat_session, resume_chat_session_async
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

DEFINITION = ChatDefinition("support")
RUN_CONFIG = RunConfig(tracing_disabled=True)


class ExecutionLog:
    """Every tool body appends ``"<tool>:<arg>"``; a file log survives SIGKILL (O_APPEND)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.lines: list[str] = []

    def append(self, line: str) -> None:
        if self.path is None:
            self.lines.append(line)
            return
        append_line(self.path, line)

    def read(self) -> list[str]:
        if self.path is None:
            return list(self.lines)
        return self.path.read_text().splitlines() if self.path.exists() else []


def make_tools(log: ExecutionLog) -> list[FunctionTool]:
    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email (the side effect that must not happen twice)."""
        log.append(f"send_email:{to}")
        return f"sent to {to}"

    @function_tool
    def lookup(q: str) -> str:
        """Look something up (no approval needed)."""
        log.append(f"lookup:{q}")
        return f"found {q}"

    return [send_email, lookup]


def make_agent(batches: Sequence[Batch], log: ExecutionLog) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(batches)
    return Agent(name="assistant", model=model, tools=make_tools(log)), model


@dataclass
class Host:
    """A host that opens a new session and bridge for every call (sync or asyncio flavour)."""

    flavour: str
    agent: Agent[Any]
    storage: Any = field(default_factory=MemoryStorage)
    session_id: str = "s1"
    clock: Callable[[], int] | None = None
    ttl_ms: int | None = None
    idempotent_tools: tuple[str, ...] = ()

    def bridge(self) -> Any:
        options: dict[str, Any] = {"run_config": RUN_CONFIG}
        if self.ttl_ms is not None:
            options["ttl_ms"] = self.ttl_ms
        if self.idempotent_tools:
            options["idempotent_tools"] = self.idempotent_tools
        clock = {} if self.clock is None else {"clock": self.clock}
        if self.clock is not None:
            options["clock"] = self.clock
        if self.flavour == "sync":
            session = resume_chat_session(
                DEFINITION, session_id=self.session_id, storage=self.storage, **clock
            )
            return OpenAIAgentsBridge(self.agent, session, self.storage, **options)

        async def open_async() -> AsyncOpenAIAgentsBridge:
            storage = self._async_storage()
            session = await resume_chat_session_async(
                DEFINITION, session_id=self.session_id, storage=storage, **clock
            )
            return AsyncOpenAIAgentsBridge(self.agent, session, storage, **options)

        runner = asyncio.Runner()
        return _Blocking(runner, runner.run(open_async()))

    def _async_storage(self) -> Any:
        if isinstance(self.storage, MemoryStorage):
            return AsyncMemoryStorage(self.storage)
        return self.storage

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.bridge(), name)


class _Blocking:
    """Calls an async bridge's methods to completion on its own event loop."""

    def __init__(self, runner: asyncio.Runner, bridge: AsyncOpenAIAgentsBridge) -> None:
        self.runner, self.inner = runner, bridge

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.runner.run(method(*args, **kwargs))

        return call
