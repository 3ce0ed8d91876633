"""Shared plumbing of the conformance kit: profiles, the per-run context, small assertions."""

from __future__ import annotations

import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import AkchatError
from ._envelopes import Observed, fresh_session_id, make_snapshot, observe

__all__ = [
    "PROFILES",
    "UNTYPED_ERRORS",
    "AdapterRaised",
    "CheckSkipped",
    "KitContext",
    "Profile",
    "close_storage",
]

#: The property an adapter breaks when a call raises anything but a typed error: whichever
#: check saw it, that is the bug to name (a conflict raised as ``ValueError`` is not a
#: linearizability bug, it is an untyped error).
UNTYPED_ERRORS = (
    "a conflict must return False, and every failure must raise a typed error "
    "(StorageUnavailable: nothing applied; OutcomeUnknown: it may have applied); any other "
    "exception escaping the adapter is a bug"
)

#: Writes (to fresh sessions) after which a stale read must have caught up, when the kit
#: asks whether a read that missed a write lags behind it rather than lost it.
CATCH_UP_WRITES = 32


class CheckSkipped(Exception):
    """The adapter lacks an optional capability the check needs."""


class AdapterRaised(AssertionError):
    """Workers of a concurrent check raised; ``untyped``: one of them raised an error that
    is not an :class:`~akchat_fsm.errors.AkchatError` (reported under ``UNTYPED_ERRORS``)."""

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        super().__init__(message)
        self.untyped = any(not isinstance(exc, AkchatError) for exc in errors)


def adapter_errors(results: list[Any]) -> list[BaseException]:
    """What the adapter raised in the workers: the kit's own ``BrokenBarrierError`` (a worker
    that raised aborts the barrier to release the others) is never the adapter's."""
    raised = [r for r in results if isinstance(r, BaseException)]
    return [r for r in raised if not isinstance(r, threading.BrokenBarrierError)] or raised


def raise_if_workers_raised(results: list[Any], what: str) -> None:
    """:class:`AdapterRaised` naming the first three errors the workers raised, if any."""
    errors = adapter_errors(results)
    if errors:
        shown = [describe(exc) for exc in errors[:3]]
        raise AdapterRaised(f"{what} raised {shown}", errors)


def catches_up(storage: Any, session_id: str, accept: Callable[[Observed], bool]) -> bool:
    """Whether a read of ``session_id`` that missed a write comes to show it (``accept``)
    after more writes through ``storage`` and a moment: the store's reads lag behind its
    writes (a replica, a cache) rather than the write being lost or private.

    Called only once a check has already failed, to name the bug; the writes go to fresh
    sessions, so no check's data changes. A lag measured in writes shows deterministically;
    one measured in time shows within the short waits between the writes.
    """
    for _ in range(CATCH_UP_WRITES):
        try:
            storage.save(make_snapshot(fresh_session_id("ck-lag"), 1, "lag"), None)
            time.sleep(0.001)
            if accept(observe(storage.load(session_id), session_id)):
                return True
        except Exception:
            return False
    return False


STALE_READS = (
    "reads are stale: the write shows up only after later writes, so load serves a lagging "
    "replica or cache; a compare-and-set store must read its latest acknowledged write"
)


@dataclass(frozen=True)
class Profile:
    """How hard the kit pushes. ``default`` fits a CI run; ``deep`` is for nightly runs."""

    racers: int = 8
    race_rounds: int = 3
    counter_workers: int = 4
    counter_increments: int = 20
    history_workers: int = 8
    history_ops: int = 40
    history_keys: int = 3
    #: Decisions of the large envelope that carry 65,536 characters (all 1,000 carry some).
    long_decisions: int = 8
    #: Adapter instances the cross-instance checks spread their clients over.
    instances: int = 3
    faulty_calls: int = 60
    process_racers: int = 8
    process_ops: int = 25
    max_steps: int = 20_000_000
    timeout_s: float = 60.0


PROFILES: dict[str, Profile] = {
    "default": Profile(),
    "deep": Profile(
        racers=16,
        race_rounds=20,
        counter_workers=8,
        counter_increments=100,
        history_workers=16,
        history_ops=150,
        history_keys=5,
        long_decisions=64,
        instances=4,
        faulty_calls=500,
        process_racers=16,
        process_ops=100,
        max_steps=200_000_000,
        timeout_s=600.0,
    ),
}


def close_storage(storage: Any) -> None:
    """Close an adapter however it closes: ``close()``, or its context-manager exit."""
    close = getattr(storage, "close", None)
    if callable(close):
        close()
    elif hasattr(storage, "__exit__"):
        storage.__exit__(None, None, None)


@dataclass
class KitContext:
    """What one run of the checks shares: factories, profile, seed, opened adapters."""

    make: Callable[[], Any]
    profile: Profile
    seed: int
    make_faulty: Callable[[], Any] | None = None
    process_factory: Any = None
    #: ``processes=True`` was passed: a factory that cannot race processes fails the check
    #: instead of skipping it.
    processes_requested: bool = False
    is_async: bool = False
    opened: list[Any] = field(default_factory=list)
    #: Whether two instances from the factory see the same data (probed once per run).
    _shared: bool | None = None

    def storage(self) -> Any:
        """A new adapter from the factory, closed at the end of the check."""
        storage = self.make()
        self.opened.append(storage)
        return storage

    def shares_a_store(self) -> bool:
        """Whether a session saved through one instance is visible through a new one.

        Probed once per run. When it is not, the checks that spread clients over several
        instances run them on one instance instead, so each still names its own property,
        and ``instances_share_a_store`` fails naming this one.
        """
        if self._shared is None:
            writer = self.storage()
            sid = fresh_session_id("ck-probe")
            try:
                writer.save(make_snapshot(sid, 1, "probe"), None)
                self._shared = observe(self.storage().load(sid)) == (1, "probe")
            except Exception:
                self._shared = False
        return self._shared

    def instances(self, count: int | None = None) -> list[Any]:
        """``count`` (default: the profile's) clients, each its own instance if the
        instances share a store, else one instance shared by all."""
        count = self.profile.instances if count is None else count
        if not self.shares_a_store():
            return [self.storage()] * count
        return [self.storage() for _ in range(count)]

    def close_all(self) -> None:
        while self.opened:
            with contextlib.suppress(Exception):
                close_storage(self.opened.pop())

    @contextlib.contextmanager
    def closing(self) -> Iterator[KitContext]:
        try:
            yield self
        finally:
            self.close_all()


def has_delete(storage: Any) -> bool:
    return callable(getattr(storage, "delete", None))


def require_delete(storage: Any) -> None:
    if not has_delete(storage):
        raise CheckSkipped("the adapter has no delete() (optional capability)")


def saved(storage: Any, snapshot: Any, expected: int | None, what: str) -> bool:
    """Call ``save`` and insist on a real ``bool``."""
    result = storage.save(snapshot, expected)
    if not isinstance(result, bool):
        raise AssertionError(f"{what}: save returned {result!r}, not a bool")
    return result


def expect_save(storage: Any, snapshot: Any, expected: int | None, want: bool, what: str) -> None:
    got = saved(storage, snapshot, expected, what)
    if got is not want:
        raise AssertionError(
            f"{what}: save(cursor={snapshot.cursor}, expected={expected}) "
            f"returned {got}, expected {want}"
        )


def expect_stored(storage: Any, session_id: str, want: Observed, what: str) -> None:
    got = observe(storage.load(session_id), session_id)
    if got != want:
        stale = catches_up(storage, session_id, lambda seen: seen == want)
        raise AssertionError(
            f"{what}: load returned {_show(got)}, expected {_show(want)}"
            + (f": {STALE_READS}" if stale else "")
        )


def _show(observed: Observed) -> str:
    return "nothing" if observed is None else f"cursor={observed[0]} marker={observed[1]!r}"


def describe(exc: BaseException) -> str:
    """One line naming an exception and whether it is one of ours."""
    kind = "typed" if isinstance(exc, AkchatError) else "UNTYPED"
    return f"{kind} {type(exc).__name__}: {exc}"


async def maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
