"""What the ledger and the bridges share: their errors, the stored-record parser, storages.

Like the session layer (ADR-0060), every ledger and run-record operation is written once as a
plan: a generator that yields effects and receives their results (or has their exception
thrown into it). The effects are the session's vocabulary (:mod:`akchat_fsm.session.effects`:
``LoadRecord``, ``SaveRecord``, ``ListRecords``, ``RunBody`` and the bridge's typed session and
runtime calls), run by the session's two drivers (:mod:`akchat_fsm.session.drivers`), which map
storage errors once and refuse a port of the wrong flavour before using its answer (ADR-0121).
A body's exception is never mapped: it is handed to the plan as a :class:`BodyOutcome`,
because only the plan knows what it must record before re-raising it.

An asyncio ledger over a *sync* storage (a runtime's async tool hook over a sync SQLite store)
is adapted when it is built (:func:`asyncio_records`), not by a driver that awaits whatever is
awaitable: the driver keeps one policy.

Stored record text is parsed in one place, :func:`stored_json`, which bounds its size and
nesting before parsing, so a hostile or corrupt record is a ``ConfigError`` (ADR-0103).
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Generator
from itertools import accumulate
from typing import Any, TypeAlias, TypeVar

from ..errors import AkchatError, ConfigError
from ..session.drivers import ASYNC_BODY
from ..session.effects import BodyOutcome, Effect, ListRecords, LoadRecord, RunBody, SaveRecord
from ..storage.capabilities import keeps_records
from ..storage.checks import MAX_RECORD_CHARS

__all__ = [
    "ASYNC_BODY",
    "MAX_RECORD_DEPTH",
    "BodyOutcome",
    "BridgeError",
    "Effect",
    "ListRecords",
    "LoadRecord",
    "Plan",
    "RunBody",
    "SaveRecord",
    "asyncio_records",
    "require_records",
    "stored_json",
    "sync_records",
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
    if not keeps_records(storage):
        raise ConfigError(RECORDS_NEEDED, hint=RECORDS_HINT)
    return storage


Plan: TypeAlias = Generator[Effect, Any, T]


class _AsyncRecords:
    """A sync ``RecordStorage`` given to the asyncio ledger: each call is made directly (it
    blocks the event loop for its duration, as a sync SQLite store does) and its answer handed
    back from a coroutine, so the asyncio driver sees an asyncio port like any other."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    async def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> Any:
        return self.inner.save_record(
            session_id, key, text, expected_version, processing=processing
        )

    async def list_records(self, session_id: str, prefix: str = "") -> Any:
        return self.inner.list_records(session_id, prefix)

    async def delete_record(self, session_id: str, key: str) -> Any:
        return self.inner.delete_record(session_id, key)


def asyncio_records(storage: Any) -> Any:
    """``storage`` for the asyncio driver: as is when its record methods are ``async def``
    (or of a flavour only their results can tell: the driver checks those), else adapted."""
    method = getattr(storage, "load_record", None)
    plain = inspect.ismethod(method) or inspect.isfunction(method)
    return _AsyncRecords(storage) if plain and not inspect.iscoroutinefunction(method) else storage


def sync_records(storage: Any) -> Any | None:
    """The sync storage :func:`asyncio_records` adapted into ``storage`` (``None``: ``storage``
    is an asyncio one), for work that must run off the event loop (the lease keeper)."""
    return storage.inner if isinstance(storage, _AsyncRecords) else None
