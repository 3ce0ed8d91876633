"""pydantic-ai bridge: durable human approval of deferred tool calls, each body run at most once.

Needs the ``pydantic-ai`` extra (``pydantic-ai-slim``). The agent's ``output_type`` must include
``DeferredToolRequests``; tools that need a human are marked ``requires_approval=True`` (or any
of pydantic-ai's per-call ways). What this module adds to the shared bridge
(:mod:`._bridge`) is only pydantic-ai's side:

* a run that ends with ``DeferredToolRequests`` becomes a paused run: its message history JSON
  is the run's snapshot, each ``approvals`` call a confirmation, each ``calls`` entry (external
  execution) a call passed through to the host untouched;
* continuing builds ``DeferredToolResults`` from the decisions (``True``; ``ToolApproved(
  override_args=...)`` for a reviewer's edit, ADR-0135; or ``ToolDenied`` with the reviewer's
  reason or the expiry sentence, so the model reads why) plus the host's external results, and
  resumes ``agent.run(message_history=..., deferred_tool_results=...)``;
* a capability's ``wrap_tool_execute`` sends every approved call's body through the ledger: a
  repeat continuation (a recovery after a crash, a second process) replays the recorded result.

:class:`PydanticAIBridge` (sync: ``run_sync``) and :class:`AsyncPydanticAIBridge` (asyncio:
``run``) differ only in how they call the agent.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic_ai import (
    ApprovalRequired,
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_core import to_jsonable_python

from ..errors import ConfigError
from ..wire.bounded import thaw
from ..wire.session import ConfirmationBinding
from ._bridge import (
    AsyncBridge,
    Bridge,
    BridgeReport,
    CallDecision,
    Decided,
    ExecutionGuard,
    PendingCall,
    RunInProgress,
    RunOutcome,
    RunRecord,
    RuntimeResult,
)
from ._sink import Sink
from .ledger import ExecutionUnknown, LedgerEntry, RecordedToolFailure, recorded_failure

__all__ = [
    "RUNTIME",
    "AsyncPydanticAIBridge",
    "BridgeReport",
    "Decided",
    "ExecutionUnknown",
    "PydanticAIBridge",
    "RecordedToolFailure",
    "RunInProgress",
    "RunOutcome",
    "deferred_results",
    "messages",
    "pending_calls",
]

RUNTIME = "pydantic-ai"


# --------------------------------------------------------------------------- pure mapping


def pending_calls(requests: DeferredToolRequests) -> tuple[PendingCall, ...]:
    """The deferred calls of a paused run: approvals first, then external calls (by id)."""
    calls = [
        PendingCall(
            part.tool_call_id,
            part.tool_name,
            part.args_as_dict(),
            "approval",
            to_jsonable_python(requests.metadata.get(part.tool_call_id)),
        )
        for part in requests.approvals
    ]
    calls += [
        PendingCall(
            part.tool_call_id,
            part.tool_name,
            part.args_as_dict(),
            "external",
            to_jsonable_python(requests.metadata.get(part.tool_call_id)),
        )
        for part in requests.calls
    ]
    return tuple(calls)


def _approval(decision: CallDecision) -> Any:
    if not decision.approved:
        return ToolDenied(decision.message or "")
    if decision.args is not None:  # a reviewer's edit: the body runs with these arguments
        return ToolApproved(override_args=thaw(decision.args))
    return True


def deferred_results(run: RunRecord, decisions: Sequence[CallDecision]) -> DeferredToolResults:
    """pydantic-ai's ``DeferredToolResults`` for ``decisions`` and the run's external results."""
    approvals: dict[str, Any] = {d.tool_call_id: _approval(d) for d in decisions}
    metadata = {
        c.tool_call_id: dict(c.metadata) for c in run.calls if isinstance(c.metadata, Mapping)
    }
    return DeferredToolResults(calls=dict(run.external), approvals=approvals, metadata=metadata)


def messages(snapshot: str) -> list[Any]:
    """A run snapshot (``RunOutcome.snapshot``) as pydantic-ai ``ModelMessage`` objects."""
    return ModelMessagesTypeAdapter.validate_json(snapshot)


def _result(result: Any) -> RuntimeResult:
    snapshot = result.all_messages_json().decode("utf-8")
    output = result.output
    if isinstance(output, DeferredToolRequests):
        return RuntimeResult(snapshot, pending_calls(output))
    return RuntimeResult(snapshot, None, output, to_jsonable_python(output))


#: What a tool body raises to ask for approval (or defer) instead of acting: not an outcome.
DEFERRALS = (ApprovalRequired, CallDeferred)


class _LedgerCapability(AbstractCapability[Any]):
    """Runs every call's body through the ledger (a repeat replays its record): an approved
    call's through ``execute``, one that needs no approval through ``execute_ungated``."""

    def __init__(self, guard: ExecutionGuard) -> None:
        self.guard = guard

    async def wrap_tool_execute(
        self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        key = (call.tool_call_id, call.tool_name, call.args_as_dict())
        if ctx.tool_call_approved:
            execution = await self.guard.execute(*key, lambda: handler(args))
        else:  # a body that raises a deferral releases its claim: approved, it runs later
            execution = await self.guard.execute_ungated(
                *key, lambda: handler(args), declined=DEFERRALS
            )
        if execution.ran:
            return execution.value
        return _replayed(execution.entry)


def _replayed(entry: LedgerEntry) -> Any:
    if entry.outcome != "raised":
        return entry.result
    message = (entry.error or "").partition(": ")[2]
    if entry.error_type == "ModelRetry":
        raise ModelRetry(message)  # the model reads the same retry prompt as the first time
    raise recorded_failure(entry)


# --------------------------------------------------------------------------- runtime ports


class _Runtime:
    runtime = RUNTIME

    def __init__(self, agent: Any, guard: ExecutionGuard, sink: Sink | None = None) -> None:
        self.agent = agent
        #: The guard of a new run's calls (none approved); a continuation brings its own.
        self.guard = guard
        #: This call's event sink: the run is streamed through pydantic-ai's
        #: ``event_stream_handler`` (the events of each model request and tool-call node).
        self.sink = sink

    def _streamed(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        if self.sink is None:
            return kwargs
        return {**kwargs, "event_stream_handler": self._handler}  # _one_stream checked it

    async def _handler(self, ctx: Any, events: AsyncIterable[Any]) -> None:
        sink = self.sink
        assert sink is not None
        # Every event is consumed, delivered or not: a detached sink never stops the node.
        async for event in events:
            await self._deliver(sink, event)

    async def _deliver(self, sink: Sink, event: Any) -> None:
        sink(event)  # a sync bridge's sink is a plain callable, called from the agent's loop

    def _start_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        capabilities = [*(kwargs.pop("capabilities", None) or ()), _LedgerCapability(self.guard)]
        return self._streamed({**kwargs, "capabilities": capabilities})

    def _resume_kwargs(
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> dict[str, Any]:
        return self._streamed(
            {
                "message_history": messages(run.snapshot),
                "deferred_tool_results": deferred_results(run, decisions),
                "capabilities": [_LedgerCapability(guard)],
            }
        )

    def start(self, *args: Any, **kwargs: Any) -> RuntimeResult:
        return _result(self.agent.run_sync(*args, **self._start_kwargs(kwargs)))

    def resume(
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        return _result(self.agent.run_sync(**self._resume_kwargs(run, decisions, guard)))


class _AsyncRuntime(_Runtime):
    async def _deliver(self, sink: Sink, event: Any) -> None:
        await sink.deliver(event)  # a plain or an async sink

    async def start(self, *args: Any, **kwargs: Any) -> RuntimeResult:  # type: ignore[override]
        return _result(await self.agent.run(*args, **self._start_kwargs(kwargs)))

    async def resume(  # type: ignore[override]
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        return _result(await self.agent.run(**self._resume_kwargs(run, decisions, guard)))


# --------------------------------------------------------------------------- facades


def _check_editable(tools: object) -> frozenset[str]:
    names = () if isinstance(tools, str) or not isinstance(tools, Iterable) else tuple(tools)
    if isinstance(tools, str) or not all(isinstance(t, str) for t in names):
        raise ConfigError("editable_tools must be a sequence of tool names (str).")
    return frozenset(names)


def _refusal(editable: frozenset[str], binding: ConfirmationBinding) -> str | None:
    """pydantic-ai takes ``override_args`` for any approval; the host names the tools whose
    arguments a reviewer may change (none unless named: an edit is opted into per tool)."""
    if binding.action in editable:
        return None
    return (
        f"Tool {binding.action!r} is not in this bridge's editable_tools; approve or reject "
        "the call as shown, or name the tool in editable_tools=."
    )


def _one_stream(on_event: object, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for a start, refused (``ConfigError``) before the run id is claimed when it
    asks for two streams: a caller's mistake must not use up the run id."""
    if on_event is not None and kwargs.get("event_stream_handler") is not None:
        raise ConfigError(
            "Pass on_event= or event_stream_handler=, not both.",
            hint="on_event streams the continuations too; event_stream_handler only a start.",
        )
    return kwargs


class PydanticAIBridge(Bridge):
    """A pydantic-ai ``agent`` whose approvals live in a :class:`ChatSession` (sync).

    ``PydanticAIBridge(agent, session, storage, ttl_ms=300_000, owner=None,
    idempotent_tools=(), editable_tools=())``: ``storage`` is the session's storage (it must
    have the ``RecordStorage`` capability); ``idempotent_tools`` names tools whose unknown
    executions may be run again; ``editable_tools`` names the tools a reviewer may
    :meth:`~Bridge.edit` (pydantic-ai's ``ToolApproved(override_args=...)``; none by default).
    """

    runtime_name = RUNTIME

    def __init__(
        self,
        agent: Any,
        session: Any,
        storage: Any,
        *,
        editable_tools: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.agent = agent
        self.editable_tools = _check_editable(editable_tools)

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return _refusal(self.editable_tools, binding)

    def _runtime(self, sink: Sink | None = None) -> _Runtime:
        return _Runtime(self.agent, self.execution_guard(), sink)

    def run(
        self,
        *args: Any,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> RunOutcome:
        """Run the agent (``agent.run_sync``; ``await agent.run`` for the asyncio twin) with these
        arguments; a pause is saved and its calls proposed. ``on_event``: called with each of
        pydantic-ai's ``AgentStreamEvent`` objects as the run emits them (ADR-0137; an asyncio
        bridge also awaits an async sink)."""
        return self._start(run_id, args, _one_stream(on_event, kwargs), on_event)


class AsyncPydanticAIBridge(AsyncBridge):
    """The asyncio twin of :class:`PydanticAIBridge` (``AsyncChatSession``, ``agent.run``)."""

    runtime_name = RUNTIME

    def __init__(
        self,
        agent: Any,
        session: Any,
        storage: Any,
        *,
        editable_tools: Sequence[str] = (),
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.agent = agent
        self.editable_tools = _check_editable(editable_tools)

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return _refusal(self.editable_tools, binding)

    def _runtime(self, sink: Sink | None = None) -> _AsyncRuntime:
        return _AsyncRuntime(self.agent, self.execution_guard(), sink)

    async def run(
        self,
        *args: Any,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
        **kwargs: Any,
    ) -> RunOutcome:
        """Run the agent (``agent.run_sync``; ``await agent.run`` for the asyncio twin) with these
        arguments; a pause is saved and its calls proposed. ``on_event``: called with each of
        pydantic-ai's ``AgentStreamEvent`` objects as the run emits them (ADR-0137; an asyncio
        bridge also awaits an async sink)."""
        return await self._start(run_id, args, _one_stream(on_event, kwargs), on_event)
