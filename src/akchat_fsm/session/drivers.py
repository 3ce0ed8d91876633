"""The two tiny drivers that run a plan: one sync, one asyncio. Only the I/O call differs.

A driver sends each effect's result back into the plan, or throws the effect's exception into
it; the plan decides what that means. Storage exceptions that are not already ours are mapped
here, once: a failed ``load`` changed nothing (:class:`StorageUnavailable`), a failed ``save``
may have applied (:class:`OutcomeUnknown`). Upstream and memory exceptions go to the plan
untouched, because only the plan knows which record they leave behind.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..wire.bounded import thaw
from .effects import Approve, Deny, Effect, Emit, Load, Plan, Propose, ReadMemory, Save
from .observers import Observer, log

__all__ = ["Ports", "run_async", "run_sync"]

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


def _storage_error(effect: Load | Save, exc: Exception) -> AkchatError:
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


def _execute_sync(effect: Effect, ports: Ports) -> Any:
    if isinstance(effect, Load | Save):
        try:
            if isinstance(effect, Load):
                return ports.storage.load(effect.session_id)
            return ports.storage.save(effect.snapshot, effect.expected_cursor)
        except Exception as exc:
            raise _storage_error(effect, exc) from exc
    if isinstance(effect, Propose):
        return _upstream(ports).propose_tool_call(
            effect.tool_call_id, effect.name, thaw(effect.args)
        )
    if isinstance(effect, Approve):
        return _upstream(ports).approve(effect.tool_call_id)
    if isinstance(effect, Deny):
        return _upstream(ports).deny(effect.tool_call_id, effect.reason)
    if isinstance(effect, ReadMemory):
        return _memory(ports).load()
    for pending in _notify(ports, effect):
        # A coroutine observer on a sync session cannot be awaited; close it cleanly.
        close = getattr(pending, "close", None)
        if close is not None:
            close()
    return None


async def _execute_async(effect: Effect, ports: Ports) -> Any:
    if isinstance(effect, Emit):
        for pending in _notify(ports, effect):
            try:
                await pending
            except Exception:
                log.exception("session observer raised; ignored")
        return None
    if isinstance(effect, Load | Save):
        try:
            if isinstance(effect, Load):
                return await ports.storage.load(effect.session_id)
            return await ports.storage.save(effect.snapshot, effect.expected_cursor)
        except Exception as exc:
            raise _storage_error(effect, exc) from exc
    if isinstance(effect, Propose):
        return await _upstream(ports).propose_tool_call(
            effect.tool_call_id, effect.name, thaw(effect.args)
        )
    if isinstance(effect, Approve):
        return await _upstream(ports).approve(effect.tool_call_id)
    if isinstance(effect, Deny):
        return await _upstream(ports).deny(effect.tool_call_id, effect.reason)
    return await _memory(ports).load()


def run_sync(plan: Plan[T], ports: Ports) -> T:
    """Run ``plan`` to completion, executing its effects synchronously."""
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
    """Run ``plan`` to completion, awaiting its effects (asyncio storage/upstream/memory)."""
    done, out = _advance(plan, None, None)
    while not done:
        value, error = None, None
        try:
            value = await _execute_async(out, ports)
        except Exception as exc:  # the plan decides what a failed effect means
            error = exc
        done, out = _advance(plan, value, error)
    return out  # type: ignore[no-any-return]
