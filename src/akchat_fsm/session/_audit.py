"""Who decided: one create-only audit entry per claim attempt, keyed by the cursor it claims at.

ADR-0132. Before a decider sends its claim at cursor ``C`` it creates the record
``audit:<token>:<C>`` (principal, via, intent, reason, arguments digest, time); only the
writer of that record may send the claim at ``C``. A decider whose create loses re-reads:
the token is then decided (it is a loser) or the cursor has not moved, in which case the
entry's writer has not claimed yet (or died first) and this decider fences the cursor with an
unchanged save so that claim can never apply, and tries at the next cursor.

So a claim that applied at ``C`` was sent by the writer of the entry at ``C``, and no entry
above ``C`` exists for that round (every later read sees the claim): **the entry with the
highest cursor is the decision that applied**, with no write after the claim, so a decider
killed right after its claim is still named. Entries are never updated; they outlive the
bindings retention prunes.

On a store with ``SaveWithRecords`` (ADR-0141) the entry is the record the claim's own atomic
write creates: an entry then exists iff its claim applied, and the write refuses when the key
is taken, so deciders of both protocols keep the rules above on one store.

A reviewer edit (ADR-0135) is an approve whose entry also holds the new arguments: intent
``edit``, ``argsDigest`` the digest of the arguments the reviewer was shown (the stored call's),
``editedArgs`` the arguments to run and ``effectiveDigest`` theirs. The envelope's binding is
the reference's plain ``approved``; the deciding entry is where a bridge reads what to run.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, Literal

from .. import core
from ..errors import ConfigError, OutcomeUnknown, SessionConflict, StorageUnavailable
from ..wire.bounded import thaw
from ..wire.digest import EditedArguments, arguments_digest
from ..wire.enums import ConfirmationStatus
from ..wire.js import escape_surrogates, utf16_len
from ..wire.session import ConfirmationBinding
from ._state import MAX_STALLS, SessionHolder, apply, reload, save_step
from .effects import LoadRecord, Plan, SaveRecord

__all__ = [
    "AUDIT_PREFIX",
    "VIAS",
    "AuditEntry",
    "Decider",
    "audit_key",
    "check_decider",
    "decided",
    "plan_audited_claim",
    "read_entries",
]

AUDIT_PREFIX = "audit:"
#: Where a decision came from; ``sweep`` is the library's own expiry of due calls.
VIAS = ("api", "inbox", "cli", "sweep")
Via = Literal["api", "inbox", "cli", "sweep"]
#: A principal is the host's identity for a person or a service: bounded, printable.
MAX_PRINCIPAL = 256
#: Zero-padded so that the store's sorted keys are in cursor order (cursors are safe ints).
_CURSOR_DIGITS = 16
_VERSION = 1


def audit_key(token: str, cursor: int) -> str:
    return f"{AUDIT_PREFIX}{token}:{cursor:0{_CURSOR_DIGITS}d}"


@dataclass(frozen=True, slots=True)
class Decider:
    """Who is deciding: the principal the host authenticated (``None``: not named) and from
    where (``api``, ``inbox``, ``cli`` or ``sweep``); ``edit``: the reviewer's new arguments,
    when the decision is an edit (an approve of other arguments than the call's)."""

    principal: str | None = None
    via: Via = "api"
    edit: EditedArguments | None = None


def check_decider(principal: object, via: object) -> Decider:
    """The :class:`Decider` for these arguments, or ``ConfigError`` before anything is read."""
    if principal is not None and (
        not isinstance(principal, str)
        or not principal.strip()
        or utf16_len(principal) > MAX_PRINCIPAL
        or not principal.isprintable()
    ):
        raise ConfigError(
            f"decided_by must be None or a printable str of 1 to {MAX_PRINCIPAL} characters.",
            hint="Pass the identity your host authenticated (a user id, an email, a service).",
        )
    if via not in VIAS:
        raise ConfigError(f"via must be one of {', '.join(VIAS)}, got {via!r}.")
    return Decider(principal, via)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One claim attempt as recorded before it was sent (``decided``: it is the one that
    applied; see :func:`decided`)."""

    session_id: str
    token: str
    tool_call_id: str
    action: str
    cursor: int
    #: what the decider asked: ``approve``, ``reject`` or ``expire``
    intent: str
    #: what its claim writes: ``approving``, ``rejecting`` or ``expiring`` (an approve after
    #: the expiry is an expiry)
    claims: str
    principal: str | None
    via: str
    reason: str | None
    args_digest: str
    at_ms: int
    decided: bool = False
    #: An ``edit``'s arguments to run (JSON) and their digest; ``None`` for any other intent.
    edited_args: Any = None
    effective_digest: str | None = None

    @property
    def is_edit(self) -> bool:
        """A reviewer's edit: an approve for ``edited_args`` instead of the call's (ADR-0135)."""
        return self.intent == EDIT

    def to_json(self) -> dict[str, Any]:
        """The JSON-able form (``akchat-fsm audit --json`` writes one per line; an edit's
        also holds ``editedArgs`` and ``effectiveDigest``)."""
        edit = (
            {}
            if not self.is_edit
            else {"editedArgs": self.edited_args, "effectiveDigest": self.effective_digest}
        )
        return {
            "sessionId": self.session_id,
            "token": self.token,
            "toolCallId": self.tool_call_id,
            "action": self.action,
            "cursor": self.cursor,
            "intent": self.intent,
            "claims": self.claims,
            "principal": self.principal,
            "via": self.via,
            "reason": self.reason,
            "argsDigest": self.args_digest,
            "at": self.at_ms,
            "decided": self.decided,
            **edit,
        }


#: The intent an edit's entry records (its claim is an approve's: ``approving``).
EDIT = "edit"


def _entry_text(
    binding: ConfirmationBinding,
    claims: ConfirmationStatus,
    cursor: int,
    intent: str,
    decider: Decider,
    reason: str | None,
    now_ms: int,
    nonce: int,
) -> str:
    fields = {
        "nonce": nonce,
        "v": _VERSION,
        "token": binding.token,
        "toolCallId": binding.tool_call_id,
        "action": binding.action,
        "cursor": cursor,
        "intent": intent,
        "claims": claims.value,
        "principal": decider.principal,
        "via": decider.via,
        "reason": reason,
        "argsDigest": arguments_digest(binding.input),
        "at": now_ms,
    }
    if decider.edit is not None:
        fields["intent"] = EDIT
        fields["editedArgs"] = thaw(decider.edit.args)
        fields["effectiveDigest"] = decider.edit.digest
    text = json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return escape_surrogates(text)  # a lone surrogate (ADR-0080) as its JSON escape


def _parse(session_id: str, text: object) -> AuditEntry | None:
    """The entry a record holds (``None``: not one of ours, or from a newer version)."""
    try:
        raw = json.loads(text) if isinstance(text, str) else None
        if not isinstance(raw, dict) or raw.get("v") != _VERSION:
            return None
        entry = AuditEntry(
            session_id,
            raw["token"],
            raw["toolCallId"],
            raw["action"],
            raw["cursor"],
            raw["intent"],
            raw["claims"],
            raw["principal"],
            raw["via"],
            raw["reason"],
            raw["argsDigest"],
            raw["at"],
            edited_args=raw.get("editedArgs") if raw["intent"] == EDIT else None,
            effective_digest=raw.get("effectiveDigest") if raw["intent"] == EDIT else None,
        )
    except (ValueError, KeyError, TypeError):
        return None
    texts = (entry.token, entry.tool_call_id, entry.action, entry.intent, entry.claims, entry.via)
    optional = (entry.principal, entry.reason)
    if (
        not all(isinstance(t, str) for t in (*texts, entry.args_digest))
        or not all(t is None or isinstance(t, str) for t in optional)
    ) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in (entry.cursor, entry.at_ms)
    ):
        return None
    if entry.intent == EDIT and not _edit_intact(entry):
        # Still the entry of its cursor (it fenced the claims below it), but what it would
        # run is unreadable: a bridge refuses to run the call rather than run other args.
        return replace(entry, edited_args=None, effective_digest=None)
    return entry


def _edit_intact(entry: AuditEntry) -> bool:
    try:
        return (
            isinstance(entry.edited_args, dict)
            and arguments_digest(entry.edited_args) == entry.effective_digest
        )
    except (TypeError, ValueError, RecursionError):
        return False


def read_entries(session_id: str, stored: Iterable[tuple[str, object]]) -> list[AuditEntry]:
    """Parse ``(key, text)`` pairs of the audit prefix; unreadable ones are skipped."""
    entries = [_parse(session_id, text) for key, text in stored if key.startswith(AUDIT_PREFIX)]
    return sorted((e for e in entries if e is not None), key=lambda e: (e.token, e.cursor))


def decided(entries: list[AuditEntry], bindings: Iterable[ConfirmationBinding]) -> list[AuditEntry]:
    """Mark, per token, the entry whose claim applied: the highest cursor's, unless the call is
    pending again (never claimed, or a claim that reconcile released: none applied). A token
    no longer in the envelope was pruned, which retention does only to decided calls."""
    status = {b.token: b.status for b in bindings}
    top: dict[str, int] = {}
    for entry in entries:
        top[entry.token] = max(top.get(entry.token, entry.cursor), entry.cursor)
    return [
        _with_decided(e, e.cursor == top[e.token] and status.get(e.token) is not _PENDING)
        for e in entries
    ]


_PENDING = ConfirmationStatus.PENDING


def _with_decided(entry: AuditEntry, value: bool) -> AuditEntry:
    return entry if entry.decided is value else replace(entry, decided=value)


ClaimCommand = Callable[[core.SessionState, int, int], core.Step]

ENTRY_NOT_WRITTEN = (
    "the audit entry's write timed out and a re-read did not find it, so no claim was sent; "
    "a retry is safe: the entry is create-only and keyed by the cursor"
)


def _create(session_id: str, key: str, text: str) -> Plan[bool]:
    """Create the entry: ``True`` if it is ours, ``False`` if another decider's holds the key.

    An unknown outcome is settled by reading the key back (the nonce makes our text ours);
    absent when read, :class:`StorageUnavailable` and no claim: it may still land, as an
    attempt whose claim was never sent, which the next decider at that cursor fences.
    """
    try:
        return (yield SaveRecord(session_id, key, text, None)) is True
    except OutcomeUnknown as unknown:
        stored = yield LoadRecord(session_id, key)  # a failure here stays OutcomeUnknown
        if stored is None:
            raise StorageUnavailable(ENTRY_NOT_WRITTEN) from unknown
        return bool(stored[1] == text)


def _fence(holder: SessionHolder) -> Plan[None]:
    """Move the cursor with an unchanged save, so the claim another decider's entry at the
    current cursor allows can never apply (that decider may be dead)."""
    with contextlib.suppress(SessionConflict):  # reloaded: the cursor moved anyway
        yield from apply(holder, lambda state, at, nonce: core.persist(state, at, nonce=nonce), 1)


def plan_audited_claim(
    holder: SessionHolder,
    claim: ClaimCommand,
    token: str,
    intent: str,
    decider: Decider,
    reason: str | None,
) -> Plan[core.Step]:
    """The claim, each attempt preceded by its audit entry; the step whose save applied.

    On a store with ``SaveWithRecords`` (``holder.atomic_records``, ADR-0141) the entry is
    created by the claim's own atomic write instead: one durable write, and an entry exists
    iff its claim applied. The entry's key and text, and the fence, are the same either way,
    so processes of both protocols may decide on one store side by side.

    Decided on the holder's copy first, so a refusal (``AlreadyResolved``, ...) raises before
    any write. Each failed attempt moved the stored cursor (another client's claim, fence or
    save applied), so this ends as the plain claim does; a store whose cursor does not move
    on a conflict ends in :class:`SessionConflict` after ``MAX_STALLS`` attempts.
    """
    if holder.needs_reload:
        yield from reload(holder)
    stalls = 0
    while stalls < MAX_STALLS:
        cursor = holder.cursor
        now = holder.clock()
        # Decided once per attempt: a loser raises here, before anything is written; the
        # step decided is the one saved, right after its entry.
        nonce = holder.nonce()
        step = claim(holder.core, now, nonce)
        binding = core.find_binding(step.state, token)
        if step.save is None or binding is None:  # pragma: no cover - a claim always saves
            return step
        text = _entry_text(binding, binding.status, cursor, intent, decider, reason, now, nonce)
        key = audit_key(token, cursor)
        if holder.atomic_records:
            # ADR-0141: the entry is created by the claim's own write, so it exists iff the
            # claim applied. Refused, the store is re-read (by the save): the cursor moved
            # (another write won it), or another decider's entry holds this key at an unmoved
            # cursor: a process of the create-then-claim protocol, fenced below like any.
            if (yield from save_step(holder, step, ((key, text),))):
                return replace(step, state=holder.core)
            if holder.cursor == cursor:
                yield from _fence(holder)
        elif (yield from _create(holder.session_id, key, text)):
            if (yield from save_step(holder, step)):
                return replace(step, state=holder.core)
            # a conflict (reloaded): our entry stays, below the cursor of any claim that applies
        else:
            # Another decider holds this cursor. Re-read: a decided token is refused by the
            # next attempt; an unmoved cursor is fenced so that decider's claim can never
            # apply (it may be dead), then we decide again at the next cursor.
            yield from reload(holder)
            if holder.cursor == cursor:
                yield from _fence(holder)
        stalls = 0 if holder.cursor > cursor else stalls + 1
    raise SessionConflict(session_id=holder.session_id, expected_cursor=holder.cursor)


# --------------------------------------------------------------------------- operator settles
# ADR-0136. An operator's verdict on an unknown execution (``ToolLedger.settle``,
# ``settle_unknown``) writes its entry here before the ledger's compare-and-set. The settle
# plans live with the ledger (``integrations/ledger.py``); what is stored, and the rule that
# says which entries applied, are here, beside the decisions' own.

#: Not under ``audit:``: a decision's key is ``audit:<token>:<cursor>``, and readers of that
#: prefix (``audit_trail``, the bridges' deciding entry) stay exactly as they were.
SETTLE_AUDIT_PREFIX = "audit-settle:"
#: Where an operator's verdict comes from (the library's sweep never settles).
SETTLE_VIAS = ("api", "inbox", "cli")
#: A reason is the operator's note, bounded like a stored record's strings need to be.
MAX_SETTLE_REASON = 4_000
_MAX_KEY = 200


def settle_audit_key(ledger_key: str, version: int, nonce: str) -> str:
    """``audit-settle:<call>:<version>:<nonce>``: the ledger key's call part (its SHA-256 when
    the key would be too long), the ledger version the settle read and CAS'd against
    (zero-padded: keys sort by version), and the settle's own nonce. Unique per attempt, so a
    create never contends: which attempt applied is told by the nonce (:func:`settle_decided`)."""
    import hashlib  # here: this section only appends to the module

    call = ledger_key.split(":", 1)[1] if ":" in ledger_key else ledger_key
    key = f"{SETTLE_AUDIT_PREFIX}{call}:{version:0{_CURSOR_DIGITS}d}:{nonce}"
    if len(key) > _MAX_KEY:
        digest = hashlib.sha256(call.encode("utf-8", "surrogatepass")).hexdigest()
        key = f"{SETTLE_AUDIT_PREFIX}sha256:{digest}:{version:0{_CURSOR_DIGITS}d}:{nonce}"
    return key


def check_settler(principal: object, via: object, reason: object) -> Decider:
    """Who settles, from where, and the reason's type and bound; ``ConfigError`` before any read."""
    if via not in SETTLE_VIAS:
        raise ConfigError(f"via must be one of {', '.join(SETTLE_VIAS)}, got {via!r}.")
    if reason is not None and (
        not isinstance(reason, str) or utf16_len(reason) > MAX_SETTLE_REASON
    ):
        raise ConfigError(
            f"reason must be None or a str of at most {MAX_SETTLE_REASON} characters.",
            hint="Say briefly how you checked the tool's side effect.",
        )
    try:
        return check_decider(principal, via)
    except ConfigError as exc:
        raise ConfigError(exc.message.replace("decided_by", "operator"), hint=exc.hint) from None


@dataclass(frozen=True, slots=True)
class SettleAuditEntry:
    """One operator's settle attempt as recorded before its compare-and-set (``decided``: its
    verdict applied; see :func:`settle_decided`).

    ``version`` is the ledger entry's version the settle read and wrote over; ``settled_*``
    is what it read (the state, and whose claim it settled); ``nonce`` is the verdict's, which
    the ledger entry carries from that write on (``LedgerEntry.verdict``), and ``follows`` the
    verdict nonce the entry carried when read (the previous verdict that applied, if any).
    """

    session_id: str
    tool_call_id: str
    tool: str
    version: int
    ran: bool
    result: Any
    principal: str | None
    via: str
    reason: str | None
    #: the ledger entry's arguments digest: what the execution claim was bound to
    args_digest: str
    at_ms: int
    nonce: str
    settled_state: str
    settled_owner: str
    settled_attempt: int
    follows: str | None = None
    decided: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON-able form; ``"kind": "settle"`` tells it from a decision's entry in the
        ``akchat-fsm audit --json`` export."""
        return {
            "kind": "settle",
            "sessionId": self.session_id,
            "toolCallId": self.tool_call_id,
            "tool": self.tool,
            "version": self.version,
            "verdict": "ran" if self.ran else "did-not-run",
            "result": self.result,
            "principal": self.principal,
            "via": self.via,
            "reason": self.reason,
            "argsDigest": self.args_digest,
            "at": self.at_ms,
            "settled": {
                "state": self.settled_state,
                "owner": self.settled_owner,
                "attempt": self.settled_attempt,
            },
            "nonce": self.nonce,
            "follows": self.follows,
            "decided": self.decided,
        }


def settle_entry_text(entry: SettleAuditEntry) -> str:
    """The stored text of a settle entry (``decided`` is never stored: it is read off)."""
    fields = {key: value for key, value in entry.to_json().items() if key != "decided"}
    del fields["sessionId"]
    fields["v"] = _VERSION
    return json.dumps(fields, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _parse_settle(session_id: str, text: object) -> SettleAuditEntry | None:
    """The settle entry a record holds (``None``: not one, or from a newer version)."""
    try:
        raw = json.loads(text) if isinstance(text, str) else None
        if not isinstance(raw, dict) or raw.get("v") != _VERSION or raw.get("kind") != "settle":
            return None
        settled = raw["settled"]
        entry = SettleAuditEntry(
            session_id,
            raw["toolCallId"],
            raw["tool"],
            raw["version"],
            raw["verdict"] == "ran",
            raw["result"],
            raw["principal"],
            raw["via"],
            raw["reason"],
            raw["argsDigest"],
            raw["at"],
            raw["nonce"],
            settled["state"],
            settled["owner"],
            settled["attempt"],
            raw["follows"],
        )
    except (ValueError, KeyError, TypeError):
        return None
    texts = (
        entry.tool_call_id,
        entry.tool,
        entry.via,
        entry.args_digest,
        entry.nonce,
        entry.settled_state,
        entry.settled_owner,
    )
    optional = (entry.principal, entry.reason, entry.follows)
    numbers = (entry.version, entry.at_ms, entry.settled_attempt)
    if (
        not all(isinstance(t, str) for t in texts)
        or not all(t is None or isinstance(t, str) for t in optional)
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)
    ):
        return None
    return entry


def read_settle_entries(
    session_id: str, stored: Iterable[tuple[str, object]]
) -> list[SettleAuditEntry]:
    """Parse ``(key, text)`` pairs of the settle prefix, per call in version order (then time);
    unreadable ones are skipped."""
    entries = [
        _parse_settle(session_id, text)
        for key, text in stored
        if key.startswith(SETTLE_AUDIT_PREFIX)
    ]
    return sorted(
        (e for e in entries if e is not None), key=lambda e: (e.tool_call_id, e.version, e.at_ms)
    )


def settle_decided(
    entries: list[SettleAuditEntry], verdicts: dict[str, str | None]
) -> list[SettleAuditEntry]:
    """Mark every entry whose verdict applied. ``verdicts`` maps each call to the verdict nonce
    its ledger entry carries now.

    A settle's compare-and-set writes its own nonce into the ledger entry, and every later
    write of that entry keeps it until the next verdict that applies replaces it; that one's
    entry, written before its write, read it (``follows``). So a verdict applied if and only if
    its nonce is the ledger's now or a later entry of the call follows it: a nonce whose write
    lost was never stored, so nothing can name it."""
    named: dict[str, set[str]] = {}
    for call, nonce in verdicts.items():
        if nonce is not None:
            named.setdefault(call, set()).add(nonce)
    for entry in entries:
        if entry.follows is not None:
            named.setdefault(entry.tool_call_id, set()).add(entry.follows)
    out = []
    for entry in entries:
        value = entry.nonce in named.get(entry.tool_call_id, ())
        out.append(entry if entry.decided is value else replace(entry, decided=value))
    return out


SETTLE_ENTRY_NOT_WRITTEN = (
    "the settle's audit entry could not be written (a re-read did not find it), so the verdict "
    "was not sent; nothing changed and a retry is safe"
)


def plan_create_settle_entry(session_id: str, entry: SettleAuditEntry, key: str) -> Plan[None]:
    """Create a settle's entry under ``key`` (create-only, as a decision's); an unknown outcome
    is settled by reading it back. Not ours when read: :class:`StorageUnavailable`, and the
    caller sends no verdict."""
    text = settle_entry_text(entry)
    try:
        created = yield from _create(session_id, key, text)
    except StorageUnavailable as exc:
        raise StorageUnavailable(SETTLE_ENTRY_NOT_WRITTEN) from exc
    if not created:  # a fresh nonce's key holds another text: nothing of ours may follow it
        raise StorageUnavailable(SETTLE_ENTRY_NOT_WRITTEN)
