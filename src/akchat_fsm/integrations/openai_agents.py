"""OpenAI Agents SDK bridge: ``needs_approval`` tools that run once, across processes and crashes.

The SDK pauses a run with ``ToolApprovalItem`` interruptions and continues it from a
``RunState``; it guards neither the saved state (restored twice, it is approved and continued
twice) nor the tool body (docs/adr/0100-tool-execution-ledger.md). The shared bridge
(:mod:`._bridge`) does everything that is not the SDK's: confirmations, the run record under
compare-and-set, continuing exactly once, reconcile. This module is only the SDK's side:

* :func:`guard_agent` copies the agent graph with every ``FunctionTool`` wrapped, so each body
  runs through the ledger: at most once per SDK call id, a repeat gets the recorded output;
* :class:`OpenAIRuntime` starts a run, and resumes one from the ``RunState`` JSON kept in the
  run record, approving or rejecting each interruption as the confirmations were decided (a
  rejection's or an expiry's message reaches the model as the tool's output);
* :class:`OpenAIAgentsBridge` / :class:`AsyncOpenAIAgentsBridge` put the two together.

The SDK approves or rejects an interruption, nothing else: it has no way to run a call with
other arguments, so ``edit`` is refused (:class:`~akchat_fsm.errors.EditNotAllowed`, nothing
written; ADR-0135).
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from agents import Agent, FunctionTool, RunConfig, Runner, RunState, ToolApprovalItem
from agents.exceptions import AgentsException
from agents.tool_context import ToolContext

from ..errors import AkchatError, ConfigError
from ..session.session import AsyncChatSession, ChatSession
from ..wire.session import ConfirmationBinding
from ._bridge import (
    AsyncBridge,
    Bridge,
    CallDecision,
    ExecutionGuard,
    PendingCall,
    RunOutcome,
    RunRecord,
    RuntimeResult,
    in_a_loop_message,
)
from ._bridge_io import stored_json
from ._sink import Sink
from .ledger import RecordedToolFailure, recorded_failure

__all__ = [
    "AsyncOpenAIAgentsBridge",
    "OpenAIAgentsBridge",
    "OpenAIRuntime",
    "RecordedToolFailure",
    "RunOutcome",
    "guard_agent",
]

RUNTIME = "openai-agents"
#: Why ``edit`` is refused here: the SDK has no edited approval (ADR-0135).
NO_EDITS = (
    "The OpenAI Agents SDK approves or rejects a tool call as the model made it and cannot run "
    "it with other arguments, so this bridge offers no reviewer edits; approve or reject it."
)
T = TypeVar("T")
Invoke = Callable[[ToolContext[Any], str], Awaitable[Any]]
#: Runs one tool invocation: ``(inner, ctx, args_json) -> output``.
Guard = Callable[[Invoke, ToolContext[Any], str], Awaitable[Any]]

UNGUARDABLE_HANDOFF = (
    "A Handoff object hides its target agent, so its tools cannot be guarded by the ledger; "
    "hand off to the Agent itself."
)
IN_A_LOOP = in_a_loop_message("OpenAIAgentsBridge")
UNDECIDED = "The saved run state interrupts on call {call_id!r}, which has no decision."


# The guard of the continuation running in this task (asyncio copies it into the tasks the
# SDK starts for parallel tool calls); unset for a new run.
_current: contextvars.ContextVar[ExecutionGuard | None] = contextvars.ContextVar(
    "akchat_openai_guard", default=None
)


def _pending(item: ToolApprovalItem) -> PendingCall:
    """An interruption as the shared bridge's call: the SDK call id, tool name, arguments."""
    raw = item.raw_item
    fields = raw if isinstance(raw, dict) else vars(raw)
    return PendingCall(
        str(fields.get("call_id")), item.tool_name or "", _args(fields.get("arguments"))
    )


def _args(arguments: object) -> dict[str, Any]:
    """The model's argument JSON as the confirmation's input object (what the reviewer sees)."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        parsed = arguments
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return str(value)
    return value


def guard_agent(agent: Agent[Any], guard: Guard) -> Agent[Any]:
    """A copy of ``agent`` (and of every agent it hands off to) whose function tools run through
    ``guard``. Names, schemas and ``needs_approval`` are kept, so a ``RunState`` saved by the
    original graph restores on the copy. Every tool is wrapped, not only the gated ones: the
    SDK runs ungated siblings in the pausing run and again in a replayed continuation.
    """
    copies: dict[int, Agent[Any]] = {}

    def wrap(tool: Any) -> Any:
        if not isinstance(tool, FunctionTool):
            return tool
        inner = tool.on_invoke_tool

        async def invoke(ctx: ToolContext[Any], args_json: str) -> Any:
            return await guard(inner, ctx, args_json)

        return dataclasses.replace(tool, on_invoke_tool=invoke)

    def copy(node: Agent[Any]) -> Agent[Any]:
        if id(node) not in copies:
            clone = copies[id(node)] = node.clone(tools=[wrap(t) for t in node.tools], handoffs=[])
            targets = [t for t in node.handoffs if isinstance(t, Agent)]
            if len(targets) != len(node.handoffs):
                raise ConfigError(UNGUARDABLE_HANDOFF)
            clone.handoffs = [copy(target) for target in targets]
        return copies[id(node)]

    return copy(agent)


class OpenAIRuntime:
    """The shared bridge's runtime port for one agent graph (asyncio; the sync port runs each
    call on a private event loop). Each resume restores a fresh ``RunState`` from the stored
    JSON: the SDK mutates the state it runs, so the saved snapshot is never reused in memory."""

    runtime = RUNTIME

    def __init__(
        self,
        agent: Agent[Any],
        guard: ExecutionGuard,
        run_config: RunConfig | None,
        sink: Sink | None = None,
    ) -> None:
        self.agent = guard_agent(agent, self._guarded)
        #: The guard of a new run (no approvals); a continuation brings its own.
        self.guard = guard
        self.run_config = run_config
        #: This call's event sink: the run goes through ``Runner.run_streamed`` and each of
        #: its ``stream_events()`` is handed to it (ADR-0137).
        self.sink = sink
        #: Deliver with ``await sink.deliver`` (an asyncio bridge) or call it (a sync one).
        self.awaits_sink = True

    def streaming(self, sink: Sink | None, *, awaits: bool = True) -> OpenAIRuntime:
        """This port for one bridge call with ``sink`` (the same guarded agent graph)."""
        if sink is None:
            return self
        port = copy.copy(self)
        port.sink, port.awaits_sink = sink, awaits
        return port

    async def _guarded(self, inner: Invoke, ctx: ToolContext[Any], args_json: str) -> Any:
        guard = _current.get() or self.guard
        body = lambda: inner(ctx, args_json)  # noqa: E731 - the ledger calls it at most once
        if ctx.tool_call_id in guard.approved:
            done = await guard.execute(ctx.tool_call_id, ctx.tool_name, args_json, body)
        else:
            # An ungated call (a sibling in the pausing run, or a new turn's): it needs no
            # confirmation, and its body still runs at most once per call id.
            done = await guard.execute_ungated(ctx.tool_call_id, ctx.tool_name, args_json, body)
        if not done.ran and done.entry.outcome == "raised":
            raise recorded_failure(done.entry)
        return done.value

    async def start(self, input: Any, **kwargs: Any) -> RuntimeResult:
        return await self._run(input, None, kwargs)

    async def resume(
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        stored = stored_json(run.snapshot, "stored run snapshot")
        state = await RunState.from_json(self.agent, stored)
        by_call = {d.tool_call_id: d for d in decisions}
        for item in state.get_interruptions():
            call_id = _pending(item).tool_call_id
            decision = by_call.get(call_id)
            if decision is None:
                raise ConfigError(UNDECIDED.format(call_id=call_id))
            if decision.approved:
                state.approve(item)
            else:
                state.reject(item, rejection_message=decision.message)
        return await self._run(state, guard, {})

    async def _run(
        self, input: Any, guard: ExecutionGuard | None, kwargs: Mapping[str, Any]
    ) -> RuntimeResult:
        token = _current.set(guard)
        try:
            if self.sink is None:
                result = await Runner.run(self.agent, input, run_config=self.run_config, **kwargs)
            else:
                result = await self._streamed(self.sink, input, kwargs)
        except AgentsException as exc:
            # The SDK wraps what a tool hook raised; ours (ledger refusals, storage) come out typed.
            if isinstance(exc.__cause__, AkchatError):
                raise exc.__cause__ from exc
            raise
        finally:
            _current.reset(token)
            # A sibling the SDK cancelled may still be recording its outcome: let it, before
            # the sync port's private loop closes and would cancel that write.
            await (guard or self.guard).drain()
        snapshot = json.dumps(result.to_state().to_json(), separators=(",", ":"))
        if result.interruptions:
            return RuntimeResult(snapshot, tuple(_pending(i) for i in result.interruptions))
        return RuntimeResult(snapshot, None, result.final_output, _jsonable(result.final_output))

    async def _streamed(self, sink: Sink, input: Any, kwargs: Mapping[str, Any]) -> Any:
        """``Runner.run_streamed``, every event consumed (a detached sink never stops the
        run), the run's own error raised as ``Runner.run`` would raise it."""
        result = Runner.run_streamed(self.agent, input, run_config=self.run_config, **kwargs)
        async for event in result.stream_events():
            if self.awaits_sink:
                await sink.deliver(event)
            else:
                sink(event)
        return result


class _SyncRuntime:
    """The sync bridge's port: each call runs the asyncio port on a private event loop."""

    runtime = RUNTIME

    def __init__(self, inner: OpenAIRuntime) -> None:
        self.inner = inner

    # The sync bridge refuses a running event loop before calling these (``_OutsideALoop``).
    def start(self, input: Any, **kwargs: Any) -> RuntimeResult:
        return asyncio.run(self.inner.start(input, **kwargs))

    def resume(self, *args: Any) -> RuntimeResult:
        return asyncio.run(self.inner.resume(*args))


class OpenAIAgentsBridge(Bridge):
    """Human approval for an openai-agents ``Agent`` over a sync :class:`ChatSession`.

    ``OpenAIAgentsBridge(agent, session, storage, *, run_config=None, ttl_ms=300_000,
    owner=None, clock=now_ms, idempotent_tools=())``: ``storage`` is the session's own
    (record-capable) storage; ``run_config`` is passed to every ``Runner.run``.

    ``run(input)`` starts a run; an interrupted run is saved and each interruption becomes a
    confirmation. ``approve``/``reject`` (from any process) decide one; the decision that
    settles the run's last call continues it, once. Tool bodies run at most once per call id.
    """

    runtime_name = RUNTIME

    def __init__(
        self,
        agent: Agent[Any],
        session: ChatSession,
        storage: Any,
        *,
        run_config: RunConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.runtime = OpenAIRuntime(agent, self.execution_guard(), run_config)

    def _runtime(self, sink: Sink | None = None) -> _SyncRuntime:
        return _SyncRuntime(self.runtime.streaming(sink, awaits=False))

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return NO_EDITS

    def run(
        self,
        input: Any,
        *,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> RunOutcome:
        """Run the agent on ``input``; ``paused`` (its pending confirmations) or ``completed``.
        ``on_event``: called with each of the SDK's ``StreamEvent`` objects as the run emits
        them (``Runner.run_streamed``, ADR-0137; an asyncio bridge also awaits an async sink)."""
        return self._start(run_id, (input,), kwargs, on_event)


class AsyncOpenAIAgentsBridge(AsyncBridge):
    """The asyncio twin of :class:`OpenAIAgentsBridge` (an :class:`AsyncChatSession`)."""

    runtime_name = RUNTIME

    def __init__(
        self,
        agent: Agent[Any],
        session: AsyncChatSession,
        storage: Any,
        *,
        run_config: RunConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.runtime = OpenAIRuntime(agent, self.execution_guard(), run_config)

    def _runtime(self, sink: Sink | None = None) -> OpenAIRuntime:
        return self.runtime.streaming(sink)

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return NO_EDITS

    async def run(
        self,
        input: Any,
        *,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> RunOutcome:
        """Run the agent on ``input``; ``paused`` (its pending confirmations) or ``completed``.
        ``on_event``: called with each of the SDK's ``StreamEvent`` objects as the run emits
        them (``Runner.run_streamed``, ADR-0137; an asyncio bridge also awaits an async sink)."""
        return await self._start(run_id, (input,), kwargs, on_event)
