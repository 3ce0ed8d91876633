"""Confirmation plans: propose, resolve (approve / reject / expire) and reconcile.

Every decision is the core's (:mod:`akchat_fsm.core.confirmations`); this module only orders
the I/O around it:

* propose: the core checks every limit → upstream proposal → one CAS save of the binding (no
  ghost: nothing is kept in memory unless that save succeeded). Once upstream holds the call
  it is never orphaned: a concurrent save makes the propose rebase (reload, re-check on the
  fresh envelope, save again; upstream is never asked twice), and if the binding definitely
  cannot be stored the call is denied upstream before the error is raised (ADR-0090);
* resolve: CAS#1 saves the claim (``approving`` / ``rejecting`` / ``expiring``) → only after
  that save returned ``True``, upstream ``approve``/``deny`` → CAS#2 records the final status;
* reconcile: processing records are settled from the upstream tool-call status in memory.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import core
from ..core.effects import CallDeny, ClaimedCall, ProposeUpstream
from ..core.records import RECONCILED_REJECT_REASON
from ..errors import (
    CONFIRMATION_HINT,
    AkchatError,
    AlreadyResolved,
    ConfigError,
    ConfirmationError,
    IllegalTransition,
    InvalidConfirmationToken,
    InvalidMemoryRecord,
    LimitExceeded,
    OutcomeUnknown,
    ResolutionInProgress,
    SessionConflict,
    StorageUnavailable,
)
from ..machines.confirmation import ConfirmationEvent
from ..machines.tables import CONFIRMATION_TABLE
from ..wire.bounded import BoundedJsonError, freeze_bounded_object, thaw
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding
from ._audit import Decider, plan_audited_claim
from ._state import REDECIDE, SessionHolder, apply, not_applied_when_read, reload
from .effects import (
    DeleteRecord,
    ListRecords,
    LoadRecord,
    MemoryRead,
    Plan,
    ReadMemory,
    SaveRecord,
)
from .ports import ToolCallProposal, UpstreamFailed

__all__ = [
    "ReconcileOutcome",
    "expired_pending",
    "perform_then",
    "plan_expire_due",
    "plan_propose",
    "plan_reconcile",
    "plan_resolve",
]

PROPOSAL_INVALID = "Upstream returned an invalid tool call."
NEEDS_UPSTREAM = (
    "Reconcile must re-issue a claimed call upstream never acted on, but no upstream was "
    "given: pass upstream=..., or release_untouched=True when no claimant is alive. "
    "Nothing was saved."
)
#: A claim that lost a race re-decides on the fresh envelope until it wins or is refused.
CLAIM_ATTEMPTS = REDECIDE
#: Upstream already acted: keep trying to record the completion (reconcile covers the rest).
COMPLETE_ATTEMPTS = REDECIDE
#: Upstream already created the call: rebase until the binding is saved (proposals commute).
PROPOSE_ATTEMPTS = REDECIDE
#: The deny reason of a call upstream created but this session could not bind.
UNBOUND_REASON = "proposal could not be recorded"
#: How long a proposer owns its intent's call, on the session clock (ADR-0133): while the lease
#: runs only the proposer acts on it (upstream's propose, the binding, a deny); then only
#: reconcile. A propose's one upstream request must arrive within it.
INTENT_LEASE_MS = 60_000


# --------------------------------------------------------------------------- propose


def _upstream_call(raw: object) -> core.UpstreamCall:
    """What upstream's ``propose_tool_call`` returned, as the core's value (typed error else)."""
    try:
        if isinstance(raw, ToolCallProposal):
            fields: Mapping[str, Any] = {
                "id": raw.id,
                "name": raw.name,
                "args": raw.args,
                "status": raw.status,
            }
        elif isinstance(raw, Mapping):
            fields = raw
        else:
            raise TypeError(type(raw).__name__)
        return core.UpstreamCall(
            id=fields["id"],
            name=fields["name"],
            args=fields.get("args", {}),
            status=core.UpstreamToolStatus(fields.get("status", "requires_confirmation")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(PROPOSAL_INVALID, hint=CONFIRMATION_HINT) from exc


def plan_propose(
    holder: SessionHolder,
    name: str,
    args: Mapping[str, Any],
    *,
    suffix: str | None = None,
    ttl_ms: int = core.DEFAULT_TTL_MS,
    keep_terminal: int = core.KEEP_TERMINAL,
    intent: bool = False,
    lease_ms: int = INTENT_LEASE_MS,
) -> Plan[ConfirmationBinding]:
    """Propose a tool call upstream and bind it to this session with one CAS save.

    Every limit is checked before upstream is called. If the save fails nothing is kept in
    memory (no ghost record); upstream's proposal stays ``requires_confirmation`` and unbound.
    ``intent`` (a storage with the records capability): an intent record is created before
    the upstream call and deleted once the binding is stored, so a crash in between leaves
    something reconcile finds (issue 22, ADR-0093). The intent carries the proposer's lease
    (``lease_ms`` on the session clock, ADR-0133): past it this propose neither asks upstream
    nor denies, so a reconcile running meanwhile can never orphan or double-settle the call.
    """
    if holder.needs_reload:
        yield from reload(holder)
    now = holder.clock()
    proposal = core.plan_proposal(holder.core, name, args, now, ttl_ms=ttl_ms, suffix=suffix)
    lease = None
    if intent:
        lease = now + lease_ms
        yield from _record_intent(holder.session_id, proposal, lease)
    # Every error path settles the intent itself (dropped only where nothing can wait unbound).
    binding = yield from _propose_and_bind(holder, proposal, keep_terminal, lease)
    if lease is not None:
        yield from _drop_intent(holder, proposal)  # the binding is stored
    return binding


def _drop_intent(holder: SessionHolder, proposal: core.Proposal) -> Plan[None]:
    # Best effort: an intent left behind is settled by the next reconcile.
    with contextlib.suppress(AkchatError):
        yield DeleteRecord(holder.session_id, intent_key(proposal.effect.tool_call_id))


def _propose_and_bind(
    holder: SessionHolder, proposal: core.Proposal, keep_terminal: int, lease: int | None
) -> Plan[ConfirmationBinding]:
    """``lease``: when the intent's lease ends (``None``: no intent was recorded)."""
    if lease is not None and lease_over(lease, holder.clock()):
        # A reconcile may already have found the intent stale and deleted it: a call created
        # now could wait with neither binding nor intent. Nothing was asked: the intent goes.
        yield from _drop_intent(holder, proposal)
        raise StorageUnavailable(LEASE_ENDED)
    try:
        raw = yield proposal.effect
    except AkchatError:
        # The call never ran (a refused port): nothing waits for a binding, so the intent goes
        # too (else the session idles in the processing index).
        if lease is not None:
            yield from _drop_intent(holder, proposal)
        raise
    except Exception as exc:  # upstream may hold the call: the intent stays
        raise UpstreamFailed("Upstream refused the tool-call proposal.") from exc
    try:
        call = _upstream_call(raw)
    except ConfigError as invalid:  # upstream acted on our id but answered nonsense
        yield from _settle_unbound(holder, proposal, proposal.effect.tool_call_id, invalid, lease)
        raise
    try:
        step = yield from _save_binding(holder, proposal, call, keep_terminal)
    except OutcomeUnknown:
        raise  # the binding may be stored: never deny a call that may be bound
    except StorageUnavailable as refused:
        if not not_applied_when_read(refused):
            created = call.id if isinstance(call.id, str) else proposal.effect.tool_call_id
            yield from _settle_unbound(holder, proposal, created, refused, lease)
            raise
        # "Not applied when read" is not "never applies": the binding's save may still be in
        # flight. Fence it first; deny only once it can never land (ADR-0093).
        bound = yield from _fence_lost_binding(holder, proposal.token, call.id, refused)
        if bound is not None:
            return bound
        yield from _settle_unbound(holder, proposal, call.id, refused, lease)
        raise
    except AkchatError as refused:
        # Definitely not bound (storage refused or failed before applying, or the fresh
        # envelope no longer admits it): nobody could ever approve this call, so settle it
        # upstream rather than leave it waiting for a confirmation that cannot come.
        # The call upstream holds: the id it answered with, unless that id is not even a
        # string (then the one we asked for; the envelope refused the answer either way).
        created = call.id if isinstance(call.id, str) else proposal.effect.tool_call_id
        yield from _settle_unbound(holder, proposal, created, refused, lease)
        raise
    binding = core.find_binding(step.state, proposal.token) or core.by_tool_call(
        step.state, call.id
    )
    if binding is None:  # pragma: no cover - the core recorded it or found it bound
        raise ConfigError(PROPOSAL_INVALID, hint=CONFIRMATION_HINT)
    return binding


#: Fences in a row that may each be in flight themselves before the propose gives up.
FENCE_ATTEMPTS = 3
FENCE_GAVE_UP = (
    "the binding's save outcome stays unknown: it had not applied when read and a fence "
    "could not be saved; the call is left for reconcile (docs/reconciliation.md)"
)


def _save_binding(
    holder: SessionHolder, proposal: core.Proposal, call: core.UpstreamCall, keep_terminal: int
) -> Plan[core.Step]:
    """Bind ``call`` with one CAS save, rebasing on every concurrent save: reload, re-check
    on the fresh envelope, save again (a propose and reconcile's binding of an intent)."""
    return (
        yield from apply(
            holder,
            lambda state, now, nonce: core.record_proposal(
                state, proposal, call, now, keep_terminal=keep_terminal, nonce=nonce
            ),
            PROPOSE_ATTEMPTS,
        )
    )


def _fence_lost_binding(
    holder: SessionHolder, token: str, tool_call_id: object, lost: StorageUnavailable
) -> Plan[ConfirmationBinding | None]:
    """Make a binding save that was "not applied when read" unable to land; the binding if it did.

    The lost save expected the cursor the re-read found. A compare-and-set save of that same
    envelope (unchanged but for its write nonce) moves the cursor past it, so once the fence
    applies the lost save's CAS can never apply: ``None``, the call is safe to deny. If the
    fence conflicts, the cursor moved anyway (the lost save landed, or another client wrote):
    the fresh envelope says which; a binding found there is returned, bound. The resume fence
    of a claim is the same idea (ADR-0054). A fence whose own outcome stays unknown raises
    :class:`OutcomeUnknown`: the binding may still land, so nothing is denied.
    """
    for _ in range(FENCE_ATTEMPTS):
        try:
            yield from apply(
                holder, lambda state, now, nonce: core.persist(state, now, nonce=nonce), 1
            )
            return None  # the fence applied: the lost save expects a cursor that is gone
        except SessionConflict:
            # Reloaded: the cursor moved past the one the lost save expected, so it cannot
            # apply from now on; if it applied before, its binding is in the fresh envelope.
            return _bound(holder.core, token, tool_call_id)
        except StorageUnavailable as again:
            if not not_applied_when_read(again):
                break
            continue  # this fence is in flight too; the next one fences both
    unknown = OutcomeUnknown(FENCE_GAVE_UP)
    unknown.__cause__ = lost
    raise unknown


def _bound(
    state: core.SessionState, token: str, tool_call_id: object
) -> ConfirmationBinding | None:
    found = core.find_binding(state, token)
    if found is None and isinstance(tool_call_id, str):
        found = core.by_tool_call(state, tool_call_id)
    return found


# --------------------------------------------------------------------------- intents

#: Where a propose records its intent beside the envelope (records capability).
INTENT_PREFIX = "propose-intent:"
INTENT_TAKEN = "Action confirmation id is invalid."
LEASE_ENDED = (
    "the intent's lease ended before upstream was asked (its save outlasted it), so upstream "
    "was not asked: a reconcile may already have settled the intent (ADR-0133)"
)
LEFT_FOR_RECONCILE = (
    "upstream tool call {id} is unbound; the propose's intent lease had ended, so it was not "
    "denied: its intent is left for reconcile, which binds it (ADR-0133)"
)


def lease_over(lease_ends_at: int, now_ms: int) -> bool:
    """Whether an intent's lease has ended: the one rule both the proposer and reconcile read."""
    return now_ms >= lease_ends_at


@dataclass(frozen=True)
class _Intent:
    """A stored intent: the proposal, and when its proposer's lease ends (session clock; 0 for
    an intent written before leases, which is stale at once)."""

    proposal: core.Proposal
    lease_ends_at: int


def intent_key(tool_call_id: str) -> str:
    return f"{INTENT_PREFIX}{tool_call_id}"


def _record_intent(session_id: str, proposal: core.Proposal, lease_ends_at: int) -> Plan[None]:
    """Create-only, marked processing (the sweep lists the session), before the upstream call.

    Any failure is raised before upstream is asked: nothing exists upstream to orphan. An
    unknown outcome may have left the intent stored; reconcile then finds no call upstream for
    it and deletes it.
    """
    text = json.dumps(
        {
            "version": 1,
            "token": proposal.token,
            "toolCallId": proposal.effect.tool_call_id,
            "name": proposal.name,
            "input": thaw(proposal.args),
            "expiresAt": proposal.expires_at,
            "leaseEndsAt": lease_ends_at,
        },
        separators=(",", ":"),
        sort_keys=True,
    )
    key = intent_key(proposal.effect.tool_call_id)
    created = yield SaveRecord(session_id, key, text, None, processing=True)
    if created is not True:  # another propose already used this id
        raise ConfigError(INTENT_TAKEN, hint=CONFIRMATION_HINT)


def _read_intent(text: object) -> _Intent | None:
    """The proposal an intent recorded and its lease (``None``: not one of ours; left alone)."""
    try:
        fields = json.loads(text) if isinstance(text, str) else None
        if not isinstance(fields, dict) or fields.get("version") != 1:
            return None
        frozen = freeze_bounded_object(fields["input"])
        token, name, call_id = fields["token"], fields["name"], fields["toolCallId"]
        expires_at, lease_ends_at = fields["expiresAt"], fields.get("leaseEndsAt", 0)
        if (
            not all(isinstance(v, str) for v in (token, name, call_id))
            or type(expires_at) is not int
            or type(lease_ends_at) is not int
        ):
            return None
        proposal = core.Proposal(
            token, name, frozen, expires_at, ProposeUpstream(call_id, name, frozen)
        )
        return _Intent(proposal, lease_ends_at)
    except (KeyError, TypeError, ValueError, BoundedJsonError):
        return None


def _settle_intent(
    holder: SessionHolder,
    intent: _Intent,
    status: core.UpstreamToolStatus | None,
    keep_terminal: int,
) -> Plan[ReconcileOutcome | None]:
    """Bind a stale intent's call if upstream holds it, then delete the intent.

    While the proposer's lease runs the call is the proposer's (ADR-0133): memory may not know
    it yet because the proposer has not asked upstream, or the proposer may yet deny it; so
    an intent whose call is not bound is left as it is, an ``unknown`` outcome (the session
    stays listed). One whose call is bound already is deleted at any age: nothing waits unbound.

    Binding, never denying: a proposer still alive may yet save the same binding, and two
    saves of one proposal commute (the second finds it bound, ADR-0090), whereas a deny here
    could not stop that save from landing afterwards (the bug ADR-0093 fixes in propose). The
    bound record keeps the proposal's expiry, so an undecided call is denied once, through the
    ordinary expire path. Any other ``status`` means nothing waits upstream: ``None`` (memory
    does not know the call: upstream never created it) or a call already settled there (the
    propose denied it as unbound, or upstream never asked for a confirmation). A binding the
    session cannot admit (``LimitExceeded``: already 1,000 live records) is ``refused``: the
    intent is kept, and a reconcile after a record is decided binds it.
    """
    proposal = intent.proposal
    call_id = proposal.effect.tool_call_id
    outcome = None
    bound = _bound(holder.core, proposal.token, call_id)
    if bound is None and not lease_over(intent.lease_ends_at, holder.clock()):
        return _asked(proposal, "unknown")  # in flight: its proposer may still be alive
    if bound is None and status is core.UpstreamToolStatus.REQUIRES_CONFIRMATION:
        call = core.UpstreamCall(
            id=call_id, name=proposal.name, args=thaw(proposal.args), status=status
        )
        try:
            step = yield from _save_binding(holder, proposal, call, keep_terminal)
        except LimitExceeded as refused:
            # Refused before any save, and refused again until a record is decided: this
            # intent's outcome, not the pass's (the records after it still settle). The
            # intent stays, so the call waiting upstream stays covered and listed.
            return _asked(proposal, "refused", refused)
        record = _bound(step.state, proposal.token, call_id)
        if record is not None:
            action = "bound" if step.accepted else "settled"
            outcome = ReconcileOutcome(proposal.token, call_id, record.status, action, record)
    yield DeleteRecord(holder.session_id, intent_key(call_id))
    return outcome


def _asked(
    proposal: core.Proposal, action: str, refused: LimitExceeded | None = None
) -> ReconcileOutcome:
    """An intent left as it is (``unknown``, ``refused``): ``record`` is the binding it asks
    for, not stored."""
    asked = ConfirmationBinding.model_construct(
        token=proposal.token,
        action=proposal.name,
        input=proposal.args,
        tool_call_id=proposal.effect.tool_call_id,
        expires_at=proposal.expires_at,
        status=ConfirmationStatus.PENDING,
    )
    return ReconcileOutcome(
        proposal.token, asked.tool_call_id, asked.status, action, asked, refused=refused
    )


def _intents(holder: SessionHolder) -> Plan[list[_Intent]]:
    keys = yield ListRecords(holder.session_id, INTENT_PREFIX)
    found: list[_Intent] = []
    for key in keys:
        stored = yield LoadRecord(holder.session_id, key)
        intent = None if stored is None else _read_intent(stored[1])
        if intent is not None and key == intent_key(intent.proposal.effect.tool_call_id):
            found.append(intent)
    return found


def _settle_unbound(
    holder: SessionHolder,
    proposal: core.Proposal,
    tool_call_id: str,
    error: AkchatError,
    lease: int | None,
) -> Plan[None]:
    """A call upstream created that this propose definitely cannot bind.

    Without an intent, or within its lease, the propose denies it and then drops its intent.
    Past the lease a reconcile may be binding it: a deny could land after that binding (a
    ``pending`` record for a denied call), so the call is left to reconcile with its intent,
    and bound there (ADR-0133). An intent whose deny failed stays too: the call still waits.
    """
    if lease is not None and lease_over(lease, holder.clock()):
        error.add_note(LEFT_FOR_RECONCILE.format(id=tool_call_id))
        return
    denied = yield from _deny_unbound(tool_call_id, error)
    if denied and lease is not None:
        yield from _drop_intent(holder, proposal)


def _deny_unbound(tool_call_id: str, error: AkchatError) -> Plan[bool]:
    """Best effort: deny a call upstream created but no session binds; note it on ``error``.

    ``True`` once upstream took the deny; ``False`` if it raised (the call may still wait)."""
    try:
        yield CallDeny(tool_call_id, UNBOUND_REASON)
    except Exception as exc:  # the original error matters more; say what is left behind
        error.add_note(f"upstream tool call {tool_call_id} is unbound; denying it failed: {exc!r}")
        return False
    error.add_note(f"upstream tool call {tool_call_id} was not bound, so it was denied upstream")
    return True


# --------------------------------------------------------------------------- resolve


def settled_for(intent: ConfirmationEvent, status: ConfirmationStatus) -> bool:
    """A terminal record that already says what ``intent`` asked for: a repeat returns it.

    Derived from the lifecycle, not restated: ``status`` is a final state that a claim of
    ``intent`` on a pending record reaches (before or after expiry). So ``expired`` answers
    every intent (an approve after expiry resolves as expired, as in the reference),
    ``approved`` answers approve and ``rejected`` answers reject; anything else is a loser's
    :class:`AlreadyResolved`.
    """
    return status in _SETTLES.get(intent, ())


def _settles(intent: ConfirmationEvent) -> frozenset[ConfirmationStatus]:
    reached = (
        CONFIRMATION_TABLE.get((ConfirmationStatus.PENDING, intent, e)) for e in (False, True)
    )
    return frozenset(core.records.MATCHING_TERMINAL[s] for s in reached if s is not None)


_SETTLES = {intent: _settles(intent) for intent in core.records.CLAIM_EVENTS}


CLAIM_RELEASED = (
    "Upstream acted, but this claim was released by reconcile meanwhile; the record was not "
    "completed. Release only when no claimant is alive (docs/reconciliation.md)."
)


def _complete(token: str, claimed: ConfirmationStatus | None = None) -> Any:
    """CAS#2's command: record the final status of *our* claim (``claimed``), nothing else.

    If the record is no longer in the status we claimed, a reconcile released it while our
    upstream call ran (the documented misuse of ``release_untouched`` with a live claimant):
    completing whatever is stored now could record the opposite of what upstream did, so
    nothing is written and :class:`ConfirmationError` (``.record``: the stored one) is raised.
    """

    def command(state: core.SessionState, now_ms: int, nonce: int) -> core.Step:
        binding = core.find_binding(state, token)
        if binding is not None and binding.status.is_terminal:
            return core.Step(state, accepted=False)  # recorded meanwhile (by a reconcile)
        if claimed is not None and (binding is None or binding.status is not claimed):
            raise ConfirmationError(CLAIM_RELEASED, record=binding)
        return core.complete_resolution(state, token, now_ms, nonce=nonce)

    return command


def perform_then(
    holder: SessionHolder, token: str, step: core.Step
) -> Plan[ConfirmationBinding | None]:
    """Perform what comes after a step's applied save: its ``then`` upstream call, if any,
    then the matching final status (CAS#2). ``None``: the step had no upstream call.

    The one place a step's ``then`` is performed (resolve and reconcile both come here);
    :func:`~akchat_fsm.session._state.apply` has already performed its ``save``, and returns a
    step only once that save applied, so a claim that lost never reaches this.
    """
    if step.then is None:
        return None
    return (yield from _call_upstream(holder, token, step.then))


def _call_upstream(
    holder: SessionHolder, token: str, effect: ClaimedCall
) -> Plan[ConfirmationBinding]:
    """Perform a won claim's upstream call, then record the matching final status (CAS#2)."""
    claim = core.find_binding(holder.core, token)
    claimed = claim.status if claim is not None else None
    try:
        yield effect
    except AkchatError:
        raise
    except Exception as exc:
        # Never a false completion and never retried here: the claim stays as stored.
        raise UpstreamFailed(
            "Upstream failed; the confirmation stays in its processing status.",
            record=core.find_binding(holder.core, token),
        ) from exc
    step = yield from apply(holder, _complete(token, claimed), COMPLETE_ATTEMPTS)
    binding = core.find_binding(step.state, token)
    if binding is None:  # pragma: no cover - terminal records are pruned only on a propose
        raise InvalidConfirmationToken()
    return binding


def plan_resolve(
    holder: SessionHolder,
    token: str,
    intent: ConfirmationEvent,
    *,
    reason: str | None = None,
    session_id: str | None = None,
    args_digest: str | None = None,
    audit: Decider | None = None,
) -> Plan[ConfirmationBinding]:
    """Resolve ``token``: claim with CAS#1, call upstream once, record the result with CAS#2.

    ``audit``: who decides, on a store with records: each claim attempt is preceded by its
    create-only audit entry (ADR-0132); ``None`` on a store without them.

    Returns the terminal binding. A repeat of a settled resolution returns the stored record
    and calls nothing. Losers get :class:`AlreadyResolved` or :class:`ResolutionInProgress`;
    a decision for other arguments than ``args_digest`` names, :class:`ArgumentsMismatch`.
    """
    # `type()`, not `isinstance`: an object may claim to be a str through `__class__`.
    if not issubclass(type(token), str) or not (
        session_id is None or issubclass(type(session_id), str)
    ):
        raise InvalidConfirmationToken()
    # Exact strs: a subclass's own __eq__ / __hash__ never runs in a lookup or comparison.
    token = str.__str__(token)
    session_id = None if session_id is None else str.__str__(session_id)

    def claim(state: core.SessionState, now_ms: int, nonce: int) -> core.Step:
        return core.claim_resolution(
            state,
            token,
            intent,
            now_ms,
            session_id=session_id,
            reason=reason,
            nonce=nonce,
            args_digest=args_digest,
        )

    def claimed() -> Plan[core.Step]:
        if audit is None:
            return (yield from apply(holder, claim, CLAIM_ATTEMPTS))
        return (yield from plan_audited_claim(holder, claim, token, str(intent), audit, reason))

    if session_id is not None and session_id != holder.session_id:
        raise InvalidConfirmationToken()  # bound to another session: inert, nothing read
    try:
        try:
            step = yield from claimed()
        except (InvalidConfirmationToken, ResolutionInProgress):
            # Decided on this object's copy, which may be stale: the token may have been
            # proposed, or the claim finished or released, since it last read storage. One
            # re-read (a load; a write only if the record is pending again) makes the answer
            # reflect storage. A terminal copy needs no re-read: terminal records never change.
            yield from reload(holder)
            step = yield from claimed()
    except AlreadyResolved as resolved:
        record = resolved.record
        if isinstance(record, ConfirmationBinding) and settled_for(intent, record.status):
            return record
        raise
    done = yield from perform_then(holder, token, step)
    if done is None:  # pragma: no cover - a won claim's step always names its upstream call
        raise IllegalTransition("confirmation", "claimed", str(intent), "no upstream call")
    return done


def expired_pending(holder: SessionHolder) -> tuple[str, ...]:
    """Tokens of pending records whose expiry has passed on the session clock."""
    now = holder.clock()
    return tuple(
        b.token
        for b in holder.snapshot.confirmations
        if b.status is ConfirmationStatus.PENDING and core.records.is_expired(b.expires_at, now)
    )


def plan_expire_due(
    holder: SessionHolder, audit: Decider | None = None
) -> Plan[tuple[ConfirmationBinding, ...]]:
    """Expire every pending record that is due; returns the records this call expired.

    A record another client resolved or claimed meanwhile (or that was pruned) is skipped,
    not an error: it is no longer this call's to expire, and nothing was called for it.
    Reads storage first, so records proposed or resolved elsewhere are seen.
    """
    yield from reload(holder)
    expired: list[ConfirmationBinding] = []
    for token in expired_pending(holder):
        try:
            record = yield from plan_resolve(holder, token, ConfirmationEvent.EXPIRE, audit=audit)
        except (AlreadyResolved, ResolutionInProgress, InvalidConfirmationToken):
            continue  # a loser: someone else settled (or is settling) this record
        expired.append(record)
    return tuple(expired)


# --------------------------------------------------------------------------- reconcile


@dataclass(frozen=True)
class ReconcileOutcome:
    """What reconciliation did for one processing record.

    ``action``: ``"completed"`` (upstream had acted: final status recorded, nothing called),
    ``"resumed"`` (upstream had not acted: the claimed call was issued, then completed),
    ``"released"`` (back to ``pending``), ``"settled"`` (another client settled it first),
    ``"unknown"`` (the tool call is not in memory, or an intent whose proposer's lease has not
    ended and whose call is not bound, ADR-0133: left as is), ``"bound"`` (a proposal's
    intent named a call upstream awaits with no binding: bound ``pending``; ``before`` is
    its born status, ADR-0093) or ``"refused"`` (such an intent the session cannot admit:
    ``refused`` says why, ``record`` is the binding it asks for, which was not stored, and the
    intent is kept for a later reconcile).
    """

    token: str
    tool_call_id: str
    before: ConfirmationStatus
    action: str
    record: ConfirmationBinding
    refused: LimitExceeded | None = None


def _status(value: object) -> core.UpstreamToolStatus:
    try:
        return core.UpstreamToolStatus(str(value)) if isinstance(value, str) else _bad_status()
    except ValueError:
        return _bad_status()


def _bad_status() -> core.UpstreamToolStatus:
    raise InvalidMemoryRecord("Chat memory returned an invalid tool-call status.")


def _statuses_from_record(raw: object, wanted: frozenset[str]) -> dict[str, object]:
    """The statuses of ``wanted`` calls in a whole memory record, at any chat length.

    Reconcile needs a few tool calls' statuses, not the validated chat: the record's bounds
    (10,000 JSON values, about 700 tool-call messages) are for keeping it, and applying them
    here made the longest chats, the ones that most need recovery, impossible to reconcile.
    So this reads only the path to each tool call (``messages[].toolCalls[].id/status``), in
    one linear pass; a record that does not even have that shape is :class:`InvalidMemoryRecord`.
    """
    from ..wire.memory import MemoryRecord

    if isinstance(raw, MemoryRecord):
        return {
            call.id: str(call.status)
            for message in raw.messages
            for call in message.tool_calls or ()
            if call.id in wanted
        }
    messages = raw.get("messages") if isinstance(raw, Mapping) else raw
    if not isinstance(messages, list | tuple) or (
        isinstance(raw, Mapping) and raw.get("version") != 1
    ):
        raise InvalidMemoryRecord("Chat memory record is invalid.")
    found: dict[str, object] = {}
    for message in messages:
        calls = message.get("toolCalls") if isinstance(message, Mapping) else None
        for call in calls if isinstance(calls, list | tuple) else ():
            if isinstance(call, Mapping) and call.get("id") in wanted:
                found[call["id"]] = call.get("status")
    return found


def _tool_statuses(read: object, wanted: frozenset[str]) -> dict[str, core.UpstreamToolStatus]:
    """What memory said about ``wanted``, validated; an id it did not mention is unknown."""
    if not isinstance(read, MemoryRead):  # pragma: no cover - the drivers always wrap it
        raise InvalidMemoryRecord("Chat memory answer is invalid.")
    answer = read.statuses
    if answer is None:
        answer = _statuses_from_record(read.record, wanted)
    elif not isinstance(answer, Mapping):
        raise InvalidMemoryRecord("Chat memory tool_call_statuses() must return a mapping.")
    return {i: _status(answer[i]) for i in wanted if answer.get(i) is not None}


def _reconcile_one(
    holder: SessionHolder,
    binding: ConfirmationBinding,
    status: core.UpstreamToolStatus,
    release_untouched: bool,
) -> Plan[ReconcileOutcome]:
    token = binding.token

    def command(state: core.SessionState, now_ms: int, nonce: int) -> core.Step:
        current = core.find_binding(state, token)
        if current is None or not current.status.is_processing:
            return core.Step(state, accepted=False)  # settled meanwhile
        return core.reconcile(
            state,
            token,
            status,
            now_ms,
            release_untouched=release_untouched,
            reason=RECONCILED_REJECT_REASON,
            nonce=nonce,
        )

    step = yield from apply(holder, command, COMPLETE_ATTEMPTS)
    resumed = yield from perform_then(holder, token, step)
    if resumed is not None:
        done = resumed
        action = "resumed"
    else:
        done = core.find_binding(holder.core, token) or binding
        if not step.accepted:
            action = "settled"
        elif done.status is ConfirmationStatus.PENDING:
            action = "released"
        else:
            action = "completed"
    return ReconcileOutcome(token, binding.tool_call_id, binding.status, action, done)


def plan_reconcile(
    holder: SessionHolder,
    *,
    release_untouched: bool = False,
    can_call_upstream: bool = True,
    intents: bool = False,
) -> Plan[tuple[ReconcileOutcome, ...]]:
    """Settle every processing record from the upstream tool-call status in memory.

    Everything is decided before the first save: when some record would need an upstream call
    (``requires_confirmation`` without ``release_untouched``) and ``can_call_upstream`` is
    false, :class:`ConfigError` is raised and nothing is saved.
    ``intents`` (records capability): proposals a crash left between their intent and their
    binding are bound from memory's status of their call, then their intents deleted.
    See :mod:`akchat_fsm.session.reconcile` for the rule and when it is safe to run.
    """
    yield from reload(holder)  # recovery works from what storage holds now
    targets = [b for b in holder.snapshot.confirmations if b.status.is_processing]
    orphans = (yield from _intents(holder)) if intents else []
    if not targets and not orphans:
        return ()
    wanted = tuple(
        dict.fromkeys(
            [b.tool_call_id for b in targets] + [i.proposal.effect.tool_call_id for i in orphans]
        )
    )
    try:
        read = yield ReadMemory(wanted)
        statuses = _tool_statuses(read, frozenset(wanted))
    except AkchatError:
        raise
    except Exception as exc:
        raise StorageUnavailable(f"chat memory read failed: {exc!r}") from exc
    if not can_call_upstream and any(
        core.records.reconcile_decision(b.status, statuses[b.tool_call_id], release_untouched)
        is core.Reconciliation.RESUME
        for b in targets
        if b.tool_call_id in statuses
    ):
        raise ConfigError(NEEDS_UPSTREAM)
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
        outcomes.append((yield from _reconcile_one(holder, binding, status, release_untouched)))
    for orphan in orphans:
        status = statuses.get(orphan.proposal.effect.tool_call_id)
        settled = yield from _settle_intent(holder, orphan, status, core.KEEP_TERMINAL)
        if settled is not None:
            outcomes.append(settled)
    return tuple(outcomes)
