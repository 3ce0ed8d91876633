"""The I/O the ledger and the run records ask for, and the two drivers that perform it.

Like the session layer (ADR-0060), every ledger and run-record operation is written once as a
plan: a generator that yields these effects and receives their results (or has their exception
thrown into it). :func:`run_sync` needs a sync :class:`~akchat_fsm.storage.port.RecordStorage`
and a sync body; :func:`run_async` awaits whatever is awaitable, so an asyncio host may pass an
async or a sync storage and body (a runtime's async tool hook over a sync SQLite store, say).

Storage exceptions that are not already ours are mapped here, once: a failed read changed
nothing (:class:`StorageUnavailable`), a failed write may have applied (:class:`OutcomeUnknown`).
A body's exception is never mapped: it is handed to the plan as a :class:`BodyOutcome`, because
only the plan knows what it must record before re-raising it.

Stored record text is parsed in one place, :func:`stored_json`, which bounds its size and
nesting before parsing, so a hostile or corrupt record is a ``ConfigError`` (ADR-0103).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, TypeAlias, TypeVar

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..storage.checks import MAX_RECORD_CHARS

__all__ = [
    "MAX_RECORD_DEPTH",
    "BodyOutcome",
    "BridgeError",
    "Effect",
    "Invoke",
    "ListRecords",
    "LoadRecord",
    "Plan",
    "RunBody",
    "SaveRecord",
    "require_records",
    "run_async",
    "run_sync",
    "stored_json",
]


class BridgeError(AkchatError):
    """A bridge or ledger call did not do what was asked (a run held or taken over elsewhere,
    an execution whose outcome is unknown, a body that already raised, a refused verdict).

    ``record`` is the run record or ledger entry as stored (``None`` when there is none):
    never a confirmation record, which is why these are not ``ConfirmationError`` s (whose
    ``record.status`` handlers read). Each subclass says what to do (docs/errors.md).
    """

    def __init__(self, message: str, *, record: Any = None) -> None:
        super().__init__(message)
        self.record = record


T = TypeVar("T")

RECORDS_NEEDED = (
    "This storage lacks the RecordStorage capability (load_record, save_record, list_records, "
    "delete_record) that the tool-execution ledger and agent bridges need."
)
RECORDS_HINT = "Use a shipped adapter (memory, SQLite, PostgreSQL, Redis) or add the capability."
ASYNC_BODY = "An async tool body was given to a sync API; use the async twin."
ASYNC_STORAGE = "An asyncio storage was given to a sync API; use the async twin."
ASYNC_PORT = "An asyncio session or runtime was given to a sync API; use the async twin."
_RECORD_METHODS = ("load_record", "save_record", "list_records", "delete_record")


#: The deepest nesting a stored record may hold. Far above any record the bridges write, and
#: far enough below the interpreter's recursion limit that parsing it, and dumping it again for
#: an operator, never raises ``RecursionError`` from inside a deep call stack.
MAX_RECORD_DEPTH = 512
STORED_RECORD_HINT = "Repair or delete the record: no bridge could have written it."
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _depth(text: str) -> int:
    """The deepest nesting of ``text``'s arrays and objects, strings left out (no parsing)."""
    steps = map(_STEP.__getitem__, _BRACKETS.findall(_STRING.sub("", text)))
    return max(accumulate(steps), default=0)


def stored_json(text: object, what: str) -> Any:
    """Parse a stored record's JSON text; ``ConfigError`` (never retryable) if it is not.

    The record is read from storage a bridge shares with others, so it may be hostile or
    corrupt. ``what`` names it in the message ("stored run record"). Its size is bounded
    before parsing (what a shipped adapter accepts), and its
    nesting at the one parse point: the C parser's ``RecursionError`` (100,000 nested arrays
    fail within the first thousand) and, for a text with enough brackets to be deep at all,
    a scan that refuses what parsed but is deeper than :data:`MAX_RECORD_DEPTH`.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            message = f"A {what} is not UTF-8 text."
            raise ConfigError(message, hint=STORED_RECORD_HINT) from exc
    if not isinstance(text, str):
        raise ConfigError(
            f"A {what} is a {type(text).__name__}, not text.", hint=STORED_RECORD_HINT
        )
    if len(text) > MAX_RECORD_CHARS:
        raise ConfigError(
            f"A {what} holds {len(text)} characters, more than {MAX_RECORD_CHARS}.",
            hint=STORED_RECORD_HINT,
        )
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(what) from None
    except ValueError as exc:
        raise ConfigError(f"A {what} is not JSON: {exc}.", hint=STORED_RECORD_HINT) from exc
    if text.count("[") + text.count("{") > MAX_RECORD_DEPTH and _depth(text) > MAX_RECORD_DEPTH:
        raise _too_deep(what)
    return value


def _too_deep(what: str) -> ConfigError:
    message = f"A {what} is nested deeper than {MAX_RECORD_DEPTH}."
    return ConfigError(message, hint=STORED_RECORD_HINT)


def require_records(storage: Any) -> Any:
    """Return ``storage`` if it has the ``RecordStorage`` capability, else ``ConfigError``."""
    if not all(callable(getattr(storage, name, None)) for name in _RECORD_METHODS):
        raise ConfigError(RECORDS_NEEDED, hint=RECORDS_HINT)
    return storage


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
class ListRecords:
    """``storage.list_records(session_id, prefix)`` → sorted keys."""

    session_id: str
    prefix: str


@dataclass(frozen=True, slots=True)
class RunBody:
    """Run the guarded tool body once; the result is a :class:`BodyOutcome`, never an error."""


@dataclass(frozen=True, slots=True)
class Invoke:
    """Call ``method`` of the named port (the session, the runtime); its exception is thrown
    into the plan unmapped, because only the plan knows what the failure leaves behind."""

    port: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BodyOutcome:
    """What the body did: returned ``value``, or raised ``error``."""

    value: Any = None
    error: BaseException | None = None


Effect: TypeAlias = LoadRecord | SaveRecord | ListRecords | RunBody | Invoke
Plan: TypeAlias = Generator[Effect, Any, T]
Body = Callable[[], Any]


def _mapped(effect: Effect, exc: Exception) -> AkchatError:
    if isinstance(exc, AkchatError):
        return exc
    err: AkchatError
    if isinstance(effect, SaveRecord):
        err = OutcomeUnknown(f"record save failed and may have applied: {exc!r}")
    else:
        err = StorageUnavailable(f"record read failed: {exc!r}")
    err.__cause__ = exc
    return err


def _call(storage: Any, effect: LoadRecord | SaveRecord | ListRecords) -> Any:
    """Issue the storage call (its result may be an awaitable for an async storage)."""
    if isinstance(effect, LoadRecord):
        return storage.load_record(effect.session_id, effect.key)
    if isinstance(effect, SaveRecord):
        return storage.save_record(
            effect.session_id,
            effect.key,
            effect.text,
            effect.expected_version,
            processing=effect.processing,
        )
    return storage.list_records(effect.session_id, effect.prefix)


def _advance(plan: Plan[Any], value: Any, error: Exception | None) -> tuple[bool, Any]:
    try:
        return False, plan.send(value) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value


def _not_awaitable(value: Any, message: str) -> Any:
    """A sync driver never holds an awaitable: close it and refuse (it never ran)."""
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if close is not None:
            close()
        raise ConfigError(message)
    return value


def _no_body() -> Any:
    raise ConfigError("This plan has no tool body to run.")


def _run_sync_body(body: Body) -> BodyOutcome:
    try:
        result = body()
    except Exception as exc:  # recorded by the plan, then re-raised by it
        return BodyOutcome(error=exc)
    try:
        # An async body on the sync API never ran: never record a coroutine as its result.
        return BodyOutcome(value=_not_awaitable(result, ASYNC_BODY))
    except ConfigError as exc:
        return BodyOutcome(error=exc)


def _invoke(ports: Mapping[str, Any], effect: Invoke) -> Any:
    return getattr(ports[effect.port], effect.method)(*effect.args, **effect.kwargs)


def run_sync(
    plan: Plan[T], storage: Any, body: Body = _no_body, ports: Mapping[str, Any] | None = None
) -> T:
    """Run ``plan`` to completion: the sync driver takes a sync storage, ``body`` and ports
    (an awaitable is refused, ADR-0091); the asyncio driver awaits whatever is awaitable."""
    done, out = _advance(plan, None, None)
    while not done:
        value: Any = None
        error: Exception | None = None
        if isinstance(out, RunBody):
            value = _run_sync_body(body)
        elif isinstance(out, Invoke):
            try:
                value = _not_awaitable(_invoke(ports or {}, out), ASYNC_PORT)
            except Exception as exc:  # the plan decides what a failed call means
                error = exc
        else:
            try:
                value = _not_awaitable(_call(storage, out), ASYNC_STORAGE)
            except Exception as exc:
                error = _mapped(out, exc)
        done, out = _advance(plan, value, error)
    return out  # type: ignore[no-any-return]


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def run_async(
    plan: Plan[T], storage: Any, body: Body = _no_body, ports: Mapping[str, Any] | None = None
) -> T:
    """Run ``plan`` to completion: the sync driver takes a sync storage, ``body`` and ports
    (an awaitable is refused, ADR-0091); the asyncio driver awaits whatever is awaitable."""
    done, out = _advance(plan, None, None)
    while not done:
        value: Any = None
        error: Exception | None = None
        if isinstance(out, RunBody):
            try:
                value = BodyOutcome(value=await _maybe_await(body()))
            except Exception as exc:  # recorded by the plan, then re-raised by it
                value = BodyOutcome(error=exc)
        elif isinstance(out, Invoke):
            try:
                value = await _maybe_await(_invoke(ports or {}, out))
            except Exception as exc:  # the plan decides what a failed call means
                error = exc
        else:
            try:
                value = await _maybe_await(_call(storage, out))
            except Exception as exc:
                error = _mapped(out, exc)
        done, out = _advance(plan, value, error)
    return out  # type: ignore[no-any-return]
