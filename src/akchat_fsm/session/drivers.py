"""The two tiny drivers that run a plan: one sync, one asyncio. Only the I/O call differs.

A driver sends each effect's result back into the plan, or throws the effect's exception into
it; the plan decides what that means. Storage exceptions that are not already ours are mapped
here, once: a failed ``load`` changed nothing (:class:`StorageUnavailable`), a failed ``save``
may have applied (:class:`OutcomeUnknown`). Upstream and memory exceptions go to the plan
untouched, because only the plan knows which record they leave behind.

Every port call is made in one place (``_start``) for both drivers, one ``match`` over every
effect the plans can yield, proven exhaustive by mypy (``assert_never``); anything else fails
there with an ``AssertionError`` naming it. A driver only awaits what the port returned, or
refuses it: an awaitable from a port given to the sync API (closed, never run) or a plain value
from one given to the asyncio API is a :class:`ConfigError` naming the right function
(ADR-0091), never a result the plan could take for success.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar, assert_never

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..wire.bounded import thaw
from ._flavour import wrong_flavour
from .effects import (
    CallApprove,
    CallDeny,
    Effect,
    Emit,
    Load,
    MemoryRead,
    Plan,
    PortEffect,
    ProposeUpstream,
    ReadMemory,
    SaveSnapshot,
)
from .observers import Observer, log

__all__ = ["Ports", "execute_sync", "run_async", "run_sync"]

T = TypeVar("T")

NO_UPSTREAM = "This session has no upstream chat controller."
NO_MEMORY = "Reconciliation needs the host's ChatMemory."


@dataclass
class Ports:
    """Where a plan's effects go. ``upstream`` and ``memory`` are needed only by some plans."""

    storage: Any
    upstream: Any = None
    memory: Any = None
    observers: Sequence[Observer] = field(default_factory=tuple)


def _storage_error(effect: Load | SaveSnapshot, exc: Exception) -> AkchatError:
    if isinstance(exc, AkchatError):
        return exc
    if isinstance(effect, Load):
        err: AkchatError = StorageUnavailable(f"storage load failed: {exc!r}")
    else:
        err = OutcomeUnknown(f"storage save failed and may have applied: {exc!r}")
    err.__cause__ = exc
    return err


def _upstream(ports: Ports) -> Any:
    if ports.upstream is None:
        raise ConfigError(NO_UPSTREAM)
    return ports.upstream


def _memory(ports: Ports) -> Any:
    if ports.memory is None:
        raise ConfigError(NO_MEMORY)
    return ports.memory


def _notify(ports: Ports, emit: Emit) -> list[Awaitable[object]]:
    """Call every observer; a raising one is logged and ignored. Returns what they awaited."""
    pending: list[Awaitable[object]] = []
    for observer in ports.observers:
        try:
            result = observer(emit.event)
        except Exception:
            log.exception("session observer raised; ignored")
            continue
        if inspect.isawaitable(result):
            pending.append(result)
    return pending


def _advance(plan: Plan[Any], value: Any, error: Exception | None) -> tuple[bool, Any]:
    """Send the last effect's result (or throw its error) into ``plan``.

    Returns ``(False, next_effect)`` or ``(True, plan_result)``.
    """
    try:
        return False, plan.send(value) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value


def _identity(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _Started:
    """A port call made: what the method returned (an awaitable for an asyncio port)."""

    returned: Any
    port: str  # e.g. "storage.load", for the wrong-flavour message
    finish: Callable[[Any], Any] = _identity
    #: A storage effect: its port's exceptions are mapped by :func:`_storage_error`.
    storage: Load | SaveSnapshot | None = None


def _raise_mapped(effect: Load | SaveSnapshot, exc: Exception) -> NoReturn:
    mapped = _storage_error(effect, exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


def _storage_call(effect: Load | SaveSnapshot, port: str, call: Callable[[], Any]) -> _Started:
    try:
        returned = call()
    except Exception as exc:
        _raise_mapped(effect, exc)
    return _Started(returned, port, storage=effect)


def _start(effect: PortEffect, ports: Ports) -> _Started:
    """Make the port call ``effect`` asks for: the one place that maps effects to ports.

    Exhaustive (mypy proves it through ``assert_never``); at run time an object that is no
    effect fails here, loudly, instead of being taken for some port's answer.
    """
    match effect:
        case Load(session_id=session_id):
            return _storage_call(effect, "storage.load", lambda: ports.storage.load(session_id))
        case SaveSnapshot(snapshot=snapshot, expected_cursor=expected):
            return _storage_call(
                effect, "storage.save", lambda: ports.storage.save(snapshot, expected)
            )
        case ProposeUpstream(tool_call_id=tool_call_id, name=name, args=args):
            returned = _upstream(ports).propose_tool_call(tool_call_id, name, thaw(args))
            return _Started(returned, "upstream.propose_tool_call")
        case CallApprove(tool_call_id=tool_call_id):
            return _Started(_upstream(ports).approve(tool_call_id), "upstream.approve")
        case CallDeny(tool_call_id=tool_call_id, reason=reason):
            return _Started(_upstream(ports).deny(tool_call_id, reason), "upstream.deny")
        case ReadMemory(tool_call_ids=tool_call_ids):
            memory = _memory(ports)
            if callable(getattr(memory, "tool_call_statuses", None)):
                returned = memory.tool_call_statuses(list(tool_call_ids))
                return _Started(returned, "memory.tool_call_statuses", _statuses)
            return _Started(memory.load(), "memory.load", _record)
        case _:
            assert_never(effect)


def _statuses(value: Any) -> MemoryRead:
    return MemoryRead(statuses=value)


def _record(value: Any) -> MemoryRead:
    return MemoryRead(record=value)


def _close(awaitable: object) -> None:
    # Never awaited, so the asyncio port's call never ran: close it cleanly (no warning).
    close = getattr(awaitable, "close", None) or getattr(awaitable, "cancel", None)
    if close is not None:
        close()


def _execute_sync(effect: Effect, ports: Ports) -> Any:
    match effect:
        case Emit():
            for pending in _notify(ports, effect):
                _close(pending)  # a coroutine observer on a sync session cannot be awaited
            return None
        case _:
            started = _start(effect, ports)
    if inspect.isawaitable(started.returned):
        # An asyncio port on the sync API: its call never ran. Refuse loudly (never treat the
        # coroutine object as the call's success: that would record a false completion).
        _close(started.returned)
        raise ConfigError(wrong_flavour(started.port, asyncio_port=True))
    return started.finish(started.returned)


async def _execute_async(effect: Effect, ports: Ports) -> Any:
    match effect:
        case Emit():
            for pending in _notify(ports, effect):
                try:
                    await pending
                except Exception:
                    log.exception("session observer raised; ignored")
            return None
        case _:
            started = _start(effect, ports)
    _check_awaitable(started)
    try:
        return started.finish(await started.returned)
    except Exception as exc:
        if started.storage is None:
            raise  # upstream and memory exceptions are the plan's to interpret
        _raise_mapped(started.storage, exc)


def _check_awaitable(started: _Started) -> None:
    if not inspect.isawaitable(started.returned):
        raise ConfigError(wrong_flavour(started.port, asyncio_port=False))


def execute_sync(effect: Effect, ports: Ports) -> Any:
    """Perform one effect synchronously (what :func:`run_sync` does for each step)."""
    return _execute_sync(effect, ports)


def run_sync(plan: Plan[T], ports: Ports) -> T:
    """Run ``plan`` to completion, performing each effect through ``ports`` in this driver's
    flavour (the sync driver calls, the asyncio driver awaits)."""
    done, out = _advance(plan, None, None)
    while not done:
        value, error = None, None
        try:
            value = _execute_sync(out, ports)
        except Exception as exc:  # the plan decides what a failed effect means
            error = exc
        done, out = _advance(plan, value, error)
    return out  # type: ignore[no-any-return]


async def run_async(plan: Plan[T], ports: Ports) -> T:
    """Run ``plan`` to completion, performing each effect through ``ports`` in this driver's
    flavour (the sync driver calls, the asyncio driver awaits)."""
    done, out = _advance(plan, None, None)
    while not done:
        value, error = None, None
        try:
            value = await _execute_async(out, ports)
        except Exception as exc:  # the plan decides what a failed effect means
            error = exc
        done, out = _advance(plan, value, error)
    return out  # type: ignore[no-any-return]
