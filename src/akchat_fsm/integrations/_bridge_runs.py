"""The run record of a paused agent run, and every decision about it, as pure functions.

One record per run, key ``run:<run-id>``, beside the envelope (ADR-0100 §3):

=============  ===============================================================  ==============
state          meaning                                                          next
=============  ===============================================================  ==============
``paused``     the runtime's serialised state, and the calls awaiting a         ``continuing``
               decision (approval) or a host result (external)
``continuing`` one process claimed the continuation (claim nonce, owner,       ``paused`` (the
               attempt); saved with ``processing=True``                         next batch) or
                                                                                ``completed``
``completed``  the run's output and final state; terminal                       —
=============  ===============================================================  ==============

The runtime's state is read and written only through this record's compare-and-set, so two
processes never continue one paused state: the one whose claim applied runs it, the other
gets :class:`RunInProgress` (or, once completed, the recorded outcome). Every decision about
the record is a lookup in the table derived from
:class:`~akchat_fsm.machines.run.RunLifecycle` (``RUN_TABLE``, ADR-0120).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from ..errors import ConfigError
from ..machines.run import RunEvent, RunState
from ..machines.tables import MACHINES, RUN_TABLE, step
from ..storage.checks import check_record_key
from ..wire.bounded import thaw
from ..wire.enums import ConfirmationStatus
from ..wire.js import escape_surrogates
from ..wire.session import ConfirmationBinding
from ._bridge_io import BridgeError, stored_json

__all__ = [
    "DENIAL_PREFIX",
    "EXPIRED_MESSAGE",
    "REJECTED_MESSAGE",
    "RUN_PREFIX",
    "CallDecision",
    "ContinueAction",
    "ContinueDecision",
    "PendingCall",
    "Readiness",
    "RunBlocked",
    "RunClaimLost",
    "RunInProgress",
    "RunRecord",
    "RunState",
    "decide_continuation",
    "decide_continue",
    "decide_readiness",
    "decide_release_run",
    "decide_renew_run",
    "decide_settle_run",
    "decide_start_run",
    "decision_args",
    "decision_key",
    "denial_key",
    "lease_expired",
    "run_key",
    "start_key",
]

RUN_PREFIX = "run:"
#: ``rid:<run-id>``: the create-only claim of a run id, saved before the agent first runs.
START_PREFIX = "rid:"
DENIAL_PREFIX = "denial:"
DECISION_PREFIX = "decided:"
#: What the model reads when a reviewer rejected the call without a reason.
REJECTED_MESSAGE = "A reviewer rejected this tool call; it was not run."
#: What the model reads when nobody decided before the confirmation expired.
EXPIRED_MESSAGE = "The approval request for this tool call expired; it was not run."


#: The final states of a run record (``completed``): read off the machine, not restated.
_FINAL = MACHINES["run"].finals


def _stored_state(value: Any) -> RunState:
    """A stored run's state; ``absent`` names no record, so no record may hold it."""
    state = RunState(value)
    if state is RunState.ABSENT:
        raise ValueError("a stored run record cannot be absent")
    return state


class RunInProgress(BridgeError):
    """Another process holds this run's continuation; nothing ran here. ``record``: the run."""


class RunBlocked(BridgeError):
    """The runtime cannot continue this run from what it holds (a LangGraph thread that no
    longer holds the run's pause); nothing ran. The message names the state; ``next_step``
    says what an operator must do, and the sweep reports it so. ``record``: the run."""

    def __init__(self, message: str, *, next_step: str, record: Any = None) -> None:
        super().__init__(message, record=record)
        self.next_step = next_step


class RunClaimLost(BridgeError):
    """This process's continuation claim was taken over (by a recovery) meanwhile; the run's
    new state was not saved by this process. ``record`` is the stored run."""


def _lease(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"leaseUntilMs must be an int or null, got {value!r}")
    return value


def lease_expired(run: RunRecord | None, now_ms: int) -> bool:
    """May a recovery take over ``run``'s continuation now? Only once its lease passed (a run
    without a lease: at once, as before leases)."""
    return run is None or run.lease_until_ms is None or run.lease_until_ms <= now_ms


def run_key(run_id: str) -> str:
    """``run:<run-id>``; the run id must fit a record key."""
    try:
        return check_record_key(RUN_PREFIX + run_id)
    except ConfigError as exc:
        raise ConfigError(
            f"Invalid run id {run_id!r}.", hint="Use letters, digits and '._:-' (max 190)."
        ) from exc


def start_key(run_id: str) -> str:
    """``rid:<run-id>`` (as long as the run's own key, so it fits wherever that one does)."""
    run_key(run_id)
    return START_PREFIX + run_id


def denial_key(tool_call_id: str) -> str:
    """Where a rejection's reason is kept for the model (create-only, first reason wins)."""
    from .ledger import ledger_key

    return DENIAL_PREFIX + ledger_key(tool_call_id)[len("call:") :]


def decision_key(tool_call_id: str) -> str:
    """Where a run's decided call keeps its terminal status once seen, so that retention
    pruning the confirmation (ADR-0013) cannot make the bridge propose it again."""
    from .ledger import ledger_key

    return DECISION_PREFIX + ledger_key(tool_call_id)[len("call:") :]


def decision_text(status: ConfirmationStatus, args: Mapping[str, Any] | None = None) -> str:
    """A decision record; an edited approval keeps the reviewer's arguments too (ADR-0135),
    so a run whose binding retention pruned still runs what the reviewer decided."""
    body: dict[str, Any] = {"v": 1, "status": status.value}
    if args is not None:
        body["args"] = thaw(args)
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return escape_surrogates(text)


def decision_args(stored: tuple[int, str] | None) -> dict[str, Any] | None:
    """The edited arguments a decision record keeps (``None``: none, or no record)."""
    if stored is None:
        return None
    raw = stored_json(stored[1], "stored decision record")
    args = raw.get("args") if isinstance(raw, dict) else None
    if args is not None and not isinstance(args, dict):
        raise ConfigError("A decision record's edited arguments are not an object.")
    return args


def decision_status(stored: tuple[int, str] | None) -> ConfirmationStatus | None:
    """The terminal status a decision record holds, or ``None`` when there is none."""
    if stored is None:
        return None
    raw = stored_json(stored[1], "stored decision record")
    try:
        status = ConfirmationStatus(raw["status"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"A decision record is not valid: {exc!r}.") from exc
    if not status.is_terminal:
        raise ConfigError(f"A decision record holds a live status {status.value!r}.")
    return status


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call the runtime deferred: ``kind`` ``"approval"`` (a confirmation decides it) or
    ``"external"`` (the host executes it and passes the result; passed through untouched)."""

    tool_call_id: str
    tool: str
    args: Mapping[str, Any]
    kind: str = "approval"
    metadata: Any = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.tool_call_id,
            "tool": self.tool,
            "args": dict(self.args),
            "kind": self.kind,
            "metadata": self.metadata,
        }

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> PendingCall:
        return cls(
            str(raw["id"]),
            str(raw["tool"]),
            dict(raw["args"]),
            str(raw["kind"]),
            raw.get("metadata"),
        )


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A paused, continuing or completed agent run as stored (``version``: storage version)."""

    run_id: str
    runtime: str
    state: RunState
    #: The runtime's own serialised state (message history JSON, ``RunState`` JSON).
    snapshot: str
    calls: tuple[PendingCall, ...] = ()
    #: How many pauses this run has had (1 for the first batch of calls).
    batch: int = 1
    attempt: int = 0
    claim: str | None = None
    owner: str | None = None
    #: Host results of external calls, fixed at the continuation claim (a recovery reuses them).
    external: Mapping[str, Any] = field(default_factory=dict)
    #: The run's final output as JSON, once completed.
    output: Any = None
    updated_ms: int = 0
    version: int = 0
    #: Until when (epoch ms, the bridge's clock) the continuation claim is held: the owner
    #: renews it before each tool body; a recovery takes over only once it passed. ``None``:
    #: no lease (a bridge without ``lease_ms``), so a recovery may take over at once.
    lease_until_ms: int | None = None

    def to_json(self) -> str:
        body = {
            "v": 1,
            "runId": self.run_id,
            "runtime": self.runtime,
            "state": self.state.value,
            "snapshot": self.snapshot,
            "calls": [call.to_wire() for call in self.calls],
            "batch": self.batch,
            "attempt": self.attempt,
            "claim": self.claim,
            "owner": self.owner,
            "external": dict(self.external),
            "output": self.output,
            "updatedMs": self.updated_ms,
            "leaseUntilMs": self.lease_until_ms,
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_stored(cls, stored: tuple[int, str] | None) -> RunRecord | None:
        if stored is None:
            return None
        version, text = stored
        raw = stored_json(text, "stored run record")
        try:
            return cls(
                run_id=str(raw["runId"]),
                runtime=str(raw["runtime"]),
                state=_stored_state(raw["state"]),
                snapshot=str(raw["snapshot"]),
                calls=tuple(PendingCall.from_wire(c) for c in raw["calls"]),
                batch=int(raw["batch"]),
                attempt=int(raw["attempt"]),
                claim=raw.get("claim"),
                owner=raw.get("owner"),
                external=dict(raw.get("external") or {}),
                output=raw.get("output"),
                updated_ms=int(raw.get("updatedMs", 0)),
                version=int(version),
                lease_until_ms=_lease(raw.get("leaseUntilMs")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"A run record is not valid: {exc!r}.") from exc

    @property
    def approvals(self) -> tuple[PendingCall, ...]:
        return tuple(c for c in self.calls if c.kind == "approval")

    @property
    def externals(self) -> tuple[PendingCall, ...]:
        return tuple(c for c in self.calls if c.kind != "approval")


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class CallDecision:
    """What the runtime is told about one approval call: run it, or deny it with ``message``."""

    tool_call_id: str
    approved: bool
    message: str | None = None
    #: The confirmation's terminal status the decision comes from (kept in decision records).
    status: ConfirmationStatus | None = None
    #: A reviewer's edit: the arguments to run instead of the call's (``None``: as proposed).
    args: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether a paused run can continue: every approval decided and every external answered.

    ``unproposed``: approval calls with no confirmation yet (a crash between saving the run and
    proposing); ``pending``: confirmations not yet terminal; ``awaiting_external``: external
    calls the host has not answered. ``decisions`` is complete only when all three are empty.
    """

    decisions: tuple[CallDecision, ...]
    unproposed: tuple[PendingCall, ...] = ()
    pending: tuple[ConfirmationBinding, ...] = ()
    awaiting_external: tuple[PendingCall, ...] = ()

    @property
    def ready(self) -> bool:
        return not (self.unproposed or self.pending or self.awaiting_external)


def decide_readiness(
    run: RunRecord,
    bindings: Iterable[ConfirmationBinding],
    denials: Mapping[str, str],
    external: Mapping[str, Any],
    recorded: Mapping[str, ConfirmationStatus] | None = None,
    edits: Mapping[str, Mapping[str, Any]] | None = None,
) -> Readiness:
    """Map each approval call to its confirmation's terminal status (pure).

    ``approved`` runs the body; ``rejected`` and ``expired`` deny it with a message the model
    reads: the reviewer's reason when one was given (``denials``), else a fixed sentence.
    ``recorded``: the statuses kept in decision records, for calls whose confirmation
    retention pruned from the envelope (a binding, when there is one, is the same status).
    ``edits``: the reviewers' arguments of approved calls that were edited (ADR-0135).
    """
    by_call = {b.tool_call_id: b for b in bindings}
    decisions: list[CallDecision] = []
    unproposed: list[PendingCall] = []
    pending: list[ConfirmationBinding] = []
    for call in run.approvals:
        binding = by_call.get(call.tool_call_id)
        status = binding.status if binding is not None else (recorded or {}).get(call.tool_call_id)
        if status is None:
            unproposed.append(call)
        elif status is ConfirmationStatus.APPROVED:
            edited = (edits or {}).get(call.tool_call_id)
            decisions.append(CallDecision(call.tool_call_id, True, None, status, edited))
        elif status is ConfirmationStatus.REJECTED:
            reason = denials.get(call.tool_call_id) or REJECTED_MESSAGE
            decisions.append(CallDecision(call.tool_call_id, False, reason, status))
        elif status is ConfirmationStatus.EXPIRED:
            decisions.append(CallDecision(call.tool_call_id, False, EXPIRED_MESSAGE, status))
        elif binding is not None:
            pending.append(binding)
    answered = {**run.external, **external}
    awaiting = tuple(c for c in run.externals if c.tool_call_id not in answered)
    return Readiness(tuple(decisions), tuple(unproposed), tuple(pending), awaiting)


class ContinueAction(StrEnum):
    """What a continuation decision says (a ``StrEnum``: each member equals its old string)."""

    #: Save ``record`` (our continuation claim) with the stored version, then resume.
    CLAIM = "claim"
    #: ``record`` is already our claim (its save applied): resume it, writing nothing.
    HOLD = "hold"
    #: ``record`` is completed: report its recorded outcome.
    COMPLETED = "completed"
    #: Another process holds ``record``'s continuation: nothing runs here.
    IN_PROGRESS = "in_progress"


@dataclass(frozen=True, slots=True)
class ContinueDecision:
    """One continuation decision and the record it is about (the claim to save for ``claim``)."""

    action: ContinueAction
    record: RunRecord


def _cell(
    run: RunRecord | None, event: RunEvent, claim: str, recover: bool
) -> tuple[RunState, bool, RunState | None]:
    """(state, ours, target) of ``event`` on ``run`` in the machine's table."""
    state = RunState.ABSENT if run is None else run.state
    ours = run is not None and run.claim == claim
    return state, ours, RUN_TABLE.get((state, event, (ours, recover)))


def decide_start_run(
    run_id: str, runtime: str, snapshot: str, calls: tuple[PendingCall, ...], now_ms: int
) -> RunRecord:
    """The record a run that paused at its start is created with (the table's ``start``)."""
    state = step("run", RUN_TABLE, RunState.ABSENT, RunEvent.START, (False, False))
    return RunRecord(run_id, runtime, state, snapshot, calls, updated_ms=now_ms)


def decide_continuation(
    run: RunRecord | None,
    *,
    run_id: str,
    claim: str,
    owner: str,
    now_ms: int,
    external: Mapping[str, Any],
    recover: bool,
    lease_ms: int | None = None,
) -> ContinueDecision:
    """May this process continue the run? The table's ``claim`` cell decides: no move from a
    final state is the recorded outcome (``completed``), no move otherwise is another
    process's continuation (``in_progress``), a self-loop under ``ours`` is our own claim found
    again (``hold``), any other move is the claim to save (``claim``).

    ``recover=True`` takes over a ``continuing`` claim (reconcile, once the host judges its
    claimant gone) whose lease has passed (:func:`lease_expired`: a live owner renews it, so
    it is never taken over); the bodies it already ran replay from the ledger. Our claim
    holds a lease of ``lease_ms`` (``None``: none). Raises :class:`ConfigError` when there is
    no run.
    """
    recover = recover and lease_expired(run, now_ms)
    state, ours, target = _cell(run, RunEvent.CLAIM, claim, recover)
    if run is None:
        raise ConfigError(f"No paused run {run_id!r} in this session.")
    if target is None:
        if state in _FINAL:
            return ContinueDecision(ContinueAction.COMPLETED, run)
        return ContinueDecision(ContinueAction.IN_PROGRESS, run)
    if ours and target is state:
        return ContinueDecision(ContinueAction.HOLD, run)
    answered = {**run.external, **external}
    write = replace(
        run,
        state=target,
        attempt=run.attempt + 1,
        claim=claim,
        owner=owner,
        # Decided before readiness is read: an unanswered call is left out (a run that is not
        # ready is not claimed, so that write is never saved).
        external={
            c.tool_call_id: answered[c.tool_call_id]
            for c in run.externals
            if c.tool_call_id in answered
        },
        updated_ms=now_ms,
        lease_until_ms=None if lease_ms is None else now_ms + lease_ms,
    )
    return ContinueDecision(ContinueAction.CLAIM, write)


def decide_continue(
    run: RunRecord | None,
    *,
    run_id: str,
    claim: str,
    owner: str,
    now_ms: int,
    external: Mapping[str, Any],
    recover: bool,
) -> tuple[ContinueAction, RunRecord | None]:
    """:func:`decide_continuation` as ``(action, record)``: ``("claim", write)``, ``("hold",
    run)`` (our claim already applied), or ``("completed", run)``. Raises
    :class:`RunInProgress` for a loser."""
    decision = decide_continuation(
        run,
        run_id=run_id,
        claim=claim,
        owner=owner,
        now_ms=now_ms,
        external=external,
        recover=recover,
    )
    if decision.action is ContinueAction.IN_PROGRESS:
        raise RunInProgress(
            f"Run {run_id!r} is being continued by {decision.record.owner} "
            f"(attempt {decision.record.attempt}).",
            record=decision.record,
        )
    return decision.action, decision.record


def _claim_lost(run: RunRecord | None) -> RunClaimLost:
    return RunClaimLost(
        "This continuation's claim was taken over meanwhile; its result was not saved.",
        record=run,
    )


def decide_settle_run(
    run: RunRecord | None,
    claim: str,
    *,
    snapshot: str,
    calls: tuple[PendingCall, ...] | None,
    output: Any,
    now_ms: int,
) -> RunRecord:
    """The run's next record after our continuation: ``paused`` again (``calls``: the next
    batch; the table's ``pause``) or ``completed`` (``calls is None``; ``complete``). Raises
    :class:`RunClaimLost` unless the stored run is still our ``continuing`` claim."""
    event = RunEvent.COMPLETE if calls is None else RunEvent.PAUSE
    _, _, target = _cell(run, event, claim, False)
    if target is None or run is None:
        raise _claim_lost(run)
    if calls is None:
        return replace(
            run,
            state=target,
            snapshot=snapshot,
            output=output,
            external={},
            updated_ms=now_ms,
            lease_until_ms=None,
        )
    return replace(
        run,
        state=target,
        snapshot=snapshot,
        calls=calls,
        batch=run.batch + 1,
        claim=None,
        external={},
        updated_ms=now_ms,
        lease_until_ms=None,
    )


def decide_release_run(run: RunRecord, claim: str, *, now_ms: int) -> RunRecord:
    """Our continuation's resume raised: the run goes back to waiting (the table's
    ``release``); every body that ran is in the ledger, so the next continuation replays
    them. Raises :class:`RunClaimLost` unless ``run`` is our ``continuing`` claim."""
    _, _, target = _cell(run, RunEvent.RELEASE, claim, False)
    if target is None:
        raise _claim_lost(run)
    return replace(run, state=target, claim=None, updated_ms=now_ms, lease_until_ms=None)


def decide_renew_run(run: RunRecord | None, claim: str, *, now_ms: int, lease_ms: int) -> RunRecord:
    """Our continuation works on: its lease, renewed to ``now_ms + lease_ms`` (the claim's
    self-loop, state unchanged). Raises :class:`RunClaimLost` unless ``run`` is still our
    ``continuing`` claim, so a body never starts under a claim that was taken over."""
    _, ours, target = _cell(run, RunEvent.CLAIM, claim, False)
    if run is None or not ours or target is not run.state:
        raise _claim_lost(run)
    return replace(run, lease_until_ms=now_ms + lease_ms, updated_ms=now_ms)
