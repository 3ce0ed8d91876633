"""LangGraph bridge: ``create_agent`` approvals decided in the session, each body run at most once.

Needs the ``langgraph`` extra. The agent is langchain's ``create_agent(model, tools,
middleware=[HumanInTheLoopMiddleware(interrupt_on), ToolBoundaryMiddleware(hitl)],
checkpointer=...)`` (HITL per-call or batched). LangGraph serialises nothing across
processes: two resumes of one pause both run the body, a crash after the body re-runs it, and
another middleware's ``jump_to="tools"`` can skip the approval (docs/adr/0107-langgraph-bridge.md).
What this module adds to the shared bridge (:mod:`._bridge`) is only LangGraph's side:

* a run that ends with HITL's interrupts becomes a paused run: each per-call
  ``tool_approval`` interrupt's tool call (id, tool, args), and each action request of a
  batched one (matched to the paused ``AIMessage``'s gated calls, ADR-0140), a confirmation;
  the snapshot is only what resuming needs (thread id, the paused checkpoint id, the
  interrupt id of each call), never the state;
* continuing sends one ``Command(resume={interrupt_id: answer})`` with every decision, which
  the session already holds (approve; edit, with the reviewer's arguments, for a tool whose
  HITL config allows it, ADR-0135; or reject with the reviewer's reason or the expiry
  sentence, which HITL hands the model as the tool's message; a batch as one
  ``{"decisions": [...]}``, checked whole first), on the thread's head, or on a replay of
  the pause when the head holds answers that are not the session's (ADR-0138);
* :class:`ToolBoundaryMiddleware`, listed after HITL, runs every tool body through the
  execution guard keyed by the tool-call id (the ledger binds the id to the effective args),
  and refuses a gated tool that has no approved decision in the session, whatever skipped HITL.

:class:`LangGraphBridge` (sync: ``graph.invoke``) and :class:`AsyncLangGraphBridge` (asyncio:
``graph.ainvoke``) differ only in how they call the graph.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

from langchain.agents.middleware import AgentMiddleware, HumanInTheLoopMiddleware
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langgraph.types import Command, GraphOutput

from ..errors import ConfigError, ConfirmationError
from ..wire.bounded import thaw
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
)
from ._bridge_runs import RunBlocked
from ._sink import Sink
from .ledger import Execution, LedgerEntry, RecordedToolFailure, recorded_failure

__all__ = [
    "RUNTIME",
    "AsyncLangGraphBridge",
    "LangGraphBridge",
    "RecordedToolFailure",
    "RunBlocked",
    "RunOutcome",
    "ToolBoundaryMiddleware",
    "foreign_answers",
    "pending_calls",
    "resume_command",
    "resume_values",
    "use_guard",
]

RUNTIME = "langgraph"
#: The HITL decisions the bridge sends; a gated tool must allow both.
NEEDED_DECISIONS = ("approve", "reject")
UNGATED = (
    "Tool call {id!r} ({tool}) is gated but reached execution without an approved "
    "confirmation in this session; refusing to run it."
)

# The guard of the bridge call running the graph (LangGraph copies the context into the
# threads and tasks it runs tool calls in); unset when the graph runs outside a bridge.
_current: contextvars.ContextVar[ExecutionGuard | None] = contextvars.ContextVar(
    "akchat_langgraph_guard", default=None
)


@contextlib.contextmanager
def use_guard(guard: ExecutionGuard) -> Iterator[ExecutionGuard]:
    """Run the graph calls made inside with ``guard`` at the :class:`ToolBoundaryMiddleware`.

    The bridge does this around each of its own ``invoke``; a host that drives the graph
    itself (streaming it, say) wraps that call with ``bridge.execution_guard(approved)``.
    """
    token = _current.set(guard)
    try:
        yield guard
    finally:
        _current.reset(token)


# --------------------------------------------------------------------------- pure mapping


def pending_calls(
    interrupts: Sequence[Any], messages: Sequence[Any] = ()
) -> tuple[PendingCall, ...]:
    """The approval calls of a pause: one per per-call ``tool_approval`` interrupt, and one per
    action request of a batched HITL interrupt (by call id).

    The interrupt id, the reviewer's description and the decisions the call accepts (read off
    a per-call interrupt's ``response_schema``, the one LangGraph checks the answer against,
    or a batched one's ``review_configs``; ``[]`` when unknown) ride in each call's
    ``metadata``. A batched interrupt's action requests name no tool-call id: they are the
    gated calls of the last ``AIMessage`` in ``messages`` (the paused state's), in order,
    matched by name and arguments; ``metadata["batch"]`` is the call's position in it, which
    its decision must take in the one ``{"decisions": [...]}`` answer (ADR-0140). Any other
    interrupt (a node's own ``interrupt()``) is refused: its answer cannot be tied to calls.
    """
    calls: list[PendingCall] = []
    for found in interrupts:
        value = found.value
        if _batched(value):
            calls += _batch_calls(found, value, messages)
            continue
        if not (isinstance(value, Mapping) and value.get("type") == "tool_approval"):
            raise ConfigError(
                f"The graph paused on an interrupt the bridge cannot decide: {value!r:.200}.",
                hint="Use HumanInTheLoopMiddleware for approvals (per_call or batched mode).",
            )
        call_id, name, args = value.get("tool_call_id"), value.get("name"), value.get("args")
        if not (_named(call_id) and _named(name) and isinstance(args, Mapping | None)):
            raise ConfigError(
                f"A tool_approval interrupt lacks its tool call (id, name, args): {value!r:.200}.",
                hint=MALFORMED_HINT,
            )
        metadata = {
            "interrupt_id": found.id,
            "description": str(value.get("description", "")),
            "decisions": _accepted(getattr(found, "response_schema", None)),
        }
        calls.append(PendingCall(call_id, name, dict(args or {}), "approval", metadata))
    ids = [c.tool_call_id for c in calls]
    if len(set(ids)) != len(ids):  # one answer per interrupt: a repeated id would lose one
        raise ConfigError(
            f"A pause asks twice about one tool call: {sorted(ids)}.", hint=MALFORMED_HINT
        )
    return tuple(sorted(calls, key=lambda c: c.tool_call_id))


def _batched(value: object) -> TypeGuard[Mapping[str, Any]]:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("action_requests"), list)
        and isinstance(value.get("review_configs"), list)
    )


def _batch_calls(
    found: Any, value: Mapping[str, Any], messages: Sequence[Any]
) -> list[PendingCall]:
    """A batched HITL interrupt's calls: its action requests matched, in order, to the gated
    tool calls of the last ``AIMessage`` (HITL asks about them in that order)."""
    requests, configs = value["action_requests"], value["review_configs"]
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    tool_calls = list(last.tool_calls) if last is not None else []
    allowed = {
        c.get("action_name"): c.get("allowed_decisions") for c in configs if isinstance(c, Mapping)
    }
    calls, at = [], 0
    for position, request in enumerate(requests):
        name = request.get("name") if isinstance(request, Mapping) else None
        args = request.get("args") if isinstance(request, Mapping) else None
        while at < len(tool_calls) and (
            tool_calls[at].get("name"),
            tool_calls[at].get("args"),
        ) != (name, args):
            at += 1
        if at == len(tool_calls) or not _named(tool_calls[at].get("id")) or not _named(name):
            raise ConfigError(
                f"A batched approval interrupt asks about a call the paused state's last "
                f"AIMessage does not hold, in order: {request!r:.200}.",
                hint=MALFORMED_HINT,
            )
        decisions = allowed.get(name)
        metadata = {
            "interrupt_id": found.id,
            "description": str(request.get("description", "")),
            "decisions": sorted(str(d) for d in decisions) if isinstance(decisions, list) else [],
            "batch": position,
            "batch_size": len(requests),
        }
        call_id = str(tool_calls[at]["id"])
        calls.append(PendingCall(call_id, name, dict(args or {}), "approval", metadata))
        at += 1
    return calls


MALFORMED_HINT = "Each pending tool call needs its own non-empty id (HumanInTheLoopMiddleware)."


def _accepted(schema: object) -> list[str]:
    """The decision types a per-call interrupt's JSON schema accepts: its discriminator's
    mapping (HITL builds one union member per allowed decision), sorted; ``[]`` if unknown."""
    if not isinstance(schema, Mapping):
        return []
    mapping = schema.get("discriminator", {})
    mapping = mapping.get("mapping") if isinstance(mapping, Mapping) else None
    if not isinstance(mapping, Mapping):
        return []
    return sorted(str(kind) for kind in mapping)


def _refusal(call: PendingCall | None) -> str | None:
    """Why LangGraph will not take an edit of ``call`` (``None``: HITL allows one)."""
    metadata = call.metadata if call is not None else None
    decisions = metadata.get("decisions") if isinstance(metadata, Mapping) else None
    if isinstance(decisions, list) and "edit" in decisions:
        return None
    tool = "this call's tool" if call is None else repr(call.tool)
    return (
        f"HumanInTheLoopMiddleware does not allow edits of {tool} "
        '(allowed_decisions has no "edit"); approve or reject the call as shown.'
    )


def _named(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _decision(decision: CallDecision, tool: str) -> dict[str, Any]:
    if decision.approved and decision.args is not None:  # a reviewer's edit (ADR-0135)
        return {"type": "edit", "edited_action": {"name": tool, "args": thaw(decision.args)}}
    if decision.approved:
        return {"type": "approve"}
    return {"type": "reject", "message": decision.message or ""}


def resume_command(run: RunRecord, decisions: Sequence[CallDecision]) -> Command[Any]:
    """The ``Command(resume=...)`` answering every interrupt of ``run`` (its snapshot's
    interrupt ids) with ``decisions``."""
    return Command(resume=resume_values(run, decisions))


def resume_values(run: RunRecord, decisions: Sequence[CallDecision]) -> dict[str, Any]:
    """What ``resume_command`` answers each interrupt with, by interrupt id: a per-call
    interrupt its call's decision; a batched one ``{"decisions": [...]}``, one per action
    request in its order, sent only whole. A batch missing a decision, holding one twice or
    out of place, or a decision the call does not accept, is a ``ConfigError`` raised before
    anything is sent: a malformed batched answer wedges the LangGraph thread (ADR-0140)."""
    interrupts = json.loads(run.snapshot)["interrupts"]
    calls = {c.tool_call_id: c for c in run.calls}
    values: dict[str, Any] = {}
    batches: dict[str, dict[int, dict[str, Any]]] = {}
    sizes: dict[str, int] = {}
    for decision in decisions:
        call = calls.get(decision.tool_call_id)
        answer = _decision(decision, call.tool if call is not None else "")
        interrupt = interrupts[decision.tool_call_id]
        metadata = call.metadata if call is not None and isinstance(call.metadata, Mapping) else {}
        if "batch" not in metadata:
            values[interrupt] = answer
            continue
        allowed = metadata.get("decisions")
        if isinstance(allowed, list) and allowed and answer["type"] not in allowed:
            raise ConfigError(
                f"Tool call {decision.tool_call_id!r} does not accept a {answer['type']!r} "
                f"decision (allowed: {allowed}); nothing was sent to LangGraph.",
                hint="Decide each call of a batched pause with a decision its tool allows.",
            )
        batch = batches.setdefault(interrupt, {})
        position, size = metadata.get("batch"), metadata.get("batch_size")
        if not isinstance(position, int) or position in batch or sizes.get(interrupt, size) != size:
            raise ConfigError(
                f"The batched interrupt {interrupt!r} has calls out of place "
                f"({decision.tool_call_id!r} at {position!r}); nothing was sent to LangGraph.",
                hint=MALFORMED_HINT,
            )
        batch[position] = answer
        sizes[interrupt] = int(size) if isinstance(size, int) else -1
    for interrupt, batch in batches.items():
        if sorted(batch) != list(range(sizes[interrupt])):
            raise ConfigError(
                f"The batched interrupt {interrupt!r} asks about {sizes[interrupt]} calls but "
                f"{len(batch)} are decided (positions {sorted(batch)}); nothing was sent to "
                "LangGraph: a partial batched answer wedges the thread.",
                hint="Decide every call of a batched pause; the bridge then continues it.",
            )
        values[interrupt] = {"decisions": [batch[i] for i in range(sizes[interrupt])]}
    return values


def _messages(value: Any) -> Sequence[Any]:
    messages = value.get("messages") if isinstance(value, Mapping) else None
    return messages if isinstance(messages, list) else ()


def _snapshot(thread_id: str, checkpoint_id: str | None, calls: Sequence[PendingCall]) -> str:
    interrupts = {c.tool_call_id: c.metadata["interrupt_id"] for c in calls}
    body = {"thread_id": thread_id, "checkpoint_id": checkpoint_id, "interrupts": interrupts}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _final_text(value: Any) -> str:
    messages = value.get("messages") if isinstance(value, Mapping) else None
    if not messages:
        return ""
    last = messages[-1]
    return last.text if isinstance(last, BaseMessage) else str(last)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def _checkpoint_id(state: Any) -> str | None:
    found = (state.config or {}).get("configurable", {}).get("checkpoint_id")
    return None if found is None else str(found)


def _result(thread_id: str, output: Any, checkpoint_id: str | None) -> RuntimeResult:
    if output.interrupts:
        calls = pending_calls(output.interrupts, _messages(output.value))
        return RuntimeResult(_snapshot(thread_id, checkpoint_id, calls), calls)
    text = _final_text(output.value)
    return RuntimeResult(_snapshot(thread_id, checkpoint_id, ()), None, text, text)


# --------------------------------------------------------------------------- resuming
# LangGraph keeps a pause's answers as ``__resume__`` pending writes on the paused checkpoint,
# and ``interrupt()`` returns the first one written for its task. An answer sent through
# LangGraph itself (a host's ``graph.invoke(Command(resume=...))`` on the paused thread) is
# that first one, and a later resume with the session's decision is ignored. So the
# continuation reads the pause's writes first; when any answer there is not the session's
# decision, it replays the paused checkpoint (``invoke(None)`` at its id: LangGraph forks the
# thread, drops the ``__resume__`` writes and asks again under new interrupt ids) and answers
# that fork, by tool-call id (docs/adr/0138-the-sessions-decision-wins-over-a-foreign-resume.md).

#: LangGraph's channel names and null task id for a checkpoint's pending writes.
RESUME_CHANNEL, INTERRUPT_CHANNEL = "__resume__", "__interrupt__"
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class _ReadPause:
    """The thread's head checkpoint id and the paused checkpoint's pending writes: a
    :class:`_Pause`."""

    thread_id: str
    checkpoint_id: str


@dataclass(frozen=True, slots=True)
class _Pause:
    #: The id of the thread's newest checkpoint (``None``: the thread is empty).
    head: str | None
    #: The paused checkpoint's pending writes (``None``: the checkpointer does not hold it).
    writes: list[Any] | None


@dataclass(frozen=True, slots=True)
class _Fork:
    """Replay the paused checkpoint; its answer: the interrupts the fork paused on, and the
    fork's messages (a batched interrupt's calls are read off them)."""

    thread_id: str
    checkpoint_id: str


@dataclass(frozen=True, slots=True)
class _Resume:
    """Resume the thread's head with ``command``; its answer: the :class:`RuntimeResult`."""

    thread_id: str
    command: Command[Any]


_ResumeEffect = _ReadPause | _Fork | _Resume


def _plan_resume(
    run: RunRecord, decisions: Sequence[CallDecision]
) -> Generator[_ResumeEffect, Any, RuntimeResult]:
    """Continue ``run``'s pause with ``decisions`` so that LangGraph uses exactly those: on the
    thread's head when the pause holds no other answer, else on a fork of the pause."""
    snapshot = json.loads(run.snapshot)
    thread_id, paused = str(snapshot["thread_id"]), snapshot.get("checkpoint_id")
    command = resume_command(run, decisions)  # checked whole before anything is sent
    if paused is not None:  # (``None``: not saved by this bridge; nothing to compare with)
        pause: _Pause = yield _ReadPause(thread_id, str(paused))
        if pause.writes is None:
            raise RunBlocked(
                f"Run {run.run_id!r} paused at checkpoint {paused!r} of LangGraph thread "
                f"{thread_id!r}, which its checkpointer no longer holds (a deleted or pruned "
                "thread, a shallow checkpointer): the session's decisions cannot reach the run.",
                next_step=(
                    f"an operator restores checkpoint {paused!r} of LangGraph thread "
                    f"{thread_id!r} to the graph's checkpointer (never a shallow one); the "
                    "next sweep continues the run"
                ),
                record=run,
            )
        # Off the pause (a continuation that died after moving the thread on, a host's own
        # answer or fork), the head may hold answers the session never gave: replay the pause.
        if pause.head != paused or foreign_answers(pause.writes, _resume_map(command)):
            asked, messages = yield _Fork(thread_id, str(paused))
            fork = {c.tool_call_id: c for c in pending_calls(asked, messages)}
            if sorted(map(_place, fork.values())) != sorted(map(_place, run.calls)):
                raise RunBlocked(
                    f"Run {run.run_id!r}: replaying its pause at checkpoint {paused!r} of "
                    f"LangGraph thread {thread_id!r}, to drop an answer sent outside the "
                    f"bridge, asked about tool calls {sorted(fork)}, not the run's "
                    f"{sorted(c.tool_call_id for c in run.calls)}.",
                    next_step=(
                        f"an operator makes the graph that paused LangGraph thread "
                        f"{thread_id!r} (same nodes and tools) the bridge's; the next sweep "
                        "continues the run"
                    ),
                    record=run,
                )
            # The same calls, asked under the fork's interrupt ids.
            forked = replace(run, snapshot=_snapshot(thread_id, paused, tuple(fork.values())))
            command = resume_command(forked, decisions)
    result: RuntimeResult = yield _Resume(thread_id, command)
    return result


def _resume_map(command: Command[Any]) -> Mapping[str, Any]:
    resume = command.resume
    return resume if isinstance(resume, Mapping) else {}


def _place(call: PendingCall) -> tuple[str, int]:
    """A call's tool-call id and place in its batch (``-1``: asked on its own)."""
    metadata = call.metadata if isinstance(call.metadata, Mapping) else {}
    position = metadata.get("batch")
    return call.tool_call_id, position if isinstance(position, int) else -1


def foreign_answers(writes: Iterable[Sequence[Any]], answers: Mapping[str, Any]) -> tuple[str, ...]:
    """Which answers among a paused checkpoint's pending writes LangGraph would use instead of
    ``answers`` (the bridge's, by interrupt id: what ``resume_values`` sends): each task's
    first ``__resume__`` value that is not what the bridge sends its interrupt, and any
    unkeyed one (a bare ``Command(resume=value)``: the bridge always answers by interrupt
    id). Named by interrupt id (the task id when the pause holds no interrupt for it); ``()``
    when LangGraph will use the bridge's answers."""
    writes = [tuple(w) for w in writes]
    interrupt_of: dict[str, str] = {}
    for task_id, channel, value, *_ in writes:
        if channel == INTERRUPT_CHANNEL:
            found = value if isinstance(value, list | tuple) else (value,)
            if found and _named(getattr(found[0], "id", None)):
                interrupt_of[str(task_id)] = found[0].id
    foreign: list[str] = []
    for task_id, channel, value, *_ in writes:
        if channel != RESUME_CHANNEL:
            continue
        if task_id == NULL_TASK_ID:
            foreign.append("(a bare resume value)")
            continue
        first = value[0] if isinstance(value, list) and value else value
        interrupt = interrupt_of.get(str(task_id))
        if interrupt is None or interrupt not in answers or answers[interrupt] != first:
            foreign.append(interrupt or str(task_id))
    return tuple(foreign)


def _at(thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": "",
            "checkpoint_id": checkpoint_id,
        }
    }


def _pause(head: Any, paused: Any) -> _Pause:
    """What :class:`_ReadPause` reads, from the checkpointer's two tuples."""
    head_id = None if head is None else head.config["configurable"].get("checkpoint_id")
    writes = None if paused is None else list(paused.pending_writes or ())
    return _Pause(None if head_id is None else str(head_id), writes)


def _checkpointer(graph: Any) -> Any:
    saver = getattr(graph, "checkpointer", None)
    if saver is None or isinstance(saver, bool):
        raise ConfigError(
            "The graph has no checkpointer of its own; the bridge cannot read its pauses.",
            hint="Compile the graph with checkpointer=... (SqliteSaver, PostgresSaver, ...).",
        )
    return saver


# --------------------------------------------------------------------------- the boundary


def _gated_names(gated: HumanInTheLoopMiddleware | Iterable[str]) -> frozenset[str]:
    if not isinstance(gated, HumanInTheLoopMiddleware):
        return frozenset(gated)
    for name, config in gated.interrupt_on.items():
        missing = [d for d in NEEDED_DECISIONS if d not in config["allowed_decisions"]]
        if missing or config.get("when") is not None:
            # A `when` that says "no review" lets HITL run the call; the boundary would then
            # refuse it, so the predicate could never do what it says.
            raise ConfigError(
                f"Tool {name!r} is gated in a way the bridge cannot decide "
                f"({'no ' + ', '.join(missing) if missing else 'a when predicate'}).",
                hint="Allow approve and reject, without `when`, for every gated tool.",
            )
    return frozenset(gated.interrupt_on)


def _record(message: Any) -> Any:
    """What the ledger keeps of a tool's result: the ``ToolMessage`` as a dict."""
    if isinstance(message, ToolMessage):
        return {"message": message_to_dict(message)}
    return {"unreplayable": type(message).__name__}


#: What the model reads for a call an operator settled as run without giving its result.
SETTLED_WITHOUT_RESULT = "The tool ran; an operator recorded that, without its result."


def _replayed(entry: LedgerEntry) -> ToolMessage:
    if entry.outcome == "raised":
        raise recorded_failure(entry)
    result = entry.result if isinstance(entry.result, Mapping) else {}
    if entry.outcome == "settled" and "message" not in result:
        # An operator's verdict holds the tool's result as any JSON value (what `akchat-fsm
        # settle --result` and the other bridges take), not the ledger's recorded message.
        return ToolMessage(
            _settled_content(entry.result), tool_call_id=entry.tool_call_id, name=entry.tool
        )
    if "message" not in result:
        raise ConfigError(
            f"Tool call {entry.tool_call_id!r} already ran and returned something other than a "
            "ToolMessage; the bridge cannot hand it to the model again.",
            hint="Make guarded tools return content (a ToolMessage), not a Command.",
        )
    message = messages_from_dict([result["message"]])[0]
    assert isinstance(message, ToolMessage)
    return message


def _settled_content(result: object) -> str:
    if result is None:
        return SETTLED_WITHOUT_RESULT
    if isinstance(result, str):
        return result
    return json.dumps(thaw(result), ensure_ascii=False, separators=(",", ":"))


class ToolBoundaryMiddleware(AgentMiddleware[Any, Any, Any]):
    """Runs every tool body through the bridge's execution guard; refuses unapproved gated calls.

    ``ToolBoundaryMiddleware(gated)``: ``gated`` is the agent's ``HumanInTheLoopMiddleware``
    (its ``interrupt_on`` tools) or tool names. List it **after** HITL, so it sees the calls
    HITL let through, with the reviewer's edited args. A gated call runs only when the bridge's
    continuation holds an approved decision for its tool-call id, once per id (a repeat gets the
    recorded message); any other tool runs through the ledger too, so a replayed continuation
    does not run it twice. Outside a bridge, a gated call is refused and the rest run as usual.
    """

    def __init__(self, gated: HumanInTheLoopMiddleware | Iterable[str]) -> None:
        super().__init__()
        self.gated = _gated_names(gated)

    def _guard(self, request: Any) -> tuple[ExecutionGuard | None, str, str, dict[str, Any]]:
        call = request.tool_call
        tool_call_id, tool = call.get("id"), call.get("name")
        if not (_named(tool_call_id) and _named(tool)):
            # The ledger keys a body by its call id: an id-less call would share one entry
            # with every other id-less call and replay another call's result.
            raise ConfigError(
                f"A tool call without an id or name: {call!r:.200}.", hint=MALFORMED_HINT
            )
        guard = _current.get()
        if tool in self.gated and (guard is None or tool_call_id not in guard.approved):
            raise ConfirmationError(UNGATED.format(id=tool_call_id, tool=tool))
        return guard, tool_call_id, tool, dict(call["args"])

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        guard, tool_call_id, tool, args = self._guard(request)
        if guard is None:
            return handler(request)
        ran: list[Any] = []

        def body() -> Any:
            ran.append(handler(request))
            return _record(ran[0])

        # The guard is asyncio (ADR-0107); a sync graph calls this from its own worker thread,
        # where no loop runs, so the guard gets a loop of its own for this one body.
        execution = asyncio.run(_execute(guard, tool, tool_call_id, args, body))
        return ran[0] if execution.ran else _replayed(execution.entry)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        guard, tool_call_id, tool, args = self._guard(request)
        if guard is None:
            return await handler(request)
        ran: list[Any] = []

        async def body() -> Any:
            ran.append(await handler(request))
            return _record(ran[0])

        execution = await _execute(guard, tool, tool_call_id, args, body)
        return ran[0] if execution.ran else _replayed(execution.entry)


async def _execute(
    guard: ExecutionGuard, tool: str, tool_call_id: str, args: dict[str, Any], body: Any
) -> Execution:
    if tool_call_id in guard.approved:
        return await guard.execute(tool_call_id, tool, args, body)
    return await guard.execute_ungated(tool_call_id, tool, args, body)


# --------------------------------------------------------------------------- runtime ports


class _Collected:
    """What ``invoke(version="v2")`` returns, collected from a stream as it goes by: the last
    ``values`` part's data and every interrupt those parts carry (LangGraph's own rule)."""

    def __init__(self, modes: tuple[str, ...]) -> None:
        self.modes = modes
        self.latest: Any = None
        self.interrupts: list[Any] = []

    def take(self, part: Any) -> bool:
        """Collect ``part``; whether it is of the host's modes (to hand to the sink)."""
        if part.get("type") == "values":
            self.latest = part["data"]
            self.interrupts.extend(part.get("interrupts", ()))
        return part.get("type") in self.modes

    def output(self) -> GraphOutput[Any]:
        return GraphOutput(value=self.latest, interrupts=tuple(self.interrupts))


class _Runtime:
    runtime = RUNTIME

    def __init__(
        self,
        graph: Any,
        durability: str,
        new_guard: Callable[[], ExecutionGuard],
        sink: Sink | None = None,
        stream_mode: tuple[str, ...] = (),
    ) -> None:
        self.graph = graph
        self.durability = durability
        self.new_guard = new_guard
        #: This call's event sink: the graph runs through ``stream``/``astream`` and each
        #: part of the host's ``stream_mode`` is handed to it (ADR-0137).
        self.sink = sink
        self.stream_mode = stream_mode

    def _modes(self) -> list[str]:
        # "values" is always streamed: its last part is what ``invoke`` returns.
        return ["values", *(m for m in self.stream_mode if m != "values")]

    def _invoke(self, value: Any, thread_id: str, guard: ExecutionGuard) -> RuntimeResult:
        config = _config(thread_id)
        with use_guard(guard):
            if self.sink is None:
                output = self.graph.invoke(value, config, version="v2", durability=self.durability)
            else:
                sink, collected = self.sink, _Collected(self.stream_mode)
                parts = self.graph.stream(
                    value,
                    config,
                    stream_mode=self._modes(),
                    version="v2",
                    durability=self.durability,
                )
                for part in parts:
                    if collected.take(part):
                        sink(part)
                output = collected.output()
        return _result(thread_id, output, _checkpoint_id(self.graph.get_state(config)))

    def start(self, input: Any, *, thread_id: str) -> RuntimeResult:
        return self._invoke(input, thread_id, self.new_guard())

    def resume(
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        # On the thread's head, never the paused checkpoint id (resuming an old id forks),
        # unless the pause holds an answer that is not the session's (_plan_resume).
        plan = _plan_resume(run, decisions)
        effect = next(plan)
        while True:
            try:
                effect = plan.send(self._perform(effect, guard))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _perform(self, effect: _ResumeEffect, guard: ExecutionGuard) -> Any:
        if isinstance(effect, _ReadPause):
            saver = _checkpointer(self.graph)
            head = saver.get_tuple(_config(effect.thread_id))
            paused = saver.get_tuple(_at(effect.thread_id, effect.checkpoint_id))
            return _pause(head, paused)
        if isinstance(effect, _Fork):
            with use_guard(guard):
                output = self.graph.invoke(
                    None,
                    _at(effect.thread_id, effect.checkpoint_id),
                    version="v2",
                    durability=self.durability,
                )
            return output.interrupts, _messages(output.value)
        return self._invoke(effect.command, effect.thread_id, guard)


class _AsyncRuntime(_Runtime):
    async def _ainvoke(self, value: Any, thread_id: str, guard: ExecutionGuard) -> RuntimeResult:
        config = _config(thread_id)
        with use_guard(guard):
            try:
                if self.sink is None:
                    output = await self.graph.ainvoke(
                        value, config, version="v2", durability=self.durability
                    )
                else:
                    sink, collected = self.sink, _Collected(self.stream_mode)
                    parts = self.graph.astream(
                        value,
                        config,
                        stream_mode=self._modes(),
                        version="v2",
                        durability=self.durability,
                    )
                    async for part in parts:
                        if collected.take(part):
                            await sink.deliver(part)
                    output = collected.output()
            finally:
                await guard.drain()  # a cancelled sibling's claimed body records its outcome
        return _result(thread_id, output, _checkpoint_id(await self.graph.aget_state(config)))

    async def start(self, input: Any, *, thread_id: str) -> RuntimeResult:  # type: ignore[override]
        return await self._ainvoke(input, thread_id, self.new_guard())

    async def resume(  # type: ignore[override]
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        plan = _plan_resume(run, decisions)
        effect = next(plan)
        while True:
            try:
                effect = plan.send(await self._aperform(effect, guard))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _aperform(self, effect: _ResumeEffect, guard: ExecutionGuard) -> Any:
        if isinstance(effect, _ReadPause):
            saver = _checkpointer(self.graph)
            head = await saver.aget_tuple(_config(effect.thread_id))
            paused = await saver.aget_tuple(_at(effect.thread_id, effect.checkpoint_id))
            return _pause(head, paused)
        if isinstance(effect, _Fork):
            with use_guard(guard):
                try:
                    output = await self.graph.ainvoke(
                        None,
                        _at(effect.thread_id, effect.checkpoint_id),
                        version="v2",
                        durability=self.durability,
                    )
                finally:
                    await guard.drain()
            return output.interrupts, _messages(output.value)
        return await self._ainvoke(effect.command, effect.thread_id, guard)


def _check_durability(durability: object) -> str:
    if durability not in ("sync", "async"):
        raise ConfigError(
            f"durability must be 'sync' or 'async', got {durability!r}.",
            hint="With 'exit' a crash loses the recorded approval and re-runs finished tools.",
        )
    return str(durability)


#: The parts a streamed run hands ``on_event`` by default: the model's tokens and each node's
#: update (a pause shows as the ``__interrupt__`` update).
STREAM_MODE = ("messages", "updates")
STREAM_MODES = ("values", "updates", "messages", "custom", "checkpoints", "tasks", "debug")


def _check_stream_mode(stream_mode: object) -> tuple[str, ...]:
    modes = (stream_mode,) if isinstance(stream_mode, str) else stream_mode
    if not isinstance(modes, Sequence) or not modes or any(m not in STREAM_MODES for m in modes):
        raise ConfigError(
            f"stream_mode must be one of {STREAM_MODES} or a non-empty sequence of them, "
            f"got {stream_mode!r}."
        )
    return tuple(dict.fromkeys(str(m) for m in modes))


def _check_thread_id(thread_id: object) -> str:
    if not isinstance(thread_id, str) or not thread_id:
        raise ConfigError(f"thread_id must be a non-empty str, got {thread_id!r}.")
    return thread_id


# --------------------------------------------------------------------------- facades


class LangGraphBridge(Bridge):
    """A LangGraph ``create_agent`` graph whose approvals live in a :class:`ChatSession` (sync).

    ``LangGraphBridge(graph, session, storage, durability="sync", ttl_ms=300_000, owner=None,
    idempotent_tools=())``: ``graph`` is compiled with a checkpointer, HITL (``per_call`` or
    ``batched`` mode) and :class:`ToolBoundaryMiddleware` after it; ``storage`` is the
    session's storage (it must have the ``RecordStorage`` capability); ``durability`` is
    LangGraph's (never ``"exit"``).
    """

    runtime_name = RUNTIME

    def __init__(
        self,
        graph: Any,
        session: Any,
        storage: Any,
        *,
        durability: str = "sync",
        stream_mode: str | Sequence[str] = STREAM_MODE,
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.graph = graph
        self.durability = _check_durability(durability)
        self.stream_mode = _check_stream_mode(stream_mode)

    def _runtime(self, sink: Sink | None = None) -> _Runtime:
        return _Runtime(self.graph, self.durability, self.execution_guard, sink, self.stream_mode)

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return _refusal(call)

    def run(
        self,
        input: Any,
        *,
        thread_id: str,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
    ) -> RunOutcome:
        """Run the graph on ``input`` in LangGraph thread ``thread_id`` (``graph.invoke``;
        ``await graph.ainvoke`` for the asyncio twin); a pause is saved and its calls proposed.
        ``on_event``: called with each ``StreamPart`` of the bridge's ``stream_mode`` as the
        graph emits it (``stream`` / ``astream``, ADR-0137; an asyncio bridge also awaits an
        async sink)."""
        return self._start(run_id, (input,), {"thread_id": _check_thread_id(thread_id)}, on_event)


class AsyncLangGraphBridge(AsyncBridge):
    """The asyncio twin of :class:`LangGraphBridge` (``AsyncChatSession``, ``graph.ainvoke``)."""

    runtime_name = RUNTIME

    def __init__(
        self,
        graph: Any,
        session: Any,
        storage: Any,
        *,
        durability: str = "sync",
        stream_mode: str | Sequence[str] = STREAM_MODE,
        **options: Any,
    ) -> None:
        super().__init__(session, storage, **options)
        self.graph = graph
        self.durability = _check_durability(durability)
        self.stream_mode = _check_stream_mode(stream_mode)

    def _runtime(self, sink: Sink | None = None) -> _AsyncRuntime:
        return _AsyncRuntime(
            self.graph, self.durability, self.execution_guard, sink, self.stream_mode
        )

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        return _refusal(call)

    async def run(
        self,
        input: Any,
        *,
        thread_id: str,
        run_id: str | None = None,
        on_event: Callable[[Any], Any] | None = None,
    ) -> RunOutcome:
        """Run the graph on ``input`` in LangGraph thread ``thread_id`` (``graph.invoke``;
        ``await graph.ainvoke`` for the asyncio twin); a pause is saved and its calls proposed.
        ``on_event``: called with each ``StreamPart`` of the bridge's ``stream_mode`` as the
        graph emits it (``stream`` / ``astream``, ADR-0137; an asyncio bridge also awaits an
        async sink)."""
        return await self._start(
            run_id, (input,), {"thread_id": _check_thread_id(thread_id)}, on_event
        )
