"""``reconcile_all``: find the sessions a crash left holding claims, and reconcile each one.

After a crash nobody knows which sessions hold ``approving`` / ``rejecting`` / ``expiring``
records. A storage with the :class:`~akchat_fsm.storage.port.ProcessingIndex` capability lists
them (with the time of their last write) from an index kept in the same compare-and-set write
as the envelope, so the sweep never loads every envelope. For each session older than the
threshold, the host says what to reconcile it with (:class:`SweepPorts`: its definition, its
chat memory, its upstream); the session is resumed and :func:`~akchat_fsm.session.reconcile`
settles its records. One session failing does not stop the others: its typed error is in the
:class:`SweepReport`.

Sessions run by an agent-runtime bridge (``akchat_fsm.integrations``) also hold processing
records beside the envelope: a tool-execution ledger entry claimed and never finished, or a
run's continuation whose claimant is gone (ADR-0100). ``SweepPorts.bridge`` lets the host
reconcile such a session through its bridge (which settles the confirmations from the ledger,
recovers continuations and names the executions whose outcome is unknown). Whatever still holds
a session after its reconcile is found by listing the index once more at the end of the sweep:
such a session is reported ``execution_unknown``, never ``settled`` (docs/reconciliation.md,
ADR-0102).

A session whose only work is a confirmation past its expiry holds no processing record. On a
storage that also has the :class:`~akchat_fsm.storage.port.PendingIndex` capability the sweep
lists those too (``list_pending(expiring_before_ms=now)``, paged, at most ``limit`` sessions)
and expires them through the host's bridge (``expire_due()``: the run continues with the
expired answer) or upstream (the session's ``expire_due``); ``older_than_ms`` does not delay
an expiry, which is its own time condition. Without that capability nothing is listed for
expiry (docs/reconciliation.md).

The sweep is written once, as a plan of effects (list the indexes, ask the host, reconcile or
expire one session, report progress: :mod:`akchat_fsm.session.effects`); :func:`reconcile_all` and
:func:`reconcile_all_async` run it on the drivers every plan runs on (ADR-0060, ADR-0094,
ADR-0121), with the sweep's host side as a port of their flavour (``_Sweeper``). Reconciling
one session is the public ``resume_chat_session`` + ``reconcile`` pair
(or their asyncio twins), so its checks and rules are exactly those of a hand-written loop.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeAlias

from ..errors import AkchatError, ConfigError
from ..storage.port import (
    AsyncSessionStorage,
    PendingApproval,
    PendingPage,
    ProcessingSession,
    SessionStorage,
)
from ..wire.enums import ConfirmationStatus
from ._confirm import ReconcileOutcome
from .definition import ChatDefinition
from .drivers import Ports, run_async, run_sync
from .effects import (
    AskHost,
    Effect,
    Expired,
    ExpireListed,
    ListPending,
    ListProcessing,
    Progress,
    ReconcileListed,
)
from .ports import AsyncChatMemory, AsyncUpstreamChat, ChatMemory, UpstreamChat
from .session import (
    AsyncChatSession,
    ChatSession,
    default_clock,
    resume_chat_session,
    resume_chat_session_async,
)

__all__ = [
    "DEFAULT_SWEEP_LIMIT",
    "AsyncSessionBridge",
    "AsyncSweepPorts",
    "SessionBridge",
    "SweepPorts",
    "SweepReport",
    "SweptSession",
    "reconcile_all",
    "reconcile_all_async",
]

#: Sessions one sweep handles at most (the index lists the oldest first).
DEFAULT_SWEEP_LIMIT = 1000

NO_INDEX = (
    "reconcile_all needs a storage with the ProcessingIndex capability (list_processing); "
    "{kind} has none."
)
#: Read from the method's definition, before any call: so the message says nothing ran.
WRONG_FLAVOUR = "{kind}.{name} is {what}; nothing was called: use {right} for this storage."
SweepStatus = Literal[
    "settled", "expired", "unsettled", "waiting", "execution_unknown", "failed", "skipped"
]
#: Reconcile actions that leave a record for a later sweep (the session stays listed).
LEFT_AS_IS = frozenset({"unknown", "refused"})
NO_MEMORY = "SweepPorts for {sid!r} has neither a memory nor a bridge to reconcile with."
#: ``list_pending`` takes at most this many rows per page (PendingIndex).
PENDING_PAGE_MAX = 1000


class BridgeSweepReport(Protocol):
    """What a bridge's ``reconcile()`` returns, as far as the sweep reads it
    (``akchat_fsm.integrations``' ``BridgeReport``)."""

    @property
    def confirmations(self) -> Sequence[ReconcileOutcome]: ...

    @property
    def execution_unknown(self) -> Sequence[Any]:
        """Ledger entries (each with a ``tool_call_id``) whose outcome is unknown."""

    @property
    def runs(self) -> Sequence[Any]:
        """Each run the bridge continued or found waiting (``run_id``, ``status``,
        ``next_step``: what a person or the host must do, ``None`` once completed)."""


class SessionBridge(Protocol):
    """A bridge over one resumed session (sync): ``reconcile()`` settles it; ``expire_due()``
    expires its due confirmations and continues the runs they let go on (each returned run
    has ``run_id`` and ``next_step``)."""

    def reconcile(self) -> BridgeSweepReport: ...

    def expire_due(self) -> Sequence[Any]: ...


class AsyncSessionBridge(Protocol):
    """The asyncio twin of :class:`SessionBridge`."""

    async def reconcile(self) -> BridgeSweepReport: ...

    async def expire_due(self) -> Sequence[Any]: ...


@dataclass(frozen=True)
class SweepPorts:
    """What the host reconciles one session with (sync): the definition it was resumed with,
    its chat memory, and its upstream (``None``: untouched claims are left as they are, or
    released with ``release_untouched=True``; nothing can be re-issued).

    ``bridge``: for a session an agent-runtime bridge runs, ``bridge(session)`` returns that
    bridge over the resumed session, and the sweep calls its ``reconcile()`` instead of the
    session's (``memory`` and ``upstream`` are then unused: the bridge reads the ledger), and
    its ``expire_due()`` for confirmations past their expiry. Without a bridge, those are
    expired through ``upstream`` (its ``deny``); with no upstream either they are left
    pending (:attr:`SweptSession.still_due`).
    """

    definition: ChatDefinition
    memory: ChatMemory | None = None
    upstream: UpstreamChat | None = None
    bridge: Callable[[ChatSession], SessionBridge] | None = None


@dataclass(frozen=True)
class AsyncSweepPorts:
    """What the host reconciles one session with (asyncio): see :class:`SweepPorts`."""

    definition: ChatDefinition
    memory: AsyncChatMemory | None = None
    upstream: AsyncUpstreamChat | None = None
    bridge: Callable[[AsyncChatSession], AsyncSessionBridge] | None = None


@dataclass(frozen=True)
class SweptSession:
    """What the sweep did for one listed session.

    ``outcomes``: one :class:`ReconcileOutcome` per processing confirmation record (empty
    when the session was settled by someone else before the sweep reached it, or when only a
    record beside the envelope keeps it listed). ``execution_unknown``: the tool calls whose
    execution outcome is unknown, as the session's bridge reported them (``SweepPorts.bridge``).
    ``held``: the index still lists the session after its reconcile (a processing record beside
    the envelope: a ledger entry whose execution outcome is unknown, or a run's continuation).
    ``error``: the typed error that stopped this session (nothing after it was done for it).
    ``skipped``: the host's ``ports_for`` returned ``None`` (not its session).
    ``waiting``: ``(run id, next step)`` of each bridged run that waits for a person or the
    host (a confirmation to decide, an external result to pass): such a run stays in the
    index, because it has work left, but nothing in it is the sweep's to do (ADR-0106).
    ``last_write_ms``: the processing index's stamp; ``None`` for a session only the pending
    index listed (confirmations past their expiry, nothing processing).
    ``expired``: the tool calls whose confirmations the sweep expired (their upstream call
    denied, the records ``expired``; a bridged run continued with that answer).
    ``still_due``: the tool calls the pending index listed past their expiry that the sweep
    did not expire: the host skipped the session, or its ports have neither a bridge nor an
    upstream to deny them with.
    """

    session_id: str
    last_write_ms: int | None
    outcomes: tuple[ReconcileOutcome, ...] = ()
    error: AkchatError | None = None
    skipped: bool = False
    execution_unknown: tuple[str, ...] = ()
    held: bool = False
    waiting: tuple[tuple[str, str], ...] = ()
    expired: tuple[str, ...] = ()
    still_due: tuple[str, ...] = ()

    @property
    def status(self) -> SweepStatus:
        """``failed``, ``skipped``, ``execution_unknown`` (an execution whose outcome is
        unknown, or another processing record beside the envelope, still holds the session:
        an operator settles it, docs/reconciliation.md), ``waiting`` (a bridged run waits for
        a person or the host: :attr:`waiting` says for what), ``unsettled`` (some record left
        as it is: its tool call is not in memory, an intent the session cannot admit yet, or a
        confirmation past its expiry with nothing to deny it through: :attr:`still_due`),
        ``expired`` (settled, and the sweep expired :attr:`expired`) or ``settled``."""
        if self.error is not None:
            return "failed"
        if self.skipped:
            return "skipped"
        if self.execution_unknown or (self.held and not self.waiting):
            return "execution_unknown"
        if self.waiting:
            return "waiting"
        if self.still_due or any(o.action in LEFT_AS_IS for o in self.outcomes):
            return "unsettled"
        if self.expired:
            return "expired"
        return "settled"


@dataclass(frozen=True)
class SweepReport:
    """Everything one sweep did, oldest session first.

    ``sessions``: the processing index's, oldest first, then those only the pending index
    listed, soonest expiry first.
    ``written_before_ms``: the cut-off (sessions last written before it were listed).
    ``expiring_before_ms``: the instant confirmations were due before (the sweep's clock);
    ``None`` when the storage has no pending index, so nothing was listed for expiry.
    ``more_due``: the pending index listed due confirmations of more than ``limit`` sessions.
    ``truncated``: the processing index returned ``limit`` sessions, or more sessions than
    ``limit`` have due confirmations: more may be waiting; sweep again (settled and expired
    sessions leave the indexes) or raise ``limit``.
    """

    written_before_ms: int
    limit: int
    sessions: tuple[SweptSession, ...]
    expiring_before_ms: int | None = None
    more_due: bool = False

    @property
    def truncated(self) -> bool:
        processing = sum(1 for s in self.sessions if s.last_write_ms is not None)
        return processing >= self.limit or self.more_due

    @property
    def counts(self) -> dict[SweepStatus, int]:
        """Sessions per :attr:`SweptSession.status` (only statuses that occurred)."""
        return dict(Counter(s.status for s in self.sessions))

    @property
    def failed(self) -> tuple[SweptSession, ...]:
        return tuple(s for s in self.sessions if s.error is not None)

    @property
    def ok(self) -> bool:
        """Every listed session was reconciled without an error (skips allowed)."""
        return not self.failed


# --------------------------------------------------------------------------- the plan


_Sweep: TypeAlias = Generator[Effect, Any, SweepReport]


def _typed(exc: Exception, what: str) -> AkchatError:
    """A host callback's or adapter's untyped exception, as one of ours (mapped once, here)."""
    if isinstance(exc, AkchatError):
        return exc
    error = ConfigError(f"{what} raised {exc!r}")
    error.__cause__ = exc
    return error


def _sweep_one(
    sid: str,
    last: int | None,
    due: Sequence[PendingApproval],
    release_untouched: bool,
    clock: Callable[[], int],
    expected: type[SweepPorts | AsyncSweepPorts],
) -> Generator[Effect, Any, SweptSession]:
    """One listed session: ask the host, then resume and reconcile it (when the processing
    index listed it, ``last`` its stamp) and expire its due confirmations (when the pending
    index listed some, ``due``). Every failure is this session's own (typed, in the result);
    nothing here stops the sweep."""
    try:
        ports = yield AskHost(sid)
    except Exception as exc:
        return SweptSession(sid, last, error=_typed(exc, f"ports_for({sid!r})"))
    if ports is None:
        return SweptSession(sid, last, skipped=True, still_due=_tool_calls(due))
    if not isinstance(ports, expected):  # the other flavour, or not ports at all
        return SweptSession(
            sid,
            last,
            error=ConfigError(
                f"ports_for({sid!r}) returned {type(ports).__name__}; this sweep needs "
                f"{expected.__name__} (or None to skip the session)."
            ),
        )
    swept = SweptSession(sid, last)
    if last is not None:
        if ports.memory is None and ports.bridge is None:
            return SweptSession(sid, last, error=ConfigError(NO_MEMORY.format(sid=sid)))
        try:
            reconciled = yield ReconcileListed(sid, ports, release_untouched, clock)
        except AkchatError as exc:
            return SweptSession(sid, last, error=exc)
        outcomes, unknown, waiting = _read_reconciled(reconciled)
        swept = replace(swept, outcomes=outcomes, execution_unknown=unknown, waiting=waiting)
    if not due:
        return swept
    return (yield from _expire_one(swept, due, ports, clock))


def _tool_calls(due: Sequence[PendingApproval]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(d.tool_call_id for d in due))


def _expire_one(
    swept: SweptSession,
    due: Sequence[PendingApproval],
    ports: SweepPorts | AsyncSweepPorts,
    clock: Callable[[], int],
) -> Generator[Effect, Any, SweptSession]:
    """Expire a session's due confirmations through its bridge or its upstream."""
    if ports.bridge is None and ports.upstream is None:
        # An expiry is recorded only after upstream's deny: with nothing to deny through, the
        # records stay pending (and listed), for a sweep with an upstream or the host's own.
        return replace(swept, still_due=_tool_calls(due))
    try:
        expired: Expired = yield ExpireListed(swept.session_id, ports, clock)
    except AkchatError as exc:
        return replace(swept, error=exc)
    # A run the expiry continued replaces what its reconcile said of it (completed: gone).
    waiting = dict(swept.waiting)
    for run in expired.runs:
        step = getattr(run, "next_step", None)
        if step is None:
            waiting.pop(str(run.run_id), None)
        else:
            waiting[str(run.run_id)] = str(step)
    return replace(
        swept,
        expired=tuple(b.tool_call_id for b in expired.records),
        waiting=tuple(waiting.items()),
    )


def _read_reconciled(
    value: Any,
) -> tuple[tuple[ReconcileOutcome, ...], tuple[str, ...], tuple[tuple[str, str], ...]]:
    """A session's reconcile outcomes, or a bridge's report (outcomes, unknown executions, and
    the runs left waiting with their next step)."""
    if hasattr(value, "execution_unknown"):
        unknown = tuple(str(e.tool_call_id) for e in value.execution_unknown)
        waiting = tuple(
            (str(run.run_id), str(run.next_step))
            for run in getattr(value, "runs", ())
            if getattr(run, "next_step", None) is not None
        )
        return tuple(value.confirmations), unknown, waiting
    return tuple(value), (), ()


def _list_due(
    now_ms: int, limit: int
) -> Generator[Effect, Any, tuple[dict[str, list[PendingApproval]], bool]]:
    """The sessions holding confirmations past their expiry, soonest first, each once with its
    listed rows: at most ``limit`` sessions, paged by the pending index's keyset cursor
    (stable under concurrent writes). Also returns whether more sessions were due."""
    due: dict[str, list[PendingApproval]] = {}
    after: str | None = None
    while True:
        page: PendingPage = yield ListPending(now_ms, after, min(limit, PENDING_PAGE_MAX))
        for item in page.items:
            if item.session_id not in due and len(due) >= limit:
                return due, True
            due.setdefault(item.session_id, []).append(item)
        after = page.next_after
        if after is None:
            return due, False


#: The statuses the final listing can still turn into ``execution_unknown`` (``held``).
_FINISHED: frozenset[SweepStatus] = frozenset({"settled", "expired"})


def _plan_sweep(
    cutoff_ms: int,
    now_ms: int | None,
    limit: int,
    release_untouched: bool,
    clock: Callable[[], int],
    expected: type[SweepPorts | AsyncSweepPorts],
) -> _Sweep:
    """List the stuck sessions once, and (``now_ms``: the storage has the pending index) the
    sessions with confirmations due before ``now_ms``; then settle each session once, in that
    order, reporting progress."""
    # A failed read changed nothing (StorageUnavailable, mapped by the driver): safe to retry.
    listed: Sequence[ProcessingSession] = yield ListProcessing(cutoff_ms, limit)
    due, more_due = ({}, False) if now_ms is None else (yield from _list_due(now_ms, limit))
    visits: list[tuple[str, int | None]] = [(r.session_id, r.last_write_ms) for r in listed]
    processing = {sid for sid, _ in visits}
    visits += [(sid, None) for sid in due if sid not in processing]
    swept: list[SweptSession] = []
    for sid, last in visits:
        one = yield from _sweep_one(sid, last, due.get(sid, ()), release_untouched, clock, expected)
        swept.append(one)
        yield Progress(one, len(swept), len(visits))
    if any(s.status in _FINISHED for s in swept):
        # A session is settled only if the index let go of it: what still holds one is a
        # processing record beside the envelope that its reconcile could not settle.
        still = {row.session_id for row in (yield ListProcessing(cutoff_ms, limit))}
        swept = [
            replace(s, held=True) if s.status in _FINISHED and s.session_id in still else s
            for s in swept
        ]
    return SweepReport(cutoff_ms, limit, tuple(swept), now_ms, more_due)


# --------------------------------------------------------------------------- arguments


def _flavour(storage: object, *, want_async: bool) -> bool:
    """Refuse a storage without the index, or of the other flavour, before any I/O. Returns
    whether it also has the pending index (of the same flavour) to list due confirmations."""
    kind = type(storage).__name__
    if not callable(getattr(storage, "list_processing", None)):
        raise ConfigError(NO_INDEX.format(kind=kind))
    for name in ("list_processing", "list_pending"):
        method = getattr(storage, name, None)
        if not callable(method):
            return False  # no pending index: the sweep lists nothing for expiry
        is_async = inspect.iscoroutinefunction(method)
        if is_async and not want_async:
            raise ConfigError(
                WRONG_FLAVOUR.format(
                    kind=kind,
                    name=name,
                    what="a coroutine function (async def)",
                    right="reconcile_all_async",
                )
            )
        if want_async and not is_async:
            what = "a plain function (def, not async def)"
            raise ConfigError(
                WRONG_FLAVOUR.format(kind=kind, name=name, what=what, right="reconcile_all")
            )
    return True


def _checked(older_than_ms: object, limit: object) -> None:
    for name, value, least in (("older_than_ms", older_than_ms, 0), ("limit", limit, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ConfigError(f"{name} must be an int >= {least}, got {value!r}.")


# --------------------------------------------------------------------------- drivers

PortsFor = Callable[[str], SweepPorts | None]
AsyncPortsFor = Callable[[str], AsyncSweepPorts | Awaitable[AsyncSweepPorts | None] | None]
ProgressFn = Callable[[SweptSession, int, int], None]


def _sweep(
    storage: Any,
    ports_for: Callable[[str], Any],
    older_than_ms: int,
    limit: int,
    release_untouched: bool,
    clock: Callable[[], int],
    progress: ProgressFn | None,
    *,
    asyncio: bool,
) -> tuple[_Sweep, Ports]:
    """Both sweeps, written once: the plan, and the ports its driver performs it through.
    Every argument is checked here, before any I/O."""
    pending = _flavour(storage, want_async=asyncio)
    _checked(older_than_ms, limit)
    # Expiry is its own time condition (each record's ``expiresAt``), so ``older_than_ms``
    # does not delay it: a decision racing the sweep's expiry loses or wins one CAS.
    now = clock()
    expected = AsyncSweepPorts if asyncio else SweepPorts
    sweeper = (_AsyncSweeper if asyncio else _Sweeper)(storage, ports_for, progress)
    plan = _plan_sweep(
        now - older_than_ms,
        now if pending else None,
        limit,
        release_untouched,
        clock,
        expected,
    )
    return plan, Ports(storage, sweeper=sweeper)


def _pending_tokens(session: ChatSession | AsyncChatSession) -> frozenset[str]:
    return frozenset(
        b.token for b in session.confirmations if b.status is ConfirmationStatus.PENDING
    )


def _expired_among(
    session: ChatSession | AsyncChatSession, tokens: frozenset[str]
) -> tuple[Any, ...]:
    """The records a bridge's ``expire_due`` expired (it returns the runs it continued): those
    pending when the session was resumed and ``expired`` now, on the session it shares."""
    return tuple(
        b
        for b in session.confirmations
        if b.token in tokens and b.status is ConfirmationStatus.EXPIRED
    )


class _Sweeper:
    """The sync sweep's host side: the host's callbacks, and the public session calls that
    reconcile one listed session."""

    def __init__(
        self, storage: Any, ports_for: Callable[[str], Any], progress: ProgressFn | None
    ) -> None:
        self.storage, self.ports_for, self.report = storage, ports_for, progress

    def ask(self, session_id: str) -> Any:
        return self.ports_for(session_id)

    def reconcile(self, step: ReconcileListed) -> Any:
        ports = step.ports
        session = resume_chat_session(
            ports.definition, session_id=step.session_id, storage=self.storage, clock=step.clock
        )
        if ports.bridge is not None:
            return ports.bridge(session).reconcile()
        return session.reconcile(
            ports.memory, upstream=ports.upstream, release_untouched=step.release_untouched
        )

    def expire(self, step: ExpireListed) -> Expired:
        ports = step.ports
        session = resume_chat_session(
            ports.definition, session_id=step.session_id, storage=self.storage, clock=step.clock
        )
        if ports.bridge is not None:
            pending = _pending_tokens(session)
            runs = ports.bridge(session).expire_due()
            return Expired(_expired_among(session, pending), tuple(runs))
        return Expired(session.confirmations_for(ports.upstream).expire_due())

    def progress(self, step: Progress) -> None:
        if self.report is not None:
            self.report(step.session, step.done, step.total)


class _AsyncSweeper(_Sweeper):
    """The asyncio sweep's host side (its ``ports_for`` may be a plain or an ``async``
    function: it is the host's code, not a port, so either is awaited or taken as is)."""

    async def ask(self, session_id: str) -> Any:
        found = self.ports_for(session_id)
        return (await found) if inspect.isawaitable(found) else found

    async def reconcile(self, step: ReconcileListed) -> Any:
        ports = step.ports
        session = await resume_chat_session_async(
            ports.definition, session_id=step.session_id, storage=self.storage, clock=step.clock
        )
        if ports.bridge is not None:
            return await ports.bridge(session).reconcile()
        return await session.reconcile(
            ports.memory, upstream=ports.upstream, release_untouched=step.release_untouched
        )

    async def expire(self, step: ExpireListed) -> Expired:  # type: ignore[override]
        ports = step.ports
        session = await resume_chat_session_async(
            ports.definition, session_id=step.session_id, storage=self.storage, clock=step.clock
        )
        if ports.bridge is not None:
            pending = _pending_tokens(session)
            runs = await ports.bridge(session).expire_due()
            return Expired(_expired_among(session, pending), tuple(runs))
        return Expired(await session.confirmations_for(ports.upstream).expire_due())

    async def progress(self, step: Progress) -> None:  # type: ignore[override]
        super().progress(step)


def reconcile_all(
    storage: SessionStorage,
    ports_for: PortsFor,
    *,
    older_than_ms: int,
    limit: int = DEFAULT_SWEEP_LIMIT,
    release_untouched: bool = False,
    clock: Callable[[], int] = default_clock,
    progress: ProgressFn | None = None,
) -> SweepReport:
    """Reconcile every session whose processing records were last written more than
    ``older_than_ms`` ago (strictly before ``clock() - older_than_ms``, the index's
    ``written_before_ms``: at 0, a write in the current millisecond waits for the next
    sweep; at most ``limit``, oldest first), then expire the confirmations due before
    ``clock()`` (at most ``limit`` more sessions, soonest first; a storage with the pending
    index only).

    ``storage``: an adapter of this function's flavour with the ``ProcessingIndex``
    capability (``ConfigError`` naming it otherwise, before any I/O). ``ports_for(session_id)``:
    a :class:`SweepPorts` for the session (an :class:`AsyncSweepPorts` for
    ``reconcile_all_async``, whose ``ports_for`` may be an ``async`` function), or ``None`` to
    skip it. ``clock``: epoch ms; it sets the cut-off against
    the adapter's wall-clock write stamps and is the resumed sessions' clock.
    ``progress(session, done, total)`` is called after each session. Never raises for one
    session's failure (see :class:`SweptSession`); raises only if an index cannot be read.
    """
    return run_sync(
        *_sweep(
            storage,
            ports_for,
            older_than_ms,
            limit,
            release_untouched,
            clock,
            progress,
            asyncio=False,
        )
    )


async def reconcile_all_async(
    storage: AsyncSessionStorage,
    ports_for: AsyncPortsFor,
    *,
    older_than_ms: int,
    limit: int = DEFAULT_SWEEP_LIMIT,
    release_untouched: bool = False,
    clock: Callable[[], int] = default_clock,
    progress: ProgressFn | None = None,
) -> SweepReport:
    """Reconcile every session whose processing records were last written more than
    ``older_than_ms`` ago (strictly before ``clock() - older_than_ms``, the index's
    ``written_before_ms``: at 0, a write in the current millisecond waits for the next
    sweep; at most ``limit``, oldest first), then expire the confirmations due before
    ``clock()`` (at most ``limit`` more sessions, soonest first; a storage with the pending
    index only).

    ``storage``: an adapter of this function's flavour with the ``ProcessingIndex``
    capability (``ConfigError`` naming it otherwise, before any I/O). ``ports_for(session_id)``:
    a :class:`SweepPorts` for the session (an :class:`AsyncSweepPorts` for
    ``reconcile_all_async``, whose ``ports_for`` may be an ``async`` function), or ``None`` to
    skip it. ``clock``: epoch ms; it sets the cut-off against
    the adapter's wall-clock write stamps and is the resumed sessions' clock.
    ``progress(session, done, total)`` is called after each session. Never raises for one
    session's failure (see :class:`SweptSession`); raises only if an index cannot be read.
    """
    return await run_async(
        *_sweep(
            storage,
            ports_for,
            older_than_ms,
            limit,
            release_untouched,
            clock,
            progress,
            asyncio=True,
        )
    )
