"""Confirmation plans: propose, resolve (approve / reject / expire) and reconcile.

Every decision is the core's (:mod:`akchat_fsm.core.records`, :mod:`akchat_fsm.core.retention`);
this module only maps the envelope to the core's records and back, and orders the I/O:

* propose: limits → upstream proposal → one CAS save of the new binding (no ghost: nothing is
  kept in memory unless that save succeeded);
* resolve: CAS#1 claims (``approving`` / ``rejecting`` / ``expiring``) → only after that save
  returned ``True``, upstream ``approve``/``deny`` → CAS#2 records the matching final status;
* reconcile: processing records are settled from the upstream tool-call status in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..core.records import (
    MATCHING_TERMINAL,
    Reconciliation,
    Record,
    UpstreamToolStatus,
    claim,
    complete,
    find,
    is_expired,
    reconcile_decision,
    release,
)
from ..core.retention import KEEP_TERMINAL, MAX_CONFIRMATIONS, live_count, prune_for_admission
from ..errors import (
    CONFIRMATION_HINT,
    AkchatError,
    AlreadyResolved,
    ConfigError,
    ConfirmationError,
    InvalidConfirmationToken,
    InvalidMemoryRecord,
    LimitExceeded,
)
from ..machines.confirmation import ConfirmationEvent
from ..wire._js import is_identifier
from ..wire.bounded import is_bounded_json_value
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._state import Decision, SessionState, apply
from .effects import Approve, Deny, Plan, Propose, ReadMemory
from .observers import SessionEvent, SessionEventKind
from .ports import ToolCallProposal, UpstreamFailed

__all__ = [
    "EXPIRED_REASON",
    "ReconcileOutcome",
    "plan_propose",
    "plan_reconcile",
    "plan_resolve",
]

EXPIRED_REASON = "confirmation expired"
RECONCILED_REJECT_REASON = "confirmation rejected"
DEFAULT_TTL_MS = 300_000
ID_INVALID = "Action confirmation id is invalid."
OPTIONS_INVALID = "Action confirmation options are invalid."
PROPOSAL_INVALID = "Upstream returned an invalid tool call."
#: A claim that lost a race re-decides on the fresh envelope; a few rounds settle it.
CLAIM_ATTEMPTS = 4
#: Upstream already acted: keep trying to record the completion (reconcile covers the rest).
COMPLETE_ATTEMPTS = 16


def _records(snapshot: SessionSnapshot) -> tuple[Record, ...]:
    return tuple(
        Record(b.token, b.action, b.tool_call_id, b.expires_at, b.status)
        for b in snapshot.confirmations
    )


def _with_status(
    snapshot: SessionSnapshot, index: int, status: ConfirmationStatus
) -> SessionSnapshot:
    bindings = list(snapshot.confirmations)
    bindings[index] = bindings[index].model_copy(update={"status": status})
    return snapshot.model_copy(update={"confirmations": tuple(bindings)})


def _event(
    session_id: str, record: ConfirmationBinding, previous: ConfirmationStatus | None
) -> Callable[[int], SessionEvent]:
    def make(cursor: int) -> SessionEvent:
        return SessionEvent(
            SessionEventKind.CONFIRMATION,
            session_id,
            cursor,
            record=record,
            previous_status=None if previous is None else str(previous),
        )

    return make


# --------------------------------------------------------------------------- propose


def _normalise_proposal(call: object) -> ToolCallProposal:
    if isinstance(call, ToolCallProposal):
        return call
    if isinstance(call, Mapping):
        try:
            return ToolCallProposal(
                id=call["id"],
                name=call["name"],
                args=call.get("args", {}),
                status=call.get("status", "requires_confirmation"),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(PROPOSAL_INVALID, hint=CONFIRMATION_HINT) from exc
    raise ConfigError(PROPOSAL_INVALID, hint=CONFIRMATION_HINT)


def _check_admission(snapshot: SessionSnapshot) -> None:
    if live_count(_records(snapshot)) >= MAX_CONFIRMATIONS:
        raise LimitExceeded("Too many live confirmations in this session.", limit="confirmations")


def _check_input(args: object) -> None:
    if not isinstance(args, Mapping) or not is_bounded_json_value(args):
        raise LimitExceeded("Action confirmation input exceeds the envelope bounds.", limit="input")


def _admit(
    session_id: str, binding: ConfirmationBinding, keep_terminal: int
) -> Callable[[SessionSnapshot, int], Decision[ConfirmationBinding]]:
    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[ConfirmationBinding]:
        for existing in snapshot.confirmations:
            if existing.token == binding.token or existing.tool_call_id == binding.tool_call_id:
                if (
                    existing.token == binding.token
                    and existing.tool_call_id == binding.tool_call_id
                ):
                    return Decision(None, existing)  # already recorded (a settled retry)
                raise ConfigError(ID_INVALID, hint=CONFIRMATION_HINT)
        _check_admission(snapshot)
        records = _records(snapshot)
        kept = prune_for_admission(records, MAX_CONFIRMATIONS, keep_terminal)
        kept_tokens = {r.token for r in kept}
        bindings = tuple(b for b in snapshot.confirmations if b.token in kept_tokens)
        new = snapshot.model_copy(update={"confirmations": (*bindings, binding)})
        return Decision(new, binding, (_event(session_id, binding, None),))

    return decide


def plan_propose(
    state: SessionState,
    name: str,
    args: Mapping[str, Any],
    *,
    suffix: str,
    ttl_ms: int = DEFAULT_TTL_MS,
    keep_terminal: int = KEEP_TERMINAL,
) -> Plan[ConfirmationBinding]:
    """Propose a tool call upstream and bind it to this session with one CAS save.

    Every limit is checked before upstream is called. If the save fails nothing is kept in
    memory (no ghost record); upstream's proposal stays ``requires_confirmation`` and unbound.
    """
    if not is_identifier(suffix) or len(suffix) > 120:
        raise ConfigError(ID_INVALID, hint=CONFIRMATION_HINT)
    if not is_identifier(name) or isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        raise ConfigError(OPTIONS_INVALID, hint=CONFIRMATION_HINT)
    if ttl_ms <= 0:
        raise ConfigError(OPTIONS_INVALID, hint=CONFIRMATION_HINT)
    _check_input(args)
    _check_admission(state.snapshot)
    try:
        raw_call = yield Propose(f"app-{suffix}", name, args)
    except AkchatError:
        raise
    except Exception as exc:
        raise UpstreamFailed("Upstream refused the tool-call proposal.") from exc
    call = _normalise_proposal(raw_call)
    born = (
        ConfirmationStatus.PENDING
        if call.status == "requires_confirmation"
        else ConfirmationStatus.REJECTED
    )
    _check_input(call.args)
    try:
        binding = ConfirmationBinding(
            token=f"confirm-{suffix}",
            action=call.name,
            input=dict(call.args),
            tool_call_id=call.id,
            expires_at=state.clock() + ttl_ms,
            status=born,
        )
    except (ValidationError, ValueError, TypeError) as exc:
        raise ConfigError(PROPOSAL_INVALID, hint=CONFIRMATION_HINT) from exc
    return (yield from apply(state, _admit(state.session_id, binding, keep_terminal), 4))


# --------------------------------------------------------------------------- resolve


def _settled_for(intent: ConfirmationEvent, status: ConfirmationStatus) -> bool:
    """A terminal record that already says what ``intent`` asked for (idempotent repeat)."""
    if status is ConfirmationStatus.EXPIRED:
        return True
    return (intent, status) in {
        (ConfirmationEvent.APPROVE, ConfirmationStatus.APPROVED),
        (ConfirmationEvent.REJECT, ConfirmationStatus.REJECTED),
    }


@dataclass(frozen=True)
class _Claimed:
    record: ConfirmationBinding
    won: bool


def _claim(
    session_id: str, token: str, intent: ConfirmationEvent
) -> Callable[[SessionSnapshot, int], Decision[_Claimed]]:
    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[_Claimed]:
        records = _records(snapshot)
        index = find(records, token)
        if index >= 0 and records[index].status.is_terminal:
            current = snapshot.confirmations[index]
            if _settled_for(intent, current.status):
                return Decision(None, _Claimed(current, won=False))
            raise AlreadyResolved("Action confirmation was already resolved.", record=current)
        try:
            won = claim(records, token, intent, now_ms)
        except ConfirmationError as exc:
            # The core reports its own Record; hand the caller the stored binding instead.
            if index >= 0:
                exc.record = snapshot.confirmations[index]
            raise
        new = _with_status(snapshot, won.index, won.record.status)
        claimed = new.confirmations[won.index]
        previous = snapshot.confirmations[won.index].status
        return Decision(new, _Claimed(claimed, won=True), (_event(session_id, claimed, previous),))

    return decide


def _complete(
    session_id: str, token: str
) -> Callable[[SessionSnapshot, int], Decision[ConfirmationBinding]]:
    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[ConfirmationBinding]:
        records = _records(snapshot)
        index = find(records, token)
        if index < 0:
            raise InvalidConfirmationToken()
        current = snapshot.confirmations[index]
        if current.status.is_terminal:
            return Decision(None, current)  # someone (a reconcile) recorded it already
        new = _with_status(snapshot, index, complete(records, token)[index].status)
        done = new.confirmations[index]
        return Decision(new, done, (_event(session_id, done, current.status),))

    return decide


def _upstream_effect(record: ConfirmationBinding, reason: str) -> Approve | Deny:
    if record.status is ConfirmationStatus.APPROVING:
        return Approve(record.tool_call_id)
    if record.status is ConfirmationStatus.EXPIRING:
        return Deny(record.tool_call_id, EXPIRED_REASON)
    return Deny(record.tool_call_id, reason)


def _finish(
    state: SessionState, claimed: ConfirmationBinding, reason: str
) -> Plan[ConfirmationBinding]:
    """Call upstream for a won claim, then record the matching final status (CAS#2)."""
    try:
        yield _upstream_effect(claimed, reason)
    except AkchatError:
        raise
    except Exception as exc:
        # Never a false completion and never retried here: the claim stays as stored.
        raise UpstreamFailed(
            "Upstream failed; the confirmation stays in its processing status.", record=claimed
        ) from exc
    return (yield from apply(state, _complete(state.session_id, claimed.token), COMPLETE_ATTEMPTS))


def plan_resolve(
    state: SessionState,
    token: str,
    intent: ConfirmationEvent,
    *,
    reason: str = "",
    session_id: str | None = None,
) -> Plan[ConfirmationBinding]:
    """Resolve ``token``: claim with CAS#1, call upstream once, record the result with CAS#2.

    Returns the terminal binding. A repeat of a settled resolution returns the stored record
    and calls nothing. Losers get :class:`AlreadyResolved` or :class:`ResolutionInProgress`.
    """
    if session_id is not None and session_id != state.session_id:
        raise InvalidConfirmationToken()
    if not isinstance(token, str):
        raise InvalidConfirmationToken()
    claimed = yield from apply(state, _claim(state.session_id, token, intent), CLAIM_ATTEMPTS)
    if not claimed.won:
        return claimed.record
    return (yield from _finish(state, claimed.record, reason))


# --------------------------------------------------------------------------- reconcile


@dataclass(frozen=True)
class ReconcileOutcome:
    """What :func:`plan_reconcile` did for one processing record."""

    token: str
    tool_call_id: str
    before: ConfirmationStatus
    action: str  # "completed" | "released" | "resumed" | "unknown"
    record: ConfirmationBinding


def _tool_statuses(raw: object) -> dict[str, UpstreamToolStatus]:
    from ..wire.memory import MemoryRecord, validate_memory_record

    if isinstance(raw, list | tuple):
        raw = {"version": 1, "messages": list(raw)}
    record = raw if isinstance(raw, MemoryRecord) else validate_memory_record(raw)
    statuses: dict[str, UpstreamToolStatus] = {}
    for message in record.messages:
        for call in message.tool_calls or ():
            statuses[call.id] = UpstreamToolStatus(str(call.status))
    return statuses


def _release(
    session_id: str, token: str
) -> Callable[[SessionSnapshot, int], Decision[ConfirmationBinding | None]]:
    def decide(snapshot: SessionSnapshot, now_ms: int) -> Decision[ConfirmationBinding | None]:
        records = _records(snapshot)
        index = find(records, token)
        if index < 0 or not records[index].status.is_processing:
            return Decision(None, None)  # settled meanwhile
        current = snapshot.confirmations[index]
        new = _with_status(snapshot, index, release(records, token)[index].status)
        done = new.confirmations[index]
        return Decision(new, done, (_event(session_id, done, current.status),))

    return decide


def plan_reconcile(
    state: SessionState, *, release_untouched: bool = False
) -> Plan[tuple[ReconcileOutcome, ...]]:
    """Settle every processing record from the upstream tool-call status in memory.

    Upstream acted (any status but ``requires_confirmation``) → the matching final status is
    recorded, with no upstream call. Upstream has not acted → the claimed call is issued now
    and completed (``resume``), or, with ``release_untouched=True``, the record goes back to
    ``pending``. Run it only when no client is still inside a resolution of these records
    (after a crash, or once the host's resolution timeout has passed): see docs/reconciliation.md.
    """
    targets = [b for b in state.snapshot.confirmations if b.status.is_processing]
    if not targets:
        return ()
    try:
        raw = yield ReadMemory()
        statuses = _tool_statuses(raw)
    except InvalidMemoryRecord:
        raise
    except AkchatError:
        raise
    except Exception as exc:
        raise InvalidMemoryRecord("Chat memory could not be read for reconciliation.") from exc
    outcomes: list[ReconcileOutcome] = []
    for binding in targets:
        status = statuses.get(binding.tool_call_id)
        if status is None:
            outcomes.append(
                ReconcileOutcome(
                    binding.token, binding.tool_call_id, binding.status, "unknown", binding
                )
            )
            continue
        choice = reconcile_decision(binding.status, status, release_untouched)
        if choice is Reconciliation.COMPLETE:
            done = yield from apply(
                state, _complete(state.session_id, binding.token), COMPLETE_ATTEMPTS
            )
            action = "completed"
        elif choice is Reconciliation.RELEASE:
            released = yield from apply(
                state, _release(state.session_id, binding.token), COMPLETE_ATTEMPTS
            )
            done = released if released is not None else binding
            action = "released"
        else:
            done = yield from _finish(state, binding, RECONCILED_REJECT_REASON)
            action = "resumed"
        outcomes.append(
            ReconcileOutcome(binding.token, binding.tool_call_id, binding.status, action, done)
        )
    return tuple(outcomes)


def expired_pending(state: SessionState) -> tuple[str, ...]:
    """Tokens of pending records whose expiry has passed on the session clock."""
    now = state.clock()
    return tuple(
        b.token
        for b in state.snapshot.confirmations
        if b.status is ConfirmationStatus.PENDING and is_expired(b.expires_at, now)
    )


_ = MATCHING_TERMINAL  # the mapping CAS#2 follows, named here for readers
