"""The two tiny drivers that run every plan: one sync, one asyncio. Only the I/O call differs.

Every plan of the library runs here: the session's operations, the ledger's and the bridges'
(ADR-0121). A driver sends each effect's result back into the plan, or throws the effect's
exception into it; the plan decides what that means. Storage exceptions that are not already
ours are mapped here, once, for every storage effect: a failed read (``load``,
``load_record``, ``list_records``) changed nothing (:class:`StorageUnavailable`), a failed
write (``save``, ``save_record``) may have applied (:class:`OutcomeUnknown`). Upstream,
memory and runtime exceptions go to the plan untouched, because only the plan knows
which record they leave behind.

Every port call is made in one place (``_start``) for both drivers, one ``match`` over every
effect the plans can yield, proven exhaustive by mypy (``assert_never``); anything else fails
there with an ``AssertionError`` naming it. A driver only awaits what the port returned, or
refuses it: an awaitable from a port given to the sync API (closed, never run) or a plain value
from one given to the asyncio API is a :class:`ConfigError` naming the right function
(ADR-0091), never a result the plan could take for success. That is the one flavour policy: a
host that means a sync storage under an asyncio API adapts it when it builds the object
(``AsyncToolLedger`` does, ADR-0121). A tool body is not a port: the asyncio driver awaits
what it returns if that is awaitable (a sync body is fine there), the sync driver refuses it.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar, assert_never

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..wire.bounded import thaw
from ._flavour import wrong_flavour
from .effects import (
    AskHost,
    BodyOutcome,
    CallApprove,
    CallDeny,
    DeleteRecord,
    Effect,
    Emit,
    ExpireListed,
    ListAudit,
    ListPending,
    ListProcessing,
    ListRecords,
    Load,
    LoadRecord,
    MemoryRead,
    Plan,
    PortEffect,
    Progress,
    ProposeUpstream,
    ReadMemory,
    ReconcileListed,
    ResumeRuntime,
    RunBody,
    SaveRecord,
    SaveSnapshot,
    SaveSnapshotCreatingRecords,
    StartRuntime,
    StorageEffect,
)
from .observers import Observer, log

__all__ = ["Ports", "execute_sync", "run_async", "run_sync"]

T = TypeVar("T")

NO_UPSTREAM = "This session has no upstream chat controller."
NO_MEMORY = "Reconciliation needs the host's ChatMemory."
NO_BODY = "This plan has no tool body to run."
NO_RUNTIME = "This plan has no agent runtime: only a bridge's plans call one."
NO_SWEEPER = "This plan has no sweeper: only reconcile_all's plan asks the host."
ASYNC_BODY = "An async tool body was given to a sync API; use the async twin."
#: The right API for a record or bridge port of the other flavour (the session's is
#: :data:`~akchat_fsm.session._flavour.RIGHT_API`).
RIGHT_BRIDGE_API = {
    "async": "the asyncio twin (AsyncToolLedger, AsyncBridge, read_bridge_records_async)",
    "sync": "the sync twin (ToolLedger, Bridge, read_bridge_records)",
}
RIGHT_SWEEP_API = {"async": "reconcile_all_async", "sync": "reconcile_all"}
#: Which effects read storage (a failure changed nothing); every other storage effect writes.
_READS = (Load, LoadRecord, ListRecords, ListProcessing, ListPending, ListAudit)


@dataclass
class Ports:
    """Where a plan's effects go. Only ``storage`` is needed by every plan.

    ``upstream`` and ``memory`` serve some session plans; ``body`` is a ledger plan's guarded
    tool body (``RunBody``); ``runtime`` is a bridge's agent runtime (the bridge effects);
    ``sweeper`` performs ``reconcile_all``'s host steps (the sweep effects).
    """

    storage: Any
    upstream: Any = None
    memory: Any = None
    observers: Sequence[Observer] = field(default_factory=tuple)
    body: Callable[[], Any] | None = None
    runtime: Any = None
    sweeper: Any = None


def _storage_error(effect: StorageEffect, method: str, exc: Exception) -> AkchatError:
    """The one storage-error mapping: a read that failed changed nothing, a write may have."""
    if isinstance(exc, AkchatError):
        return exc
    if isinstance(effect, _READS):
        err: AkchatError = StorageUnavailable(f"storage {method} failed: {exc!r}")
    else:
        err = OutcomeUnknown(f"storage {method} failed and may have applied: {exc!r}")
    err.__cause__ = exc
    return err


def _port(ports: Ports, name: str, missing: str) -> Any:
    port = getattr(ports, name)
    if port is None:
        raise ConfigError(missing)
    return port


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


def _advance(
    plan: Generator[Any, Any, Any], value: Any, error: Exception | None
) -> tuple[bool, Any]:
    """Send the last effect's result (or throw its error) into ``plan``: the one step every
    driver of the library takes (the sweep's too).

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
    storage: StorageEffect | None = None
    #: The API to name when the flavour is wrong, per flavour (``None``: the session's).
    right: Mapping[str, str] | None = None


def _raise_mapped(effect: StorageEffect, method: str, exc: Exception) -> NoReturn:
    mapped = _storage_error(effect, method, exc)
    if mapped is exc:
        raise exc
    raise mapped from exc


def _start(effect: PortEffect, ports: Ports) -> _Started:
    """Make the port call ``effect`` asks for: the one place that maps effects to ports.

    Exhaustive (mypy proves it through ``assert_never``); at run time an object that is no
    effect fails here, loudly, instead of being taken for some port's answer.
    """
    match effect:
        case (
            Load()
            | SaveSnapshot()
            | SaveSnapshotCreatingRecords()
            | LoadRecord()
            | SaveRecord()
            | DeleteRecord()
            | ListRecords()
            | ListProcessing()
            | ListPending()
            | ListAudit()
        ):
            return _store(effect, ports.storage)
        case ProposeUpstream(tool_call_id=tool_call_id, name=name, args=args):
            upstream = _port(ports, "upstream", NO_UPSTREAM)
            returned = upstream.propose_tool_call(tool_call_id, name, thaw(args))
            return _Started(returned, "upstream.propose_tool_call")
        case CallApprove(tool_call_id=tool_call_id):
            upstream = _port(ports, "upstream", NO_UPSTREAM)
            return _Started(upstream.approve(tool_call_id), "upstream.approve")
        case CallDeny(tool_call_id=tool_call_id, reason=reason):
            upstream = _port(ports, "upstream", NO_UPSTREAM)
            return _Started(upstream.deny(tool_call_id, reason), "upstream.deny")
        case ReadMemory(tool_call_ids=tool_call_ids):
            memory = _port(ports, "memory", NO_MEMORY)
            if callable(getattr(memory, "tool_call_statuses", None)):
                returned = memory.tool_call_statuses(list(tool_call_ids))
                return _Started(returned, "memory.tool_call_statuses", _statuses)
            return _Started(memory.load(), "memory.load", _record)
        case StartRuntime(args=args, kwargs=kwargs):
            runtime = _port(ports, "runtime", NO_RUNTIME)
            return _Started(runtime.start(*args, **kwargs), "runtime.start", right=RIGHT_BRIDGE_API)
        case ResumeRuntime(run=run, decisions=decisions, guard=guard):
            runtime = _port(ports, "runtime", NO_RUNTIME)
            returned = runtime.resume(run, decisions, guard)
            return _Started(returned, "runtime.resume", right=RIGHT_BRIDGE_API)
        case AskHost(session_id=session_id):
            sweeper = _port(ports, "sweeper", NO_SWEEPER)
            return _Started(sweeper.ask(session_id), "ports_for", right=RIGHT_SWEEP_API)
        case ReconcileListed():
            return _Started(
                _port(ports, "sweeper", NO_SWEEPER).reconcile(effect), "sweeper.reconcile"
            )
        case ExpireListed():
            return _Started(_port(ports, "sweeper", NO_SWEEPER).expire(effect), "sweeper.expire")
        case Progress():
            return _Started(
                _port(ports, "sweeper", NO_SWEEPER).progress(effect), "sweeper.progress"
            )
        case _:
            assert_never(effect)


def _store(effect: StorageEffect, storage: Any) -> _Started:
    """One storage call; what it raises at once is mapped here, what it raises when awaited
    is mapped by the asyncio driver (both through :func:`_storage_error`)."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = {}
    match effect:
        case Load(session_id=session_id):
            method, args = "load", (session_id,)
        case SaveSnapshot(snapshot=snapshot, expected_cursor=expected):
            method, args = "save", (snapshot, expected)
        case SaveSnapshotCreatingRecords(save=save, records=created):
            method, args = "save_with_records", (save.snapshot, save.expected_cursor, created)
        case LoadRecord(session_id=session_id, key=key):
            method, args = "load_record", (session_id, key)
        case SaveRecord():
            method = "save_record"
            args = (effect.session_id, effect.key, effect.text, effect.expected_version)
            kwargs = {"processing": effect.processing}
        case DeleteRecord(session_id=session_id, key=key):
            method, args = "delete_record", (session_id, key)
        case ListRecords(session_id=session_id, prefix=prefix):
            method, args = "list_records", (session_id, prefix)
        case ListProcessing(written_before_ms=written_before_ms, limit=limit):
            method, args = "list_processing", ()
            kwargs = {"written_before_ms": written_before_ms, "limit": limit}
        case ListPending(expiring_before_ms=expiring_before_ms, after=after, limit=limit):
            method, args = "list_pending", ()
            kwargs = {"expiring_before_ms": expiring_before_ms, "after": after, "limit": limit}
        case ListAudit(since_ms=since_ms, after=after, limit=limit):
            method, args = "list_audit", ()
            kwargs = {"since_ms": since_ms, "after": after, "limit": limit}
        case _:
            assert_never(effect)
    records = isinstance(effect, LoadRecord | SaveRecord | DeleteRecord | ListRecords | ListAudit)
    sweep = isinstance(effect, ListProcessing | ListPending)
    try:
        returned = getattr(storage, method)(*args, **kwargs)
    except Exception as exc:
        _raise_mapped(effect, method, exc)
    right = RIGHT_BRIDGE_API if records else RIGHT_SWEEP_API if sweep else None
    return _Started(returned, f"storage.{method}", storage=effect, right=right)


def _statuses(value: Any) -> MemoryRead:
    return MemoryRead(statuses=value)


def _record(value: Any) -> MemoryRead:
    return MemoryRead(record=value)


def _close(awaitable: object) -> None:
    # Never awaited, so the asyncio port's call never ran: close it cleanly (no warning).
    close = getattr(awaitable, "close", None) or getattr(awaitable, "cancel", None)
    if close is not None:
        close()


def _refusal(started: _Started, *, asyncio_port: bool) -> ConfigError:
    message = wrong_flavour(started.port, asyncio_port=asyncio_port, right=started.right)
    return ConfigError(message)


def _run_body_sync(ports: Ports) -> BodyOutcome:
    try:
        result = _port(ports, "body", NO_BODY)()
    except Exception as exc:  # recorded by the plan, then re-raised by it
        return BodyOutcome(error=exc)
    if inspect.isawaitable(result):
        # An async body on the sync API never ran: never record a coroutine as its result.
        _close(result)
        return BodyOutcome(error=ConfigError(ASYNC_BODY))
    return BodyOutcome(value=result)


async def _run_body_async(ports: Ports) -> BodyOutcome:
    try:
        result = _port(ports, "body", NO_BODY)()
        # A body is the host's code, not a port: an asyncio host may give a sync one.
        return BodyOutcome(value=await result if inspect.isawaitable(result) else result)
    except Exception as exc:  # recorded by the plan, then re-raised by it
        return BodyOutcome(error=exc)


def _execute_sync(effect: Effect, ports: Ports) -> Any:
    match effect:
        case Emit():
            for pending in _notify(ports, effect):
                _close(pending)  # a coroutine observer on a sync session cannot be awaited
            return None
        case RunBody():
            return _run_body_sync(ports)
        case _:
            started = _start(effect, ports)
    if inspect.isawaitable(started.returned):
        # An asyncio port on the sync API: its call never ran. Refuse loudly (never treat the
        # coroutine object as the call's success: that would record a false completion).
        _close(started.returned)
        raise _refusal(started, asyncio_port=True)
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
        case RunBody():
            return await _run_body_async(ports)
        case _:
            started = _start(effect, ports)
    if not inspect.isawaitable(started.returned):
        raise _refusal(started, asyncio_port=False)
    try:
        return started.finish(await started.returned)
    except Exception as exc:
        if started.storage is None:
            raise  # upstream, memory and runtime exceptions are the plan's to interpret
        _raise_mapped(started.storage, started.port.removeprefix("storage."), exc)


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
