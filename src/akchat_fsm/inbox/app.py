"""The approver's inbox: an ASGI app over the pending index and the session API (ADR-0130).

Every request is authorized by the host's hook (or refused unless it comes from loopback in
the explicit local-only mode); every POST is checked for its CSRF token and its origin, then
its body is read within a bound, all *before* storage is touched, so a refused request
changes nothing. A decision is the session's own two-CAS approve / reject, or the host's
bridge for the session (``bridge_for``). Sync or asyncio storage, the routes are written once:
every port call goes through ``_Inbox.call``, which runs a sync one in a worker thread and
awaits an asyncio one on the loop; the host's permission hooks go through ``_Inbox.hook``,
which runs a sync one in a worker thread over either storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qsl

from jinja2 import Environment, PackageLoader
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from ..errors import (
    ArgumentsMismatch,
    ConfigError,
    ConfirmationError,
    EditNotAllowed,
    InvalidConfirmationToken,
    InvalidMemoryRecord,
    LimitExceeded,
    OutcomeUnknown,
    SessionConflict,
    StorageError,
    StorageUnavailable,
)
from ..integrations import BridgeError
from ..integrations.ledger import (
    AsyncToolLedger,
    LedgerEntry,
    SettleAuditEntry,
    SettleRefused,
    ToolLedger,
    describe_entry,
    result_from_json,
    settle_trail,
    settle_trail_async,
)
from ..session import (
    AsyncChatMemory,
    AsyncUpstreamChat,
    AuditEntry,
    ChatDefinition,
    ChatMemory,
    UpstreamChat,
    UpstreamFailed,
    audit_trail,
    audit_trail_async,
    resume_chat_session,
    resume_chat_session_async,
)
from ..storage.capabilities import has_pending_index, keeps_records
from ..storage.port import (
    AsyncPendingIndex,
    AsyncProcessingIndex,
    AsyncSessionStorage,
    PendingApproval,
    PendingIndex,
    PendingPage,
    ProcessingIndex,
    SessionStorage,
)
from ..wire import ConfirmationBinding, ConfirmationStatus, MemoryRecord, validate_memory_record
from ..wire.digest import arguments_digest, edited_arguments
from ._render import (
    DEFAULT_BOUNDS,
    Bounds,
    bounded_text,
    countdown,
    editable_json,
    pretty_arguments,
    utc_time,
    visible,
)
from ._security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    Csrf,
    SecurityHeaders,
    is_loopback_client,
    principal_identity,
    same_origin,
)

Principal = Any
#: What a decision form carries as the digest of the arguments it showed.
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
Authorize = Callable[[Request], "Principal | Awaitable[Principal | None] | None"]
CanDecide = Callable[[Principal, PendingApproval], "bool | Awaitable[bool]"]
#: Whether a principal who may decide a call may also approve it with arguments of their own.
CanEdit = Callable[[Principal, PendingApproval], "bool | Awaitable[bool]"]
CanSettle = Callable[[Principal, "UnknownExecution"], "bool | Awaitable[bool]"]

#: The longest ``after`` cursor the inbox passes to storage. The shipped adapters' longest is 389
#: characters ("p1." and the base64 of the JSON of the order, a safe integer and two
#: 128-character identifiers); a longer one is refused before storage is asked.
MAX_CURSOR = 400

BridgeFor = Callable[[str], "Bridge | AsyncBridge | Awaitable[AsyncBridge | None] | None"]
UpstreamFor = Callable[[str], "UpstreamChat | AsyncUpstreamChat"]
MemoryFor = Callable[[str], "ChatMemory | AsyncChatMemory | None"]

#: The principal of the local-only mode, when the host gives no ``authorize`` hook.
LOCAL_PRINCIPAL = "local"


class InboxStorage(SessionStorage, PendingIndex, Protocol):
    """A sync storage adapter with the pending index (memory, SQLite, PostgreSQL, ...)."""


class AsyncInboxStorage(AsyncSessionStorage, AsyncPendingIndex, Protocol):
    """An asyncio storage adapter with the pending index (``AsyncSQLiteStorage``, ...)."""


class Bridge(Protocol):
    """What ``bridge_for`` returns: an agent-runtime bridge's two decisions (the inbox passes
    the digest of the arguments shown and who decides, keyword arguments every bridge takes)."""

    def approve(
        self,
        token: str,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> object: ...

    def reject(
        self,
        token: str,
        reason: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> object: ...


class AsyncBridge(Protocol):
    """The asyncio twin of :class:`Bridge` (``AsyncPydanticAIBridge``, ...)."""

    async def approve(
        self,
        token: str,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> object: ...

    async def reject(
        self,
        token: str,
        reason: str | None = None,
        *,
        args_digest: str | None = None,
        decided_by: str | None = None,
        via: str = "api",
    ) -> object: ...


@dataclass(frozen=True, slots=True)
class UnknownExecution:
    """What ``can_settle`` is asked about: one ledger entry whose outcome is unknown (an
    ``executing`` claim nobody finished) and the session it belongs to."""

    session_id: str
    entry: LedgerEntry


@dataclass(frozen=True, slots=True)
class _Settled:
    """What a settle request showed: its HTTP status, a kind and the entry as stored after."""

    status_code: int
    #: settled | already | missing | forbidden | busy | invalid
    kind: str
    session_id: str
    tool_call_id: str
    entry: LedgerEntry | None = None
    detail: str = ""
    #: With a bridge: what continuing the session's runs said ("" when it was not tried).
    continued: str = ""


@dataclass(frozen=True, slots=True)
class _Located:
    session_id: str
    binding: ConfirmationBinding
    #: The index's row while the call is pending; ``None`` once it left the index.
    pending: PendingApproval | None


@dataclass(frozen=True, slots=True)
class _Outcome:
    """What a decision request showed: a page name, its HTTP status and what it says."""

    status_code: int
    #: won | decided | changed | expired | missing | forbidden | failed | busy | undecidable
    #: | uneditable (an edit the call's bridge refuses) | invalid (edited arguments out of bounds)
    kind: str
    located: _Located | None = None
    detail: str = ""


@dataclass(slots=True)
class _Changes:
    """Wakes every event stream of this process when a decision here changed the index."""

    _event: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        with contextlib.suppress(TimeoutError):  # the poll: other processes write too
            await asyncio.wait_for(self._event.wait(), timeout_s)


async def pending_changes(
    fingerprint: Callable[[], Awaitable[object]], wait: Callable[[], Awaitable[None]]
) -> AsyncIterator[dict[str, str]]:
    """One ``pending`` event each time the index's fingerprint differs after a ``wait``."""
    last = await fingerprint()
    while True:
        await wait()
        now = await fingerprint()
        if now != last:
            last = now
            yield {"event": "pending", "data": "changed"}


def _system_clock() -> int:
    return time.time_ns() // 1_000_000


class _Inbox:
    """The routes' shared configuration; one per :func:`create_inbox` call."""

    def __init__(self, **options: Any) -> None:
        self.storage: InboxStorage | AsyncInboxStorage = options["storage"]
        #: Asyncio storage: every port is awaited on the loop (ADR-0130, amended).
        self.asyncio: bool = options["asyncio"]
        self.definition_for: Callable[[str], ChatDefinition] = options["definition_for"]
        self.authorize: Authorize | None = options["authorize"]
        self.can_decide: CanDecide = options["can_decide"]
        self.can_edit: CanEdit = options["can_edit"]
        self.can_settle: CanSettle = options["can_settle"]
        self.local_only: bool = options["local_only"]
        self.bridge_for: BridgeFor | None = options["bridge_for"]
        self.upstream_for: UpstreamFor | None = options["upstream_for"]
        self.memory_for: MemoryFor | None = options["memory_for"]
        self.recent: int = options["recent_messages"]
        self.clock: Callable[[], int] = options["clock"]
        self.csrf = Csrf(options["csrf_secret"])
        self.trusted_origins: frozenset[str] = options["trusted_origins"]
        self.bounds: Bounds = options["bounds"]
        self.page_size: int = options["page_size"]
        self.max_cursor: int = options["max_cursor"]
        self.max_reason: int = options["max_reason"]
        self.max_body: int = options["max_body"]
        self.max_result: int = options["max_result"]
        self.poll_s: float = options["poll_interval_s"]
        self.changes = _Changes()
        env = Environment(
            loader=PackageLoader("akchat_fsm.inbox", "templates"),
            autoescape=True,  # every template, whatever its name: arguments are hostile
        )
        env.filters["visible"] = visible
        # A value read back from a shared store (a ledger entry's tool, owner, a run's id):
        # inert and cut, like a chat message.
        env.filters["bounded"] = lambda text: bounded_text(str(text), self.bounds.max_string)
        env.filters["utc"] = utc_time
        # An edit's arguments read back from the audit trail: bounded and inert like a call's.
        env.filters["pretty"] = lambda value: pretty_arguments(value, self.bounds)
        self.templates = Jinja2Templates(env=env)

    # ------------------------------------------------------------------ the gate
    async def principal(self, request: Request) -> Principal | None:
        if self.local_only and not is_loopback_client(request):
            return None
        if self.authorize is None:
            return LOCAL_PRINCIPAL
        return await self.hook(self.authorize, request)

    def refuse(self, request: Request, status_code: int, message: str) -> Response:
        return self.page(request, "refused.html", {"message": message}, status_code, for_=None)

    def page(
        self,
        request: Request,
        name: str,
        context: dict[str, Any],
        status_code: int = 200,
        *,
        for_: Principal | None,
    ) -> Response:
        """A rendered page; rendered ``for_`` a principal, it carries a CSRF token bound to
        that principal (and the nonce cookie, if new); a refusal carries none."""
        fresh = None
        token = ""
        if for_ is not None:
            nonce = request.cookies.get(CSRF_COOKIE) or ""
            if not 20 <= len(nonce) <= 128:
                nonce = fresh = Csrf.new_nonce()
            token = self.csrf.form_token(nonce, principal_identity(for_))
        context = {**context, "csrf_field": CSRF_FIELD, "local_only": self.local_only}
        context["csrf_token"] = token
        response = self.templates.TemplateResponse(request, name, context, status_code)
        if fresh is not None:
            response.set_cookie(
                CSRF_COOKIE,
                fresh,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
                path=request.scope.get("root_path") or "/",
            )
        return response

    async def form(self, request: Request, principal: Principal) -> dict[str, str] | Response:
        """The POST's fields, once its origin, size and CSRF token (bound to ``principal``)
        passed; else the refusal."""
        own = f"{request.url.scheme}://{request.url.netloc}"
        if not same_origin(request.headers, own, self.trusted_origins):
            return self.refuse(request, 403, "This request did not come from the inbox page.")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return self.refuse(request, 415, "Send the inbox's own form.")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > self.max_body:
                return self.refuse(request, 413, "The form is too large.")
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=8)
        except (UnicodeDecodeError, ValueError):
            return self.refuse(request, 400, "The form could not be read.")
        fields = dict(pairs)
        nonce, token = request.cookies.get(CSRF_COOKIE), fields.get(CSRF_FIELD)
        if not self.csrf.valid(nonce, token, principal_identity(principal)):
            return self.refuse(request, 403, "The form expired: reload the page and try again.")
        return fields

    # ------------------------------------------------------------------ the ports
    async def call(self, port: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """One call into storage, the session or a host hook, the one seam between flavours.

        Over sync storage it runs in a worker thread (sync ports block); over asyncio storage
        it runs on the loop and its result is awaited when it is awaitable (the async
        session's and bridges' methods, an async hook).
        """
        if not self.asyncio:
            # A hook may be async even over sync storage (an ``async def can_decide``): its
            # coroutine is awaited here, never taken for an answer (a coroutine is truthy).
            result = await run_in_threadpool(port, *args, **kwargs)
        else:
            result = port(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result

    async def hook(self, hook: Callable[..., Any], /, *args: Any) -> Any:
        """One call of a host permission hook (``authorize``, ``can_decide``): an ``async def``
        one is awaited on the loop; any other runs in a worker thread, over either storage,
        because the host's check may block (a database lookup) and on the loop it would stall
        every request. An awaitable it returns is awaited here, never taken for an answer."""
        if inspect.iscoroutinefunction(hook):
            return await hook(*args)
        # Anything else returning an awaitable (an object with an ``async def __call__``) only
        # builds it in the thread; its body runs when it is awaited, here on the loop.
        result = await run_in_threadpool(hook, *args)
        return await result if inspect.isawaitable(result) else result

    async def resume(self, session_id: str, observers: tuple[Any, ...] = ()) -> Any:
        """The session, resumed with its definition: a ``ChatSession`` or ``AsyncChatSession``."""
        definition = await self.call(self.definition_for, session_id)
        resume = resume_chat_session_async if self.asyncio else resume_chat_session
        return await self.call(
            resume,
            definition,
            session_id=session_id,
            storage=self.storage,
            clock=self.clock,
            observers=observers,
        )

    async def pending_row(self, session_id: str, token: str) -> PendingApproval | None:
        after = None
        while True:
            page = await self.call(
                self.storage.list_pending, session_id=session_id, after=after, limit=1000
            )
            for item in page.items:
                if item.token == token:
                    found: PendingApproval = item
                    return found
            if page.next_after is None:
                return None
            after = page.next_after

    async def locate(self, token: str, session_hint: str | None) -> _Located | None:
        """The call behind ``token``: from the index while pending, else from the hinted session.

        The hint (the page's ``session`` field) is only a place to look: the binding must be in
        that session's stored envelope, so a hint names nothing an attacker could not see.
        """
        session_id = await self.call(self.storage.find_token, token) or session_hint
        if not session_id:
            return None
        try:
            session = await self.resume(session_id)
        except ConfigError:
            return None
        binding = next((b for b in session.confirmations if b.token == token), None)
        if binding is None:
            return None
        pending = None
        if binding.status is ConfirmationStatus.PENDING:
            pending = await self.pending_row(session_id, token)
        return _Located(session_id, binding, pending)

    async def may_decide(self, principal: Principal, pending: PendingApproval) -> bool:
        # Deny by default: only an explicit ``True`` lets a person decide.
        return await self.hook(self.can_decide, principal, pending) is True

    async def may_also_edit(self, principal: Principal, pending: PendingApproval) -> bool:
        # Asked only of a principal who may decide (an edit is a decision and more); deny by
        # default: only an explicit ``True``.
        return await self.hook(self.can_edit, principal, pending) is True

    async def decide(
        self,
        principal: Principal,
        token: str,
        hint: str | None,
        reason: str | None,
        approve: bool,
        shown: str,
        edit: Mapping[str, Any] | None = None,
    ) -> _Outcome:
        """Decide ``token`` for ``principal``, bound to ``shown`` (the digest of the arguments
        the page displayed) and recorded in the audit trail as theirs, via the inbox. With
        ``edit`` (an approve only): the bridge's ``edit``, approving those arguments instead
        (ADR-0135); a session without a bridge, or a bridge without edits, refuses it."""
        located = await self.locate(token, hint)
        if located is None:
            return _Outcome(404, "missing")
        if located.pending is None:
            return await self._decided(located)
        if not await self.may_decide(principal, located.pending):
            return _Outcome(403, "forbidden", located)
        if edit is not None and not await self.may_also_edit(principal, located.pending):
            return _Outcome(403, "forbidden", located)
        session_id = located.session_id
        who = {"args_digest": shown, "decided_by": principal_identity(principal), "via": "inbox"}
        won: list[bool] = []
        try:
            bridge = None
            if self.bridge_for is not None:
                bridge = await self.call(self.bridge_for, session_id)
            if edit is not None:
                if bridge is None or getattr(bridge, "edit", None) is None:
                    return _Outcome(409, "uneditable", located, _NO_EDITS)
                await self.call(bridge.edit, token, edit, reason=reason, **who)
                won.append(True)
            elif bridge is not None:
                if approve:
                    await self.call(bridge.approve, token, **who)
                else:
                    await self.call(bridge.reject, token, reason, **who)
                won.append(True)  # a loser's bridge raises ConfirmationError
            else:
                won += await self._decide_plain(session_id, token, reason, approve, who)
        except UpstreamFailed as exc:
            return _Outcome(502, "failed", located, f"{type(exc.__cause__).__name__}")
        except ArgumentsMismatch:
            return _Outcome(409, "changed", located)
        except EditNotAllowed as exc:
            return _Outcome(409, "uneditable", located, str(exc))
        except ConfirmationError:
            return await self._decided(await self.locate(token, session_id) or located)
        except InvalidConfirmationToken:
            return _Outcome(404, "missing")
        except LimitExceeded as exc:  # edited arguments out of the library's bounds
            return _Outcome(400, "invalid", located, exc.message)
        except ConfigError as exc:  # the host gave no way to decide this session: nothing ran
            return _Outcome(501, "undecidable", located, exc.message)
        except (SessionConflict, StorageUnavailable, OutcomeUnknown, BridgeError) as exc:
            return _Outcome(503, "busy", located, type(exc).__name__)
        after = await self.locate(token, session_id) or located
        if after.binding.status is ConfirmationStatus.EXPIRED:
            return _Outcome(409, "expired", after)
        return _Outcome(200 if won else 409, "won" if won else "decided", after)

    async def editable(self, session_id: str, token: str) -> bool:
        """Whether the session's bridge would accept an edit of ``token``: its ``can_edit``
        says so (ADR-0135). No bridge, a bridge without the query, or a host hook or bridge
        that fails to answer: no edit form. This only decides what the page offers, so a
        failure here never breaks the page; a decision through the same hook reports it."""
        if self.bridge_for is None:
            return False
        try:
            bridge = await self.call(self.bridge_for, session_id)
            can_edit = getattr(bridge, "can_edit", None)
            return can_edit is not None and await self.call(can_edit, token) is True
        except Exception:  # a display hint only: the edit route asks again
            return False

    async def _decided(self, located: _Located) -> _Outcome:
        """The "already decided" answer, naming who decided when the store keeps a trail."""
        detail = ""
        if keeps_records(self.storage):
            trail = audit_trail_async if self.asyncio else audit_trail
            try:
                entries = await self.call(
                    trail, self.storage, located.session_id, token=located.binding.token
                )
            except (StorageError, ConfigError):
                entries = ()  # the answer stands without the name
            won = [e for e in entries if e.decided]
            if won:
                detail = won[-1].principal or "(not named)"
        return _Outcome(409, "decided", located, detail)

    async def _decide_plain(
        self,
        session_id: str,
        token: str,
        reason: str | None,
        approve: bool,
        who: dict[str, Any],
    ) -> list[bool]:
        if self.upstream_for is None:
            raise ConfigError(
                "The inbox has no upstream for this session.",
                hint="Give create_inbox upstream_for, or a bridge_for that returns a bridge.",
            )
        # Our own transition, seen by an observer, is what says this request won: an approve
        # that finds the call already approved returns the stored record without an error.
        won: list[bool] = []

        def observe(event: Any) -> None:
            record = getattr(event, "record", None)
            if record is not None and record.token == token and record.status.is_terminal:
                won.append(True)

        session = await self.resume(session_id, observers=(observe,))
        upstream = await self.call(self.upstream_for, session_id)
        coordinator = session.confirmations_for(upstream)
        if approve:
            await self.call(coordinator.approve, token, session_id=session_id, **who)
        else:
            await self.call(coordinator.reject, token, session_id=session_id, reason=reason, **who)
        return won[:1]

    async def conversation(self, session_id: str) -> list[tuple[str, str]] | None:
        """The last messages of the session's chat, as (role, bounded text), when the host
        gives a memory; ``None`` without one. A memory that fails shows as an empty chat."""
        memory = None
        if self.memory_for is not None:
            memory = await self.call(self.memory_for, session_id)
        if memory is None:
            return None
        try:
            loaded = await self.call(memory.load)
            if isinstance(loaded, MemoryRecord):
                record = loaded
            elif isinstance(loaded, Mapping):
                record = validate_memory_record(loaded)
            else:
                record = validate_memory_record({"version": 1, "messages": list(loaded)})
        except InvalidMemoryRecord:
            return []
        limit = self.bounds.max_string
        return [
            (message.role.value, bounded_text(message.content, limit))
            for message in record.messages[-self.recent :]
        ]

    # ------------------------------------------------------------------ the operator's view
    def ledger(self, session_id: str) -> ToolLedger | AsyncToolLedger:
        """The session's tool-execution ledger over the inbox's storage, of its flavour."""
        return (AsyncToolLedger if self.asyncio else ToolLedger)(
            self.storage, session_id, clock=self.clock
        )

    async def trail(self, session_id: str, token: str | None = None) -> tuple[AuditEntry, ...]:
        """The session's audit entries (one call's with ``token``); none when the store keeps
        no trail. A trail that cannot be read is a store failure (the 503 page)."""
        if not keeps_records(self.storage):
            return ()
        read = audit_trail_async if self.asyncio else audit_trail
        entries: tuple[AuditEntry, ...] = await self.call(
            read, self.storage, session_id, token=token
        )
        return entries

    async def settles(self, session_id: str) -> tuple[SettleAuditEntry, ...]:
        """The session's settle entries (ADR-0136); none when the store keeps no records."""
        if not keeps_records(self.storage):
            return ()
        read = settle_trail_async if self.asyncio else settle_trail
        entries: tuple[SettleAuditEntry, ...] = await self.call(read, self.storage, session_id)
        return entries

    async def processing(self, principal: Principal) -> list[dict[str, Any]] | None:
        """Each session in the processing index (at most ``page_size``, oldest write first)
        with its processing claims and its unknown executions, each with whether ``principal``
        may settle it; ``None`` without the index."""
        if not isinstance(self.storage, ProcessingIndex | AsyncProcessingIndex):
            return None
        listed = await self.call(self.storage.list_processing, limit=self.page_size)
        out = []
        for item in listed[: self.page_size]:  # an adapter ignoring the limit: still a page
            try:
                session = await self.resume(item.session_id)
                claims = [b for b in session.confirmations if b.status.is_processing]
            except ConfigError:  # a session this host cannot resume: its ledger still shows
                claims = []
            unknown: tuple[LedgerEntry, ...] = ()
            if keeps_records(self.storage):
                unknown = await self.call(self.ledger(item.session_id).unknown)
            settles = [
                (entry, await self.may_settle(principal, UnknownExecution(item.session_id, entry)))
                for entry in unknown[: self.page_size]
            ]
            out.append(
                {
                    "session_id": item.session_id,
                    "last_write_ms": item.last_write_ms,
                    "claims": claims[: self.page_size],
                    "unknown": settles,
                    "hidden": max(0, len(claims) - self.page_size)
                    + max(0, len(unknown) - self.page_size),
                }
            )
        return out

    async def may_settle(self, principal: Principal, unknown: UnknownExecution) -> bool:
        # Deny by default, apart from deciding: only an explicit ``True`` lets one settle.
        return await self.hook(self.can_settle, principal, unknown) is True

    async def settle(
        self,
        principal: Principal,
        session_id: str,
        tool_call_id: str,
        ran: bool,
        result: Any,
        reason: str | None = None,
    ) -> _Settled:
        """Record ``principal``'s verdict on an unknown execution, then, through the host's
        bridge for the session, continue its runs (the CLI's ``settle`` then ``reconcile``).

        The verdict is the ledger's ``settle_unknown`` (ADR-0104), as ``akchat-fsm settle``
        writes it: one compare-and-set over the entry read, which must still be unknown, with
        the principal as its operator; anything that changed it writes nothing to the ledger.
        Its audit entry (the principal, ``inbox``, the reason) is written first (ADR-0136).
        """
        ledger = self.ledger(session_id)
        entry: LedgerEntry | None = await self.call(ledger.get, tool_call_id)
        if entry is None:
            return _Settled(404, "missing", session_id, tool_call_id)
        if not await self.may_settle(principal, UnknownExecution(session_id, entry)):
            return _Settled(403, "forbidden", session_id, tool_call_id, entry)
        if not entry.unknown:
            return _Settled(409, "already", session_id, tool_call_id, entry, describe_entry(entry))
        who = principal_identity(principal)
        try:
            entry = await self.call(
                ledger.settle_unknown,
                tool_call_id,
                ran=ran,
                result=result,
                operator=who,
                reason=reason,
                via="inbox",
            )
        except ConfigError as exc:  # the principal cannot be recorded: nothing was written
            return _Settled(400, "invalid", session_id, tool_call_id, entry, exc.message)
        except SettleRefused as exc:
            now = exc.entry
            return _Settled(409, "already", session_id, tool_call_id, now, describe_entry(now))
        except (StorageUnavailable, OutcomeUnknown) as exc:
            return _Settled(503, "busy", session_id, tool_call_id, entry, type(exc).__name__)
        continued = await self._continue(session_id)
        return _Settled(200, "settled", session_id, tool_call_id, entry, continued=continued)

    async def _continue(self, session_id: str) -> str:
        """Continue the session's runs through its bridge (its ``reconcile``: the sweep the
        CLI's next steps name); "" without a bridge. The verdict stands whatever this says."""
        bridge = None
        if self.bridge_for is not None:
            bridge = await self.call(self.bridge_for, session_id)
        reconcile = getattr(bridge, "reconcile", None)  # a bridge with decisions only: not here
        if reconcile is None:
            return ""
        try:
            report = await self.call(reconcile)
        except (UpstreamFailed, SessionConflict, StorageError, BridgeError) as exc:
            return f"not continued ({type(exc).__name__}); the bridge's sweep continues it later"
        runs = getattr(report, "runs", ())
        return ", ".join(f"{run.run_id}: {run.status}" for run in runs) or "no run to continue"

    async def fingerprint(self) -> tuple[str, ...]:
        page = await self.call(self.storage.list_pending, order="newest", limit=100)
        return tuple(item.token for item in page.items[:100])


# ---------------------------------------------------------------------- routes
def _inbox(request: Request) -> _Inbox:
    inbox: _Inbox = request.app.state.inbox
    return inbox


def _filters(request: Request) -> dict[str, Any]:
    query = request.query_params
    order = query.get("order", "expiry")
    return {
        "action": query.get("action") or None,
        "session_id": query.get("session") or None,
        "order": order if order in ("expiry", "newest") else "expiry",
        "after": query.get("after") or None,
    }


async def list_page(request: Request) -> Response:
    inbox = _inbox(request)
    principal = await inbox.principal(request)
    if principal is None:
        return inbox.refuse(request, 401 if not inbox.local_only else 403, _NOT_AUTHORIZED)
    filters = _filters(request)
    if len(filters["after"] or "") > inbox.max_cursor:
        return inbox.refuse(request, 400, "The page cursor is too long.")
    if any(len(value or "") > 512 for value in filters.values()):
        return inbox.refuse(request, 400, "A filter is too long.")
    try:
        page: PendingPage = await inbox.call(
            inbox.storage.list_pending, limit=inbox.page_size, **filters
        )
    except ConfigError as exc:
        return inbox.refuse(request, 400, exc.message)
    now = inbox.clock()
    rows = [
        {
            "item": item,
            "remaining_ms": item.expires_at_ms - now,
            "countdown": countdown(item.expires_at_ms - now),
        }
        for item in page.items[: inbox.page_size]  # an adapter ignoring the limit: still a page
    ]
    context = {
        "rows": rows,
        "hidden": len(page.items) - len(rows),
        "filters": filters,
        "next_after": page.next_after,
    }
    return inbox.page(request, "list.html", context, for_=principal)


async def detail_page(request: Request) -> Response:
    inbox = _inbox(request)
    principal = await inbox.principal(request)
    if principal is None:
        return inbox.refuse(request, 401 if not inbox.local_only else 403, _NOT_AUTHORIZED)
    token = request.path_params["token"]
    hint = request.query_params.get("session")
    if len(token) > 256 or len(hint or "") > 256:
        return inbox.refuse(request, 404, "No such call.")
    located = await inbox.locate(token, hint)
    if located is None:
        return inbox.refuse(request, 404, "No such call.")
    context = await _call_context(inbox, principal, located)
    context["conversation"] = await inbox.conversation(located.session_id)
    context["keeps_records"] = keeps_records(inbox.storage)
    trail = await inbox.trail(located.session_id, token=located.binding.token)
    context.update(_audit_context(inbox, trail))
    return inbox.page(request, "detail.html", context, for_=principal)


async def _call_context(inbox: _Inbox, principal: Principal, located: _Located) -> dict[str, Any]:
    remaining = located.binding.expires_at - inbox.clock()
    pending = located.pending
    can_decide = (
        pending is not None and remaining > 0 and await inbox.may_decide(principal, pending)
    )
    can_edit = (
        can_decide
        and pending is not None
        and await inbox.may_also_edit(principal, pending)
        and await inbox.editable(located.session_id, located.binding.token)
    )
    return {
        "call": located,
        "arguments": pretty_arguments(located.binding.input, inbox.bounds),
        "remaining_ms": remaining,
        "countdown": countdown(remaining),
        "can_decide": can_decide,
        "can_edit": can_edit,
        "edit_text": editable_json(located.binding.input) if can_edit else "",
        "max_reason": inbox.max_reason,
        "args_digest": arguments_digest(located.binding.input),
    }


async def _decision(request: Request, approve: bool, edit: bool = False) -> Response:
    inbox = _inbox(request)
    principal = await inbox.principal(request)
    if principal is None:
        return inbox.refuse(request, 401 if not inbox.local_only else 403, _NOT_AUTHORIZED)
    fields = await inbox.form(request, principal)
    if isinstance(fields, Response):
        return fields
    token = request.path_params["token"]
    hint = fields.get("session") or None
    reason = (fields.get("reason") or "").strip() or None
    if len(token) > 256 or len(hint or "") > 256:
        return inbox.refuse(request, 404, "No such call.")
    if reason is not None and len(reason) > inbox.max_reason:
        return inbox.refuse(request, 400, f"The reason is longer than {inbox.max_reason}.")
    shown = fields.get("args_digest") or ""
    if not _DIGEST.fullmatch(shown):
        # Deny by default: a decision must name the arguments it was made on (ADR-0132).
        return inbox.refuse(request, 400, "The form does not say which arguments you saw.")
    edited = None
    if edit:
        parsed = _edited_fields(fields)
        if isinstance(parsed, str):
            return inbox.refuse(request, 400, parsed)
        edited = parsed
    outcome = await inbox.decide(principal, token, hint, reason, approve, shown, edited)
    if outcome.kind in ("won", "expired"):
        inbox.changes.notify()
    context = {"outcome": outcome, "call": outcome.located, "approve": approve, "edit": edit}
    return inbox.page(request, "result.html", context, outcome.status_code, for_=principal)


async def approve(request: Request) -> Response:
    return await _decision(request, approve=True)


async def reject(request: Request) -> Response:
    return await _decision(request, approve=False)


async def edit(request: Request) -> Response:
    return await _decision(request, approve=True, edit=True)


_NO_EDITS = "This call's agent runtime takes no edits here: approve or reject it as shown."


def _edited_fields(fields: dict[str, str]) -> Mapping[str, Any] | str:
    """The edit form's arguments, parsed and bounded as the library bounds edited arguments
    (``edited_arguments``: a JSON object, the bounds of a proposed input), or why they are
    refused (400); all before storage is read."""
    text = fields.get("args") or ""
    if not text.strip():
        return "The edit has no arguments."
    try:
        # The size and nesting bounds of a stored record, then those of edited arguments.
        value = result_from_json(text, "reviewer's edit")
        edited_arguments(value)
    except ConfigError as exc:  # LimitExceeded, or text that is not bounded JSON
        return f"{exc.message} Nothing was changed."
    parsed: Mapping[str, Any] = value
    return parsed


async def _gate(request: Request) -> tuple[_Inbox, Principal | None, Response | None]:
    inbox = _inbox(request)
    principal = await inbox.principal(request)
    if principal is None:
        status = 401 if not inbox.local_only else 403
        return inbox, None, inbox.refuse(request, status, _NOT_AUTHORIZED)
    return inbox, principal, None


async def operator_page(request: Request) -> Response:
    inbox, principal, refused = await _gate(request)
    if refused is not None:
        return refused
    sessions = await inbox.processing(principal)
    context = {
        "sessions": sessions,
        "keeps_records": keeps_records(inbox.storage),
        "max_result": inbox.max_result,
        "max_reason": inbox.max_reason,
        "now_ms": inbox.clock(),
    }
    return inbox.page(request, "operator.html", context, for_=principal)


@dataclass(frozen=True, slots=True)
class _SettleForm:
    session_id: str
    tool_call_id: str
    ran: bool
    result: Any = None
    reason: str | None = None


def _settle_fields(inbox: _Inbox, fields: dict[str, str]) -> _SettleForm | str:
    """The settle form's session, tool call, verdict, result and reason, or why it is
    refused (400)."""
    session_id, tool_call_id = fields.get("session") or "", fields.get("tool_call") or ""
    if not session_id or not tool_call_id or len(session_id) > 256 or len(tool_call_id) > 256:
        return "The form does not name a session and a tool call."
    reason = (fields.get("reason") or "").strip() or None
    if reason is not None and len(reason) > inbox.max_reason:
        return f"The reason is longer than {inbox.max_reason}."
    verdict = fields.get("verdict")
    if verdict not in ("ran", "did-not-run"):
        return "The form does not say whether the call ran."
    text = fields.get("result") or ""
    if verdict == "did-not-run":
        if text.strip():
            return "A result goes with \u201cit ran\u201d: a call that did not run has none."
        return _SettleForm(session_id, tool_call_id, False, None, reason)
    if not text.strip():
        return _SettleForm(session_id, tool_call_id, True, None, reason)
    try:
        result = result_from_json(text, "result")
    except ConfigError as exc:
        return exc.message
    if _depth(result) > inbox.bounds.max_depth:
        return f"The result is nested deeper than {inbox.bounds.max_depth} levels."
    return _SettleForm(session_id, tool_call_id, True, result, reason)


def _depth(value: Any) -> int:
    """How many containers a parsed JSON value nests (a scalar: 0, ``[[]]``: 2), walked
    without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


async def settle(request: Request) -> Response:
    inbox, principal, refused = await _gate(request)
    if refused is not None:
        return refused
    fields = await inbox.form(request, principal)
    if isinstance(fields, Response):
        return fields
    if len(fields.get("result") or "") > inbox.max_result:
        return inbox.refuse(request, 413, f"The result is longer than {inbox.max_result:,}.")
    parsed = _settle_fields(inbox, fields)
    if isinstance(parsed, str):
        return inbox.refuse(request, 400, parsed)
    if not keeps_records(inbox.storage):
        return inbox.refuse(request, 501, "This store keeps no tool-execution ledger.")
    outcome = await inbox.settle(
        principal, parsed.session_id, parsed.tool_call_id, parsed.ran, parsed.result, parsed.reason
    )
    if outcome.kind == "settled":
        inbox.changes.notify()
    context = {"outcome": outcome, "ran": parsed.ran}
    return inbox.page(request, "settled.html", context, outcome.status_code, for_=principal)


async def audit_page(request: Request) -> Response:
    inbox, principal, refused = await _gate(request)
    if refused is not None:
        return refused
    session_id = request.path_params["session_id"]
    if len(session_id) > 256:
        return inbox.refuse(request, 404, "No such session.")
    if not keeps_records(inbox.storage):
        return inbox.refuse(request, 501, "This store keeps no audit trail.")
    try:
        entries = await inbox.trail(session_id)
        settles = await inbox.settles(session_id)
    except ConfigError:
        return inbox.refuse(request, 404, "No such session.")
    context = {"session_id": session_id, **_audit_context(inbox, entries)}
    context.update(_settle_context(inbox, settles))
    return inbox.page(request, "audit.html", context, for_=principal)


def _audit_context(inbox: _Inbox, entries: tuple[AuditEntry, ...]) -> dict[str, Any]:
    """The newest ``page_size`` entries, oldest first, and how many more. The trail is read
    call by call; the session's cursor orders the calls' claims as they were made (the clock
    may repeat). The template shows each text field inert and bounded."""
    ordered = sorted(entries, key=lambda entry: (entry.cursor, entry.at_ms))
    shown = ordered[-inbox.page_size :]
    return {"audit": shown, "audit_hidden": len(entries) - len(shown)}


def _settle_context(inbox: _Inbox, entries: tuple[SettleAuditEntry, ...]) -> dict[str, Any]:
    """The newest ``page_size`` settle entries, oldest first (by time, then the ledger version
    they wrote over), and how many more; shown inert and bounded."""
    ordered = sorted(entries, key=lambda entry: (entry.at_ms, entry.version))
    shown = ordered[-inbox.page_size :]
    return {"settles": shown, "settles_hidden": len(entries) - len(shown)}


async def events(request: Request) -> Response:
    inbox = _inbox(request)
    if await inbox.principal(request) is None:
        return Response(status_code=401 if not inbox.local_only else 403)

    async def wait() -> None:
        await inbox.changes.wait(inbox.poll_s)

    return EventSourceResponse(pending_changes(inbox.fingerprint, wait), ping=15)


_NOT_AUTHORIZED = "You are not authorized to use this inbox."


def _deny(principal: Principal, pending: PendingApproval) -> bool:
    return False


def _allow(principal: Principal, pending: PendingApproval) -> bool:
    return True


class AllowPrincipals:
    """A permission hook (``can_decide``, ``can_edit`` or ``can_settle``) that allows exactly
    the named principals, compared by identity (a principal's ``id``, else ``str(principal)``;
    the one its CSRF tokens are bound to). No names: nobody."""

    def __init__(self, names: tuple[str, ...] | frozenset[str] = ()) -> None:
        self.names = frozenset(names)

    def __call__(self, principal: Principal, item: object) -> bool:
        return principal_identity(principal) in self.names

    def __repr__(self) -> str:
        return f"AllowPrincipals({sorted(self.names)!r})"


def _deny_settle(principal: Principal, unknown: UnknownExecution) -> bool:
    return False


def _allow_settle(principal: Principal, unknown: UnknownExecution) -> bool:
    return True


STORAGE_FAILED = "The store did not answer. Reload to see where things stand."


async def _storage_failed(request: Request, exc: Exception) -> Response:
    """A store that failed under any page (a read, the re-read after a decision): one typed
    refusal page (503), never Starlette's 500; the error is mapped here, once."""
    return _inbox(request).refuse(request, 503, STORAGE_FAILED)


class InboxApp(Starlette):
    """The inbox's Starlette app; its security headers wrap even the 500 page."""

    def build_middleware_stack(self) -> ASGIApp:
        # Middleware added the usual way sits inside Starlette's ServerErrorMiddleware, whose
        # "Internal Server Error" would then leave without the headers.
        return SecurityHeaders(super().build_middleware_stack())


def create_inbox(
    storage: InboxStorage | AsyncInboxStorage,
    *,
    definition: ChatDefinition | Callable[[str], ChatDefinition],
    authorize: Authorize | None = None,
    can_decide: CanDecide | None = None,
    can_edit: CanEdit | None = None,
    can_settle: CanSettle | None = None,
    local_only: bool = False,
    bridge_for: BridgeFor | None = None,
    upstream_for: UpstreamFor | None = None,
    memory_for: MemoryFor | None = None,
    recent_messages: int = 10,
    clock: Callable[[], int] | None = None,
    csrf_secret: bytes | None = None,
    trusted_origins: tuple[str, ...] = (),
    bounds: Bounds = DEFAULT_BOUNDS,
    page_size: int = 50,
    max_cursor: int = MAX_CURSOR,
    max_reason: int = 1_000,
    max_body: int = 16_384,
    max_result: int = 8_000,
    poll_interval_s: float = 2.0,
) -> InboxApp:
    """The approver's inbox as a Starlette app; mount it anywhere (docs/inbox.md).

    ``authorize(request)`` returns the host's principal or ``None`` (refused); it may be async.
    ``can_decide(principal, pending)`` allows each decision; without it nobody may decide,
    except in ``local_only`` mode without ``authorize`` (the developer's own machine), which
    serves loopback clients only. ``can_edit(principal, pending)`` allows a principal who may
    decide a call to approve it with edited arguments ("Edit and approve", ADR-0135), with the
    same default: a host that allows decisions allows no edits until it says so.
    ``can_settle(principal, unknown)`` allows each settle of an
    unknown execution on the operator's page, with the same default. A decision goes to
    ``bridge_for(session_id)`` when it returns a bridge, else to the session's coordinator
    over ``upstream_for(session_id)``; a settle continues the session's runs through that
    bridge's ``reconcile``. With ``memory_for(session_id)`` a call's page shows the chat's
    last ``recent_messages``.

    ``storage`` is sync or asyncio; over asyncio storage the session, the bridge, the upstream
    and the memory are the asyncio ones (``AsyncPydanticAIBridge``, ``AsyncUpstreamChat``), and
    the hooks may be async (``bridge_for`` may await a resumed ``AsyncChatSession``).
    """
    if authorize is None and not local_only:
        raise ConfigError(
            "The inbox needs an authorize hook.",
            hint="Pass authorize=(request -> principal | None), or local_only=True on loopback.",
        )
    flavours = {
        inspect.iscoroutinefunction(getattr(storage, name, None))
        for name in ("list_pending", "find_token")
    }
    if not has_pending_index(storage) or len(flavours) != 1:
        raise ConfigError(
            "The inbox needs a storage with the pending index (list_pending, find_token).",
            hint="Pass a MemoryStorage, SQLiteStorage, AsyncSQLiteStorage or another adapter.",
        )
    if bridge_for is None and upstream_for is None:
        raise ConfigError(
            "The inbox needs a way to decide.",
            hint="Pass upstream_for=(session_id -> UpstreamChat), bridge_for, or both.",
        )
    if not (
        1 <= page_size <= 1000
        and 16 <= max_cursor <= 4096
        and max_reason >= 1
        and max_body >= 1024
        and 1 <= max_result <= max_body
        and recent_messages >= 1
    ):
        raise ConfigError("The inbox's bounds are invalid.", hint="See docs/inbox.md.")
    if can_decide is None:
        can_decide = _allow if authorize is None else _deny
    if can_edit is None:  # asked separately: may approve is not may rewrite what runs
        can_edit = _allow if authorize is None else _deny
    if can_settle is None:  # the same default, asked separately: deciding is not settling
        can_settle = _allow_settle if authorize is None else _deny_settle
    inbox = _Inbox(
        storage=storage,
        asyncio=flavours == {True},
        definition_for=definition if callable(definition) else (lambda _sid: definition),
        authorize=authorize,
        can_decide=can_decide,
        can_edit=can_edit,
        can_settle=can_settle,
        local_only=local_only,
        bridge_for=bridge_for,
        upstream_for=upstream_for,
        memory_for=memory_for,
        recent_messages=recent_messages,
        clock=clock or _system_clock,
        csrf_secret=csrf_secret,
        trusted_origins=frozenset(trusted_origins),
        bounds=bounds,
        page_size=page_size,
        max_cursor=max_cursor,
        max_reason=max_reason,
        max_body=max_body,
        max_result=max_result,
        poll_interval_s=poll_interval_s,
    )
    app = InboxApp(
        exception_handlers={StorageError: _storage_failed},
        routes=[
            Route("/", list_page, name="list"),
            Route("/call/{token}", detail_page, name="detail"),
            Route("/call/{token}/approve", approve, methods=["POST"], name="approve"),
            Route("/call/{token}/reject", reject, methods=["POST"], name="reject"),
            Route("/call/{token}/edit", edit, methods=["POST"], name="edit"),
            Route("/operator", operator_page, name="operator"),
            Route("/operator/settle", settle, methods=["POST"], name="settle"),
            Route("/session/{session_id}/audit", audit_page, name="audit"),
            Route("/events", events, name="events"),
            Mount("/static", StaticFiles(packages=[("akchat_fsm.inbox", "static")]), name="static"),
        ],
    )
    app.state.inbox = inbox
    return app
