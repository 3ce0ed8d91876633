"""The controlled-chat driver (docs/reference.md §5.3-5.4): the host owns the session; we only
project.

Theory of operation. :func:`create_controlled_chat` validates an untrusted snapshot (strict
shell, then canonical messages), fails closed before anything is built, and returns a frozen
:class:`ControlledChat`: state from the snapshot, plus the host's ten callbacks picked one by one
and passed through unwrapped. The driver creates no controller, stores nothing, and adds no
optimistic state: after a callback the host re-renders with a new snapshot.

Beyond the reference (ADR-0032..0034):

- :class:`SnapshotSequence` refuses a stale or duplicate host snapshot per session (§7.17).
- :attr:`ControlledChat.duplicate_message_ids` reports repeated ids; they are kept (parity).
- :class:`ControlledConfirmations` is the in-memory confirmation coordinator of controlled mode,
  bound to the snapshot's session id, forwarding to the host's ``propose_tool_call`` /
  ``approve`` / ``deny``. Every decision comes from the pure kernel
  (:mod:`akchat_fsm.core.records`); this module only performs the calls.

This module imports neither storage nor session code (a test pins that).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeAlias, TypeVar, cast

from pydantic import ValidationError

from .core import records as kernel
from .core.confirmations import DEFAULT_TTL_MS, confirmation_ids, random_suffix
from .errors import (
    ConfigError,
    InvalidConfirmationToken,
    InvalidControlledSnapshot,
    InvalidMemoryRecord,
)
from .machines.confirmation import ConfirmationEvent
from .wire.controlled import ChatStatus, ControlledError, ControlledSnapshot, Usage
from .wire.controlled import parse_controlled_snapshot as _parse
from .wire.enums import ConfirmationStatus
from .wire.js import as_safe_int, is_identifier
from .wire.memory import Message, ToolCall, ToolCallStatus, clone_bounded_json

__all__ = [
    "ACTION_NAMES",
    "ControlledActions",
    "ControlledChat",
    "ControlledConfirmation",
    "ControlledConfirmations",
    "SnapshotSequence",
    "StaleControlledSnapshot",
    "create_controlled_chat",
]

T = TypeVar("T")
#: Sync or async: a callback may return its value or an awaitable of it.
MaybeAwaitable: TypeAlias = T | Awaitable[T]

ACTION_NAMES = (
    "send",
    "stop",
    "retry",
    "edit",
    "regenerate",
    "set_input",
    "clear",
    "propose_tool_call",
    "approve",
    "deny",
)


class ControlledActions(Protocol):
    """Exactly the ten host callbacks (the reference's ``ControlledChatActions``, snake_case).

    Each may be a plain function or a coroutine function; the driver never wraps them.
    """

    def send(self, text: str, /) -> MaybeAwaitable[None]: ...
    def stop(self) -> MaybeAwaitable[None]: ...
    def retry(self) -> MaybeAwaitable[None]: ...
    def edit(
        self, message_id: str, new_content: str, /, *, regenerate: bool = ...
    ) -> MaybeAwaitable[None]: ...
    def regenerate(self, message_id: str | None = ..., /) -> MaybeAwaitable[None]: ...
    def set_input(self, value: str, /) -> MaybeAwaitable[None]: ...
    def clear(self) -> MaybeAwaitable[None]: ...
    def propose_tool_call(self, call: Mapping[str, Any], /) -> MaybeAwaitable[Any]: ...
    def approve(self, tool_call_id: str, /) -> MaybeAwaitable[None]: ...
    def deny(self, tool_call_id: str, reason: str | None = ..., /) -> MaybeAwaitable[None]: ...


Callback = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class ControlledChat:
    """A read-only chat view over one validated snapshot, with the host's callbacks.

    Calling a callback never changes this view: render the next snapshot instead.
    """

    snapshot: ControlledSnapshot
    send: Callback
    stop: Callback
    retry: Callback
    edit: Callback
    regenerate: Callback
    set_input: Callback
    clear: Callback
    propose_tool_call: Callback
    approve: Callback
    deny: Callback
    mode: Literal["controlled"] = field(default="controlled", init=False)

    @property
    def session_id(self) -> str:
        return self.snapshot.session_id

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.snapshot.messages

    @property
    def status(self) -> ChatStatus:
        return self.snapshot.status

    @property
    def input(self) -> str:
        return self.snapshot.input

    @property
    def error(self) -> ControlledError | None:
        return self.snapshot.error

    @property
    def usage(self) -> Usage:
        return self.snapshot.usage

    @property
    def duplicate_message_ids(self) -> tuple[str, ...]:
        """Ids used by more than one message, first-seen order (accepted, as the reference)."""
        seen: set[str] = set()
        repeated: dict[str, None] = {}
        for message in self.snapshot.messages:
            if message.id in seen:
                repeated[message.id] = None
            seen.add(message.id)
        return tuple(repeated)

    def tool_calls_awaiting_confirmation(self) -> tuple[ToolCall, ...]:
        """Tool calls whose upstream status is ``requires_confirmation``, in message order."""
        return tuple(
            call
            for message in self.snapshot.messages
            for call in message.tool_calls or ()
            if call.status is ToolCallStatus.REQUIRES_CONFIRMATION
        )


def _pick(actions: object, name: str) -> Callback:
    try:
        if isinstance(actions, Mapping):
            callback = actions.get(name)
        else:
            callback = getattr(actions, name, None)
    except Exception as exc:  # a host property that raises: report it as bad options
        raise ConfigError(f"Controlled chat action {name!r} could not be read.") from exc
    if not callable(callback):
        raise ConfigError(f"Controlled chat action {name!r} is missing or not callable.")
    return cast(Callback, callback)


def create_controlled_chat(snapshot: object, actions: ControlledActions | object) -> ControlledChat:
    """Validate ``snapshot`` and project it with the host's ``actions``.

    Raises :class:`~akchat_fsm.errors.InvalidControlledSnapshot` for a bad snapshot and
    :class:`~akchat_fsm.errors.ConfigError` when a callback is missing, before anything is
    built. Only the ten callbacks are read from ``actions`` (an object or a mapping).
    """
    if isinstance(snapshot, ControlledSnapshot):
        snapshot.check()  # fail closed even on an instance built without validation
        parsed = snapshot
    else:
        parsed = _parse(snapshot)
    picked = {name: _pick(actions, name) for name in ACTION_NAMES}
    return ControlledChat(snapshot=parsed, **picked)


# --------------------------------------------------------------------------- freshness


class StaleControlledSnapshot(InvalidControlledSnapshot):
    """A host snapshot whose sequence is not newer than the last one accepted (ADR-0033).

    ``layer`` is ``"shell"``: freshness is a property of the envelope, not of the messages.
    """

    def __init__(self, session_id: str, sequence: int, last: int) -> None:
        super().__init__(
            "shell",
            f"Controlled snapshot {sequence} of session {session_id!r} is not newer than {last}.",
        )
        self.session_id = session_id
        self.sequence = sequence
        self.last = last


class SnapshotSequence:
    """Per-session freshness gate: each accepted snapshot must carry a larger sequence.

    The host numbers its snapshots (any safe integer >= 0, strictly increasing per session).
    A stale or duplicate one raises :class:`StaleControlledSnapshot`; an invalid snapshot
    raises without consuming its sequence number. Thread-safe.
    """

    def __init__(self) -> None:
        self._last: dict[str, int] = {}
        self._lock = threading.Lock()

    def last(self, session_id: str) -> int | None:
        """The sequence of the last accepted snapshot of ``session_id``, if any."""
        with self._lock:
            return self._last.get(session_id)

    def forget(self, session_id: str) -> None:
        """Drop what is known about ``session_id`` (e.g. when its view is unmounted)."""
        with self._lock:
            self._last.pop(session_id, None)

    def create_chat(
        self, sequence: int, snapshot: object, actions: ControlledActions | object
    ) -> ControlledChat:
        """:func:`create_controlled_chat`, refused unless ``sequence`` is fresh."""
        number = as_safe_int(sequence)
        if number is None or number < 0:
            raise InvalidControlledSnapshot(
                "shell", "Controlled snapshot sequence must be a safe integer >= 0."
            )
        chat = create_controlled_chat(snapshot, actions)
        with self._lock:
            last = self._last.get(chat.session_id)
            if last is not None and number <= last:
                raise StaleControlledSnapshot(chat.session_id, number, last)
            self._last[chat.session_id] = number
        return chat


# --------------------------------------------------------------------------- confirmations


@dataclass(frozen=True, slots=True)
class ControlledConfirmation:
    """One in-memory confirmation record of controlled mode (never persisted)."""

    session_id: str
    token: str
    action: str
    input: Mapping[str, Any]
    tool_call_id: str
    expires_at: int
    status: ConfirmationStatus


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _settle(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class ControlledConfirmations:
    """In-memory confirmation coordinator bound to one controlled chat's session id.

    Forwards to the chat's ``propose_tool_call`` / ``approve`` / ``deny``. Resolutions are
    single-flighted per token: concurrent calls on one token share one upstream call and its
    outcome. A token of another session, or an unknown one, raises
    :class:`~akchat_fsm.errors.InvalidConfirmationToken` and calls nothing. A terminal record
    raises :class:`~akchat_fsm.errors.AlreadyResolved` (its ``record`` attached). If upstream
    fails the claim is released back to ``pending`` (nothing durable to protect in memory) and
    the error propagates, so a retry works. Methods are coroutines; callbacks may be sync.
    """

    def __init__(
        self,
        chat: ControlledChat,
        *,
        ttl_ms: int = DEFAULT_TTL_MS,
        now: Callable[[], int] = _now_ms,
        create_id: Callable[[], str] | None = None,
    ) -> None:
        ttl = as_safe_int(ttl_ms)
        if ttl is None or ttl <= 0 or not callable(now):
            raise ConfigError("Action confirmation options are invalid.")
        self._chat = chat
        self._ttl_ms = ttl
        self._now = now
        # The core's id factory (128 random bits), not a copy of it: the two drivers cannot drift.
        self._create_id = create_id or random_suffix
        self._records: tuple[kernel.Record, ...] = ()
        self._inputs: dict[str, Mapping[str, Any]] = {}
        self._flights: dict[str, asyncio.Future[ControlledConfirmation]] = {}

    @property
    def session_id(self) -> str:
        return self._chat.session_id

    def records(self) -> tuple[ControlledConfirmation, ...]:
        return tuple(self._view(record) for record in self._records)

    def by_tool_call(self, tool_call_id: str) -> ControlledConfirmation | None:
        for record in self._records:
            if record.tool_call_id == tool_call_id:
                return self._view(record)
        return None

    def _view(self, record: kernel.Record) -> ControlledConfirmation:
        return ControlledConfirmation(
            session_id=self.session_id,
            token=record.token,
            action=record.action,
            input=self._inputs[record.token],
            tool_call_id=record.tool_call_id,
            expires_at=record.expires_at,
            status=record.status,
        )

    def _clock(self) -> int:
        now = as_safe_int(self._now())
        if now is None or now < 0:
            raise ConfigError("Action confirmation clock returned an invalid time.")
        return now

    async def propose(self, name: str, args: Mapping[str, Any]) -> ControlledConfirmation:
        """Propose ``name(args)`` upstream and bind a pending confirmation to it."""
        token, request_id = confirmation_ids(self._create_id())  # the session driver's ids
        if kernel.find(self._records, token) >= 0 or not is_identifier(name):
            raise ConfigError("Action confirmation options are invalid.")
        request = {"id": request_id, "name": name, "args": _json_object(args)}
        call = _tool_call(await _settle(self._chat.propose_tool_call(request)))
        status = kernel.born_status(call.status)
        record = kernel.Record(token, call.name, call.id, self._clock() + self._ttl_ms, status)
        self._records = (*self._records, record)
        self._inputs[token] = call.args
        return self._view(record)

    async def approve(self, token: str, session_id: str) -> ControlledConfirmation:
        """Approve once; after expiry this denies upstream and records ``expired``."""
        return await self._resolve(token, session_id, ConfirmationEvent.APPROVE, None)

    async def reject(
        self, token: str, session_id: str, reason: str | None = None
    ) -> ControlledConfirmation:
        """Deny once with ``reason``; after expiry the record ends ``expired``."""
        return await self._resolve(token, session_id, ConfirmationEvent.REJECT, reason)

    async def _resolve(
        self, token: str, session_id: str, event: ConfirmationEvent, reason: str | None
    ) -> ControlledConfirmation:
        if session_id != self.session_id or kernel.find(self._records, token) < 0:
            raise InvalidConfirmationToken()
        flight = self._flights.get(token)
        if flight is not None:  # single flight per token, whatever the event
            return await asyncio.shield(flight)
        claim = kernel.claim(self._records, token, event, self._clock())
        flight = asyncio.get_running_loop().create_future()
        self._flights[token] = flight
        self._records = claim.records
        try:
            record = claim.record  # the kernel decides which call the claim allows, and why
            if kernel.upstream_call(record) is kernel.UpstreamAction.APPROVE:
                await _settle(self._chat.approve(record.tool_call_id))
            else:
                why = kernel.deny_reason(record, reason)
                await _settle(self._chat.deny(record.tool_call_id, why))
        except BaseException as exc:
            # In memory nothing durable records the claim, so give it up: a retry may run.
            self._records = kernel.release(self._records, token)
            if isinstance(exc, asyncio.CancelledError):
                flight.cancel()
            else:
                flight.set_exception(exc)
                flight.exception()  # retrieved here; joiners re-raise it themselves
            raise
        else:
            self._records = kernel.complete(self._records, token)
            result = self._view(self._records[kernel.find(self._records, token)])
            flight.set_result(result)
            return result
        finally:
            del self._flights[token]


def _json_object(value: object) -> dict[str, Any]:
    """A fresh JSON object within the record bounds: args sent upstream are never aliased."""
    try:
        cloned = clone_bounded_json(value, python_forms=True)
    except InvalidMemoryRecord as exc:
        raise ConfigError("Action confirmation options are invalid.") from exc
    if type(cloned) is not dict:
        raise ConfigError("Action confirmation options are invalid.")
    return cloned


def _tool_call(value: object) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    try:
        return ToolCall.model_validate(clone_bounded_json(value))
    except (InvalidMemoryRecord, ValidationError) as exc:
        raise ConfigError("Upstream returned an invalid tool call.") from exc
