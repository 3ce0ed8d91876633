"""The tool-execution ledger: an approved tool body runs at most once per tool call (ADR-0100).

One record per tool call, key ``call:<tool-call-id>``, in the session's
:class:`~akchat_fsm.storage.port.RecordStorage`, beside the envelope:

==============  ===========================================================  ===================
state           meaning                                                      next
==============  ===========================================================  ===================
(absent)        the body never started here                                  ``executing``
``executing``   a process claimed the body and may be running it             ``executed`` or,
                (owner, attempt, claim nonce, start time); saved with        by an operator or
                ``processing=True``                                          a declining body,
                                                                             ``released``
``executed``    the body returned or raised; outcome and result recorded    terminal
``released``    an operator said an unknown execution did not happen, or     ``executing``
                its claimant's body declined to act (``declined=``)
==============  ===========================================================  ===================

Every decision is a pure function of (stored entry, request): :func:`decide_claim`,
:func:`decide_finish`, :func:`decide_settle`, each a lookup in the table derived from
:class:`~akchat_fsm.machines.execution.ExecutionLifecycle` (``EXECUTION_TABLE``, ADR-0120). The
plans order the I/O around them and the two drivers of :mod:`._bridge_io` perform it, so
:class:`ToolLedger` and :class:`AsyncToolLedger` differ only in the driver.

The body runs only in the process whose claim save applied (a create, or for a tool the host
declares idempotent a re-claim with ``attempt + 1``). A repeat finds ``executed`` and gets the
recorded result without running anything. An ``executing`` entry found by anyone but its
claimant has an unknown outcome: :class:`ExecutionUnknown`, never a re-run by default.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import secrets
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, TypeVar

from ..errors import (
    AlreadyResolved,
    ConfigError,
    OutcomeUnknown,
    StorageUnavailable,
)
from ..machines.execution import ExecutionEvent, ExecutionState
from ..machines.tables import EXECUTION_TABLE, MACHINES
from ..session.drivers import Ports, run_async, run_sync
from ..session.settle_audit import (
    SETTLE_AUDIT_PREFIX,
    Decider,
    SettleAuditEntry,
    check_settler,
    plan_create_settle_entry,
    read_settle_entries,
    settle_audit_key,
    settle_decided,
)
from ..storage.checks import check_record_key, check_session_id, now_ms
from ._bridge_io import (
    ASYNC_BODY,
    BodyOutcome,
    BridgeError,
    ListRecords,
    LoadRecord,
    Plan,
    RunBody,
    SaveRecord,
    asyncio_records,
    require_records,
    stored_json,
)

__all__ = [
    "LEDGER_PREFIX",
    "SETTLE_AUDIT_PREFIX",
    "AsyncToolLedger",
    "BridgeError",
    "ClaimAction",
    "ClaimDecision",
    "ClaimRequest",
    "Execution",
    "ExecutionClaimLost",
    "ExecutionState",
    "ExecutionUnknown",
    "LedgerEntry",
    "RecordedToolFailure",
    "SettleAuditEntry",
    "SettleRefused",
    "ToolCallMismatch",
    "ToolLedger",
    "args_digest",
    "decide_claim",
    "decide_finish",
    "decide_settle",
    "default_owner",
    "describe_entry",
    "ledger_key",
    "plan_entries",
    "plan_execute",
    "plan_get",
    "plan_mark_settles",
    "plan_settle",
    "plan_settle_trail",
    "plan_settle_unknown",
    "plan_unknown",
    "recorded_failure",
    "result_from_json",
    "settle_trail",
    "settle_trail_async",
]

T = TypeVar("T")
LEDGER_PREFIX = "call:"
#: A claim that lost a CAS race re-decides on the fresh entry; a few rounds settle it.
CLAIM_ATTEMPTS = 5
#: The body already ran: keep trying to record its outcome (each try re-reads first).
FINISH_ATTEMPTS = 8


#: The final states of the entry (``executed``): read off the machine, not restated.
_FINAL = MACHINES["execution"].finals


def _stored_state(value: Any) -> ExecutionState:
    """A stored entry's state; ``absent`` names no record, so no record may hold it."""
    state = ExecutionState(value)
    if state is ExecutionState.ABSENT:
        raise ValueError("a stored ledger record cannot be absent")
    return state


# --------------------------------------------------------------------------- errors


class ExecutionUnknown(BridgeError):
    """The tool call was claimed for execution and its outcome is unknown; nothing ran here.

    Its claimant may still be running it, or died after (or before) the body acted. It is
    never re-run by default: an operator settles it (:meth:`ToolLedger.settle`), or the host
    declares the tool idempotent. ``record`` is the stored :class:`LedgerEntry`.
    """


class ExecutionClaimLost(BridgeError):
    """This process's execution claim was settled or re-claimed by another meanwhile.

    Raised after the body ran when its outcome could not be recorded as *this* claim's
    (an operator settled it, or an idempotent re-claim took it). ``record`` is what is stored.
    """


class ToolCallMismatch(ConfigError):
    """The tool-call id is already recorded for another tool or other arguments."""


class RecordedToolFailure(BridgeError):
    """The tool body already ran once and raised; it is not run again. ``record`` is the
    ledger entry (its ``error`` says what was raised). Every bridge raises this one class
    (also importable from each runtime module)."""


def recorded_failure(entry: LedgerEntry) -> RecordedToolFailure:
    """The error a repeat of a call whose body raised gets instead of a second run."""
    return RecordedToolFailure(
        f"Tool call {entry.tool_call_id!r} already ran and raised ({entry.error}); "
        "it is not run again.",
        record=entry,
    )


# --------------------------------------------------------------------------- the entry


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"expected a str or null, got {type(value).__name__}")
    return value


def args_digest(args: Mapping[str, Any] | str | None) -> str:
    """SHA-256 of the arguments' canonical JSON (sorted keys): what a claim is bound to."""
    if isinstance(args, str):
        with contextlib.suppress(ValueError):
            args = json.loads(args)
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def ledger_key(tool_call_id: str) -> str:
    """The record key of a tool call: ``call:<id>``, or ``call:sha256:<hex>`` for odd ids."""
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise ConfigError(f"Invalid tool call id {tool_call_id!r}.")
    key = LEDGER_PREFIX + tool_call_id
    try:
        return check_record_key(key)
    except ConfigError:
        digest = hashlib.sha256(tool_call_id.encode("utf-8", "surrogatepass")).hexdigest()
        return f"{LEDGER_PREFIX}sha256:{digest}"


def default_owner() -> str:
    """``host:pid``: who claimed an execution, for operators reading ``executing`` entries."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One tool call's execution record as stored (``version`` is the storage version)."""

    tool_call_id: str
    tool: str
    args_digest: str
    state: ExecutionState
    attempt: int
    claim: str
    owner: str
    started_ms: int
    finished_ms: int | None = None
    #: ``"returned"``, ``"raised"`` or ``"settled"`` (an operator recorded it) once executed.
    outcome: str | None = None
    #: The body's return value as JSON (``outcome == "returned"`` or ``"settled"``).
    result: Any = None
    #: ``"<exception type>: <message>"`` when the body raised.
    error: str | None = None
    error_type: str | None = None
    version: int = 0
    #: The nonce of the last operator's verdict that applied to this call (its settle audit
    #: entry's, ADR-0136), kept by every later write until the next verdict; ``None``: never
    #: settled.
    verdict: str | None = None

    def to_json(self) -> str:
        body = {
            "v": 1,
            "toolCallId": self.tool_call_id,
            "tool": self.tool,
            "argsDigest": self.args_digest,
            "state": self.state.value,
            "attempt": self.attempt,
            "claim": self.claim,
            "owner": self.owner,
            "startedMs": self.started_ms,
            "finishedMs": self.finished_ms,
            "outcome": self.outcome,
            "result": self.result,
            "error": self.error,
            "errorType": self.error_type,
        }
        if self.verdict is not None:  # absent otherwise: an unsettled entry's text is unchanged
            body["verdict"] = self.verdict
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_stored(cls, stored: tuple[int, str] | None) -> LedgerEntry | None:
        if stored is None:
            return None
        version, text = stored
        raw = stored_json(text, "stored ledger record")
        try:
            return cls(
                tool_call_id=str(raw["toolCallId"]),
                tool=str(raw["tool"]),
                args_digest=str(raw["argsDigest"]),
                state=_stored_state(raw["state"]),
                attempt=int(raw["attempt"]),
                claim=str(raw["claim"]),
                owner=str(raw["owner"]),
                started_ms=int(raw["startedMs"]),
                finished_ms=raw.get("finishedMs"),
                outcome=raw.get("outcome"),
                result=raw.get("result"),
                error=raw.get("error"),
                error_type=raw.get("errorType"),
                version=int(version),
                verdict=_optional_text(raw.get("verdict")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"A ledger record is not valid: {exc!r}.") from exc

    @property
    def unknown(self) -> bool:
        """Claimed and never finished: an execution whose outcome nobody here knows."""
        return self.state is ExecutionState.EXECUTING


@dataclass(frozen=True, slots=True)
class Execution:
    """What :meth:`ToolLedger.execute` did: ``ran`` here, or replayed the recorded outcome.

    ``value`` is the body's return value when it ran here, the recorded JSON result otherwise.
    A replayed entry whose ``outcome`` is ``"raised"`` carries the recorded error instead.
    """

    entry: LedgerEntry
    ran: bool
    value: Any = None


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Who asks to run which call's body, and on what terms."""

    tool_call_id: str
    tool: str
    args_digest: str
    owner: str
    claim: str
    now_ms: int
    idempotent: bool = False
    #: Exception types by which a body declines to act (a runtime's deferral, raised before
    #: any side effect): its claim is released, not recorded, so a later run may claim it.
    declined: tuple[type[BaseException], ...] = ()


class ClaimAction(StrEnum):
    """What a claim decision says (a ``StrEnum``: each member equals its old string)."""

    #: Run the body: save ``write`` with ``expected``, or nothing when we already hold it.
    RUN = "run"
    #: The body already finished: replay ``entry``'s recorded outcome.
    REPLAY = "replay"
    #: ``entry`` is executing under another claim: its outcome is unknown, nothing runs.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class ClaimDecision:
    """``run`` (save ``write`` with ``expected``, or nothing when we already hold the claim),
    ``replay`` (the body already finished: ``entry``), or ``unknown`` (``entry`` is executing)."""

    action: ClaimAction
    entry: LedgerEntry | None = None
    write: LedgerEntry | None = None
    expected: int | None = None


def _check_same_call(stored: LedgerEntry, request: ClaimRequest) -> None:
    if stored.tool != request.tool or stored.args_digest != request.args_digest:
        raise ToolCallMismatch(
            f"Tool call {request.tool_call_id!r} is recorded for tool {stored.tool!r} with "
            f"other arguments; refusing to run {request.tool!r} under the same id.",
            hint="A tool call id names one invocation; use a fresh id for a new call.",
        )


def _cell(
    stored: LedgerEntry | None, event: ExecutionEvent, claim: str | None, idempotent: bool
) -> tuple[ExecutionState, bool, ExecutionState | None]:
    """(state, ours, target) of ``event`` on ``stored`` in the machine's table."""
    state = ExecutionState.ABSENT if stored is None else stored.state
    ours = stored is not None and claim is not None and stored.claim == claim
    return state, ours, EXECUTION_TABLE.get((state, event, (ours, idempotent)))


def decide_claim(stored: LedgerEntry | None, request: ClaimRequest) -> ClaimDecision:
    """May ``request`` run the body now? A pure function of the stored entry and the request.

    The table's ``claim`` cell decides: no move from a final state replays it, no move
    otherwise is an unknown outcome, a self-loop under ``ours`` is our own claim found again
    (its save applied), and any other move is a claim to save.
    """
    if stored is not None:
        _check_same_call(stored, request)
    state, ours, target = _cell(stored, ExecutionEvent.CLAIM, request.claim, request.idempotent)
    if target is None:
        action = ClaimAction.REPLAY if state in _FINAL else ClaimAction.UNKNOWN
        return ClaimDecision(action, entry=stored)
    if ours and target is state:
        return ClaimDecision(ClaimAction.RUN, entry=stored)
    write = LedgerEntry(
        tool_call_id=request.tool_call_id,
        tool=request.tool,
        args_digest=request.args_digest,
        state=target,
        attempt=1 if stored is None else stored.attempt + 1,
        claim=request.claim,
        owner=request.owner,
        started_ms=request.now_ms,
        # An operator's verdict stays named through a re-claim (ADR-0136: settle_decided).
        verdict=None if stored is None else stored.verdict,
    )
    return ClaimDecision(
        ClaimAction.RUN, write=write, expected=None if stored is None else stored.version
    )


def decide_finish(
    stored: LedgerEntry | None, claim: str, outcome: BodyOutcome, result: Any, now_ms: int
) -> LedgerEntry | None:
    """The ``executed`` entry to save for our claim, or ``None`` when it is already recorded.

    ``result`` is the body's value already encoded as JSON. Raises :class:`ExecutionClaimLost`
    when the stored entry is no longer our claim (the table's ``finish`` needs ``ours``).
    """
    state, ours, target = _cell(stored, ExecutionEvent.FINISH, claim, False)
    if target is None or stored is None:
        if ours and state in _FINAL:
            return None  # our claim's outcome is already recorded
        raise ExecutionClaimLost(
            "The tool body ran, but its execution claim was settled or re-claimed meanwhile; "
            "its outcome was not recorded.",
            record=stored,
        )
    error = outcome.error
    return replace(
        stored,
        state=target,
        finished_ms=now_ms,
        outcome="returned" if error is None else "raised",
        result=result if error is None else None,
        error=None if error is None else f"{type(error).__name__}: {error}",
        error_type=None if error is None else type(error).__qualname__,
    )


#: The claim an operator's verdict records: it holds no body, and it is no claimant's nonce.
OPERATOR_CLAIM = "operator-verdict"


def decide_settle(
    stored: LedgerEntry | None,
    tool_call_id: str,
    *,
    ran: bool,
    result: Any,
    now_ms: int,
    operator: str,
) -> LedgerEntry | None:
    """An operator's verdict on an unknown execution: it ran (``result``), or it did not.

    Returns the entry to save, or ``None`` when nothing changes (a release of a released
    entry: the table's self-loop). ``ran=False`` releases the call so the next continuation
    may run it; only an ``executing`` (or released) entry can be settled. An operator holds
    no claim, so the verdict is looked up with both guards off.
    """
    event = ExecutionEvent.SETTLE_RAN if ran else ExecutionEvent.RELEASE
    state, _, target = _cell(stored, event, None, False)
    if stored is None:
        raise ConfigError(f"No execution is recorded for tool call {tool_call_id!r}.")
    if target is None:
        raise AlreadyResolved(
            f"Tool call {tool_call_id!r} already has a recorded outcome.", record=stored
        )
    if target is state:
        return None
    # The verdict takes the claim from whoever held it: a claimant whose body is still running
    # must find its claim gone (ExecutionClaimLost), never take the operator's recorded outcome
    # for its own. No claimant's nonce (128 random bits, hex) can equal this one.
    if not ran:
        return replace(
            stored, state=target, claim=OPERATOR_CLAIM, owner=operator, finished_ms=now_ms
        )
    return replace(
        stored,
        state=target,
        claim=OPERATOR_CLAIM,
        owner=operator,
        finished_ms=now_ms,
        outcome="settled",
        result=result,
    )


# --------------------------------------------------------------------------- plans


def default_encode(value: Any) -> Any:
    """The body's value as JSON (``str()`` for what JSON cannot hold)."""
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _load(session_id: str, key: str) -> Plan[LedgerEntry | None]:
    return LedgerEntry.from_stored((yield LoadRecord(session_id, key)))


def plan_get(session_id: str, tool_call_id: str) -> Plan[LedgerEntry | None]:
    """The entry of one tool call, or ``None``."""
    return (yield from _load(session_id, ledger_key(tool_call_id)))


def plan_entries(session_id: str) -> Plan[tuple[LedgerEntry, ...]]:
    """Every ledger entry of the session (key order)."""
    keys = yield ListRecords(session_id, LEDGER_PREFIX)
    entries = []
    for key in keys:
        entry = yield from _load(session_id, key)
        if entry is not None:
            entries.append(entry)
    return tuple(entries)


def plan_unknown(session_id: str) -> Plan[tuple[LedgerEntry, ...]]:
    """The session's entries claimed and never finished: executions whose outcome is unknown."""
    return tuple(entry for entry in (yield from plan_entries(session_id)) if entry.unknown)


def _save(session_id: str, key: str, entry: LedgerEntry, expected: int | None) -> Plan[bool]:
    """One CAS save; an unknown outcome counts as not applied (the caller re-reads to settle)."""
    try:
        applied: bool = yield SaveRecord(
            session_id, key, entry.to_json(), expected, entry.state is ExecutionState.EXECUTING
        )
    except OutcomeUnknown:
        return False
    return applied


def plan_execute(
    session_id: str,
    request: ClaimRequest,
    *,
    clock: Callable[[], int] = now_ms,
    encode: Callable[[Any], Any] = default_encode,
) -> Plan[Execution]:
    """Claim the call (CAS), run the body once, record its outcome (CAS); or replay / refuse.

    The body's own exception is re-raised after its outcome is recorded.
    """
    key = ledger_key(request.tool_call_id)
    # Optimistic: most calls run once, so try the create first; anything stored makes it fail
    # (a definite conflict, or an unknown outcome our nonce settles) and the loop re-reads.
    stored: LedgerEntry | None = None
    for _ in range(CLAIM_ATTEMPTS):
        decision = decide_claim(stored, request)
        if decision.action is ClaimAction.REPLAY:
            assert decision.entry is not None
            return Execution(decision.entry, ran=False, value=decision.entry.result)
        if decision.action is ClaimAction.UNKNOWN:
            entry = decision.entry
            assert entry is not None
            raise ExecutionUnknown(
                f"Tool call {request.tool_call_id!r} ({entry.tool}) was claimed for execution "
                f"(attempt {entry.attempt}, owner {entry.owner}) and its outcome is unknown; "
                "it is not run again. Settle it, or declare the tool idempotent.",
                record=entry,
            )
        if decision.write is None:
            break  # we already hold it
        if (yield from _save(session_id, key, decision.write, decision.expected)):
            stored = replace(decision.write, version=(decision.expected or 0) + 1)
            break
        # Lost the race, or the save's outcome is unknown: our claim nonce settles it.
        stored = yield from _load(session_id, key)
    else:
        raise ExecutionClaimLost(
            f"Could not claim tool call {request.tool_call_id!r}: it kept changing.",
            record=stored,
        )
    outcome: BodyOutcome = yield RunBody()
    if request.declined and isinstance(outcome.error, request.declined):
        yield from _release_declined(session_id, key, stored, request.claim, clock)
        raise outcome.error
    result = None
    if outcome.error is None:
        try:
            result = encode(outcome.value)
        except Exception as exc:  # the body ran: record that, with why its value was dropped
            result = {"unencodable": repr(exc)}
    finished = yield from _finish(session_id, key, stored, request, outcome, result, clock)
    if outcome.error is not None:
        raise outcome.error
    return Execution(finished, ran=True, value=outcome.value)


def _finish(
    session_id: str,
    key: str,
    stored: LedgerEntry | None,
    request: ClaimRequest,
    outcome: BodyOutcome,
    result: Any,
    clock: Callable[[], int],
) -> Plan[LedgerEntry]:
    for _ in range(FINISH_ATTEMPTS):
        write = decide_finish(stored, request.claim, outcome, result, clock())
        if write is None:
            assert stored is not None
            return stored
        try:
            applied = yield from _save(session_id, key, write, write.version)
        except StorageUnavailable:
            applied = False  # nothing applied: retrying is safe
        if applied:
            return replace(write, version=write.version + 1)
        stored = yield from _load(session_id, key)
    raise OutcomeUnknown(
        f"Tool call {request.tool_call_id!r} ran, but its outcome could not be recorded; "
        "its ledger entry stays executing (an unknown outcome for operators to settle)."
    )


def _release_declined(
    session_id: str, key: str, stored: LedgerEntry | None, claim: str, clock: Callable[[], int]
) -> Plan[None]:
    """Release our claim of a body that declined to act (the table's ``release``). A claim
    settled or re-claimed meanwhile is not ours to release; a release that cannot be recorded
    leaves the entry ``executing``, an unknown execution for an operator (``ran=False``)."""
    for _ in range(FINISH_ATTEMPTS):
        _, ours, target = _cell(stored, ExecutionEvent.RELEASE, claim, False)
        if not ours or target is None or stored is None:
            return
        write = replace(stored, state=target, finished_ms=clock())
        try:
            if (yield from _save(session_id, key, write, write.version)):
                return
        except StorageUnavailable:
            pass  # nothing applied: retrying is safe
        stored = yield from _load(session_id, key)


def new_verdict_nonce() -> str:
    """A verdict's nonce (128 random bits, hex): in its audit entry's key and the ledger's."""
    return secrets.token_hex(16)


def _record_settle(
    session_id: str,
    stored: LedgerEntry,
    write: LedgerEntry,
    settler: Decider,
    reason: str | None,
    now_ms: int,
) -> Plan[None]:
    """The settle's create-only audit entry, durable before its compare-and-set over
    ``stored.version`` (ADR-0136); a write that did not land raises and nothing is sent."""
    assert write.verdict is not None
    ran = write.state is ExecutionState.EXECUTED
    entry = SettleAuditEntry(
        session_id=session_id,
        tool_call_id=stored.tool_call_id,
        tool=stored.tool,
        version=stored.version,
        ran=ran,
        result=write.result if ran else None,
        principal=settler.principal,
        via=settler.via,
        reason=reason,
        args_digest=stored.args_digest,
        at_ms=now_ms,
        nonce=write.verdict,
        settled_state=stored.state.value,
        settled_owner=stored.owner,
        settled_attempt=stored.attempt,
        follows=stored.verdict,
    )
    key = settle_audit_key(ledger_key(stored.tool_call_id), stored.version, write.verdict)
    yield from plan_create_settle_entry(session_id, entry, key)


def plan_settle(
    session_id: str,
    tool_call_id: str,
    *,
    ran: bool,
    result: Any,
    operator: str,
    clock: Callable[[], int] = now_ms,
    settler: Decider | None = None,
    reason: str | None = None,
    nonce: Callable[[], str] = new_verdict_nonce,
) -> Plan[LedgerEntry]:
    """Record an operator's verdict on an unknown execution (one CAS, re-decided on conflict).

    Each attempt first writes its audit entry (who: ``settler``, why: ``reason``), keyed by
    the version it writes over; an attempt whose CAS loses leaves an entry that never applied
    (its verdict nonce is stored nowhere). A CAS whose outcome was unknown and did apply is
    recognised by its nonce on the re-read, not re-decided.
    """
    key = ledger_key(tool_call_id)
    mine: set[str] = set()
    for _ in range(CLAIM_ATTEMPTS):
        stored = yield from _load(session_id, key)
        if stored is not None and stored.verdict in mine:
            return stored  # our own write applied after all
        at = clock()
        write = decide_settle(
            stored, tool_call_id, ran=ran, result=result, now_ms=at, operator=operator
        )
        if write is None:
            assert stored is not None
            return stored
        assert stored is not None  # decide_settle refuses a missing entry
        write = replace(write, verdict=nonce())
        yield from _record_settle(session_id, stored, write, settler or Decider(), reason, at)
        mine.add(write.verdict or "")
        if (yield from _save(session_id, key, write, write.version)):
            return replace(write, version=write.version + 1)
    raise ExecutionClaimLost(f"Tool call {tool_call_id!r} kept changing; not settled.")


NOTHING_WRITTEN = "nothing written"


class SettleRefused(BridgeError):
    """An operator's verdict wrote nothing: the entry was not an unknown execution when read,
    or it changed before the write (another settle, the claimant finishing late).

    ``record`` is what is stored now (``None``: nothing is recorded for the call), like every
    bridge error's; ``entry`` is the same object, under the name it had first.
    """

    def __init__(self, message: str, entry: LedgerEntry | None = None) -> None:
        super().__init__(message, record=entry)

    @property
    def entry(self) -> LedgerEntry | None:
        """The stored entry (an alias of ``record``)."""
        record: LedgerEntry | None = self.record
        return record


def describe_entry(entry: LedgerEntry | None) -> str:
    """One phrase for operators: what a ledger entry says about its call now."""
    if entry is None:
        return "gone"
    if entry.unknown:
        return f"executing (attempt {entry.attempt}, owner {entry.owner})"
    if entry.state is ExecutionState.RELEASED:
        return f"released (settled as not run by {entry.owner})"
    return f"executed (outcome {entry.outcome}, by {entry.owner})"


def result_from_json(text: str, what: str = "result") -> Any:
    """A verdict's result given as JSON text, parsed with the bounds a stored record is read
    back with (ADR-0103), so the entry it goes into stays readable; ``ConfigError`` if not."""
    return stored_json(text, what)


def plan_settle_unknown(
    session_id: str,
    tool_call_id: str,
    *,
    ran: bool,
    result: Any,
    operator: str,
    now_ms: int,
    settler: Decider | None = None,
    reason: str | None = None,
    nonce: Callable[[], str] = new_verdict_nonce,
) -> Plan[LedgerEntry]:
    """An operator's verdict, written only over the entry read, which must still be unknown.

    Unlike :func:`plan_settle` (which re-decides on a conflict), one compare-and-set over the
    version read: anything that changed the entry in between makes this write nothing to the
    ledger and raise :class:`SettleRefused` saying what the entry is now (ADR-0104). The
    verdict itself is :func:`decide_settle`'s. Its audit entry is written first (ADR-0136);
    after a lost compare-and-set it stays, as an attempt that did not apply. A write whose
    answer was lost is settled by re-reading: the entry's verdict is ours, or (a later write
    replaced it: a re-claim, another operator) the call's settle trail says ours applied;
    the entry returned is then the one our verdict wrote, which a later write has replaced.
    """
    key = ledger_key(tool_call_id)
    stored = yield from _load(session_id, key)
    if stored is None:
        raise SettleRefused(
            f"no execution is recorded for tool call {tool_call_id!r} in session {session_id!r}"
        )
    if not stored.unknown:
        raise SettleRefused(
            f"tool call {tool_call_id!r} has no unknown outcome to settle: it is "
            f"{describe_entry(stored)}; {NOTHING_WRITTEN}",
            stored,
        )
    write = decide_settle(
        stored, tool_call_id, ran=ran, result=result, now_ms=now_ms, operator=operator
    )
    assert write is not None  # an executing entry always changes
    write = replace(write, verdict=nonce())
    yield from _record_settle(session_id, stored, write, settler or Decider(), reason, now_ms)
    lost = False
    try:
        applied = yield SaveRecord(session_id, key, write.to_json(), stored.version, False)
    except OutcomeUnknown:
        applied, lost = False, True  # settled by the re-reads below
    if applied:
        return replace(write, version=stored.version + 1)
    now_stored = yield from _load(session_id, key)
    if now_stored is not None and now_stored.verdict == write.verdict:
        return now_stored
    if lost and (yield from _verdict_applied(session_id, tool_call_id, write.verdict)):
        # It applied, and the entry moved on before the re-read (a re-claim of the released
        # call, another operator's verdict): that verdict's entry follows ours.
        return replace(write, version=stored.version + 1)
    raise SettleRefused(
        f"tool call {tool_call_id!r} changed while settling: it is now "
        f"{describe_entry(now_stored)}; {NOTHING_WRITTEN}",
        now_stored,
    )


def _verdict_applied(session_id: str, tool_call_id: str, nonce: str | None) -> Plan[bool]:
    """Whether the verdict ``nonce`` applied, as the call's settle trail marks it."""
    trail = yield from plan_settle_trail(session_id, tool_call_id)
    return any(e.nonce == nonce and e.decided for e in trail)


# --------------------------------------------------------------------------- the settle trail


def plan_settle_trail(
    session_id: str, tool_call_id: str | None = None, since_ms: int | None = None
) -> Plan[tuple[SettleAuditEntry, ...]]:
    """The session's settle entries (one call's with ``tool_call_id``; from ``since_ms`` on),
    each marked ``decided`` when its verdict applied (:func:`settle_decided`, which reads each
    call's ledger entry once)."""
    keys = yield ListRecords(session_id, SETTLE_AUDIT_PREFIX)
    stored: list[tuple[str, object]] = []
    for key in keys:
        record = yield LoadRecord(session_id, key)
        if record is not None:
            stored.append((key, record[1]))
    entries = read_settle_entries(session_id, stored)
    if tool_call_id is not None:
        entries = [e for e in entries if e.tool_call_id == tool_call_id]
    verdicts = yield from _verdicts(session_id, {e.tool_call_id for e in entries})
    marked = settle_decided(entries, verdicts)
    return tuple(e for e in marked if since_ms is None or e.at_ms >= since_ms)


def _verdicts(session_id: str, calls: set[str]) -> Plan[dict[str, str | None]]:
    """The verdict nonce each call's ledger entry carries now (one read a call)."""
    verdicts: dict[str, str | None] = {}
    for call in sorted(calls):
        try:
            ledger = yield from _load(session_id, ledger_key(call))
        except ConfigError:  # an unreadable ledger entry names no verdict
            ledger = None
        verdicts[call] = None if ledger is None else ledger.verdict
    return verdicts


def plan_mark_settles(
    session_id: str, entries: list[SettleAuditEntry]
) -> Plan[list[SettleAuditEntry]]:
    """Some of the session's settle entries (a page of the audit index, ADR-0139), in the same
    order, each marked ``decided`` as :func:`plan_settle_trail` marks it, without reading the
    session's other settles: per call one ledger read, one listing of the call's entry keys,
    and a read of each entry keyed after the lowest one given (only a later attempt can follow
    a verdict, :func:`settle_decided`; keys sort by version)."""
    verdicts = yield from _verdicts(session_id, {e.tool_call_id for e in entries})
    given = {_settle_key(e) for e in entries}
    known = list(entries)
    for call in sorted(verdicts):
        lowest = min(_settle_key(e) for e in entries if e.tool_call_id == call)
        nonce = next(e.nonce for e in entries if _settle_key(e) == lowest)
        prefix = lowest[: lowest.rindex(":", 0, len(lowest) - len(nonce) - 1) + 1]
        for key in (yield ListRecords(session_id, prefix)):
            if key > lowest and key not in given:
                record = yield LoadRecord(session_id, key)
                if record is not None:
                    known += read_settle_entries(session_id, [(key, record[1])])
    return settle_decided(known, verdicts)[: len(entries)]  # marked in order, given ones first


def _settle_key(entry: SettleAuditEntry) -> str:
    return settle_audit_key(ledger_key(entry.tool_call_id), entry.version, entry.nonce)


def _trail_plan(
    storage: Any, session_id: object, tool_call_id: object, since_ms: object
) -> Plan[tuple[SettleAuditEntry, ...]]:
    """The plan, every argument checked first (nothing is read on a refusal)."""
    require_records(storage)
    sid = check_session_id(session_id)
    if tool_call_id is not None and not isinstance(tool_call_id, str):
        raise ConfigError(f"tool_call_id must be a str or None, got {type(tool_call_id).__name__}.")
    if since_ms is not None and (isinstance(since_ms, bool) or not isinstance(since_ms, int)):
        raise ConfigError(f"since_ms must be an int (epoch ms) or None, got {since_ms!r}.")
    return plan_settle_trail(sid, tool_call_id, since_ms)


def settle_trail(
    storage: Any, session_id: str, *, tool_call_id: str | None = None, since_ms: int | None = None
) -> tuple[SettleAuditEntry, ...]:
    """Who settled which unknown execution of the session (one call's with ``tool_call_id``;
    from ``since_ms`` on): every attempt, its verdict, and whether it applied (ADR-0136).

    ``ConfigError`` for a storage without records or bad arguments, before any read.
    """
    return run_sync(_trail_plan(storage, session_id, tool_call_id, since_ms), Ports(storage))


async def settle_trail_async(
    storage: Any, session_id: str, *, tool_call_id: str | None = None, since_ms: int | None = None
) -> tuple[SettleAuditEntry, ...]:
    """Who settled which unknown execution of the session (one call's with ``tool_call_id``;
    from ``since_ms`` on): every attempt, its verdict, and whether it applied (ADR-0136).

    ``ConfigError`` for a storage without records or bad arguments, before any read.
    """
    return await run_async(
        _trail_plan(storage, session_id, tool_call_id, since_ms), Ports(asyncio_records(storage))
    )


# --------------------------------------------------------------------------- the facades


class _LedgerBase:
    def __init__(
        self,
        storage: Any,
        session_id: str,
        *,
        owner: str | None = None,
        clock: Callable[[], int] = now_ms,
        encode: Callable[[Any], Any] = default_encode,
    ) -> None:
        self.storage = require_records(storage)
        #: The storage as this ledger's driver calls it (adapted for the asyncio one).
        self._io = self._records(self.storage)
        self.session_id = check_session_id(session_id)
        self.owner = owner or default_owner()
        self._clock = clock
        self._encode = encode

    def _execute(
        self,
        tool_call_id: str,
        tool: str,
        args: Mapping[str, Any] | str | None,
        idempotent: bool,
        declined: tuple[type[BaseException], ...] = (),
    ) -> Plan[Execution]:
        request = ClaimRequest(
            tool_call_id=tool_call_id,
            tool=tool,
            args_digest=args_digest(args),
            owner=self.owner,
            claim=secrets.token_hex(16),
            now_ms=self._clock(),
            idempotent=idempotent,
            declined=declined,
        )
        return plan_execute(self.session_id, request, clock=self._clock, encode=self._encode)

    def _settle(
        self,
        tool_call_id: str,
        ran: bool,
        result: Any,
        operator: str | None,
        reason: str | None,
        via: str,
    ) -> Plan[LedgerEntry]:
        settler = check_settler(operator, via, reason)  # before anything is read
        return plan_settle(
            self.session_id,
            tool_call_id,
            ran=ran,
            result=result,
            operator=operator or self.owner,
            clock=self._clock,
            settler=settler,
            reason=reason,
        )

    def _settle_unknown(
        self,
        tool_call_id: str,
        ran: bool,
        result: Any,
        operator: str | None,
        reason: str | None,
        via: str,
    ) -> Plan[LedgerEntry]:
        settler = check_settler(operator, via, reason)  # before anything is read
        return plan_settle_unknown(
            self.session_id,
            tool_call_id,
            ran=ran,
            result=result,
            operator=operator or self.owner,
            now_ms=self._clock(),
            settler=settler,
            reason=reason,
        )

    @staticmethod
    def _records(storage: Any) -> Any:
        return storage


class ToolLedger(_LedgerBase):
    """The ledger of one session over a sync ``RecordStorage``.

    ``owner`` names this process in the claims it writes (default ``host:pid``); ``encode``
    turns a body's value into the JSON that is recorded and replayed.
    """

    def execute(
        self,
        tool_call_id: str,
        tool: str,
        args: Mapping[str, Any] | str | None,
        body: Callable[[], T],
        *,
        idempotent: bool = False,
        declined: tuple[type[BaseException], ...] = (),
    ) -> Execution:
        """Run ``body`` at most once for ``tool_call_id``; a repeat replays the recorded result.

        Raises :class:`ExecutionUnknown` when another claim holds the call with an unknown
        outcome (unless ``idempotent``), and re-raises the body's own exception once recorded.
        An exception of a ``declined`` type means the body declined to act: the claim is
        released (a later call may run it) and the exception re-raised.
        """
        if inspect.iscoroutinefunction(body):
            raise ConfigError(ASYNC_BODY)
        return run_sync(
            self._execute(tool_call_id, tool, args, idempotent, declined),
            Ports(self._io, body=body),
        )

    def get(self, tool_call_id: str) -> LedgerEntry | None:
        return run_sync(plan_get(self.session_id, tool_call_id), Ports(self._io))

    def entries(self) -> tuple[LedgerEntry, ...]:
        return run_sync(plan_entries(self.session_id), Ports(self._io))

    def unknown(self) -> tuple[LedgerEntry, ...]:
        """Entries claimed and never finished (``execution_unknown`` for operators)."""
        return run_sync(plan_unknown(self.session_id), Ports(self._io))

    def settle(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> LedgerEntry:
        """Settle an unknown execution: it ``ran`` (with ``result``), or it did not (released).

        ``operator`` (the principal, named in the audit entry written first; ADR-0136) and
        ``reason`` are recorded with ``via`` (``api``, ``inbox`` or ``cli``)."""
        return run_sync(
            self._settle(tool_call_id, ran, result, operator, reason, via), Ports(self._io)
        )

    def settle_unknown(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> LedgerEntry:
        """Settle only if the outcome is still unknown, in one CAS; else :class:`SettleRefused`.

        Audited as :meth:`settle` is, before the compare-and-set."""
        return run_sync(
            self._settle_unknown(tool_call_id, ran, result, operator, reason, via), Ports(self._io)
        )


class AsyncToolLedger(_LedgerBase):
    """The asyncio twin of :class:`ToolLedger`: async or sync storage, async or sync body.

    A sync storage is adapted here, once (its calls block the loop while they run), so the
    asyncio driver refuses any port that is not asyncio (ADR-0121).
    """

    _records = staticmethod(asyncio_records)

    async def execute(
        self,
        tool_call_id: str,
        tool: str,
        args: Mapping[str, Any] | str | None,
        body: Callable[[], Awaitable[T] | T],
        *,
        idempotent: bool = False,
        declined: tuple[type[BaseException], ...] = (),
    ) -> Execution:
        """Run ``body`` at most once for ``tool_call_id``; a repeat replays the recorded result.

        Raises :class:`ExecutionUnknown` when another claim holds the call with an unknown
        outcome (unless ``idempotent``), and re-raises the body's own exception once recorded.
        An exception of a ``declined`` type means the body declined to act: the claim is
        released (a later call may run it) and the exception re-raised.
        """
        return await run_async(
            self._execute(tool_call_id, tool, args, idempotent, declined),
            Ports(self._io, body=body),
        )

    async def get(self, tool_call_id: str) -> LedgerEntry | None:
        return await run_async(plan_get(self.session_id, tool_call_id), Ports(self._io))

    async def entries(self) -> tuple[LedgerEntry, ...]:
        return await run_async(plan_entries(self.session_id), Ports(self._io))

    async def unknown(self) -> tuple[LedgerEntry, ...]:
        """Entries claimed and never finished (``execution_unknown`` for operators)."""
        return await run_async(plan_unknown(self.session_id), Ports(self._io))

    async def settle(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> LedgerEntry:
        """Settle an unknown execution: it ``ran`` (with ``result``), or it did not (released).

        ``operator`` (the principal, named in the audit entry written first; ADR-0136) and
        ``reason`` are recorded with ``via`` (``api``, ``inbox`` or ``cli``)."""
        return await run_async(
            self._settle(tool_call_id, ran, result, operator, reason, via), Ports(self._io)
        )

    async def settle_unknown(
        self,
        tool_call_id: str,
        *,
        ran: bool,
        result: Any = None,
        operator: str | None = None,
        reason: str | None = None,
        via: str = "api",
    ) -> LedgerEntry:
        """Settle only if the outcome is still unknown, in one CAS; else :class:`SettleRefused`.

        Audited as :meth:`settle` is, before the compare-and-set."""
        return await run_async(
            self._settle_unknown(tool_call_id, ran, result, operator, reason, via), Ports(self._io)
        )
