"""The I/O a session operation asks for, as plain values (sans-I/O).

Every operation is written once, as a *plan*: a generator that yields these effects and
receives their results (or has the effect's exception thrown into it). Two drivers execute
them, one sync and one asyncio (:mod:`akchat_fsm.session.drivers`); a test can also step a
plan effect by effect, which is how the stateful suites interleave clients and inject crashes
between any two steps.

The save and upstream effects are the core's own (:mod:`akchat_fsm.core.effects`), under the
same names; the shell adds the reads (storage, memory) and observer delivery. The ledger and the
agent bridges (:mod:`akchat_fsm.integrations`) plan with the same vocabulary, run by the same
drivers: the record effects (the ``RecordStorage`` capability), the tool body, and the typed
calls a bridge makes on its runtime (ADR-0121). They are plain values here, so
one ``match`` in the driver covers every effect any plan can yield.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from ..core.effects import CallApprove, CallDeny, ProposeUpstream, SaveSnapshot
from .observers import SessionEvent

__all__ = [
    "AskHost",
    "BodyOutcome",
    "BridgeEffect",
    "CallApprove",
    "CallDeny",
    "DeleteRecord",
    "Effect",
    "Emit",
    "ExpireListed",
    "Expired",
    "ListAudit",
    "ListPending",
    "ListProcessing",
    "ListRecords",
    "Load",
    "LoadRecord",
    "MemoryRead",
    "Plan",
    "PortEffect",
    "Progress",
    "ProposeUpstream",
    "ReadMemory",
    "ReconcileListed",
    "ResumeRuntime",
    "RunBody",
    "SaveRecord",
    "SaveSnapshot",
    "SaveSnapshotCreatingRecords",
    "StartRuntime",
    "StorageEffect",
    "SweepEffect",
]

T = TypeVar("T")

# The core's effects, each under its one name, and what a driver answers for each:
# SaveSnapshot → ``storage.save(snapshot, expected_cursor)``: ``True`` or ``False`` (conflict);
# ProposeUpstream → ``upstream.propose_tool_call(id, name, args)``: the call upstream returned;
# CallApprove / CallDeny → ``upstream.approve`` / ``upstream.deny``: the side effect a claim
# protects.


@dataclass(frozen=True)
class Load:
    """``storage.load(session_id)`` → the stored value (or ``None``)."""

    session_id: str


@dataclass(frozen=True)
class ReadMemory:
    """Ask memory for the status of ``tool_call_ids`` (used only by reconciliation).

    → :class:`MemoryRead`: ``memory.tool_call_statuses(ids)`` when the memory has it (a
    :class:`~akchat_fsm.session.ports.ToolCallStatusMemory`), else ``memory.load()``.
    """

    tool_call_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryRead:
    """What memory answered: ``statuses`` (id → status) or a whole memory ``record``."""

    statuses: Mapping[str, object] | None = None
    record: object = None


@dataclass(frozen=True)
class Emit:
    """Deliver an observer event. Never fails: observer errors are swallowed by drivers."""

    event: SessionEvent


# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class LoadRecord:
    """``storage.load_record(session_id, key)`` → ``(version, text)`` or ``None``."""

    session_id: str
    key: str


@dataclass(frozen=True, slots=True)
class SaveRecord:
    """``storage.save_record(...)`` → ``True`` (applied) or ``False`` (definite conflict)."""

    session_id: str
    key: str
    text: str
    expected_version: int | None
    processing: bool = False


@dataclass(frozen=True, slots=True)
class SaveSnapshotCreatingRecords:
    """``storage.save_with_records(save.snapshot, save.expected_cursor, records)`` → ``True``
    (the envelope's CAS and every record's create applied, together) or ``False`` (neither:
    the cursor moved or a key exists). Yielded only on a store with ``SaveWithRecords``
    (ADR-0141); ``save`` is the core's step save, exactly as the core built it."""

    save: SaveSnapshot
    #: ``(key, text)`` of each create-only record
    records: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ListRecords:
    """``storage.list_records(session_id, prefix)`` → sorted keys."""

    session_id: str
    prefix: str


@dataclass(frozen=True, slots=True)
class DeleteRecord:
    """``storage.delete_record(session_id, key)`` → ``None`` (idempotent: gone either way)."""

    session_id: str
    key: str


@dataclass(frozen=True, slots=True)
class RunBody:
    """Run the guarded tool body once; the result is a :class:`BodyOutcome`, never an error."""


@dataclass(frozen=True, slots=True)
class BodyOutcome:
    """What the body did: returned ``value``, or raised ``error``."""

    value: Any = None
    error: BaseException | None = None


# --------------------------------------------------------------------------- bridge calls
# A bridge's calls on its agent runtime (start or resume). Their exceptions reach the plan
# unmapped: only the plan knows what a failure leaves behind. A bridge's calls on its session
# are no effects: a bridge plan composes the session's own plans (``yield from``), so their
# loads, saves and events are effects of the bridge plan itself (ADR-0121).


@dataclass(frozen=True, slots=True)
class StartRuntime:
    """``runtime.start(*args, **kwargs)`` → the runtime's result for a new run."""

    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class ResumeRuntime:
    """``runtime.resume(run, decisions, guard)`` → the runtime's result for a continuation."""

    run: Any
    decisions: tuple[Any, ...]
    guard: Any


# --------------------------------------------------------------------------- the sweep
# ``reconcile_all``'s steps (:mod:`akchat_fsm.session.sweep`): the processing and pending index
# reads, and
# the host's side of each listed session, performed by the sweep's own port of its flavour.


@dataclass(frozen=True, slots=True)
class ListProcessing:
    """``storage.list_processing(written_before_ms=..., limit=...)`` → the listed sessions."""

    written_before_ms: int
    limit: int


@dataclass(frozen=True, slots=True)
class ListPending:
    """``storage.list_pending(expiring_before_ms=..., after=..., limit=...)`` (expiry order)
    → one :class:`~akchat_fsm.storage.port.PendingPage` of confirmations past their expiry."""

    expiring_before_ms: int
    after: str | None
    limit: int


@dataclass(frozen=True, slots=True)
class ListAudit:
    """``storage.list_audit(since_ms=..., after=..., limit=...)`` → one
    :class:`~akchat_fsm.storage.port.AuditRefPage` of audit records across sessions."""

    since_ms: int | None
    after: str | None
    limit: int


@dataclass(frozen=True, slots=True)
class AskHost:
    """``ports_for(session_id)``: what to reconcile this session with, or ``None``."""

    session_id: str


@dataclass(frozen=True, slots=True)
class ReconcileListed:
    """Resume a listed session with the host's definition, then ``reconcile`` it with the
    host's memory and upstream (or its bridge): the public calls, so every check they make
    applies. → the reconcile outcomes, or the bridge's report."""

    session_id: str
    ports: Any
    release_untouched: bool
    clock: Callable[[], int]


@dataclass(frozen=True, slots=True)
class ExpireListed:
    """Resume a session the pending index listed with confirmations past their expiry, then
    expire them with the host's bridge (``expire_due()``: a bridged run continues with the
    expired answer) or its upstream (the session's ``expire_due``, audited ``via="sweep"``):
    the public calls. → :class:`Expired`."""

    session_id: str
    ports: Any
    clock: Callable[[], int]


@dataclass(frozen=True, slots=True)
class Expired:
    """What :class:`ExpireListed` did: the records it expired, and, through a bridge, the
    runs it continued (each with ``run_id`` and ``next_step``)."""

    records: tuple[Any, ...]
    runs: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Progress:
    """``progress(session, done, total)``: tell the caller (a progress bar) one is done."""

    session: Any
    done: int
    total: int


#: What a driver performs through ``storage``; its failures are mapped once (reads changed
#: nothing, writes may have applied).
StorageEffect: TypeAlias = (
    Load
    | SaveSnapshot
    | SaveSnapshotCreatingRecords
    | LoadRecord
    | SaveRecord
    | DeleteRecord
    | ListRecords
    | ListProcessing
    | ListPending
    | ListAudit
)
BridgeEffect: TypeAlias = StartRuntime | ResumeRuntime
SweepEffect: TypeAlias = AskHost | ReconcileListed | ExpireListed | Progress
#: What a driver performs through a port: everything but ``Emit`` and ``RunBody``.
PortEffect: TypeAlias = (
    StorageEffect
    | ProposeUpstream
    | CallApprove
    | CallDeny
    | ReadMemory
    | BridgeEffect
    | SweepEffect
)
Effect: TypeAlias = PortEffect | Emit | RunBody
#: A plan yields effects, receives their results, and returns ``T``.
Plan: TypeAlias = Generator[Effect, Any, T]
