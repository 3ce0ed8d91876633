"""OpenAI Agents SDK bridge: ``needs_approval`` tools that run once, across processes and crashes.

The SDK pauses a run with ``ToolApprovalItem`` interruptions and continues it from a
``RunState``; it guards neither the saved state (restored twice, it is approved and continued
twice) nor the tool body (docs/adr/0100-tool-execution-ledger.md). This module maps the SDK
onto the shared pieces:

* each interruption becomes a confirmation in the session (``toolCallId`` = the SDK's
  ``call_id``), decided by the two-CAS protocol;
* the ``RunState`` JSON lives only in the run record, read and written by compare-and-set;
  a run continues in the one process whose claim of the record applied, once all its calls
  are settled; a rejection's or an expiry's message reaches the model as the tool output;
* every ``FunctionTool`` of the agent graph is wrapped so its body runs through the ledger:
  at most once per call id, a repeat gets the recorded output.

Only what is specific to the SDK lives here: reading interruptions, guarding the tools, and
one coroutine that restores a state, applies decisions and runs it (:func:`advance`). The
sync and asyncio bridges run the same plans; only their drivers differ (ADR-0060).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from agents import Agent, FunctionTool, RunConfig, Runner, RunState, ToolApprovalItem
from agents.exceptions import AgentsException
from agents.tool_context import ToolContext

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..session.session import AsyncChatSession, ChatSession
from ..machines.confirmation import ConfirmationEvent
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding
from . import _openai_interim as shared
from .ledger import AsyncToolLedger, ExecutionUnknown, LedgerEntry
from ._openai_interim import Call, Decision, LoadRecord, Plan, RunRecord, SaveRecord

__all__ = [
    "AsyncOpenAIAgentsBridge",
    "OpenAIAgentsBridge",
    "RunOutcome",
    "guard_agent",
]

RunStatus = Literal["paused", "continuing", "completed"]
Invoke = Callable[[ToolContext[Any], str], Awaitable[Any]]
#: Wraps one tool invocation: ``(inner, ctx, args_json) -> output``.
Guard = Callable[[Invoke, ToolContext[Any], str], Awaitable[Any]]

UNGUARDABLE_HANDOFF = (
    "A Handoff object hides its target agent, so its tools cannot be guarded by the ledger; "
    "hand off to the Agent itself."
)
UNKNOWN_RUN = "No agent run {run_id!r} is recorded in this session."
RUN_EXISTS = "An agent run {run_id!r} is already recorded in this session."
UNDECIDED = "The saved run state interrupts on call {call_id!r}, which has no decision."


@dataclass(frozen=True)
class RunOutcome:
    """Where an agent run stands after a bridge call.

    ``paused``: ``pending`` holds the confirmations still awaiting a decision (approve or
    reject them by token, from any process). ``continuing``: another process holds the
    continuation. ``completed``: ``final_output`` is the run's output, recorded once.
    """

    run_id: str
    status: RunStatus
    pending: tuple[ConfirmationBinding, ...] = ()
    final_output: Any = None


# --------------------------------------------------------------------------- the SDK side


def _call_of(item: ToolApprovalItem) -> Call:
    raw = item.raw_item
    call_id = getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict) else None)
    arguments = getattr(raw, "arguments", None) if not isinstance(raw, dict) else raw.get("arguments")
    return Call(str(call_id), item.tool_name or "", _parse_args(arguments))


def _parse_args(arguments: object) -> dict[str, Any]:
    """The model's argument JSON as the confirmation's input object (what the human sees)."""
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) and arguments else {}
    except ValueError:
        parsed = arguments
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


def _jsonable(value: Any) -> Any:
    """A tool's output or a run's final output as JSON (recorded once, returned on replays)."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
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
        if id(node) in copies:
            return copies[id(node)]
        clone = node.clone(tools=[wrap(t) for t in node.tools], handoffs=[])
        copies[id(node)] = clone
        handoffs: list[Any] = []
        for target in node.handoffs:
            if not isinstance(target, Agent):
                raise ConfigError(UNGUARDABLE_HANDOFF)
            handoffs.append(copy(target))
        clone.handoffs = handoffs
        return clone

    return copy(agent)


@dataclass(frozen=True)
class Advanced:
    """What one SDK run ended with: new interruptions (and the state to save) or an output."""

    calls: tuple[Call, ...]
    run_state: dict[str, Any] | None
    final_output: Any = None


@dataclass(frozen=True)
class Advance:
    """Effect: run the agent from ``input`` (a new run) or from a saved state with decisions."""

    run_state: dict[str, Any] | None
    input: Any
    decisions: Mapping[str, Decision]


async def advance(agent: Agent[Any], run_config: RunConfig | None, effect: Advance) -> Advanced:
    """The one place the SDK runs. A ``RunState`` is restored from the record's JSON each time
    (the SDK mutates the state it is given, so the saved snapshot is never reused in memory)."""
    try:
        if effect.run_state is None:
            result = await Runner.run(agent, effect.input, run_config=run_config)
        else:
            state = await RunState.from_json(agent, effect.run_state)
            for item in state.get_interruptions():
                call_id = _call_of(item).call_id
                decision = effect.decisions.get(call_id)
                if decision is None:
                    raise ConfigError(UNDECIDED.format(call_id=call_id))
                if decision.approved:
                    state.approve(item)
                else:
                    state.reject(item, rejection_message=decision.message)
            result = await Runner.run(agent, state, run_config=run_config)
    except AgentsException as exc:
        # The SDK wraps what a tool raised; ours (ledger refusals, storage errors) come out typed.
        cause = exc.__cause__
        if isinstance(cause, AkchatError):
            raise cause from exc
        raise
    calls = tuple(_call_of(item) for item in result.interruptions)
    if calls:
        return Advanced(calls, result.to_state().to_json())
    return Advanced((), None, _jsonable(result.final_output))


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class ProposeCall:
    """Effect: bind ``call`` as a pending confirmation (idempotent per call id)."""

    call: Call


@dataclass(frozen=True)
class ReadBindings:
    """Effect: re-read the session; returns its confirmation bindings."""


def _run_key(run_id: str) -> str:
    return shared.record_key("run", run_id)


def _outcome(record: RunRecord, bindings: Mapping[str, ConfirmationBinding]) -> RunOutcome:
    if record.state == "completed":
        return RunOutcome(record.run_id, "completed", final_output=record.output)
    pending = tuple(
        bindings[c.call_id]
        for c in record.calls
        if c.call_id in bindings and not bindings[c.call_id].status.is_terminal
    )
    return RunOutcome(record.run_id, "paused" if record.state == "paused" else "continuing", pending)


def _settle(
    run_id: str, expected: int | None, advanced: Advanced, attempt: int, seen: tuple[str, ...]
) -> Plan[RunOutcome]:
    """Save what a run ended with (CAS on the claimed version), then bind its new calls."""
    state = "paused" if advanced.calls else "completed"
    seen = (*seen, *(c.call_id for c in advanced.calls))
    record = RunRecord(
        run_id, 0, state, advanced.calls, advanced.run_state, None, attempt,
        advanced.final_output, seen,
    )
    if not (yield SaveRecord(_run_key(run_id), record.to_text(), expected)):
        # Another process took the run over meanwhile (reconcile): what it stored stands.
        stored = yield LoadRecord(_run_key(run_id))
        if stored is None and expected is None:  # pragma: no cover - a create cannot vanish
            raise ConfigError(UNKNOWN_RUN.format(run_id=run_id))
        if expected is None:
            raise ConfigError(RUN_EXISTS.format(run_id=run_id))
        return _outcome(RunRecord.from_stored(run_id, stored), {})
    bindings = {}
    for call in record.calls:
        bindings[call.call_id] = yield ProposeCall(call)
    return _outcome(record, bindings)


def plan_start(run_id: str, input: Any) -> Plan[RunOutcome]:
    if (yield LoadRecord(_run_key(run_id))) is not None:
        raise ConfigError(RUN_EXISTS.format(run_id=run_id))
    advanced = yield Advance(None, input, {})
    return (yield from _settle(run_id, None, advanced, 0, ()))


def plan_resume(run_id: str, owner: str, *, take_over: bool = False) -> Plan[RunOutcome]:
    """Continue ``run_id`` exactly once, when all its calls are settled.

    A paused run is claimed (``continuing``, CAS on its version) by one process, which runs
    the SDK from the saved state with the decisions and saves what it ends with. A run that
    is ``continuing`` belongs to its claimant; ``take_over`` (reconcile, after a crash)
    re-claims it: bodies that already ran return their recorded outputs.
    """
    key = _run_key(run_id)
    for _ in range(4):
        stored = yield LoadRecord(key)
        if stored is None:
            raise ConfigError(UNKNOWN_RUN.format(run_id=run_id))
        record = RunRecord.from_stored(run_id, stored)
        if record.state == "completed" or (record.state == "continuing" and not take_over):
            return _outcome(record, {})
        bindings = {b.tool_call_id: b for b in (yield ReadBindings())}
        decisions: dict[str, Decision] = {}
        for call in record.calls:
            binding = bindings.get(call.call_id)
            if binding is None:  # crashed between saving the record and binding this call
                binding = bindings[call.call_id] = yield ProposeCall(call)
            denial = None
            if binding.status is ConfirmationStatus.REJECTED:
                stored_denial = yield LoadRecord(shared.record_key("denial", call.call_id))
                denial = json.loads(stored_denial[1])["message"] if stored_denial else None
            decision = shared.decision_for(binding, denial)
            if decision is not None:
                decisions[call.call_id] = decision
        if len(decisions) < len(record.calls):
            return _outcome(record, bindings)
        claimed = dataclasses.replace(
            record, state="continuing", owner=owner, attempt=record.attempt + 1
        )
        if not (yield SaveRecord(key, claimed.to_text(), record.version, True)):
            continue  # someone else claimed or settled it: re-read and answer from storage
        advanced = yield Advance(record.runtime_state, None, decisions)
        return (yield from _settle(
            run_id, record.version + 1, advanced, claimed.attempt, record.seen
        ))
    stored = yield LoadRecord(key)
    return _outcome(RunRecord.from_stored(run_id, stored), {})




@dataclass(frozen=True)
class ListRecords:
    """Effect: the keys of the session's records starting with ``prefix``."""

    prefix: str


@dataclass(frozen=True)
class Resolve:
    """Effect: the two-CAS resolution of ``token`` (its upstream has no side effect)."""

    token: str
    intent: ConfirmationEvent
    reason: str | None = None


@dataclass(frozen=True)
class ExpireDue:
    """Effect: expire every due pending confirmation; returns those this call expired."""


@dataclass(frozen=True)
class SettleClaims:
    """Effect: reconcile the session's processing confirmations (the upstream acted on none)."""


@dataclass(frozen=True)
class BridgeReconcile:
    """What :meth:`OpenAIAgentsBridge.reconcile` did.

    ``confirmations``: the session's own reconcile outcomes (claims left by a crash between
    the two saves of a decision). ``runs``: every run that was not completed, after its
    continuation was retried. ``execution_unknown``: call ids whose body was claimed by a
    process that never recorded the outcome: never re-run; an operator settles them.
    """

    confirmations: tuple[Any, ...]
    runs: tuple[RunOutcome, ...]
    execution_unknown: tuple[str, ...]


def plan_run_of(call_id: str) -> Plan[str | None]:
    """Which run a call belongs to (a scan of the session's run records)."""
    for key in (yield ListRecords("run:")):
        stored = yield LoadRecord(key)
        if stored is not None and call_id in json.loads(stored[1]).get("seen", ()):
            return str(json.loads(stored[1])["run_id"])
    return None


def plan_decide(
    token: str, intent: ConfirmationEvent, owner: str, reason: str | None = None
) -> Plan[RunOutcome]:
    """Resolve one confirmation, then continue its run if that settled the run's last call."""
    binding = yield Resolve(token, intent, reason)
    run_id = yield from plan_run_of(binding.tool_call_id)
    if run_id is None:
        raise ConfigError(UNKNOWN_RUN.format(run_id=f"of call {binding.tool_call_id}"))
    return (yield from plan_resume(run_id, owner))


def plan_expire_due(owner: str) -> Plan[tuple[RunOutcome, ...]]:
    expired = yield ExpireDue()
    runs: dict[str, None] = {}
    for binding in expired:
        run_id = yield from plan_run_of(binding.tool_call_id)
        if run_id is not None:
            runs[run_id] = None
    outcomes = []
    for run_id in runs:
        outcomes.append((yield from plan_resume(run_id, owner)))
    return tuple(outcomes)


def plan_reconcile(owner: str) -> Plan[BridgeReconcile]:
    settled = yield SettleClaims()
    runs: list[RunOutcome] = []
    for key in (yield ListRecords("run:")):
        stored = yield LoadRecord(key)
        if stored is None:
            continue
        record = RunRecord.from_stored(json.loads(stored[1])["run_id"], stored)
        if record.state == "completed":
            continue
        try:
            runs.append(
                (yield from plan_resume(record.run_id, owner, take_over=record.state == "continuing"))
            )
        except ExecutionUnknown:
            runs.append(RunOutcome(record.run_id, "continuing"))
    unknown = []
    for key in (yield ListRecords("call:")):
        entry = LedgerEntry.from_stored((yield LoadRecord(key)))
        if entry is not None and entry.unknown:
            unknown.append(entry.tool_call_id)
    return BridgeReconcile(tuple(settled), tuple(runs), tuple(unknown))


# --------------------------------------------------------------------------- drivers


def _storage_error(effect: object, exc: Exception) -> AkchatError:
    """A record I/O failure, mapped once: a load changed nothing, a save may have applied."""
    if isinstance(exc, AkchatError):
        return exc
    if isinstance(effect, LoadRecord | ListRecords):
        return StorageUnavailable(f"record read failed: {exc!r}")
    return OutcomeUnknown(f"record save failed and may have applied: {exc!r}")


def _memory_of(bindings: tuple[ConfirmationBinding, ...]) -> list[dict[str, Any]]:
    """Reconcile's memory for the bridge: its upstream acts on nothing, so every processing
    claim is re-issued (a no-op) and completed; the tool bodies are the ledger's business."""
    return [
        {
            "id": f"m-{index}",
            "role": "assistant",
            "content": "",
            "status": "complete",
            "createdAt": "1970-01-01T00:00:00.000Z",
            "toolCalls": [
                {"id": b.tool_call_id, "name": b.action, "args": {}, "status": "requires_confirmation"}
            ],
        }
        for index, b in enumerate(bindings)
        if b.status.is_processing
    ]


class _Bridge:
    """What both flavours share: options, the guarded agent and the plan behind each call."""

    def __init__(
        self,
        session: Any,
        agent: Agent[Any],
        *,
        run_config: RunConfig | None = None,
        ttl_ms: int | None = None,
        owner: str | None = None,
    ) -> None:
        storage = session._ports.storage  # records live beside the session's own envelope
        if not callable(getattr(storage, "save_record", None)):
            raise ConfigError(shared.NEEDS_RECORDS)
        self.session = session
        self.storage = storage
        self.agent = guard_agent(agent, self._guard)
        self.run_config = run_config
        self.owner = owner or shared.new_owner()
        self._options: dict[str, Any] = {} if ttl_ms is None else {"ttl_ms": ttl_ms}
        self._ledger = AsyncToolLedger(storage, session.session_id, owner=self.owner)

    async def _plan(self, plan: Plan[Any]) -> Any:
        raise NotImplementedError  # pragma: no cover - each flavour drives plans its own way

    async def _guard(self, inner: Invoke, ctx: ToolContext[Any], args_json: str) -> Any:
        """One tool body through the ledger: claimed by CAS, its outcome recorded, replayed.

        The SDK awaits tool bodies, so both flavours use the asyncio ledger; it calls a sync
        storage directly (the sync bridge's SDK loop runs inside its own thread's call)."""
        execution = await self._ledger.execute(
            ctx.tool_call_id, ctx.tool_name, args_json, lambda: inner(ctx, args_json)
        )
        if not execution.ran and execution.entry.outcome == "raised":
            raise RuntimeError(f"replayed outcome: {execution.entry.error}")
        return execution.value


class OpenAIAgentsBridge(_Bridge):
    """Human approval for an openai-agents ``Agent`` over a sync :class:`ChatSession`.

    ``run`` starts a run; an interrupted run is saved and its calls become confirmations.
    ``approve``/``reject`` (any process) decide one, and the decision that settles the run's
    last call continues it, once. Tool bodies run at most once per call id.
    """

    def __init__(self, session: ChatSession, agent: Agent[Any], **options: Any) -> None:
        super().__init__(session, agent, **options)

    def _drive(self, plan: Plan[Any]) -> Any:
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = self._execute(effect)
            except Exception as exc:  # the plan decides what a failed effect means
                error = exc

    async def _plan(self, plan: Plan[Any]) -> Any:
        return self._drive(plan)  # sync storage, called from inside the SDK's loop

    def _execute(self, effect: Any) -> Any:
        storage, sid = self.storage, self.session.session_id
        if isinstance(effect, LoadRecord | SaveRecord | ListRecords):
            try:
                if isinstance(effect, LoadRecord):
                    return storage.load_record(sid, effect.key)
                if isinstance(effect, ListRecords):
                    return storage.list_records(sid, effect.prefix)
                return storage.save_record(
                    sid, effect.key, effect.text, effect.expected, processing=effect.processing
                )
            except Exception as exc:
                raise _storage_error(effect, exc) from exc
        if isinstance(effect, Advance):
            return asyncio.run(advance(self.agent, self.run_config, effect))
        if isinstance(effect, ProposeCall):
            upstream = shared.CallUpstream(effect.call)
            coordinator = self.session.confirmations_for(upstream, **self._options)
            return coordinator.propose(effect.call.tool, effect.call.args)
        if isinstance(effect, ReadBindings):
            self.session.reload()
            return self.session.confirmations
        coordinator = self.session.confirmations_for(_Denials(storage, sid))
        if isinstance(effect, Resolve):
            if effect.intent is ConfirmationEvent.APPROVE:
                return coordinator.approve(effect.token)
            return coordinator.reject(effect.token, reason=effect.reason)
        if isinstance(effect, ExpireDue):
            return coordinator.expire_due()
        self.session.reload()
        memory = _Memory(self.session.confirmations)
        return self.session.reconcile(memory, upstream=_Denials(storage, sid))

    def run(self, input: Any, *, run_id: str | None = None) -> RunOutcome:
        """Start a run; returns it ``paused`` (with its pending confirmations) or ``completed``."""
        return self._drive(plan_start(run_id or shared.new_owner(), input))

    def approve(self, token: str) -> RunOutcome:
        return self._drive(plan_decide(token, ConfirmationEvent.APPROVE, self.owner))

    def reject(self, token: str, reason: str | None = None) -> RunOutcome:
        return self._drive(plan_decide(token, ConfirmationEvent.REJECT, self.owner, reason))

    def expire_due(self) -> tuple[RunOutcome, ...]:
        return self._drive(plan_expire_due(self.owner))

    def resume(self, run_id: str) -> RunOutcome:
        return self._drive(plan_resume(run_id, self.owner))

    def reconcile(self) -> BridgeReconcile:
        return self._drive(plan_reconcile(self.owner))


class _Denials:
    """The bridge's resolution upstream: no side effect, except keeping a rejection's text
    (create-only, so a reconcile's re-issued deny never overwrites the approver's words)."""

    def __init__(self, storage: Any, session_id: str, *, asynchronous: bool = False) -> None:
        self.storage, self.session_id, self.asynchronous = storage, session_id, asynchronous

    def approve(self, tool_call_id: str) -> Any:
        return shared.as_awaitable(None) if self.asynchronous else None

    def deny(self, tool_call_id: str, reason: str) -> Any:
        key = shared.record_key("denial", tool_call_id)
        text = shared.dumps({"message": reason})
        return self.storage.save_record(self.session_id, key, text, None)


class AsyncOpenAIAgentsBridge(_Bridge):
    """The asyncio twin of :class:`OpenAIAgentsBridge` (an :class:`AsyncChatSession`)."""

    def __init__(self, session: AsyncChatSession, agent: Agent[Any], **options: Any) -> None:
        super().__init__(session, agent, **options)

    async def _plan(self, plan: Plan[Any]) -> Any:
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = plan.send(value) if error is None else plan.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = await self._execute(effect)
            except Exception as exc:  # the plan decides what a failed effect means
                error = exc

    async def _execute(self, effect: Any) -> Any:
        storage, sid = self.storage, self.session.session_id
        if isinstance(effect, LoadRecord | SaveRecord | ListRecords):
            try:
                if isinstance(effect, LoadRecord):
                    return await storage.load_record(sid, effect.key)
                if isinstance(effect, ListRecords):
                    return await storage.list_records(sid, effect.prefix)
                return await storage.save_record(
                    sid, effect.key, effect.text, effect.expected, processing=effect.processing
                )
            except Exception as exc:
                raise _storage_error(effect, exc) from exc
        if isinstance(effect, Advance):
            return await advance(self.agent, self.run_config, effect)
        if isinstance(effect, ProposeCall):
            upstream = shared.AsyncCallUpstream(effect.call)
            coordinator = self.session.confirmations_for(upstream, **self._options)
            return await coordinator.propose(effect.call.tool, effect.call.args)
        if isinstance(effect, ReadBindings):
            await self.session.reload()
            return self.session.confirmations
        denials = _Denials(storage, sid, asynchronous=True)
        coordinator = self.session.confirmations_for(denials)
        if isinstance(effect, Resolve):
            if effect.intent is ConfirmationEvent.APPROVE:
                return await coordinator.approve(effect.token)
            return await coordinator.reject(effect.token, reason=effect.reason)
        if isinstance(effect, ExpireDue):
            return await coordinator.expire_due()
        await self.session.reload()
        memory = _Memory(self.session.confirmations, asynchronous=True)
        return await self.session.reconcile(memory, upstream=denials)

    async def run(self, input: Any, *, run_id: str | None = None) -> RunOutcome:
        return await self._plan(plan_start(run_id or shared.new_owner(), input))

    async def approve(self, token: str) -> RunOutcome:
        return await self._plan(plan_decide(token, ConfirmationEvent.APPROVE, self.owner))

    async def reject(self, token: str, reason: str | None = None) -> RunOutcome:
        return await self._plan(plan_decide(token, ConfirmationEvent.REJECT, self.owner, reason))

    async def expire_due(self) -> tuple[RunOutcome, ...]:
        return await self._plan(plan_expire_due(self.owner))

    async def resume(self, run_id: str) -> RunOutcome:
        return await self._plan(plan_resume(run_id, self.owner))

    async def reconcile(self) -> BridgeReconcile:
        return await self._plan(plan_reconcile(self.owner))


class _Memory:
    """Reconcile's memory for the bridge (see :func:`_memory_of`)."""

    def __init__(self, bindings: tuple[ConfirmationBinding, ...], *, asynchronous: bool = False):
        self.messages = _memory_of(bindings)
        self.asynchronous = asynchronous

    def load(self) -> Any:
        return shared.as_awaitable(self.messages) if self.asynchronous else self.messages
