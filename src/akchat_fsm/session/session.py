"""``ChatSession`` / ``AsyncChatSession`` and their confirmation coordinators: thin shells.

Each public method builds a plan (:mod:`._ops`, :mod:`._confirm`) and hands it to a driver;
the sync and async classes differ only in which driver runs it. One session object serialises
its own operations (a lock), like the reference's per-session persist queue.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from .. import core
from ..errors import ConfigError
from ..machines.confirmation import ConfirmationEvent
from ..storage.capabilities import keeps_records, saves_with_records
from ..wire.digest import EditedArguments
from ..wire.enums import DecisionKind, TurnOutcome
from ..wire.session import ConfirmationBinding, RouteDecision, SessionSnapshot
from . import _confirm, _ops
from ._audit import Decider, check_decider
from ._flavour import Flavour, check_memory, check_storage, check_upstream
from ._state import SessionHolder, reload
from .definition import ChatDefinition
from .drivers import NO_MEMORY, NO_UPSTREAM, Ports, run_async, run_sync
from .effects import Plan
from .observers import Observer
from .ports import (
    AsyncChatMemory,
    AsyncToolCallStatusMemory,
    AsyncUpstreamChat,
    ChatMemory,
    ToolCallStatusMemory,
    UpstreamChat,
)

if TYPE_CHECKING:
    from ..storage.port import AsyncSessionStorage, SessionStorage

#: What the sync API reads tool-call statuses from: either port (statuses preferred).
Memory: TypeAlias = ChatMemory | ToolCallStatusMemory
#: The asyncio twin of :data:`Memory`.
AsyncMemory: TypeAlias = AsyncChatMemory | AsyncToolCallStatusMemory

__all__ = [
    "AsyncChatSession",
    "AsyncConfirmationCoordinator",
    "AsyncMemory",
    "ChatSession",
    "ConfirmationCoordinator",
    "Memory",
    "ReconcileOutcome",
    "default_clock",
    "resolve_chat_session",
    "resume_chat_session",
    "resume_chat_session_async",
]

T = TypeVar("T")
ReconcileOutcome = _confirm.ReconcileOutcome
PREPARED_INCOMPATIBLE = "Prepared session is incompatible with this chat definition."


def default_clock() -> int:
    """Wall-clock epoch milliseconds (inject your own ``clock`` for tests)."""
    return time.time_ns() // 1_000_000


def default_confirmation_id() -> str:
    """A random, unguessable id suffix (the core's 128 bits); a correlation handle, not a secret."""
    return core.random_suffix()


class _SessionBase:
    """What both flavours share: the state, the ports, the read-only views and plan builders."""

    _flavour: Flavour = "sync"

    def __init__(self, holder: SessionHolder, ports: Ports) -> None:
        self._holder = holder
        self._ports = ports
        holder.observed = bool(ports.observers)
        # The audited claim writes its entry inside the claim where the store can (ADR-0141).
        holder.atomic_records = saves_with_records(ports.storage)

    # -- read-only views -----------------------------------------------------------------
    @property
    def session_id(self) -> str:
        return self._holder.session_id

    @property
    def definition(self) -> ChatDefinition:
        return self._holder.definition

    @property
    def cursor(self) -> int:
        """The last cursor storage confirmed (0 for a session never saved)."""
        return self._holder.cursor

    @property
    def exists(self) -> bool:
        """Whether anything is stored yet (the next save is create-only when ``False``)."""
        return self._holder.exists

    @property
    def snapshot(self) -> SessionSnapshot:
        """The envelope as storage last confirmed it (or the unsaved fresh one)."""
        return self._holder.snapshot

    @property
    def conversation_state(self) -> str | None:
        return self._holder.conversation_state

    @property
    def confirmations(self) -> tuple[ConfirmationBinding, ...]:
        return self._holder.snapshot.confirmations

    def get_by_tool_call(self, tool_call_id: str) -> ConfirmationBinding | None:
        """The binding for an upstream tool-call id, if this session holds one."""
        for binding in self._holder.snapshot.confirmations:
            if binding.tool_call_id == tool_call_id:
                return binding
        return None

    def add_observer(self, observer: Observer) -> None:
        """Receive one :class:`SessionEvent` per durable transition from now on."""
        self._ports.observers = (*self._ports.observers, observer)
        self._holder.observed = True

    # -- plans (shared by both flavours) -------------------------------------------------
    def _decision(
        self, message_id: str, route_id: str, input: str, content: str, kind: DecisionKind | str
    ) -> Plan[RouteDecision]:
        return _ops.plan_record_decision(
            self._holder,
            message_id=message_id,
            route_id=route_id,
            input=input,
            content=content,
            kind=kind,
        )

    def _reconcile(
        self, memory: object, upstream: object, release_untouched: bool
    ) -> tuple[Plan[tuple[ReconcileOutcome, ...]], Ports]:
        # Every port is checked before the plan's first read, so a misuse saves nothing.
        check_memory(memory, self._flavour)
        check_upstream(upstream, self._flavour)
        ports = self._ports_with(upstream, memory)
        if ports.memory is None:
            raise ConfigError(NO_MEMORY)
        plan = _confirm.plan_reconcile(
            self._holder,
            release_untouched=release_untouched,
            can_call_upstream=ports.upstream is not None,
            intents=self._keeps_intents,
        )
        return plan, ports

    @property
    def _keeps_intents(self) -> bool:
        """Whether proposals record an intent beside the envelope (issue 22, ADR-0093)."""
        return keeps_records(self._ports.storage)

    def _reload(self) -> Plan[None]:
        """The re-read plan (a bridge plan composes it: ADR-0121)."""
        return reload(self._holder)

    def _ports_with(self, upstream: object = None, memory: object = None) -> Ports:
        return Ports(
            self._ports.storage,
            upstream if upstream is not None else self._ports.upstream,
            memory if memory is not None else self._ports.memory,
            self._ports.observers,
        )


SessionT = TypeVar("SessionT", bound=_SessionBase)


class _CoordinatorBase(Generic[SessionT]):
    """What both coordinator flavours share: options, plan builders and read-only views."""

    def __init__(
        self,
        session: SessionT,
        upstream: object,
        *,
        ttl_ms: int = core.DEFAULT_TTL_MS,
        create_id: Callable[[], str] = default_confirmation_id,
        keep_terminal: int = core.KEEP_TERMINAL,
    ) -> None:
        check_upstream(upstream, session._flavour)
        if upstream is None and session._ports.upstream is None:
            # Refused here, not at the upstream call: by then a resolution's claim is saved.
            raise ConfigError(NO_UPSTREAM)
        self.session = session
        self._upstream = upstream
        self._ttl_ms = ttl_ms
        self._create_id = create_id
        self._keep_terminal = keep_terminal

    def _ports(self) -> Ports:
        # Rebuilt per call so observers added to the session later are seen too.
        return self.session._ports_with(self._upstream)

    def _propose(
        self, name: str, input: Mapping[str, Any], intent: bool = False
    ) -> Plan[ConfirmationBinding]:
        # ``intent``: the public propose records one on a store with records (issue 22); a
        # bridge's proposals need none (it re-proposes what a crash left unproposed, ADR-0100).
        return _confirm.plan_propose(
            self.session._holder,
            name,
            input,
            suffix=self._create_id(),
            ttl_ms=self._ttl_ms,
            keep_terminal=self._keep_terminal,
            intent=intent,
        )

    def _resolve(
        self,
        token: str,
        intent: ConfirmationEvent,
        session_id: str | None = None,
        reason: str | None = None,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
        edit: EditedArguments | None = None,
    ) -> Plan[ConfirmationBinding]:
        """``edit``: a reviewer's new arguments (a bridge's edit, ADR-0135), recorded in the
        audit entry before the approve's claim; a store without records cannot keep one."""
        decider = check_decider(decided_by, via)  # refused before the plan's first read
        if edit is not None:
            if not self.session._keeps_intents:  # pragma: no cover - bridges require records
                raise ConfigError("A reviewer edit is kept in the audit trail: it needs records.")
            decider = replace(decider, edit=edit)
        return _confirm.plan_resolve(
            self.session._holder,
            token,
            intent,
            reason=reason,
            session_id=session_id,
            args_digest=args_digest,
            audit=decider if self.session._keeps_intents else None,
        )

    def _expire_due(self) -> Plan[tuple[ConfirmationBinding, ...]]:
        audit = Decider(None, "sweep") if self.session._keeps_intents else None
        return _confirm.plan_expire_due(self.session._holder, audit)

    def get_by_tool_call(self, tool_call_id: str) -> ConfirmationBinding | None:
        return self.session.get_by_tool_call(tool_call_id)

    def get_snapshot(self) -> tuple[ConfirmationBinding, ...]:
        return self.session.confirmations


class ChatSession(_SessionBase):
    """A resumed (or new) chat session over a sync :class:`SessionStorage`.

    Every mutation is one compare-and-set save (cursor + 1). On :class:`SessionConflict` the
    session has already reloaded: re-apply the intent. Not shared across threads without the
    built-in lock's serialisation; use one object per worker for parallelism.
    """

    def __init__(self, holder: SessionHolder, ports: Ports) -> None:
        super().__init__(holder, ports)
        self._lock = threading.RLock()

    def _run(self, plan: Plan[T], ports: Ports | None = None) -> T:
        with self._lock:
            return run_sync(plan, ports or self._ports)

    def reload(self) -> None:
        """Re-read storage (validated like resume); drops nothing durable."""
        self._run(self._reload())

    def persist(self, *, attempts: int = 1) -> int:
        """One CAS save of the current envelope; returns the new cursor."""
        return self._run(_ops.plan_persist(self._holder, attempts))

    def claim_turn(self, turn_id: str, lease_ms: int) -> bool:
        """Take the turn lease; ``False`` when busy or a replayed turn (docs/reference.md §9)."""
        return self._run(_ops.plan_claim_turn(self._holder, turn_id, lease_ms))

    def release_turn(
        self, turn_id: str, outcome: TurnOutcome | str = TurnOutcome.COMPLETED
    ) -> bool:
        """Release the lease held by ``turn_id``; ``False`` when it does not hold it."""
        return self._run(_ops.plan_release_turn(self._holder, turn_id, outcome))

    def record_decision(
        self,
        message_id: str,
        route_id: str,
        *,
        input: str = "",
        content: str = "",
        kind: DecisionKind | str = DecisionKind.DETERMINISTIC,
    ) -> RouteDecision:
        """Record a route decision through the host flow (never the message) and save it."""
        return self._run(self._decision(message_id, route_id, input, content, kind))

    def confirmations_for(
        self,
        upstream: UpstreamChat,
        *,
        ttl_ms: int = core.DEFAULT_TTL_MS,
        create_id: Callable[[], str] = default_confirmation_id,
        keep_terminal: int = core.KEEP_TERMINAL,
    ) -> ConfirmationCoordinator:
        """A confirmation coordinator bound to this session and ``upstream``.

        ``ttl_ms``: how long a proposal stays approvable. ``create_id``: the id suffix
        factory (default: 128 random bits). ``keep_terminal``: how many resolved records the
        retention rule keeps when a new proposal is admitted (live records are never pruned).
        """
        return ConfirmationCoordinator(
            self, upstream, ttl_ms=ttl_ms, create_id=create_id, keep_terminal=keep_terminal
        )

    def reconcile(
        self,
        memory: Memory,
        *,
        upstream: UpstreamChat | None = None,
        release_untouched: bool = False,
    ) -> tuple[ReconcileOutcome, ...]:
        """Settle processing records from ``memory`` (see :func:`reconcile`)."""
        return self._run(*self._reconcile(memory, upstream, release_untouched))


class ConfirmationCoordinator(_CoordinatorBase[ChatSession]):
    """Propose, approve, reject and expire tool calls for one :class:`ChatSession`.

    All coordinators of a session share its one binding list (no clobbering, docs/reference.md
    §7.5). A token is a correlation handle bound to this session, not authentication.
    """

    def _run(self, plan: Plan[T]) -> T:
        return self.session._run(plan, self._ports())

    def propose(self, name: str, input: Mapping[str, Any]) -> ConfirmationBinding:
        """Limits, then upstream ``propose_tool_call``, then one CAS save of the binding."""
        return self._run(self._propose(name, input, self.session._keeps_intents))

    def approve(
        self,
        token: str,
        session_id: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> ConfirmationBinding:
        """Claim, call upstream ``approve`` once, record ``approved`` (``expired`` if due).

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the approver
        saw; for other arguments, :class:`~akchat_fsm.ArgumentsMismatch` and nothing written.
        ``decided_by`` (the principal your host authenticated) and ``via`` (``api``,
        ``inbox``, ``cli``) go into the audit entry written before the claim, on a store with
        records (ADR-0132).
        """
        return self._run(
            self._resolve(
                token, ConfirmationEvent.APPROVE, session_id, None, args_digest, decided_by, via
            )
        )

    def reject(
        self,
        token: str,
        session_id: str | None = None,
        reason: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> ConfirmationBinding:
        """Claim, call upstream ``deny`` once, record ``rejected`` (``expired`` if due);
        ``args_digest``, ``decided_by`` and ``via`` as in :meth:`approve`."""
        return self._run(
            self._resolve(
                token, ConfirmationEvent.REJECT, session_id, reason, args_digest, decided_by, via
            )
        )

    def expire(
        self, token: str, *, decided_by: str | None = None, via: str = "api"
    ) -> ConfirmationBinding:
        """Resolve a pending record whose expiry passed: deny upstream, record ``expired``."""
        return self._run(
            self._resolve(token, ConfirmationEvent.EXPIRE, None, None, None, decided_by, via)
        )

    def expire_due(self) -> tuple[ConfirmationBinding, ...]:
        """Expire every pending record due on the session clock (re-read first); returns those
        this call expired. Records resolved or claimed elsewhere meanwhile are skipped."""
        return self._run(self._expire_due())


class AsyncChatSession(_SessionBase):
    """The asyncio twin of :class:`ChatSession` (same plans, awaited effects)."""

    _flavour: Flavour = "async"

    def __init__(self, holder: SessionHolder, ports: Ports) -> None:
        super().__init__(holder, ports)
        self._lock = asyncio.Lock()

    async def _run(self, plan: Plan[T], ports: Ports | None = None) -> T:
        async with self._lock:
            return await run_async(plan, ports or self._ports)

    async def reload(self) -> None:
        """Re-read storage (validated like resume); drops nothing durable."""
        await self._run(self._reload())

    async def persist(self, *, attempts: int = 1) -> int:
        """One CAS save of the current envelope; returns the new cursor."""
        return await self._run(_ops.plan_persist(self._holder, attempts))

    async def claim_turn(self, turn_id: str, lease_ms: int) -> bool:
        """Take the turn lease; ``False`` when busy or a replayed turn (docs/reference.md §9)."""
        return await self._run(_ops.plan_claim_turn(self._holder, turn_id, lease_ms))

    async def release_turn(
        self, turn_id: str, outcome: TurnOutcome | str = TurnOutcome.COMPLETED
    ) -> bool:
        """Release the lease held by ``turn_id``; ``False`` when it does not hold it."""
        return await self._run(_ops.plan_release_turn(self._holder, turn_id, outcome))

    async def record_decision(
        self,
        message_id: str,
        route_id: str,
        *,
        input: str = "",
        content: str = "",
        kind: DecisionKind | str = DecisionKind.DETERMINISTIC,
    ) -> RouteDecision:
        """Record a route decision through the host flow (never the message) and save it."""
        return await self._run(self._decision(message_id, route_id, input, content, kind))

    def confirmations_for(
        self,
        upstream: AsyncUpstreamChat,
        *,
        ttl_ms: int = core.DEFAULT_TTL_MS,
        create_id: Callable[[], str] = default_confirmation_id,
        keep_terminal: int = core.KEEP_TERMINAL,
    ) -> AsyncConfirmationCoordinator:
        """A confirmation coordinator bound to this session and ``upstream``.

        ``ttl_ms``: how long a proposal stays approvable. ``create_id``: the id suffix
        factory (default: 128 random bits). ``keep_terminal``: how many resolved records the
        retention rule keeps when a new proposal is admitted (live records are never pruned).
        """
        return AsyncConfirmationCoordinator(
            self, upstream, ttl_ms=ttl_ms, create_id=create_id, keep_terminal=keep_terminal
        )

    async def reconcile(
        self,
        memory: AsyncMemory,
        *,
        upstream: AsyncUpstreamChat | None = None,
        release_untouched: bool = False,
    ) -> tuple[ReconcileOutcome, ...]:
        """Settle processing records from ``memory`` (see :func:`reconcile`)."""
        return await self._run(*self._reconcile(memory, upstream, release_untouched))


class AsyncConfirmationCoordinator(_CoordinatorBase[AsyncChatSession]):
    """The asyncio twin of :class:`ConfirmationCoordinator`."""

    async def _run(self, plan: Plan[T]) -> T:
        return await self.session._run(plan, self._ports())

    async def propose(self, name: str, input: Mapping[str, Any]) -> ConfirmationBinding:
        """Limits, then upstream ``propose_tool_call``, then one CAS save of the binding."""
        return await self._run(self._propose(name, input, self.session._keeps_intents))

    async def approve(
        self,
        token: str,
        session_id: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> ConfirmationBinding:
        """Claim, call upstream ``approve`` once, record ``approved`` (``expired`` if due).

        ``args_digest``: :func:`~akchat_fsm.arguments_digest` of the arguments the approver
        saw; for other arguments, :class:`~akchat_fsm.ArgumentsMismatch` and nothing written.
        ``decided_by`` (the principal your host authenticated) and ``via`` (``api``,
        ``inbox``, ``cli``) go into the audit entry written before the claim, on a store with
        records (ADR-0132).
        """
        return await self._run(
            self._resolve(
                token, ConfirmationEvent.APPROVE, session_id, None, args_digest, decided_by, via
            )
        )

    async def reject(
        self,
        token: str,
        session_id: str | None = None,
        reason: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> ConfirmationBinding:
        """Claim, call upstream ``deny`` once, record ``rejected`` (``expired`` if due);
        ``args_digest``, ``decided_by`` and ``via`` as in :meth:`approve`."""
        return await self._run(
            self._resolve(
                token, ConfirmationEvent.REJECT, session_id, reason, args_digest, decided_by, via
            )
        )

    async def expire(
        self, token: str, *, decided_by: str | None = None, via: str = "api"
    ) -> ConfirmationBinding:
        """Resolve a pending record whose expiry passed: deny upstream, record ``expired``."""
        return await self._run(
            self._resolve(token, ConfirmationEvent.EXPIRE, None, None, None, decided_by, via)
        )

    async def expire_due(self) -> tuple[ConfirmationBinding, ...]:
        """Expire every pending record due on the session clock (re-read first); returns those
        this call expired. Records resolved or claimed elsewhere meanwhile are skipped."""
        return await self._run(self._expire_due())


# --------------------------------------------------------------------------- entry points


def _checked_ports(
    flavour: Flavour,
    storage: object,
    upstream: object,
    memory: object,
    observers: Iterable[Observer],
) -> Ports:
    """The ports, once each is known to be of ``flavour`` (ConfigError before any I/O)."""
    check_storage(storage, flavour)
    check_upstream(upstream, flavour)
    check_memory(memory, flavour)
    return Ports(storage, upstream, memory, tuple(observers))


SessionT2 = TypeVar("SessionT2", "ChatSession", "AsyncChatSession")


def _opening(
    cls: type[SessionT2],
    definition: ChatDefinition,
    session_id: str,
    clock: Callable[[], int],
    storage: object,
    observers: Iterable[Observer],
    upstream: object,
    memory: object,
) -> tuple[Plan[SessionT2], Ports]:
    """Both entry points: the ports checked for ``cls``'s flavour, and the plan resuming it."""
    ports = _checked_ports(cls._flavour, storage, upstream, memory, observers)
    return _plan_open(cls, definition, session_id, clock, ports), ports


def _plan_open(
    cls: type[SessionT2],
    definition: ChatDefinition,
    session_id: str,
    clock: Callable[[], int],
    ports: Ports,
) -> Plan[SessionT2]:
    holder = yield from _ops.plan_resume(definition, session_id, clock)
    return cls(holder, ports)


def resume_chat_session(
    definition: ChatDefinition,
    *,
    session_id: str,
    storage: SessionStorage,
    clock: Callable[[], int] = default_clock,
    observers: Iterable[Observer] = (),
    upstream: UpstreamChat | None = None,
    memory: Memory | None = None,
) -> ChatSession:
    """Resume ``session_id`` from ``storage`` (or start it fresh when nothing is stored).

    Corrupt, unsupported, foreign-session, other-definition, other-revision or unreplayable
    state is rejected before any session object exists, with the reference's messages
    (``ConfigError`` / :class:`IncompatibleSession`). ``clock`` returns epoch milliseconds.
    """
    return run_sync(
        *_opening(ChatSession, definition, session_id, clock, storage, observers, upstream, memory)
    )


async def resume_chat_session_async(
    definition: ChatDefinition,
    *,
    session_id: str,
    storage: AsyncSessionStorage,
    clock: Callable[[], int] = default_clock,
    observers: Iterable[Observer] = (),
    upstream: AsyncUpstreamChat | None = None,
    memory: AsyncMemory | None = None,
) -> AsyncChatSession:
    """Resume ``session_id`` from ``storage`` (or start it fresh when nothing is stored).

    Corrupt, unsupported, foreign-session, other-definition, other-revision or unreplayable
    state is rejected before any session object exists, with the reference's messages
    (``ConfigError`` / :class:`IncompatibleSession`). ``clock`` returns epoch milliseconds.
    """
    return await run_async(
        *_opening(
            AsyncChatSession, definition, session_id, clock, storage, observers, upstream, memory
        )
    )


S = TypeVar("S", ChatSession, AsyncChatSession)


def resolve_chat_session(definition: ChatDefinition, session: S) -> S:
    """The renderers' check: ``session`` was prepared for this definition id and revision."""
    if (
        not isinstance(session, _SessionBase)
        or session.definition.id != definition.id
        or session.definition.revision != definition.revision
    ):
        raise ConfigError(PREPARED_INCOMPATIBLE)
    return session
