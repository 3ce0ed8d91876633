"""Confirmation commands on the envelope: propose, claim, complete, reconcile.

Thin adapters: each maps the pydantic envelope to kernel :class:`~.records.Record` s, lets the
kernel (:mod:`.records`, :mod:`.retention`, CrossHair-checked) decide, and maps back. Every
limit and rule is checked before a step with effects is returned, so a shell never performs
an upstream call for a command that would later fail validation.

Resolution protocol (docs/reference.md §3, gaps of §7 closed):

1. :func:`claim_resolution` → a step whose ``save`` is the claim (``approving`` /
   ``rejecting`` / ``expiring``) and whose ``then`` is ``CallApprove`` or ``CallDeny``. The
   upstream call runs only if that save applied: exactly one client wins a claim.
2. :func:`complete_resolution` → a step whose ``save`` is the matching final state.
3. :func:`reconcile` settles a processing record left by a crash or a lost save (ADR-0012).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import (
    CONFIRMATION_HINT,
    ArgumentsMismatch,
    ConfigError,
    ConfirmationError,
    IllegalTransition,
    InvalidConfirmationToken,
    LimitExceeded,
)
from ..machines.confirmation import ConfirmationEvent
from ..wire.bounded import BoundedJsonError, FrozenDict, freeze_bounded_object
from ..wire.digest import arguments_digest
from ..wire.enums import ConfirmationStatus
from ..wire.js import MAX_SAFE_INTEGER, is_identifier
from ..wire.session import ConfirmationBinding, SessionSnapshot
from . import records as k
from .effects import CallApprove, CallDeny, ClaimedCall, ProposeUpstream
from .records import EXPIRED_REASON, Reconciliation, Record, UpstreamToolStatus
from .retention import KEEP_TERMINAL, MAX_CONFIRMATIONS, live_count, prune_for_admission
from .state import (
    SessionState,
    Step,
    TokenIndex,
    _saving,
    check_can_save,
    check_clock,
    coerce,
)

__all__ = [
    "DEFAULT_TTL_MS",
    "EXPIRED_REASON",
    "Proposal",
    "UpstreamCall",
    "by_tool_call",
    "claim_resolution",
    "complete_resolution",
    "confirmation_ids",
    "find_binding",
    "plan_proposal",
    "random_suffix",
    "reconcile",
    "record_proposal",
]

DEFAULT_TTL_MS = 300_000
_MAX_SUFFIX = 120  # so that "confirm-" + suffix and "app-" + suffix stay within 128


@dataclass(frozen=True)
class Proposal:
    """A planned propose: checked, not yet recorded. Perform ``effect``, then record it."""

    token: str
    name: str
    args: FrozenDict
    expires_at: int
    effect: ProposeUpstream


@dataclass(frozen=True)
class UpstreamCall:
    """What upstream's ``propose_tool_call`` returned (its id, name, args and status)."""

    id: str
    name: str
    args: Mapping[str, Any]
    status: UpstreamToolStatus


def random_suffix() -> str:
    """Default id suffix: 128 random bits (unguessable; never a sequence or a timestamp)."""
    return secrets.token_hex(16)


def confirmation_ids(suffix: object) -> tuple[str, str]:
    """The (token, upstream tool-call id) a proposal with id ``suffix`` uses; both drivers call
    this, so their ids cannot drift. A suffix that is not a SafeIdentifier of at most 120
    characters raises ``ConfigError("Action confirmation id is invalid.")``."""
    if not isinstance(suffix, str) or not is_identifier(suffix) or len(suffix) > _MAX_SUFFIX:
        raise ConfigError("Action confirmation id is invalid.", hint=CONFIRMATION_HINT)
    return f"confirm-{suffix}", f"app-{suffix}"


def _records(snapshot: SessionSnapshot) -> tuple[Record, ...]:
    return tuple(
        Record(b.token, b.action, b.tool_call_id, b.expires_at, b.status)
        for b in snapshot.confirmations
    )


def _positions(state: SessionState) -> dict[str, int]:
    """Token -> position in ``state``'s bindings, from its :class:`TokenIndex` (ADR-0111)."""
    bindings = state.snapshot.confirmations
    positions = state.token_index.get(bindings)
    if positions is None:
        positions = _build_positions(bindings)
        state.token_index.put(bindings, positions)
    return positions


def _build_positions(bindings: tuple[ConfirmationBinding, ...]) -> dict[str, int]:
    positions: dict[str, int] = {}
    for index, binding in enumerate(bindings):
        positions.setdefault(binding.token, index)  # the first holder, as a scan finds it
    return positions


def _position(state: SessionState, token: str) -> int:
    """Index of the binding holding ``token``, or -1."""
    if not issubclass(type(token), str):  # `type()`: `__class__` may lie to `isinstance`
        return -1  # no binding holds a non-string (and it may not be hashable)
    return _positions(state).get(str.__str__(token), -1)  # a subclass's __hash__ never runs


def _record(binding: ConfirmationBinding) -> Record:
    return Record(
        binding.token, binding.action, binding.tool_call_id, binding.expires_at, binding.status
    )


def _moved_to(
    state: SessionState, index: int, status: ConfirmationStatus
) -> tuple[SessionSnapshot, TokenIndex]:
    """The envelope with the binding at ``index`` in ``status``, every other binding as is, and
    its token index (the same tokens at the same positions: ``state``'s map carries over).

    The kernel's ``*_at`` functions leave every other record unchanged (their contracts say
    so), so the adapters let them decide on the one record at stake and splice the result
    back: a command costs one record, not a rebuild of the whole list (ADR-0111).
    """
    bindings = state.snapshot.confirmations
    binding = bindings[index]
    moved = binding if status is binding.status else binding.model_copy(update={"status": status})
    spliced = (*bindings[:index], moved, *bindings[index + 1 :])
    moved_index = TokenIndex(spliced, _positions(state))
    return state.snapshot.model_copy(update={"confirmations": spliced}), moved_index


def find_binding(state: SessionState, token: str) -> ConfirmationBinding | None:
    """The binding holding ``token`` in this session, if any."""
    index = _position(state, token)
    return None if index < 0 else state.snapshot.confirmations[index]


def by_tool_call(state: SessionState, tool_call_id: str) -> ConfirmationBinding | None:
    """The binding of upstream tool call ``tool_call_id``, if any (the renderers' lookup)."""
    return next((b for b in state.snapshot.confirmations if b.tool_call_id == tool_call_id), None)


def _invalid_options() -> ConfigError:
    return ConfigError("Action confirmation options are invalid.", hint=CONFIRMATION_HINT)


def _check_admission(records: tuple[Record, ...]) -> None:
    if live_count(records) >= MAX_CONFIRMATIONS:
        raise LimitExceeded(
            f"A session holds at most {MAX_CONFIRMATIONS} unresolved confirmations.",
            limit="confirmations",
        )


def _freeze_args(args: Any) -> FrozenDict:
    try:
        return freeze_bounded_object(args)
    except BoundedJsonError as exc:
        raise LimitExceeded(
            "Action confirmation input is not a bounded JSON object.", limit="input"
        ) from exc


def plan_proposal(
    state: SessionState,
    name: str,
    args: Mapping[str, Any],
    now_ms: int,
    *,
    ttl_ms: int = DEFAULT_TTL_MS,
    suffix: str | None = None,
    new_suffix: Callable[[], str] = random_suffix,
) -> Proposal:
    """Check every limit of a propose and plan its one upstream effect.

    Raises (before anything is performed): ``ConfigError`` for bad options, a bad id
    (``"Action confirmation id is invalid."``) or an id already used here; ``LimitExceeded``
    for an input that is not a bounded JSON object or 1,000 live confirmations;
    ``IllegalTransition`` if the session may not save now (conflicted or uncertain).
    """
    check_can_save(state)
    check_clock(now_ms)
    if type(ttl_ms) is not int or not 0 < ttl_ms <= MAX_SAFE_INTEGER:
        raise _invalid_options()
    expires_at = now_ms + ttl_ms
    if not 0 <= expires_at <= MAX_SAFE_INTEGER or not is_identifier(name):
        raise _invalid_options()
    token, tool_call_id = confirmation_ids(new_suffix() if suffix is None else suffix)
    if find_binding(state, token) or by_tool_call(state, tool_call_id):
        raise ConfigError("Action confirmation id is invalid.", hint=CONFIRMATION_HINT)
    frozen = _freeze_args(args)
    _check_admission(_records(state.snapshot))
    return Proposal(token, name, frozen, expires_at, ProposeUpstream(tool_call_id, name, frozen))


def record_proposal(
    state: SessionState,
    proposal: Proposal,
    call: UpstreamCall,
    now_ms: int,
    *,
    keep_terminal: int = KEEP_TERMINAL,
    nonce: int | None = None,
) -> Step:
    """Record what upstream returned for ``proposal``: one save of the new binding.

    The record is ``pending`` if the call requires confirmation, otherwise it is born
    ``rejected`` with no deny (docs/reference.md §3.2). Old terminal records are pruned first
    (ADR-0013). If this session already binds the returned tool call, nothing is saved and
    ``accepted`` is ``False`` (upstream is idempotent per id; the existing binding stands).
    """
    if (
        not isinstance(proposal, Proposal)
        or not isinstance(call, UpstreamCall)
        or type(keep_terminal) is not int
        or keep_terminal < 0
    ):
        raise _invalid_options()
    check_clock(now_ms)
    check_can_save(state)
    existing = by_tool_call(state, call.id)
    if existing is not None or find_binding(state, proposal.token) is not None:
        return Step(state, accepted=False)
    if not is_identifier(call.id) or not is_identifier(call.name):
        raise LimitExceeded("Upstream tool call does not fit the envelope.", limit="identifier")
    upstream = coerce(UpstreamToolStatus, call.status, _bad_upstream)
    status = k.born_status(upstream)
    binding = ConfirmationBinding.model_construct(
        token=proposal.token,
        action=call.name,
        input=_freeze_args(call.args),
        tool_call_id=call.id,
        expires_at=proposal.expires_at,
        status=status,
    )
    records = _records(state.snapshot)
    _check_admission(records)
    kept = prune_for_admission(records, MAX_CONFIRMATIONS, keep_terminal)
    bindings = state.snapshot.confirmations
    if kept is not records:  # pruning only drops records, so keep the bindings it kept
        tokens = {r.token for r in kept}
        bindings = tuple(b for b in bindings if b.token in tokens)
    snapshot = state.snapshot.model_copy(update={"confirmations": (*bindings, binding)})
    return _saving(state, snapshot, now_ms, nonce)


def _bad_upstream() -> ConfigError:
    return ConfigError("Upstream tool-call status is invalid.", hint=CONFIRMATION_HINT)


def _upstream_effect(claimed: Record, reason: str | None) -> ClaimedCall:
    # The kernel decides which call the claim allows (and refuses any record without a claim).
    if k.upstream_call(claimed) is k.UpstreamAction.APPROVE:
        return CallApprove(claimed.tool_call_id)
    return CallDeny(claimed.tool_call_id, k.deny_reason(claimed, reason) or "")


def _check_session(state: SessionState, session_id: str | None) -> None:
    if session_id is None:
        return
    if (
        not issubclass(type(session_id), str)
        or str.__str__(session_id) != state.snapshot.session_id
    ):
        raise InvalidConfirmationToken()


def claim_resolution(
    state: SessionState,
    token: str,
    event: ConfirmationEvent,
    now_ms: int,
    *,
    session_id: str | None = None,
    reason: str | None = None,
    nonce: int | None = None,
    args_digest: str | None = None,
) -> Step:
    """Claim ``approve`` / ``reject`` / ``expire`` of ``token``: save the claim, then call upstream.

    The step's ``save`` writes the processing record; its ``then`` is ``CallApprove``
    (approving) or ``CallDeny`` (rejecting with ``reason``; expiring with
    ``"confirmation expired"``).
    Losers raise: ``AlreadyResolved`` (terminal), ``ResolutionInProgress`` (processing),
    ``InvalidConfirmationToken`` (unknown token or another ``session_id``), each carrying the
    stored binding in ``.record``; ``IllegalTransition`` for ``expire`` before expiry.
    ``args_digest``: the :func:`~akchat_fsm.wire.digest.arguments_digest` of the arguments the
    decider was shown; when given and not the stored input's, :class:`ArgumentsMismatch`.
    Checked before the record's status: a repeat of a settled decision made for other
    arguments is refused, never answered as if it were the same decision (ADR-0132).
    """
    check_clock(now_ms)
    _check_session(state, session_id)

    def not_a_claim() -> IllegalTransition:
        return IllegalTransition("confirmation", "pending", str(event), "not a claim")

    event = coerce(ConfirmationEvent, event, not_a_claim)
    if event not in k.CLAIM_EVENTS:
        raise not_a_claim()
    if reason is not None and not isinstance(reason, str):
        raise _invalid_options()
    if args_digest is not None and not isinstance(args_digest, str):
        raise _invalid_options()
    check_can_save(state)
    index = _position(state, token)
    if index < 0:
        raise InvalidConfirmationToken()
    binding = state.snapshot.confirmations[index]
    if args_digest is not None:
        check_arguments_digest(binding, args_digest)
    try:
        won = k.claim_at((_record(binding),), 0, event, now_ms).record
    except ConfirmationError as error:
        error.record = binding  # the loser's answer carries the stored binding
        raise
    claimed, moved_index = _moved_to(state, index, won.status)
    then = _upstream_effect(won, reason)
    return _saving(state, claimed, now_ms, nonce, then=then, index=moved_index)


def check_arguments_digest(binding: ConfirmationBinding, given: str) -> None:
    """:class:`ArgumentsMismatch` unless ``given`` is the digest of ``binding``'s input.

    The claim checks it; a bridge also checks it before the one write it makes ahead of the
    claim (a rejection's reason), so a refused decision writes nothing at all.
    """
    expected = arguments_digest(binding.input)
    # Both are public hex digests of what any reader of the session may see: no secret to
    # time, so a plain comparison.
    if given != expected:
        raise ArgumentsMismatch(
            f"This decision was made for other arguments ({given}) than the call's "
            f"({expected}); nothing was recorded. Show the call again and decide on it.",
            record=binding,
            expected=expected,
            given=given,
        )


def complete_resolution(
    state: SessionState, token: str, now_ms: int, *, nonce: int | None = None
) -> Step:
    """Upstream returned for the claim on ``token``: save the matching final state."""
    check_clock(now_ms)
    check_can_save(state)
    index = _position(state, token)
    if index < 0:
        raise InvalidConfirmationToken()
    settled = k.complete_at((_record(state.snapshot.confirmations[index]),), 0)[0]
    completed, moved_index = _moved_to(state, index, settled.status)
    return _saving(state, completed, now_ms, nonce, index=moved_index)


def reconcile(
    state: SessionState,
    token: str,
    upstream: UpstreamToolStatus,
    now_ms: int,
    *,
    release_untouched: bool = False,
    reason: str | None = None,
    nonce: int | None = None,
) -> Step:
    """Settle the processing record of ``token`` from upstream's tool-call status (ADR-0012).

    - upstream left ``requires_confirmation`` (running / complete / error / pending): it acted,
      so save the claim's matching final state (no upstream call);
    - upstream still ``requires_confirmation`` and ``release_untouched`` is false (default):
      save the unchanged claim (a fence: cursor + 1), then re-issue the claimed call; call
      :func:`complete_resolution` after it;
    - ... and ``release_untouched`` is true (the host knows no claimant is alive): save the
      record back to ``pending``.
    """
    check_clock(now_ms)
    index = _position(state, token)
    if index < 0:
        raise InvalidConfirmationToken()
    current = _record(state.snapshot.confirmations[index])
    upstream = coerce(UpstreamToolStatus, upstream, _bad_upstream)
    decision = k.reconcile_decision(current.status, upstream, bool(release_untouched))
    if decision is Reconciliation.RESUME:
        # Re-save the claim before re-issuing its call. The save moves the cursor, which fences
        # every older write still in flight (a release whose outcome was unknown could otherwise
        # land after upstream acted and reopen the record: ADR-0054, found by the SPIN model).
        check_can_save(state)
        return _saving(state, state.snapshot, now_ms, nonce, then=_upstream_effect(current, reason))
    if decision is Reconciliation.COMPLETE:
        return complete_resolution(state, token, now_ms, nonce=nonce)
    check_can_save(state)
    released = k.release_at((current,), 0)[0]
    back, moved_index = _moved_to(state, index, released.status)
    return _saving(state, back, now_ms, nonce, index=moved_index)
