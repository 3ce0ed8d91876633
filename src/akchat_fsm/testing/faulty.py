"""A storage wrapper that injects the two failures every caller must survive.

``FaultyStorage(inner, seed=..., p_unavailable=..., p_unknown_after_apply=...)`` wraps any
:class:`~akchat_fsm.storage.port.SessionStorage` and, per call:

* ``"unavailable"``: raises :class:`~akchat_fsm.errors.StorageUnavailable` **before** calling
  the inner adapter, so nothing was applied (a retry is safe);
* ``"unknown_after_apply"``: calls the inner adapter, lets the write apply, then raises
  :class:`~akchat_fsm.errors.OutcomeUnknown` instead of returning (FoundationDB's
  ``commit_unknown_result``, a socket timeout after the commit was sent).

Which call fails is a pure function of ``(seed, call index, method)``, so a run replays
exactly whatever the thread interleaving, and an explicit ``schedule`` (call index → fault) or
``fail_next_save(...)`` / ``fail_next_load()`` / ``fail_next_delete(...)`` lets a stateful test
script faults deterministically. Random ``unknown_after_apply`` faults only hit writes
(``save``/``delete``); a random fault on ``load`` is always ``"unavailable"``. Every injected
fault is recorded in :attr:`FaultyStorage.injected`, with what the inner call returned.

:class:`AsyncFaultyStorage` is the asyncio twin; both share one :class:`FaultPlan`, so the
decisions exist once and only the inner call differs.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, get_args

from ..errors import ConfigError, OutcomeUnknown, StorageUnavailable
from ..storage.port import AsyncSessionStorage, SessionStorage, StoredValue
from ..wire.session import SessionSnapshot

T = TypeVar("T")

__all__ = [
    "AsyncFaultyStorage",
    "FaultKind",
    "FaultPlan",
    "FaultyStorage",
    "InjectedFault",
    "roll_fault",
]

FaultKind = Literal["unavailable", "unknown_after_apply"]
Method = Literal["load", "save", "delete"]
_FAULT_KINDS: frozenset[str] = frozenset(get_args(FaultKind))


@dataclass(frozen=True)
class InjectedFault:
    """One fault the wrapper injected.

    ``index`` is the 0-based index of the call on this wrapper (all methods counted
    together). ``inner_result`` is what the inner adapter returned for an
    ``unknown_after_apply`` fault (``True`` means the save really applied), and ``None``
    for ``unavailable`` (the inner adapter was never called).
    """

    index: int
    method: str
    kind: FaultKind
    session_id: str
    inner_result: Any = None


def roll_fault(
    seed: object, index: int, method: str, p_unavailable: float, p_unknown_after_apply: float
) -> FaultKind | None:
    """The seeded random fault for one call: a pure function of its arguments."""
    # A per-call RNG (string seeds hash with SHA-512) keeps the schedule independent of
    # which thread happened to make call ``index``.
    draw = random.Random(f"{seed!r}:{index}:{method}").random()
    if draw < p_unavailable:
        return "unavailable"
    if method != "load" and draw < p_unavailable + p_unknown_after_apply:
        return "unknown_after_apply"
    return None


def _check_kind(kind: str) -> FaultKind:
    if kind not in _FAULT_KINDS:
        raise ConfigError(f"unknown fault kind {kind!r}; use one of {sorted(_FAULT_KINDS)}")
    return kind  # type: ignore[return-value]


@dataclass
class FaultPlan:
    """Decides, records and raises the faults; shared by the sync and async wrappers."""

    seed: object = 0
    p_unavailable: float = 0.0
    p_unknown_after_apply: float = 0.0
    schedule: Mapping[int, FaultKind] = field(default_factory=dict)
    injected: list[InjectedFault] = field(default_factory=list)
    calls: int = 0
    _scripted: dict[str, deque[FaultKind]] = field(
        default_factory=lambda: {m: deque() for m in ("load", "save", "delete")}
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        for name in ("p_unavailable", "p_unknown_after_apply"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be within [0, 1], got {value!r}")
        if self.p_unavailable + self.p_unknown_after_apply > 1.0:
            raise ConfigError("p_unavailable + p_unknown_after_apply must not exceed 1")
        self.schedule = {int(i): _check_kind(k) for i, k in self.schedule.items()}

    def fail_next(self, method: Method, kind: FaultKind) -> None:
        """Script ``kind`` for the next call of ``method`` (queued, first in first out)."""
        with self._lock:
            self._scripted[method].append(_check_kind(kind))

    def before(self, method: Method, session_id: str) -> tuple[int, FaultKind | None]:
        """Take a call index and its fault; raise now if nothing may be applied."""
        with self._lock:
            index = self.calls
            self.calls += 1
            queue = self._scripted[method]
            kind: FaultKind | None
            if queue:
                kind = queue.popleft()
            elif index in self.schedule:
                kind = self.schedule[index]
            else:
                kind = roll_fault(
                    self.seed, index, method, self.p_unavailable, self.p_unknown_after_apply
                )
        if kind == "unavailable":
            self._record(InjectedFault(index, method, kind, session_id))
            # Chained like an adapter's mapped driver error, so error-mapping checks hold.
            raise StorageUnavailable(f"injected fault #{index}: {method} unavailable") from (
                TimeoutError(f"injected fault #{index}: driver timed out before sending")
            )
        return index, kind

    def after(
        self, index: int, method: Method, kind: FaultKind | None, session_id: str, result: Any
    ) -> Any:
        """Return the inner result, or raise ``OutcomeUnknown`` now that it has applied."""
        if kind == "unknown_after_apply":
            self._record(InjectedFault(index, method, kind, session_id, result))
            raise OutcomeUnknown(f"injected fault #{index}: {method} outcome unknown") from (
                TimeoutError(f"injected fault #{index}: driver timed out after sending")
            )
        return result

    def _record(self, fault: InjectedFault) -> None:
        with self._lock:
            self.injected.append(fault)


class _FaultyBase:
    def __init__(
        self,
        inner: Any,
        *,
        seed: object = 0,
        p_unavailable: float = 0.0,
        p_unknown_after_apply: float = 0.0,
        schedule: Mapping[int, FaultKind] | None = None,
    ) -> None:
        self.inner = inner
        self.plan = FaultPlan(seed, p_unavailable, p_unknown_after_apply, dict(schedule or {}))
        # The save that also creates records (ADR-0141) is an envelope save: it takes the
        # save's faults. Bound only when the inner store has it, so the wrapper offers the
        # capability exactly when its store does.
        if callable(getattr(inner, "save_with_records", None)):
            self.save_with_records = self._save_with_records

    @property
    def injected(self) -> list[InjectedFault]:
        """Every fault injected so far, in order."""
        return list(self.plan.injected)

    @property
    def calls(self) -> int:
        """How many calls reached the wrapper (faulted or not)."""
        return self.plan.calls

    def fail_next_save(self, kind: FaultKind = "unknown_after_apply") -> None:
        """Make the next ``save`` fail with ``kind``."""
        self.plan.fail_next("save", kind)

    def fail_next_delete(self, kind: FaultKind = "unknown_after_apply") -> None:
        """Make the next ``delete`` fail with ``kind``."""
        self.plan.fail_next("delete", kind)

    def fail_next_load(self, kind: FaultKind = "unavailable") -> None:
        """Make the next ``load`` fail with ``kind``."""
        self.plan.fail_next("load", kind)

    def __getattr__(self, name: str) -> Any:
        # close(), open_connections() and other capabilities pass straight through.
        return getattr(self.inner, name)


class FaultyStorage(_FaultyBase):
    """A :class:`SessionStorage` that fails on a seeded or scripted schedule."""

    inner: SessionStorage

    def _through(self, method: Method, session_id: str, call: Callable[[], T]) -> T:
        index, kind = self.plan.before(method, session_id)
        return self.plan.after(index, method, kind, session_id, call())  # type: ignore[no-any-return]

    def load(self, session_id: str) -> StoredValue:
        """The inner ``load``, unless a fault is due (before it: nothing was read)."""
        return self._through("load", session_id, lambda: self.inner.load(session_id))

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """The inner ``save``, unless a fault is due (before it, or after it has applied)."""
        return self._through(
            "save", snapshot.session_id, lambda: self.inner.save(snapshot, expected_cursor)
        )

    def delete(self, session_id: str) -> Any:
        """The inner ``delete``, unless a fault is due (before it, or after it has applied)."""
        return self._through("delete", session_id, lambda: self.inner.delete(session_id))  # type: ignore[attr-defined]

    def _save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: Any
    ) -> bool:
        """The inner ``save_with_records``, with the faults of ``save``."""
        inner: Any = self.inner
        return bool(
            self._through(
                "save",
                snapshot.session_id,
                lambda: inner.save_with_records(snapshot, expected_cursor, records),
            )
        )


class AsyncFaultyStorage(_FaultyBase):
    """The asyncio twin of :class:`FaultyStorage` for an :class:`AsyncSessionStorage`."""

    inner: AsyncSessionStorage

    async def _through(
        self, method: Method, session_id: str, call: Callable[[], Awaitable[T]]
    ) -> T:
        index, kind = self.plan.before(method, session_id)
        return self.plan.after(index, method, kind, session_id, await call())  # type: ignore[no-any-return]

    async def load(self, session_id: str) -> StoredValue:
        """The inner ``load``, unless a fault is due (before it: nothing was read)."""
        return await self._through("load", session_id, lambda: self.inner.load(session_id))

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """The inner ``save``, unless a fault is due (before it, or after it has applied)."""
        return await self._through(
            "save", snapshot.session_id, lambda: self.inner.save(snapshot, expected_cursor)
        )

    async def delete(self, session_id: str) -> Any:
        """The inner ``delete``, unless a fault is due (before it, or after it has applied)."""
        return await self._through("delete", session_id, lambda: self.inner.delete(session_id))  # type: ignore[attr-defined]

    async def _save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: Any
    ) -> bool:
        """The inner ``save_with_records``, with the faults of ``save``."""
        inner: Any = self.inner
        return bool(
            await self._through(
                "save",
                snapshot.session_id,
                lambda: inner.save_with_records(snapshot, expected_cursor, records),
            )
        )
