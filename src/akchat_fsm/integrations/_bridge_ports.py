"""The ports a bridge plan talks to: the execution guard, the session's upstream and memory.

* :class:`ExecutionGuard` runs an approved call's body through the ledger inside the runtime's
  tool hook (and lets a claimed body finish when the runtime cancels it);
* :class:`BridgeUpstream` is the session's ``UpstreamChat`` for bridged runs: proposing returns
  the runtime's own call id, ``approve`` and ``deny`` have no side effect (``deny`` keeps the
  reviewer's reason for the model);
* :class:`LedgerMemory` is the session's chat memory for reconcile: a tool call's status is
  read from the ledger (``tool_call_statuses``, or a canonical memory record from ``load``);
* :class:`BridgeSession` holds the session calls the plans make: the session's own plans,
  composed with ``yield from``, their upstream and memory effects answered as those two ports
  would (ADR-0121).

Each comes as a sync class and its asyncio twin; the logic they need is a plan, run by the
drivers of :mod:`akchat_fsm.session.drivers`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from ..core.records import EXPIRED_REASON, RECONCILED_REJECT_REASON
from ..errors import ArgumentsMismatch, ConfigError, ConfirmationError, OutcomeUnknown
from ..machines.confirmation import ConfirmationEvent
from ..session.drivers import Ports, _advance, run_async, run_sync
from ..session.effects import CallApprove, CallDeny, Effect, MemoryRead, ProposeUpstream, ReadMemory
from ..session.ports import ToolCallProposal
from ..storage.checks import check_session_id, now_ms
from ..wire.bounded import thaw
from ..wire.digest import EditedArguments, arguments_digest
from ..wire.session import ConfirmationBinding
from ._bridge_io import ListRecords, LoadRecord, Plan, SaveRecord, require_records
from ._bridge_runs import RUN_PREFIX, PendingCall, RunRecord, denial_key
from ._lease import BodyLease
from .ledger import (
    AsyncToolLedger,
    Execution,
    ExecutionState,
    LedgerEntry,
    plan_entries,
    plan_get,
)

T = TypeVar("T")

__all__ = [
    "AsyncBridgeUpstream",
    "AsyncLedgerMemory",
    "BridgeSession",
    "BridgeUpstream",
    "ExecutionGuard",
    "LedgerMemory",
    "plan_memory_record",
    "plan_record_denial",
    "plan_tool_call_statuses",
    "status_of",
]

PROPOSED_BY_THE_BRIDGE = (
    "Calls are proposed by the bridge when a run pauses, not through this upstream."
)
#: A call's arguments as the ledger digests them, and its body (sync or async).
Args = Mapping[str, Any] | str | None
Body = Callable[[], Awaitable[Any] | Any]


# --------------------------------------------------------------------------- the guard


class ExecutionGuard:
    """Runs an approved call's body through the ledger, inside the runtime's tool hook.

    Only calls approved in the session for this continuation may run; a repeat replays the
    recorded outcome (``Execution.ran`` is ``False``). Always async, because runtimes call tool
    hooks from their event loop; a sync storage is called directly from it.
    """

    def __init__(
        self,
        ledger: AsyncToolLedger,
        approved: frozenset[str],
        idempotent_tools: frozenset[str] = frozenset(),
        lease: BodyLease | None = None,
        edited: Mapping[str, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.approved = approved
        #: Each edited approval's arguments digest (ADR-0135): it runs with those or not at all.
        self.edited: Mapping[str, str] = dict(edited or {})
        self.idempotent_tools = idempotent_tools
        #: Inside a leased continuation: the lease, renewed before each body and kept alive
        #: while one runs (ADR-0106).
        self.lease = lease
        self._in_flight: set[asyncio.Future[Execution]] = set()

    async def drain(self) -> None:
        """Wait until every execution this guard started has recorded its outcome.

        A runtime that cancels its running siblings when one call fails may return before a
        shielded sibling finishes; if its event loop then closes (``asyncio.run``), the
        sibling's ledger write is cancelled after its body ran, and the entry stays
        ``executing`` for ever. Runtimes await this before leaving their loop.
        """
        loop = asyncio.get_running_loop()
        while True:
            # A finished execution is done with; one left by a loop that has closed (an
            # earlier continuation's) can never finish. Waiting on either would never return.
            self._in_flight.difference_update(
                [f for f in self._in_flight if f.done() or f.get_loop() is not loop]
            )
            if not self._in_flight:
                return
            await asyncio.wait(tuple(self._in_flight))

    async def execute(self, tool_call_id: str, tool: str, args: Args, body: Body) -> Execution:
        """Run an approved call's ``body`` once (a repeat replays); refuse an unapproved one,
        and an edited one that reached execution with arguments other than the reviewer's."""
        if tool_call_id not in self.approved:
            raise ConfirmationError(
                f"Tool call {tool_call_id!r} reached execution without an approved "
                "confirmation in this session; refusing to run it."
            )
        expected = self.edited.get(tool_call_id)
        if expected is not None:
            given = arguments_digest(json.loads(args) if isinstance(args, str) else args or {})
            if given != expected:
                raise ArgumentsMismatch(
                    f"Tool call {tool_call_id!r} reached execution with arguments other than "
                    "the reviewer's edit; refusing to run it.",
                    expected=expected,
                    given=given,
                )
        return await self.execute_ungated(tool_call_id, tool, args, body)

    async def execute_ungated(
        self,
        tool_call_id: str,
        tool: str,
        args: Args,
        body: Body,
        declined: tuple[type[BaseException], ...] = (),
    ) -> Execution:
        """Run a call that needs no approval (the runtime ran it without asking: an ungated
        tool, a sibling of the calls that paused the run) through the ledger all the same, so
        its body too runs at most once per call id when a continuation is replayed.
        ``declined``: the runtime's deferral exceptions (the body asked for approval instead of
        acting), which release the claim rather than record an outcome."""
        if self.lease is not None:  # before the claim: a lost continuation starts nothing
            await self.lease.renew()
        execution = self.ledger.execute(
            tool_call_id,
            tool,
            args,
            body,
            idempotent=tool in self.idempotent_tools,
            declined=declined,
        )
        claimed = asyncio.ensure_future(self._kept(execution))
        self._in_flight.add(claimed)
        claimed.add_done_callback(self._in_flight.discard)
        try:
            return await asyncio.shield(claimed)
        except asyncio.CancelledError:
            # The runtime cancels running siblings when one call fails. A body already claimed
            # finishes and records its outcome (the next continuation replays it) instead of
            # being cut mid-side-effect into an unknown outcome; then the cancel proceeds.
            with contextlib.suppress(Exception):
                await claimed
            raise

    async def _kept(self, execution: Awaitable[Execution]) -> Execution:
        """``execution`` with our lease kept alive while it runs (a long body keeps the run)."""
        if self.lease is None:
            return await execution
        async with self.lease.kept():
            return await execution


# --------------------------------------------------------------------------- upstream + memory


def plan_record_denial(session_id: str, tool_call_id: str, reason: str) -> Plan[None]:
    """Keep a reviewer's reason for the model (create-only: the first reason stands)."""
    if not reason or reason in (RECONCILED_REJECT_REASON, EXPIRED_REASON):
        return
    text = json.dumps({"v": 1, "reason": reason}, ensure_ascii=False)
    # A lost reason (an unknown outcome) only means the model reads the generic sentence.
    with contextlib.suppress(OutcomeUnknown):
        yield SaveRecord(session_id, denial_key(tool_call_id), text, None)


class _UpstreamBase:
    def __init__(self, storage: Any, session_id: str, call: PendingCall | None = None) -> None:
        self.storage = require_records(storage)
        self.session_id = check_session_id(session_id)
        self.call = call

    def _proposal(self, args: Mapping[str, Any]) -> ToolCallProposal:
        if self.call is None:
            raise ConfigError(PROPOSED_BY_THE_BRIDGE)
        return ToolCallProposal(self.call.tool_call_id, self.call.tool, args)


class BridgeUpstream(_UpstreamBase):
    """The session's ``UpstreamChat`` for bridged runs: no side effect on approve or deny.

    The runtime executes an approved body later, through the ledger, so a repeated
    ``approve`` (reconcile's default resume) is harmless. ``deny`` keeps the reviewer's reason.
    """

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self._proposal(args)

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        run_sync(plan_record_denial(self.session_id, tool_call_id, reason), Ports(self.storage))


class AsyncBridgeUpstream(_UpstreamBase):
    """The asyncio twin of :class:`BridgeUpstream`."""

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return self._proposal(args)

    async def approve(self, tool_call_id: str) -> None:
        return None

    async def deny(self, tool_call_id: str, reason: str) -> None:
        await run_async(
            plan_record_denial(self.session_id, tool_call_id, reason), Ports(self.storage)
        )


_STATUS = {ExecutionState.EXECUTED: "complete", ExecutionState.EXECUTING: "running"}


def status_of(entry: LedgerEntry | None) -> str:
    """The upstream tool-call status reconcile reads: a body that started means upstream acted;
    none (or a released one) means the decision was never acted on, so resuming is safe."""
    return (
        "requires_confirmation"
        if entry is None
        else _STATUS.get(entry.state, "requires_confirmation")
    )


def plan_tool_call_statuses(session_id: str, tool_call_ids: Sequence[str]) -> Plan[dict[str, str]]:
    statuses: dict[str, str] = {}
    for tool_call_id in tool_call_ids:
        statuses[tool_call_id] = status_of((yield from plan_get(session_id, tool_call_id)))
    return statuses


def plan_memory_record(session_id: str) -> Plan[dict[str, Any]]:
    """The canonical memory record today's reconcile reads: one assistant message holding every
    call the bridge knows (from its runs and its ledger), with its status from the ledger."""
    calls: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for key in (yield ListRecords(session_id, RUN_PREFIX)):
        run = RunRecord.from_stored((yield LoadRecord(session_id, key)))
        for call in run.approvals if run is not None else ():
            calls[call.tool_call_id] = (call.tool, call.args)
    entries = {e.tool_call_id: e for e in (yield from plan_entries(session_id))}
    for entry in entries.values():  # calls of completed runs are known from the ledger only
        calls.setdefault(entry.tool_call_id, (entry.tool, {}))
    tool_calls = [
        {"id": cid, "name": name, "args": dict(args), "status": status_of(entries.get(cid))}
        for cid, (name, args) in calls.items()
    ]
    stamp = datetime.fromtimestamp(now_ms() / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    message = {
        "id": f"bridge-{session_id}",
        "role": "assistant",
        "content": "",
        "status": "complete",
        "createdAt": stamp[:-3] + "Z",
        "toolCalls": tool_calls,
    }
    return {"version": 1, "messages": [message] if tool_calls else []}


class _LedgerMemoryBase:
    def __init__(self, storage: Any, session_id: str) -> None:
        self.storage = require_records(storage)
        self.session_id = check_session_id(session_id)


class LedgerMemory(_LedgerMemoryBase):
    """The session's ``ChatMemory`` for bridged runs: tool-call statuses read from the ledger.

    ``tool_call_statuses(ids)`` is the direct port; ``load()`` builds the canonical memory
    record for reconcilers that read messages.
    """

    def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Mapping[str, str]:
        return run_sync(
            plan_tool_call_statuses(self.session_id, tool_call_ids), Ports(self.storage)
        )

    def load(self) -> dict[str, Any]:
        return run_sync(plan_memory_record(self.session_id), Ports(self.storage))


class AsyncLedgerMemory(_LedgerMemoryBase):
    """The asyncio twin of :class:`LedgerMemory`."""

    async def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Mapping[str, str]:
        return await run_async(
            plan_tool_call_statuses(self.session_id, tool_call_ids), Ports(self.storage)
        )

    async def load(self) -> dict[str, Any]:
        return await run_async(plan_memory_record(self.session_id), Ports(self.storage))


# --------------------------------------------------------------------------- the session


def _answer(effect: Effect, session_id: str, call: PendingCall | None) -> Plan[Any]:
    """What the bridge answers for a session plan's upstream or memory effect; any other
    effect (a load, a save, an event) goes on to the driver."""
    match effect:
        case ProposeUpstream(args=args):
            if call is None:  # pragma: no cover - only BridgeSession.propose proposes
                raise ConfigError(PROPOSED_BY_THE_BRIDGE)
            return ToolCallProposal(call.tool_call_id, call.tool, thaw(args))
        case CallApprove():
            return None  # no side effect: the approved body runs later, through the ledger
        case CallDeny(tool_call_id=tool_call_id, reason=reason):
            return (yield from plan_record_denial(session_id, tool_call_id, reason))
        case ReadMemory(tool_call_ids=ids):
            return MemoryRead(statuses=(yield from plan_tool_call_statuses(session_id, ids)))
        case _:
            return (yield effect)


def _bridged(plan: Plan[T], session_id: str, call: PendingCall | None = None) -> Plan[T]:
    """The session's ``plan`` with the bridge as its upstream and the ledger as its memory.

    Composed into the bridge plan, so the session's own effects flow through the bridge's
    driver (one driver, no nested run): what :class:`BridgeUpstream` and
    :class:`LedgerMemory` do as ports, done here as sub-plans.
    """
    try:
        done, out = _advance(plan, None, None)
        while not done:
            value, error = None, None
            try:
                value = yield from _answer(out, session_id, call)
            except Exception as exc:  # the session plan decides what a failed effect means
                error = exc
            done, out = _advance(plan, value, error)
        return out  # type: ignore[no-any-return]
    finally:
        plan.close()  # a crash (GeneratorExit) abandons the session plan too


class BridgeSession:
    """The session calls the bridge plans make, each a plan of the session's own composed
    with ``yield from`` (ADR-0121), in either flavour: the driver decides."""

    def __init__(self, session: Any, storage: Any, ttl_ms: int) -> None:
        self.session, self.storage, self.ttl_ms = session, storage, ttl_ms
        self.session_id: str = session.session_id
        asyncio = inspect.iscoroutinefunction(getattr(session, "reload", None))
        # The ports the session checks (flavour) before it builds a plan; never called here.
        self._upstream: type[Any] = AsyncBridgeUpstream if asyncio else BridgeUpstream
        self._memory: type[Any] = AsyncLedgerMemory if asyncio else LedgerMemory
        self._built: Any = None

    @property
    def observers(self) -> Any:
        """The session's observers as of now (the bridge's driver delivers its events)."""
        return self.session._ports.observers

    def _coordinator(self) -> Any:
        """The session's coordinator over the bridge's upstream, built once: both hold only
        their options (the upstream has no call; the coordinator reads the session and its
        observers anew on every plan), and building one checks every port's flavour, which
        each decision would otherwise pay again (ADR-0134)."""
        if self._built is None:
            upstream = self._upstream(self.storage, self.session_id)
            self._built = self.session.confirmations_for(upstream, ttl_ms=self.ttl_ms)
        return self._built

    def cached_bindings(self) -> tuple[ConfirmationBinding, ...]:
        """The session object's copy: as of its last read or applied save (no I/O)."""
        return tuple(self.session.confirmations)

    def bindings(self) -> Plan[tuple[ConfirmationBinding, ...]]:
        """Re-read the session, then its bindings."""
        yield from self.session._reload()
        return tuple(self.session.confirmations)

    def propose(self, call: PendingCall) -> Plan[ConfirmationBinding]:
        plan = self._coordinator()._propose(call.tool, call.args)
        return _bridged(plan, self.session_id, call)

    def resolve(
        self,
        token: str,
        intent: ConfirmationEvent,
        reason: str | None,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        edit: EditedArguments | None = None,
    ) -> Plan[ConfirmationBinding]:
        plan = self._coordinator()._resolve(
            token, intent, None, reason, args_digest, decided_by, via, edit
        )
        return _bridged(plan, self.session_id)

    def expire_due(self) -> Plan[tuple[ConfirmationBinding, ...]]:
        return _bridged(self._coordinator()._expire_due(), self.session_id)

    def reconcile(self) -> Plan[Any]:
        memory = self._memory(self.storage, self.session_id)
        upstream = self._upstream(self.storage, self.session_id)
        plan, _ = self.session._reconcile(memory, upstream, False)
        return _bridged(plan, self.session_id)
