"""What every agent-runtime bridge shares: confirmations, the run record, reconcile, the guard.

A runtime module (pydantic-ai, the OpenAI Agents SDK) supplies only a *runtime port*: ``start``
a run and ``resume`` a paused one from its serialised state, each returning a
:class:`RuntimeResult`, with approved tool bodies executed through the :class:`ExecutionGuard`
it is given. Everything else is shared, written once as plans run by the session's drivers
(:mod:`akchat_fsm.session.drivers`, ADR-0121; this module: the plans and the facades; the
session and the runtime are reached through typed effects, ``ProposeCall``, ``ResumeRuntime``
and the rest; :mod:`._bridge_ports`: the guard,
the session's upstream and memory; :mod:`._bridge_runs`: the run record's decisions):

* a paused run is saved as a run record (CAS create), then each call awaiting approval becomes
  a confirmation (``toolCallId`` = the runtime's call id, ``action`` = tool name, ``input`` =
  arguments, expiry = ``ttl_ms``) through :class:`BridgeUpstream`, whose ``approve``/``deny``
  have no side effect (the side effect is the tool body, guarded by the ledger);
* approve / reject / expire are the session's two-CAS resolutions; a rejection's reason is kept
  beside the envelope so it reaches the model;
* a run continues exactly once, when every call is decided: the process whose CAS claim on the
  run record applied resumes the runtime, the body of each approved call runs through the ledger,
  and the run's next state is saved from that claim;
* reconcile settles processing confirmations from the ledger (:class:`LedgerMemory`), recovers
  continuations whose claimant is gone and lists executions with an unknown outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import json
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from ..core.confirmations import check_arguments_digest
from ..errors import (
    AlreadyResolved,
    ConfigError,
    EditNotAllowed,
    InvalidConfirmationToken,
    OutcomeUnknown,
    StorageError,
)
from ..machines.confirmation import ConfirmationEvent
from ..session.audit import check_decider, plan_deciding_entry
from ..session.drivers import Ports, run_async, run_sync
from ..session.effects import ResumeRuntime, StartRuntime
from ..session.session import ReconcileOutcome
from ..storage.checks import check_session_id, now_ms
from ..wire.digest import EditedArguments, arguments_digest, edited_arguments
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding
from ._bridge_io import (
    STORED_RECORD_HINT,
    ListRecords,
    LoadRecord,
    Plan,
    SaveRecord,
    require_records,
    stored_json,
)
from ._bridge_ports import (
    AsyncBridgeUpstream,
    AsyncLedgerMemory,
    BridgeSession,
    BridgeUpstream,
    ExecutionGuard,
    LedgerMemory,
    plan_record_denial,
)
from ._bridge_runs import (
    RUN_PREFIX,
    CallDecision,
    ContinueAction,
    PendingCall,
    Readiness,
    RunBlocked,
    RunInProgress,
    RunRecord,
    RunState,
    decide_continuation,
    decide_readiness,
    decide_release_run,
    decide_renew_run,
    decide_settle_run,
    decide_start_run,
    decision_args,
    decision_key,
    decision_status,
    decision_text,
    denial_key,
    run_key,
    start_key,
)
from ._lease import BodyLease
from ._sink import EventSink, Sink, check_sink
from .ledger import (
    AsyncToolLedger,
    LedgerEntry,
    ToolLedger,
    default_owner,
    plan_unknown,
)

__all__ = [
    "AsyncBridge",
    "AsyncBridgeUpstream",
    "AsyncLedgerMemory",
    "Bridge",
    "BridgeReport",
    "BridgeUpstream",
    "CallDecision",
    "Decided",
    "ExecutionGuard",
    "LedgerMemory",
    "PendingCall",
    "RunInProgress",
    "RunOutcome",
    "RunRecord",
    "RunState",
    "RuntimePort",
    "RuntimeResult",
    "in_a_loop_message",
]

T = TypeVar("T")
SAVE_ATTEMPTS = 4
#: ``callrun:<sha256(call id)[:32]>:<run id>``: which run deferred a call, found by prefix.
INDEX_PREFIX = "callrun:"


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class RuntimeResult:
    """What a runtime step ended with: ``calls`` deferred (paused), or ``None`` (completed)."""

    snapshot: str
    calls: tuple[PendingCall, ...] | None
    #: The runtime's own output object (completed), and its JSON form for the run record.
    output: Any = None
    output_json: Any = None


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """Where a run stands after a bridge call.

    ``status``: ``"completed"`` (``output``: the runtime's output when this call produced it,
    its recorded JSON otherwise), ``"paused"`` (``pending`` confirmations and ``external``
    calls await decisions / host results), ``"waiting"`` (the run is paused and some of its
    calls are still undecided), or ``"continuing"`` (another process holds its continuation).
    """

    run_id: str
    status: str
    output: Any = None
    pending: tuple[ConfirmationBinding, ...] = ()
    external: tuple[PendingCall, ...] = ()
    #: The runtime's serialised state (message history, ``RunState``) as stored.
    snapshot: str = ""
    #: ``True`` when this call ran nothing and reports what another call recorded.
    replayed: bool = False
    #: What an operator must do first, when the runtime cannot continue the run
    #: (:class:`RunBlocked`'s ``next_step``, as a reconcile found it).
    blocked: str | None = None

    @property
    def next_step(self) -> str | None:
        """What must happen before the run can go on, for an operator's report (``None``:
        nothing, the run is completed). A waiting run needs a person or the host, never the
        sweep: the sweep reports it with this and leaves it alone."""
        if self.status == "completed":
            return None
        if self.status == "continuing":
            return "another process holds its continuation; nothing to do unless it died"
        if self.blocked is not None:
            return self.blocked
        steps = []
        if self.pending:
            ids = ", ".join(b.tool_call_id for b in self.pending)
            steps.append(f"a person approves or rejects tool calls {ids}")
        if self.external:
            ids = ", ".join(c.tool_call_id for c in self.external)
            steps.append(
                f"the host passes the results of external calls {ids} with "
                f"bridge.continue_run({self.run_id!r}, external={{...}})"
            )
        if not steps:
            steps.append(
                "an operator settles its executions whose outcome is unknown "
                "(akchat-fsm settle); the next sweep continues it"
            )
        return "; ".join(steps)


@dataclass(frozen=True, slots=True)
class Decided:
    """A resolved confirmation, and its run's outcome when the bridge went on to continue it
    (``None`` when asked not to, or when the call belongs to no run of this session)."""

    binding: ConfirmationBinding
    run: RunOutcome | None


@dataclass(frozen=True, slots=True)
class BridgeReport:
    """What :meth:`Bridge.reconcile` did: the session's confirmation outcomes, each run it
    continued or found waiting, and the executions whose outcome is unknown (never re-run:
    an operator settles them with ``bridge.ledger.settle``)."""

    confirmations: tuple[ReconcileOutcome, ...]
    runs: tuple[RunOutcome, ...]
    execution_unknown: tuple[LedgerEntry, ...]


class RuntimePort(Protocol):
    """What a runtime module supplies (sync flavour; the async one has awaitable methods)."""

    runtime: str

    def start(self, *args: Any, **kwargs: Any) -> RuntimeResult: ...

    def resume(
        self, run: RunRecord, decisions: tuple[CallDecision, ...], guard: ExecutionGuard
    ) -> RuntimeResult:
        """Continue ``run`` (its ``snapshot``, ``calls`` and host ``external`` results) with
        ``decisions``; approved bodies must run through ``guard.execute``."""


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class BridgeContext:
    """What every bridge plan needs to know about its session, runtime and ledger."""

    session_id: str
    runtime: str
    owner: str
    clock: Callable[[], int]
    ledger: AsyncToolLedger
    idempotent_tools: frozenset[str] = field(default_factory=frozenset)
    #: How long a continuation claim holds without a renewal (``None``: no lease).
    lease_ms: int | None = None
    #: The session's plans the bridge plans compose (``None`` only for plans that need none).
    session: BridgeSession | None = None

    def confirmations(self) -> BridgeSession:
        if self.session is None:  # pragma: no cover - every facade builds its context with one
            raise ConfigError("This bridge plan needs its session.")
        return self.session

    def guard(
        self,
        approved: frozenset[str],
        run: RunRecord | None = None,
        edited: Mapping[str, str] | None = None,
    ) -> ExecutionGuard:
        """The guard for tool bodies; inside our continuation of ``run`` (with a lease), each
        body first renews the claim's lease, and does not start if the claim was lost.
        ``edited``: the digest of each edited approval's arguments, the only ones it runs."""
        lease = None
        if run is not None and self.lease_ms is not None and run.claim is not None:
            run_id, claim, lease_ms = run.run_id, run.claim, self.lease_ms
            lease = BodyLease(
                lambda: plan_renew(self, run_id, claim, lease_ms), self.ledger._io, lease_ms
            )
        return ExecutionGuard(self.ledger, approved, self.idempotent_tools, lease, edited)


def plan_renew(ctx: BridgeContext, run_id: str, claim: str, lease_ms: int) -> Plan[None]:
    """Renew our continuation's lease, before a tool body and while one runs (a lost save
    re-reads and retries; :class:`RunClaimLost` if the claim is no longer ours: a body not
    started then never starts)."""
    for _ in range(SAVE_ATTEMPTS):
        run = yield from _load_run(ctx, run_id)
        renewed = decide_renew_run(run, claim, now_ms=ctx.clock(), lease_ms=lease_ms)
        if (yield from _save_run(ctx, renewed, renewed.version)):
            return
    raise RunInProgress(f"Run {run_id!r} kept changing; its lease was not renewed.", record=run)


def _load_run(ctx: BridgeContext, run_id: str) -> Plan[RunRecord | None]:
    return RunRecord.from_stored((yield LoadRecord(ctx.session_id, run_key(run_id))))


def _save_run(ctx: BridgeContext, run: RunRecord, expected: int | None) -> Plan[bool]:
    """One CAS save of the run; an unknown outcome is reported as not applied (re-read).

    Every run that is not completed has work left (calls to propose, a continuation to run or
    take over), so it is saved with ``processing=True``: the same atomic write that leaves the
    work puts the session in the processing index, where ``reconcile_all`` finds it (ADR-0106).
    """
    processing = run.state is not RunState.COMPLETED
    try:
        applied: bool = yield SaveRecord(
            ctx.session_id, run_key(run.run_id), run.to_json(), expected, processing
        )
    except OutcomeUnknown:
        return False
    return applied


def _propose_all(
    ctx: BridgeContext, calls: Sequence[PendingCall]
) -> Plan[tuple[ConfirmationBinding, ...]]:
    bindings = []
    for call in calls:
        bindings.append((yield from ctx.confirmations().propose(call)))
    return tuple(bindings)


def _completed(run: RunRecord, output: Any = None, replayed: bool = True) -> RunOutcome:
    value = run.output if replayed else output
    return RunOutcome(run.run_id, "completed", value, snapshot=run.snapshot, replayed=replayed)


def plan_start(
    ctx: BridgeContext, run_id: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> Plan[RunOutcome]:
    """Claim the run id, run the agent; if it paused, save the run record (CAS create), then
    propose its calls."""
    yield from _claim_run_id(ctx, run_id)  # a bad or used run id is refused before the agent
    result: RuntimeResult = yield StartRuntime(args, kwargs)
    if result.calls is None:
        return RunOutcome(run_id, "completed", result.output, snapshot=result.snapshot)
    run = decide_start_run(run_id, ctx.runtime, result.snapshot, result.calls, ctx.clock())
    if not (yield from _save_run(ctx, run, None)):
        stored = yield from _load_run(ctx, run_id)
        if stored is None or stored.snapshot != run.snapshot:
            raise ConfigError(f"Run id {run_id!r} is already used in this session.")
    return (yield from _after_pause(ctx, run))


def _claim_run_id(ctx: BridgeContext, run_id: str) -> Plan[None]:
    """Refuse a run id this session already used, before the model or any tool body runs.

    The claim is a create-only record (``rid:<run-id>``), so of two hosts starting one run id
    at once exactly one create applies and only that one runs the agent. A run record with no
    claim (saved before claims existed) is refused too. A claim outlives a start that died
    before it paused: the host cannot tell whether that start's side effects happened, so a
    retry under the same id is refused rather than repeated.
    """
    used = ConfigError(
        f"Run id {run_id!r} is already used in this session; nothing ran.",
        hint="Continue that run (continue_run, approve, reconcile) or start under a new run id.",
    )
    if (yield LoadRecord(ctx.session_id, run_key(run_id))) is not None:
        raise used
    key = start_key(run_id)
    claim = secrets.token_hex(16)
    body = {"v": 1, "runId": run_id, "claim": claim, "owner": ctx.owner}
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    try:
        applied = yield SaveRecord(ctx.session_id, key, text, None)
    except OutcomeUnknown:  # applied only if what is stored is our own claim
        stored = yield LoadRecord(ctx.session_id, key)
        found = None if stored is None else stored_json(stored[1], "stored run-id claim")
        applied = isinstance(found, dict) and found.get("claim") == claim
    if not applied:
        raise used


def _index_key(tool_call_id: str, run_id: str) -> str:
    digest = hashlib.sha256(tool_call_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{INDEX_PREFIX}{digest}:{run_id}"


def _after_pause(ctx: BridgeContext, run: RunRecord) -> Plan[RunOutcome]:
    """Index each call's run (so a decision finds its run with one key listing), then propose
    each approval call as a confirmation."""
    for call in run.approvals:
        with contextlib.suppress(OutcomeUnknown):  # an index is a hint: a scan is the fallback
            yield SaveRecord(ctx.session_id, _index_key(call.tool_call_id, run.run_id), "{}", None)
    pending = yield from _propose_all(ctx, run.approvals)
    return RunOutcome(run.run_id, "paused", None, pending, run.externals, run.snapshot)


def _denials(
    ctx: BridgeContext,
    run: RunRecord,
    bindings: Sequence[ConfirmationBinding],
    recorded: Mapping[str, ConfirmationStatus],
) -> Plan[dict[str, str]]:
    """The reviewers' reasons of the run's rejected calls (read only for those).

    The deciding claim's audit entry holds its rejecter's own reason (or none: the model then
    reads the generic sentence). The reason record written before the claim (ADR-0106 item 6)
    is the fallback, for a call retention pruned from the envelope (its token is gone with
    it): the first reason written stands there, which may be a rival's whose claim lost.
    """
    by_id = {b.tool_call_id: b for b in bindings if b.status is ConfirmationStatus.REJECTED}
    rejected = set(by_id) | {c for c, s in recorded.items() if s is ConfirmationStatus.REJECTED}
    reasons: dict[str, str] = {}
    for call in run.approvals:
        if call.tool_call_id not in rejected:
            continue
        binding = by_id.get(call.tool_call_id)
        entry = (
            None if binding is None else (yield from plan_deciding_entry(ctx.session_id, binding))
        )
        if entry is not None:
            if entry.reason:
                reasons[call.tool_call_id] = entry.reason
            continue
        stored = yield LoadRecord(ctx.session_id, denial_key(call.tool_call_id))
        if stored is not None:
            denial = stored_json(stored[1], "stored denial record")
            if not isinstance(denial, dict) or "reason" not in denial:
                raise ConfigError("A stored denial record has no reason.", hint=STORED_RECORD_HINT)
            reasons[call.tool_call_id] = str(denial["reason"])
    return reasons


def _readiness(ctx: BridgeContext, run: RunRecord, external: Mapping[str, Any]) -> Plan[Readiness]:
    """Read the session's decisions for ``run`` (proposing any call a crash left unproposed).

    Decided confirmations are terminal and never change, so the session object's own copy is
    enough when it shows every call decided (it does right after the last decision's CAS);
    only otherwise is storage re-read. For the same reason a readiness computed before the
    continuation claim stays true after it. Each decided call is kept in a decision record
    too, read back for a call whose confirmation retention pruned (ADR-0103).
    """
    bindings = ctx.confirmations().cached_bindings()
    readiness = decide_readiness(run, bindings, {}, external)
    if not readiness.ready:
        bindings = yield from ctx.confirmations().bindings()
        readiness = decide_readiness(run, bindings, {}, external)
    recorded: dict[str, ConfirmationStatus] = {}
    recorded_edits: dict[str, Mapping[str, Any]] = {}
    if readiness.unproposed:  # never proposed, or decided and then pruned by retention
        recorded, recorded_edits = yield from _recorded_decisions(ctx, readiness.unproposed)
        readiness = decide_readiness(run, bindings, {}, external, recorded)
    if readiness.unproposed:
        yield from _propose_all(ctx, readiness.unproposed)
        bindings = yield from ctx.confirmations().bindings()
        readiness = decide_readiness(run, bindings, {}, external, recorded)
    # What each approved call runs: a reviewer's edit, read from the claim that decided it,
    # before its decision record is written (the record keeps it past retention, ADR-0135).
    edits = yield from _edits(ctx, readiness.decisions, bindings, recorded_edits)
    readiness = decide_readiness(run, bindings, {}, external, recorded, edits)
    # Keep what is decided beyond the envelope's retention (ADR-0013): while the run waits,
    # and also once it is ready, before the continuation claim. A claimant that dies while
    # continuing leaves the run ``continuing``; if retention prunes its decided calls before
    # the sweep recovers it, the recovery must read them here, not propose them again.
    yield from _record_decisions(ctx, readiness.decisions, recorded)
    if readiness.ready and any(not d.approved for d in readiness.decisions):
        denials = yield from _denials(ctx, run, bindings, recorded)
        readiness = decide_readiness(run, bindings, denials, external, recorded, edits)
    return readiness


def _edits(
    ctx: BridgeContext,
    decisions: Sequence[CallDecision],
    bindings: Sequence[ConfirmationBinding],
    recorded: Mapping[str, Mapping[str, Any]],
) -> Plan[dict[str, Mapping[str, Any]]]:
    """The reviewers' arguments of the approved calls that were edited (ADR-0135).

    An edit is an approve whose audit entry holds the new arguments; the entry with the
    highest cursor is the claim that applied, so only that one is read, for approved calls
    only. A call retention pruned keeps its edit in its decision record (``recorded``). An
    edit whose arguments cannot be read stops the run: running the call's own arguments
    instead would be a silent change of what the reviewer decided.
    """
    approved = {d.tool_call_id for d in decisions if d.approved}
    edits = {k: v for k, v in recorded.items() if k in approved}
    for binding in bindings:
        if binding.tool_call_id not in approved or binding.tool_call_id in edits:
            continue
        entry = yield from plan_deciding_entry(ctx.session_id, binding)
        if entry is None or not entry.is_edit:
            continue
        if not isinstance(entry.edited_args, dict):
            raise ConfigError(
                f"Tool call {binding.tool_call_id!r} was approved with a reviewer's edit that "
                "cannot be read back; refusing to run it with any arguments.",
                hint=STORED_RECORD_HINT,
            )
        edits[binding.tool_call_id] = entry.edited_args
    return edits


def _recorded_decisions(
    ctx: BridgeContext, calls: Sequence[PendingCall]
) -> Plan[tuple[dict[str, ConfirmationStatus], dict[str, Mapping[str, Any]]]]:
    """The decision records of ``calls`` (read only for calls the envelope has no binding of):
    each one's status, and the reviewer's arguments of an edited approval."""
    found: dict[str, ConfirmationStatus] = {}
    edits: dict[str, Mapping[str, Any]] = {}
    for call in calls:
        stored = yield LoadRecord(ctx.session_id, decision_key(call.tool_call_id))
        status = decision_status(stored)
        if status is not None:
            found[call.tool_call_id] = status
        args = decision_args(stored)
        if args is not None:
            edits[call.tool_call_id] = args
    return found, edits


def _record_decisions(
    ctx: BridgeContext,
    decisions: Sequence[CallDecision],
    recorded: Mapping[str, ConfirmationStatus],
) -> Plan[None]:
    """Create a decision record for each decided call of a run that waits (create-only: a
    terminal status never changes, so an existing record is already right)."""
    for decision in decisions:
        if decision.status is None or decision.tool_call_id in recorded:
            continue
        text = decision_text(decision.status, decision.args)
        # A lost record only narrows what survives retention; the envelope still holds it, so
        # a failed write never fails the decision that was just made.
        with contextlib.suppress(StorageError):
            yield SaveRecord(ctx.session_id, decision_key(decision.tool_call_id), text, None)


def plan_continue(
    ctx: BridgeContext, run_id: str, external: Mapping[str, Any], *, recover: bool = False
) -> Plan[RunOutcome]:
    """Continue ``run_id`` once every call is decided, from this process's CAS claim.

    Each round makes one decision on the run as read (:func:`decide_continuation`): report it
    completed or held elsewhere, resume our own claim, or read the run's decisions and save
    our claim; a lost save re-reads and decides again.
    """
    claim = secrets.token_hex(16)
    run = yield from _load_run(ctx, run_id)
    # A hold is decided only on a re-read after our own save (the claim nonce is fresh), which
    # the round that saved it computed these decisions for.
    decisions: tuple[CallDecision, ...] = ()
    for _ in range(SAVE_ATTEMPTS):
        decision = decide_continuation(
            run,
            run_id=run_id,
            claim=claim,
            owner=ctx.owner,
            now_ms=ctx.clock(),
            external=external,
            recover=recover,
            lease_ms=ctx.lease_ms,
        )
        found = decision.record
        if decision.action is ContinueAction.COMPLETED:
            return _completed(found)
        if decision.action is ContinueAction.IN_PROGRESS:
            return RunOutcome(run_id, "continuing", snapshot=found.snapshot, replayed=True)
        if decision.action is ContinueAction.HOLD:
            return (yield from _resume(ctx, found, decisions))
        readiness = yield from _readiness(ctx, run or found, external)
        if not readiness.ready:
            return RunOutcome(
                run_id,
                "waiting",
                None,
                readiness.pending,
                readiness.awaiting_external,
                found.snapshot,
            )
        decisions = readiness.decisions
        if (yield from _save_run(ctx, found, found.version)):
            return (yield from _resume(ctx, replace(found, version=found.version + 1), decisions))
        run = yield from _load_run(ctx, run_id)  # lost the race, or an unknown outcome
    raise RunInProgress(f"Run {run_id!r} kept changing; not continued.", record=run)


def _release_run(ctx: BridgeContext, run: RunRecord) -> Plan[None]:
    """Put our continuation's run back to ``paused``. A lease renewal moved the record's
    version since the claim, so a conflict re-reads it and releases again while the claim is
    ours (``RunClaimLost`` when it is not: then it is not ours to release)."""
    claim = run.claim or ""
    found: RunRecord | None = run
    for _ in range(SAVE_ATTEMPTS):
        if found is None:
            return
        released = decide_release_run(found, claim, now_ms=ctx.clock())
        if (yield from _save_run(ctx, released, found.version)):
            return
        found = yield from _load_run(ctx, run.run_id)


def _resume(
    ctx: BridgeContext, run: RunRecord, decisions: tuple[CallDecision, ...]
) -> Plan[RunOutcome]:
    """Resume the runtime from our claim and save the run's next state from that claim."""
    approved = frozenset(d.tool_call_id for d in decisions if d.approved)
    edited = {
        d.tool_call_id: arguments_digest(d.args)
        for d in decisions
        if d.approved and d.args is not None
    }
    try:
        guard = ctx.guard(approved, run, edited)
        result: RuntimeResult = yield ResumeRuntime(run, decisions, guard)
    except Exception:  # never on GeneratorExit or a kill: a dead process releases nothing
        # Every body that ran is in the ledger, so the run may go back to paused: the next
        # continuation replays those bodies. If this save fails, reconcile recovers the claim.
        # Released, the run waits again: its decisions must outlive retention meanwhile.
        with contextlib.suppress(Exception):  # the runtime's error is what the caller needs
            yield from _record_decisions(ctx, decisions, {})
        with contextlib.suppress(Exception):
            yield from _release_run(ctx, run)
        raise
    settled = decide_settle_run(
        run,
        run.claim or "",
        snapshot=result.snapshot,
        calls=result.calls,
        output=result.output_json,
        now_ms=ctx.clock(),
    )
    for _ in range(SAVE_ATTEMPTS):
        if (yield from _save_run(ctx, settled, run.version)):
            break
        stored = yield from _load_run(ctx, run.run_id)
        if (
            stored is not None
            and stored.state is settled.state
            and stored.snapshot == settled.snapshot
        ):
            break  # our save applied (its outcome was unknown)
        settled = decide_settle_run(  # raises RunClaimLost unless the claim is still ours
            stored,
            run.claim or "",
            snapshot=result.snapshot,
            calls=result.calls,
            output=result.output_json,
            now_ms=ctx.clock(),
        )
        run = stored  # type: ignore[assignment]
    if result.calls is None:
        return _completed(settled, result.output, replayed=False)
    return (yield from _after_pause(ctx, settled))


def plan_find_run(ctx: BridgeContext, tool_call_id: str) -> Plan[str | None]:
    """The run that deferred ``tool_call_id``, if any: from its index record (one key listing),
    else by scanning the session's runs (a crash may have come before the index was written)."""
    prefix = _index_key(tool_call_id, "")
    for key in (yield ListRecords(ctx.session_id, prefix)):
        return str(key[len(prefix) :])
    for key in (yield ListRecords(ctx.session_id, RUN_PREFIX)):
        run = RunRecord.from_stored((yield LoadRecord(ctx.session_id, key)))
        if run is not None and any(c.tool_call_id == tool_call_id for c in run.calls):
            return run.run_id
    return None


def _keep_reason_before_the_claim(
    ctx: BridgeContext, token: str, reason: str, args_digest: str | None
) -> Plan[None]:
    """Write a rejection's reason (create-only) before its claim, so that a rejecter killed
    between its claim and its terminal save leaves it for the model: the stored claim does not
    hold the reason, and reconcile finishes the rejection with a generic one (ADR-0106 §6).
    Only for a call pending on the session's copy (re-read once when the copy does not hold
    the token); a call already decided keeps its own reason. A rejection made for other
    arguments is refused here, before this write (the claim would refuse it too)."""
    binding = _binding(ctx.confirmations().cached_bindings(), token)
    if binding is None:
        binding = _binding((yield from ctx.confirmations().bindings()), token)
    if binding is not None and args_digest is not None:
        check_arguments_digest(binding, args_digest)
    if binding is not None and binding.status is ConfirmationStatus.PENDING:
        yield from plan_record_denial(ctx.session_id, binding.tool_call_id, reason)


def _binding(bindings: Iterable[ConfirmationBinding], token: str) -> ConfirmationBinding | None:
    return next((b for b in bindings if b.token == token), None)


def _same_approval(
    ctx: BridgeContext, binding: ConfirmationBinding, edit: EditedArguments | None
) -> Plan[None]:
    """An approved call answers a repeat only if the approval that applied is this one:
    the same edit (``edit``), or no edit (a plain approve). The other way round is
    :class:`AlreadyResolved`: approving as shown a call that runs a reviewer's edit, or
    editing a call approved as shown or for other arguments, is not the same decision."""
    if binding.status is not ConfirmationStatus.APPROVED:
        return
    entry = yield from plan_deciding_entry(ctx.session_id, binding)
    applied = entry.effective_digest if entry is not None and entry.is_edit else None
    wanted = None if edit is None else edit.digest
    if applied != wanted:
        raise AlreadyResolved(
            "This call was already approved "
            + ("with a reviewer's edit" if applied else "as shown")
            + ", which runs other arguments than this decision's; nothing was recorded.",
            record=binding,
        )


def plan_decide(
    ctx: BridgeContext,
    token: str,
    intent: ConfirmationEvent,
    reason: str | None,
    go_on: bool,
    args_digest: str | None = None,
    decided_by: str | None = None,
    via: str = "api",
) -> Plan[Decided]:
    """Resolve one confirmation (the session's two CAS), then continue its run if now ready.

    ``decided_by`` / ``via``: who decides, for the audit entry written before the claim."""
    check_decider(decided_by, via)  # refused before the reason record below, too
    if intent is ConfirmationEvent.REJECT and reason:
        yield from _keep_reason_before_the_claim(ctx, token, reason, args_digest)
    binding: ConfirmationBinding = yield from ctx.confirmations().resolve(
        token, intent, reason, args_digest, decided_by, via
    )
    if intent is ConfirmationEvent.APPROVE:
        yield from _same_approval(ctx, binding, None)
    if not go_on:
        return Decided(binding, None)
    run_id = yield from plan_find_run(ctx, binding.tool_call_id)
    if run_id is None:
        return Decided(binding, None)
    return Decided(binding, (yield from plan_continue(ctx, run_id, {})))


#: Why a call may not be edited (``None``: it may), from the call as its run recorded it
#: (``None`` when no run of the session holds it) and its binding; each runtime supplies one.
EditRefusal = Callable[[PendingCall | None, ConfirmationBinding], str | None]
NO_EDITS = "This bridge's runtime offers no reviewer edits; approve or reject the call as shown."


def _edit_refusal(
    ctx: BridgeContext, token: str, refusal: EditRefusal, args_digest: str | None = None
) -> Plan[tuple[ConfirmationBinding, str | None, str | None]]:
    """The call behind ``token``, its run's id and why it may not be edited (``None``: it
    may); with ``args_digest``, :class:`ArgumentsMismatch` first if it is not the call's."""
    binding = _binding(ctx.confirmations().cached_bindings(), token)
    if binding is None:
        binding = _binding((yield from ctx.confirmations().bindings()), token)
    if binding is None:
        raise InvalidConfirmationToken()
    if args_digest is not None:
        check_arguments_digest(binding, args_digest)
    run_id = yield from plan_find_run(ctx, binding.tool_call_id)
    run = None if run_id is None else (yield from _load_run(ctx, run_id))
    call = next(
        (c for c in (run.approvals if run else ()) if c.tool_call_id == binding.tool_call_id),
        None,
    )
    return binding, run_id, refusal(call, binding)


def plan_can_edit(ctx: BridgeContext, token: str, refusal: EditRefusal) -> Plan[bool]:
    """Whether the call behind ``token`` accepts a reviewer edit: its runtime and tool offer
    one (ADR-0135). It reads, never writes, and says nothing of the call's state (an edit of
    a decided call is still :class:`AlreadyResolved`)."""
    _binding, _run_id, why = yield from _edit_refusal(ctx, token, refusal)
    return why is None


def plan_edit(
    ctx: BridgeContext,
    token: str,
    args: Any,
    args_digest: str,
    reason: str | None,
    go_on: bool,
    decided_by: str | None,
    via: str,
    refusal: EditRefusal,
) -> Plan[Decided]:
    """Approve ``token`` for the reviewer's ``args`` instead of the call's (ADR-0135).

    Every refusal comes before anything is written: the decider, the arguments (bounded
    like any input), the digest of the arguments the reviewer was shown (required), whether
    the call's runtime and tool offer edits. Then the session's approve, whose audit entry
    (written before its claim) records the edit; the continuation reads it there and runs
    the body once, with the edited arguments. A repeat of the same edit returns the record;
    a call decided otherwise is :class:`AlreadyResolved`.
    """
    check_decider(decided_by, via)
    edit = edited_arguments(args)
    if not isinstance(args_digest, str):
        raise ConfigError(
            "An edit needs args_digest: the digest of the arguments the reviewer was shown.",
            hint="Pass args_digest=arguments_digest(binding.input).",
        )
    binding, run_id, why = yield from _edit_refusal(ctx, token, refusal, args_digest)
    if why is not None:
        raise EditNotAllowed(why, record=binding)
    decided: ConfirmationBinding = yield from ctx.confirmations().resolve(
        token, ConfirmationEvent.APPROVE, reason, args_digest, decided_by, via, edit
    )
    yield from _same_approval(ctx, decided, edit)
    if not go_on or run_id is None:
        return Decided(decided, None)
    return Decided(decided, (yield from plan_continue(ctx, run_id, {})))


def _continue_or_blocked(
    ctx: BridgeContext, run_id: str, recover: bool = False
) -> Plan[RunOutcome]:
    """Continue ``run_id`` for a pass over many runs: a run its runtime cannot continue is an
    operator's (``RunBlocked``), reported as waiting with that step, and the other runs go on."""
    try:
        return (yield from plan_continue(ctx, run_id, {}, recover=recover))
    except RunBlocked as blocked:
        run = yield from _load_run(ctx, run_id)  # released paused, as the error left it
        snapshot = "" if run is None else run.snapshot
        return RunOutcome(run_id, "waiting", snapshot=snapshot, blocked=blocked.next_step)


def plan_expire_due(ctx: BridgeContext) -> Plan[tuple[RunOutcome, ...]]:
    """Expire every due confirmation, then continue the runs that became ready (a blocked
    run is reported, as by :func:`plan_reconcile`)."""
    expired: tuple[ConfirmationBinding, ...] = yield from ctx.confirmations().expire_due()
    outcomes = []
    seen: set[str] = set()
    for binding in expired:
        run_id = yield from plan_find_run(ctx, binding.tool_call_id)
        if run_id is not None and run_id not in seen:
            seen.add(run_id)
            outcomes.append((yield from _continue_or_blocked(ctx, run_id)))
    return tuple(outcomes)


def plan_reconcile(ctx: BridgeContext) -> Plan[BridgeReport]:
    """Settle processing confirmations from the ledger, recover continuations, list unknowns.

    Run it when no claimant is alive (after a crash, from an operator command): a continuation
    found ``continuing`` is taken over; its bodies that already ran replay from the ledger.
    """
    from .ledger import ExecutionUnknown

    confirmations = yield from ctx.confirmations().reconcile()
    runs: list[RunOutcome] = []
    in_flight: set[str] = set()
    for key in (yield ListRecords(ctx.session_id, RUN_PREFIX)):
        run = RunRecord.from_stored((yield LoadRecord(ctx.session_id, key)))
        if run is None or run.state is RunState.COMPLETED:
            continue
        try:
            recover = run.state is RunState.CONTINUING
            outcome = yield from _continue_or_blocked(ctx, run.run_id, recover)
        except ExecutionUnknown:
            outcome = RunOutcome(run.run_id, "waiting", snapshot=run.snapshot)
        if outcome.status == "continuing":  # a live owner holds it (its lease has not passed)
            in_flight |= {c.tool_call_id for c in run.calls}
        runs.append(outcome)
    # An executing entry of a run its live owner holds is a body in flight, not an unknown.
    unknown = tuple(
        e for e in (yield from plan_unknown(ctx.session_id)) if e.tool_call_id not in in_flight
    )
    return BridgeReport(tuple(confirmations), tuple(runs), unknown)


def plan_run(ctx: BridgeContext, run_id: str) -> Plan[RunRecord | None]:
    return (yield from _load_run(ctx, run_id))


# --------------------------------------------------------------------------- facades


def _guard_ledger(
    storage: Any, session_id: str, owner: str, clock: Callable[[], int]
) -> AsyncToolLedger:
    """The ledger the execution guard runs tool bodies through, for either bridge flavour.

    Every runtime calls its tools from inside its own event loop (an async tool hook), even
    under a sync bridge, so the guard's ledger is always the asyncio one; ``bridge.ledger``
    is the operator's, of the bridge's own flavour.
    """
    return AsyncToolLedger(storage, session_id, owner=owner, clock=clock)


class _BridgeBase:
    runtime_name = "runtime"
    #: Which session flavour (and so which driver) this facade runs with.
    is_async = False

    def __init__(
        self,
        session: Any,
        storage: Any,
        *,
        ttl_ms: int = 300_000,
        owner: str | None = None,
        clock: Callable[[], int] = now_ms,
        idempotent_tools: Sequence[str] = (),
        lease_ms: int | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(getattr(session, "reload", None)) is not self.is_async:
            raise ConfigError(
                f"{type(self).__name__} needs "
                + ("an AsyncChatSession." if self.is_async else "a ChatSession (sync).")
            )
        self.session = session
        self.storage = require_records(storage)
        _check_same_storage(type(self).__name__, session, storage)
        self.session_id = check_session_id(session.session_id)
        self.ttl_ms = ttl_ms
        self.owner = owner or default_owner()
        self.idempotent_tools = frozenset(idempotent_tools)
        guard_ledger = _guard_ledger(storage, self.session_id, self.owner, clock)
        self._ctx = BridgeContext(
            self.session_id,
            self.runtime_name,
            self.owner,
            clock,
            guard_ledger,
            self.idempotent_tools,
            _check_lease(lease_ms),
            BridgeSession(session, self.storage, ttl_ms),
        )

    def execution_guard(self, approved: Iterable[str] = ()) -> ExecutionGuard:
        """The guard a runtime module runs tool bodies through outside a continuation (a
        new run's ungated calls: :meth:`ExecutionGuard.execute_ungated`); ``approved`` names
        calls it may run as approved. Continuations get theirs from ``resume``."""
        return self._ctx.guard(frozenset(approved))

    def _ports(self, runtime: Any) -> Ports:
        """One driver for the whole plan: the records, the session's own loads, saves and
        events (to its observers as of now), and the runtime (ADR-0121)."""
        return Ports(self.storage, observers=self._ctx.confirmations().observers, runtime=runtime)

    def _port(self, sink: Sink | None) -> Any:
        """This call's runtime port: ``_runtime()`` as it always was when nothing streams (a
        subclass that wraps ``_runtime()`` keeps working), the streaming one otherwise."""
        return self._runtime() if sink is None else self._runtime(sink)

    def _runtime(self, sink: Sink | None = None) -> Any:  # pragma: no cover - each module's
        """The runtime port for one bridge call; with ``sink``, it drives the runtime's
        streaming API and hands each of its events to the sink (ADR-0137)."""
        raise NotImplementedError

    def _edit_refusal(self, call: PendingCall | None, binding: ConfirmationBinding) -> str | None:
        """Why ``call`` may not be edited (``None``: it may); a runtime that offers edits
        overrides this with its own rule."""
        return NO_EDITS


def _check_lease(lease_ms: object) -> int | None:
    if lease_ms is None:
        return None
    if isinstance(lease_ms, bool) or not isinstance(lease_ms, int) or lease_ms < 1:
        raise ConfigError(
            f"lease_ms must be an int >= 1 or None, got {lease_ms!r}.",
            hint="The lease is renewed every third of it while a body runs: make it longer "
            "than the longest pause the process may take (a store outage, a stalled host).",
        )
    return lease_ms


def _check_same_storage(bridge: str, session: Any, storage: Any) -> None:
    """A bridge keeps its run records and ledger beside the session's envelope: refuse a
    storage other than the one the session was resumed with (checked before any I/O)."""
    ports = getattr(session, "_ports", None)
    own = getattr(ports, "storage", None)
    if own is not None and own is not storage:
        raise ConfigError(
            f"{bridge} was given a storage other than its session's; the run records and the "
            "tool-execution ledger must live beside the session's envelope.",
            hint="Pass the storage object the session was resumed with.",
        )


def in_a_loop_message(bridge: str) -> str:
    """What a sync bridge says when it is called from a running event loop."""
    return (
        f"{bridge} runs the agent on its own event loop and cannot be called from a "
        f"running one; use Async{bridge} there."
    )


def refuse_inside_a_loop(bridge: str) -> None:
    """``ConfigError`` naming the async twin when called from a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigError(in_a_loop_message(bridge))


class _OutsideALoop:
    """The sync bridges' runtime port, refusing to start or resume the agent inside a running
    event loop with a :class:`ConfigError` naming the async twin (nothing has run yet),
    instead of whatever the runtime's own loop handling raises there."""

    def __init__(self, inner: Any, bridge: str) -> None:
        self.inner = inner
        self.bridge = bridge
        self.runtime = getattr(inner, "runtime", None)

    def _check(self) -> None:
        refuse_inside_a_loop(self.bridge)

    def start(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self.inner.start(*args, **kwargs)

    def resume(self, *args: Any, **kwargs: Any) -> Any:
        self._check()
        return self.inner.resume(*args, **kwargs)


class Bridge(_BridgeBase):
    """The sync bridge: a :class:`ChatSession` over a sync record-capable storage.

    ``ledger`` is a sync :class:`ToolLedger` on the bridge's storage, session and clock.
    """

    ledger: ToolLedger

    def __init__(self, session: Any, storage: Any, **options: Any) -> None:
        super().__init__(session, storage, **options)
        self.ledger = ToolLedger(
            self.storage, self.session_id, owner=self.owner, clock=self._ctx.clock
        )

    def _run(self, plan: Plan[T], on_event: EventSink | None = None) -> T:
        sink = check_sink(on_event, type(self).__name__, is_async=False)
        runtime = _OutsideALoop(self._port(sink), type(self).__name__)
        return run_sync(plan, self._ports(runtime))

    def _start(
        self,
        run_id: str | None,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        on_event: EventSink | None = None,
    ) -> RunOutcome:
        # Refused before the run id is claimed: a start that cannot run must not use it up.
        refuse_inside_a_loop(type(self).__name__)
        plan = plan_start(self._ctx, run_id or secrets.token_hex(12), args, kwargs)
        return self._run(plan, on_event)

    def continue_run(
        self,
        run_id: str,
        *,
        external: Mapping[str, Any] | None = None,
        on_event: EventSink | None = None,
    ) -> RunOutcome:
        """Continue ``run_id`` if every call is decided (``external``: host results of external
        calls); ``"waiting"`` otherwise, ``"continuing"`` if another process holds it.
        ``on_event``: streams the continuation's runtime events (ADR-0137; an asyncio bridge
        also awaits an async sink)."""
        return self._run(plan_continue(self._ctx, run_id, external or {}), on_event)

    def approve(
        self,
        token: str,
        *,
        continue_run: bool = True,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Approve (two CAS); then continue the run if this was its last undecided call.

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the approver
        saw; for other arguments, :class:`~akchat_fsm.ArgumentsMismatch` and nothing written.
        ``decided_by`` / ``via``: who decides and from where, for the audit trail (ADR-0132).
        ``on_event``: streams the continuation's runtime events, if this continues the run
        (ADR-0137; an asyncio bridge also awaits an async sink).
        """
        return self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.APPROVE,
                None,
                continue_run,
                args_digest,
                decided_by,
                via,
            ),
            on_event,
        )

    def reject(
        self,
        token: str,
        reason: str | None = None,
        *,
        continue_run: bool = True,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Reject (two CAS; ``reason`` reaches the model); then continue the run if ready;
        ``args_digest``, ``decided_by`` and ``via`` as in :meth:`approve`."""
        return self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.REJECT,
                reason,
                continue_run,
                args_digest,
                decided_by,
                via,
            ),
            on_event,
        )

    def edit(
        self,
        token: str,
        args: Mapping[str, Any],
        *,
        args_digest: str,
        reason: str | None = None,
        continue_run: bool = True,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Approve the call for the reviewer's ``args`` instead of its own (ADR-0135); then
        continue the run if this was its last undecided call.

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the reviewer
        was shown (required). The audit entry records intent ``edit``, that digest, the edited
        arguments and their digest, ``reason``, ``decided_by`` and ``via``; the body runs
        once, with ``args``. A runtime or tool that does not offer edits is
        :class:`~akchat_fsm.errors.EditNotAllowed`, and nothing is written.
        """
        return self._run(
            plan_edit(
                self._ctx,
                token,
                args,
                args_digest,
                reason,
                continue_run,
                decided_by,
                via,
                self._edit_refusal,
            ),
            on_event,
        )

    def expire(
        self,
        token: str,
        *,
        continue_run: bool = True,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Expire a due confirmation (its denial reaches the model); then continue if ready."""
        return self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.EXPIRE,
                None,
                continue_run,
                None,
                decided_by,
                via,
            ),
            on_event,
        )

    def expire_due(self) -> tuple[RunOutcome, ...]:
        return self._run(plan_expire_due(self._ctx))

    def reconcile(self) -> BridgeReport:
        return self._run(plan_reconcile(self._ctx))

    def can_edit(self, token: str) -> bool:
        """Whether the call behind ``token`` accepts :meth:`edit`: its runtime and tool offer
        reviewer edits (ADR-0135). It reads and writes nothing; ``False`` here is the
        :class:`~akchat_fsm.errors.EditNotAllowed` an edit would raise."""
        return self._run(plan_can_edit(self._ctx, token, self._edit_refusal))

    def run_record(self, run_id: str) -> RunRecord | None:
        return self._run(plan_run(self._ctx, run_id))

    def unknown_executions(self) -> tuple[LedgerEntry, ...]:
        """Executions whose outcome is unknown (never re-run: settle them)."""
        return self.ledger.unknown()

    def settle_execution(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
    ) -> LedgerEntry:
        """An operator's verdict on an unknown execution (see :meth:`ToolLedger.settle`);
        ``operator`` names who gave it (the entry's owner, default this bridge's; and the
        principal of the audit entry written first, with ``reason``, via ``api``)."""
        return self.ledger.settle(
            tool_call_id, ran=ran, result=result, operator=operator, reason=reason
        )


class AsyncBridge(_BridgeBase):
    """The asyncio bridge: an :class:`AsyncChatSession` over an async record-capable storage.

    ``ledger`` is an :class:`AsyncToolLedger` on the bridge's storage, session and clock.
    """

    is_async = True
    ledger: AsyncToolLedger

    def __init__(self, session: Any, storage: Any, **options: Any) -> None:
        super().__init__(session, storage, **options)
        self.ledger = self._ctx.ledger

    async def _run(self, plan: Plan[T], on_event: EventSink | None = None) -> T:
        sink = check_sink(on_event, type(self).__name__, is_async=True)
        return await run_async(plan, self._ports(self._port(sink)))

    async def _start(
        self,
        run_id: str | None,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        on_event: EventSink | None = None,
    ) -> RunOutcome:
        plan = plan_start(self._ctx, run_id or secrets.token_hex(12), args, kwargs)
        return await self._run(plan, on_event)

    async def continue_run(
        self,
        run_id: str,
        *,
        external: Mapping[str, Any] | None = None,
        on_event: EventSink | None = None,
    ) -> RunOutcome:
        """Continue ``run_id`` if every call is decided (``external``: host results of external
        calls); ``"waiting"`` otherwise, ``"continuing"`` if another process holds it.
        ``on_event``: streams the continuation's runtime events (ADR-0137; an asyncio bridge
        also awaits an async sink)."""
        return await self._run(plan_continue(self._ctx, run_id, external or {}), on_event)

    async def approve(
        self,
        token: str,
        *,
        continue_run: bool = True,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Approve (two CAS); then continue the run if this was its last undecided call.

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the approver
        saw; for other arguments, :class:`~akchat_fsm.ArgumentsMismatch` and nothing written.
        ``decided_by`` / ``via``: who decides and from where, for the audit trail (ADR-0132).
        ``on_event``: streams the continuation's runtime events, if this continues the run
        (ADR-0137; an asyncio bridge also awaits an async sink).
        """
        return await self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.APPROVE,
                None,
                continue_run,
                args_digest,
                decided_by,
                via,
            ),
            on_event,
        )

    async def reject(
        self,
        token: str,
        reason: str | None = None,
        *,
        continue_run: bool = True,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Reject (two CAS; ``reason`` reaches the model); then continue the run if ready;
        ``args_digest``, ``decided_by`` and ``via`` as in :meth:`approve`."""
        return await self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.REJECT,
                reason,
                continue_run,
                args_digest,
                decided_by,
                via,
            ),
            on_event,
        )

    async def edit(
        self,
        token: str,
        args: Mapping[str, Any],
        *,
        args_digest: str,
        reason: str | None = None,
        continue_run: bool = True,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Approve the call for the reviewer's ``args`` instead of its own (ADR-0135); then
        continue the run if this was its last undecided call.

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the reviewer
        was shown (required). The audit entry records intent ``edit``, that digest, the edited
        arguments and their digest, ``reason``, ``decided_by`` and ``via``; the body runs
        once, with ``args``. A runtime or tool that does not offer edits is
        :class:`~akchat_fsm.errors.EditNotAllowed`, and nothing is written.
        """
        return await self._run(
            plan_edit(
                self._ctx,
                token,
                args,
                args_digest,
                reason,
                continue_run,
                decided_by,
                via,
                self._edit_refusal,
            ),
            on_event,
        )

    async def expire(
        self,
        token: str,
        *,
        continue_run: bool = True,
        decided_by: str | None = None,
        via: str = "api",
        on_event: EventSink | None = None,
    ) -> Decided:
        """Expire a due confirmation (its denial reaches the model); then continue if ready."""
        return await self._run(
            plan_decide(
                self._ctx,
                token,
                ConfirmationEvent.EXPIRE,
                None,
                continue_run,
                None,
                decided_by,
                via,
            ),
            on_event,
        )

    async def expire_due(self) -> tuple[RunOutcome, ...]:
        return await self._run(plan_expire_due(self._ctx))

    async def reconcile(self) -> BridgeReport:
        return await self._run(plan_reconcile(self._ctx))

    async def can_edit(self, token: str) -> bool:
        """Whether the call behind ``token`` accepts :meth:`edit`: its runtime and tool offer
        reviewer edits (ADR-0135). It reads and writes nothing; ``False`` here is the
        :class:`~akchat_fsm.errors.EditNotAllowed` an edit would raise."""
        return await self._run(plan_can_edit(self._ctx, token, self._edit_refusal))

    async def run_record(self, run_id: str) -> RunRecord | None:
        return await self._run(plan_run(self._ctx, run_id))

    async def unknown_executions(self) -> tuple[LedgerEntry, ...]:
        """Executions whose outcome is unknown (never re-run: settle them)."""
        return await self.ledger.unknown()

    async def settle_execution(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
    ) -> LedgerEntry:
        """An operator's verdict on an unknown execution (see :meth:`ToolLedger.settle`);
        ``operator`` names who gave it (the entry's owner, default this bridge's; and the
        principal of the audit entry written first, with ``reason``, via ``api``)."""
        return await self.ledger.settle(
            tool_call_id, ran=ran, result=result, operator=operator, reason=reason
        )
