"""The storage conformance kit: does an adapter honour the ``SessionStorage`` contract?

Function form (usable anywhere)::

    from akchat_fsm.testing import check_session_storage

    report = check_session_storage(lambda: MyStorage(dsn))
    print(report)          # one line per check; a failure states the property it broke
    assert report.ok

Pytest form: subclass :class:`akchat_fsm.testing.pytest_plugin.SessionStorageConformance`;
each check becomes its own test.

Every instance ``make_storage()`` returns must work on one shared store, as instances over
one database do: the checks write through one instance and read, race and delete through
others (ADR-0097). The store may be shared with earlier calls: every check uses fresh random
session ids and never assumes an empty store. Checks that need an optional capability
(``delete``, records, the processing, pending and audit indexes, ``open_connections()``, a faulty
factory, processes) are *skipped*, not failed, when it is absent; ``report.ok`` is true when nothing
failed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import AkchatError, ConfigError
from . import (
    _audit_index,
    _concurrent,
    _ids,
    _pending_index,
    _processes,
    _records,
    _save_with_records,
    _sequential,
)
from ._bridge import AsyncBridge, EventLoopThread
from ._kit import PROFILES, UNTYPED_ERRORS, AdapterRaised, CheckSkipped, KitContext, describe

__all__ = [
    "CHECKS",
    "PROPERTIES",
    "SYNC_ONLY",
    "UNTYPED_ERRORS",
    "CheckOutcome",
    "ConformanceReport",
    "check_session_storage",
    "run_check",
]

Status = Literal["passed", "failed", "skipped"]

#: Every check, in the order the kit runs them. Names are stable (they are test ids).
CHECKS: dict[str, Callable[[KitContext], str]] = {
    "round_trip": _sequential.round_trip,
    "round_trip_unicode": _sequential.round_trip_unicode,
    "round_trip_large": _sequential.round_trip_large,
    "load_returns_a_copy": _sequential.load_returns_a_copy,
    "instances_share_a_store": _sequential.instances_share_a_store,
    "create_only": _sequential.create_only,
    "stale_cursor_refused": _sequential.stale_cursor_refused,
    "future_cursor_refused": _sequential.future_cursor_refused,
    "missing_session_refused": _sequential.missing_session_refused,
    "cursor_advances_by_one": _sequential.cursor_advances_by_one,
    "delete": _sequential.delete,
    "session_isolation": _ids.session_isolation,
    "interleaving_read_read_save_save": _sequential.interleaving_read_read_save_save,
    "interleaving_create_create": _sequential.interleaving_create_create,
    "interleaving_stale_after_two_saves": _sequential.interleaving_stale_after_two_saves,
    "interleaving_save_after_delete": _sequential.interleaving_save_after_delete,
    "interleaving_create_after_delete": _sequential.interleaving_create_after_delete_race,
    "create_race_threads": _concurrent.create_race_threads,
    "cas_race_threads": _concurrent.cas_race_threads,
    "counter_workload": _concurrent.counter_workload,
    "linearizability_threads": _concurrent.linearizability_threads,
    "processes": _processes.processes,
    "error_mapping": _concurrent.error_mapping,
    "records_cas": _records.records_cas,
    "records_isolation": _records.records_isolation,
    "record_cas_race": _records.record_cas_race,
    "processing_index": _records.processing_index,
    "pending_index": _pending_index.pending_index,
    "pending_index_filters": _pending_index.pending_index_filters,
    "pending_index_pages": _pending_index.pending_index_pages,
    "audit_index": _audit_index.audit_index,
    "save_with_records": _save_with_records.save_with_records,
    "no_open_connections": _sequential.no_open_connections,
}

#: Checks with no async form: processes rebuild sync adapters; the faulty factory is sync.
SYNC_ONLY = frozenset({"processes", "error_mapping"})

#: What each check holds an adapter to, in its author's words: the first line of a failure.
PROPERTIES: dict[str, str] = {
    "round_trip": "load must return exactly the envelope save stored",
    "round_trip_unicode": "load must return exactly the envelope save stored, whatever "
    "characters it holds (astral emoji, combining marks, RTL, NUL, quotes)",
    "round_trip_large": "load must return exactly the envelope save stored, even at every "
    "limit (1,000 decisions, 1,000 confirmations, 64 terminal turns, 65,536-character text)",
    "load_returns_a_copy": "changing what load returned must not change what is stored",
    "instances_share_a_store": "every instance your factory returns must work on the same "
    "store, and see the other instances' writes at once (no private store, no stale cache)",
    "create_only": "save(snapshot, None) must create only: it returns False when the session "
    "exists, whichever instance asks",
    "stale_cursor_refused": "save must return False when expected_cursor is older than the "
    "stored cursor",
    "future_cursor_refused": "save must return False when expected_cursor is ahead of the "
    "stored cursor",
    "missing_session_refused": "save with an int expected_cursor must return False, and create "
    "nothing, when the session does not exist",
    "cursor_advances_by_one": "each successful save must store its snapshot (cursor + 1), "
    "visible to every instance",
    "delete": "delete must forget the session for every instance, tolerate a missing one, and "
    "allow a re-create",
    "session_isolation": "every session id must be its own key: ids of 1 to 128 characters, "
    "prefixes of one another, ids differing only in case, and look-alike ids never read, "
    "overwrite or delete each other",
    "interleaving_read_read_save_save": "of two clients that read the same cursor, only the "
    "first save may succeed",
    "interleaving_create_create": "of two clients creating the same session, only the first "
    "may succeed",
    "interleaving_stale_after_two_saves": "a client whose cursor is two saves behind must be "
    "refused",
    "interleaving_save_after_delete": "a save from a cursor read before a delete must be "
    "refused, and must not bring the session back",
    "interleaving_create_after_delete": "after a delete, only one of two creates may succeed",
    "create_race_threads": "of concurrent creates of one session, exactly one may succeed, and "
    "its envelope is the one stored",
    "cas_race_threads": "of concurrent saves from the same cursor, exactly one may succeed, "
    "and its envelope is the one stored",
    "counter_workload": "every acknowledged save must be kept: the final cursor equals the "
    "number of saves that returned True",
    "linearizability_threads": "concurrent load/save/delete calls must behave as if each took "
    "effect at one instant during the call",
    "processes": "the compare-and-set must hold across processes too",
    "error_mapping": "a failing driver must surface as StorageUnavailable (nothing applied) or "
    "OutcomeUnknown (may have applied), chained to its cause, never as False or a raw error",
    "records_cas": "save_record must follow the compare-and-set rule with versions: create "
    "only once, +1 per update, refuse stale, future and missing versions",
    "records_isolation": "records of different sessions and keys must never touch each "
    "other, and delete(session_id) must remove the session's records",
    "record_cas_race": "of concurrent save_record calls from the same version, exactly one "
    "may succeed",
    "processing_index": "list_processing must list exactly the sessions holding processing "
    "work, oldest last write first, filtered by written_before_ms",
    "pending_index": "list_pending must list a confirmation exactly while it is pending in the "
    "session's saved snapshot (a save that returns False changes no row; delete removes the "
    "session's rows), and find_token must name the session of a pending token",
    "pending_index_filters": "list_pending's filters (action, session, expiring before, pending "
    "before) and both orders must agree with the saved envelopes",
    "pending_index_pages": "list_pending's keyset pages must be disjoint, in order, and cover "
    "every row pending throughout a walk, while other writes happen",
    "audit_index": "list_audit must list every record created under audit: or audit- "
    "(and no other) from the write that creates it, in (written_ms, session_id, key) order "
    "and in keyset pages; a losing create changes nothing listed, an update lists it once at "
    "its last write; delete_record and delete unlist",
    "save_with_records": "save_with_records must write the envelope's compare-and-set and "
    "every record's create as one: both or neither; a stale cursor creates no record, an "
    "existing key leaves the envelope and the other records unchanged (ADR-0141)",
    "no_open_connections": "close() must release every connection",
}


@dataclass(frozen=True)
class CheckOutcome:
    """The result of one check: ``status`` is ``passed``, ``failed`` or ``skipped``."""

    name: str
    status: Status
    detail: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def __str__(self) -> str:
        label = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[self.status]
        return f"{label} {self.name} ({self.seconds:.2f}s): {self.detail}"


@dataclass
class ConformanceReport:
    """Every check's outcome; ``ok`` is true when none failed."""

    results: list[CheckOutcome] = field(default_factory=list)
    seed: int = 0
    profile: str = "default"
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def failed(self) -> list[CheckOutcome]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def skipped(self) -> list[CheckOutcome]:
        return [r for r in self.results if r.status == "skipped"]

    def __getitem__(self, name: str) -> CheckOutcome:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        head = (
            f"session storage conformance: {verdict} — {len(self.results)} checks, "
            f"{len(self.failed)} failed, {len(self.skipped)} skipped "
            f"(profile={self.profile}, seed={self.seed}, {self.seconds:.1f}s)"
        )
        return "\n".join([head, *(f"  {r}" for r in self.results)])


def _run_one(name: str, ctx: KitContext) -> CheckOutcome:
    started = time.monotonic()
    status: Status
    try:
        with ctx.closing():
            detail = CHECKS[name](ctx)
        status = "passed"
    except CheckSkipped as exc:
        status, detail = "skipped", str(exc)
    except AdapterRaised as exc:  # workers of a concurrent check raised
        status, detail = "failed", _broken(name, str(exc), untyped=exc.untyped)
    except AssertionError as exc:
        status, detail = "failed", _broken(name, str(exc) or type(exc).__name__)
    except AkchatError as exc:  # typed, yet where the check expected an answer
        status, detail = "failed", _broken(name, f"raised {describe(exc)}")
    except Exception as exc:  # an adapter raising anything else is a failure, not a crash
        status, detail = "failed", _broken(name, f"raised {describe(exc)}", untyped=True)
    return CheckOutcome(name, status, detail, time.monotonic() - started)


def _broken(name: str, what: str, *, untyped: bool = False) -> str:
    """A failure's detail: the property the adapter broke, then what the kit saw.

    An untyped error is named by :data:`UNTYPED_ERRORS`, whichever check met it: that, not
    the check's own property, is what the adapter broke (the check could not even ask).
    """
    if untyped:
        return f"{UNTYPED_ERRORS} (met in {name}). Seen: {what}"
    return f"{PROPERTIES[name]}. Seen: {what}"


def _process_factory(make_storage: Any, processes: bool | None) -> Any:
    """What spawned racers rebuild the adapter from; ``None`` when processes are off.

    On by default: the ``processes`` check skips (or, with ``processes=True``, fails) a
    factory that cannot be sent to another process or whose store stays in one process.
    """
    if processes is False:
        return None
    if isinstance(make_storage, str) and make_storage in ("sqlite://", "sqlite:///:memory:"):
        return "memory://"  # private to the process either way: let the probe say so
    return make_storage


def _factory(make_storage: Any) -> Callable[[], Any]:
    if isinstance(make_storage, str):
        from ..storage.url import open_storage

        url = make_storage
        return lambda: open_storage(url)
    if not callable(make_storage):
        raise ConfigError(f"make_storage must be a callable or a storage URL, got {make_storage!r}")
    return make_storage  # type: ignore[no-any-return]


def check_session_storage(
    make_storage: Callable[[], Any] | str | None,
    *,
    make_async: Callable[[], Any] | None = None,
    make_faulty_storage: Callable[[], Any] | None = None,
    profile: Literal["default", "deep"] = "default",
    processes: bool | None = None,
    seed: int | None = None,
    progress: Callable[[CheckOutcome], None] | None = None,
    only: list[str] | None = None,
) -> ConformanceReport:
    """Run the conformance kit and return a :class:`ConformanceReport` (never raises on a
    non-conformant adapter; only on bad arguments, with ``ConfigError``).

    ``make_storage``: a zero-argument factory of a sync adapter, or a storage URL for
    ``open_storage``. ``make_async``: a factory (sync or async) of the asyncio twin; its
    checks are reported as ``async:<name>``. ``make_faulty_storage``: an adapter on the same
    data whose driver fails, for the ``error_mapping`` check. ``processes``: race ``spawn``
    processes (``None``, the default: whenever the factory can be sent to another process
    and its store is visible there, skipped otherwise; ``True``: fail instead of skipping;
    ``False``: off). ``seed`` makes the workloads replay; ``progress`` is called after each
    check; ``only`` restricts the run to some check names.
    """
    if profile not in PROFILES:
        raise ConfigError(f"profile must be one of {sorted(PROFILES)}, got {profile!r}")
    names = list(CHECKS) if only is None else list(only)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ConfigError(f"unknown check name(s) {unknown}; see CHECKS")
    if make_storage is None and make_async is None:
        raise ConfigError("give make_storage, make_async or both")
    seed = random.randrange(2**32) if seed is None else seed
    report = ConformanceReport(seed=seed, profile=profile)
    started = time.monotonic()

    def record(outcome: CheckOutcome) -> None:
        report.results.append(outcome)
        if progress is not None:
            progress(outcome)

    if make_storage is not None:
        ctx = KitContext(
            make=_factory(make_storage),
            profile=PROFILES[profile],
            seed=seed,
            make_faulty=make_faulty_storage,
            process_factory=_process_factory(make_storage, processes),
            processes_requested=processes is True,
        )
        for name in names:
            record(_run_one(name, ctx))
    if make_async is not None:
        loop = EventLoopThread()
        factory = make_async
        try:
            ctx = KitContext(
                make=lambda: AsyncBridge(loop, factory),
                profile=PROFILES[profile],
                seed=seed,
                is_async=True,
            )
            for name in names:
                if name in SYNC_ONLY:
                    continue  # sync-only: processes rebuild sync adapters
                outcome = _run_one(name, ctx)
                record(
                    CheckOutcome(f"async:{name}", outcome.status, outcome.detail, outcome.seconds)
                )
        finally:
            loop.stop()
    report.seconds = time.monotonic() - started
    return report


def run_check(
    name: str,
    make_storage: Callable[[], Any] | str | None,
    **options: Any,
) -> CheckOutcome:
    """Run one check (the pytest form's building block); options as for the function form."""
    report = check_session_storage(make_storage, only=[name], **options)
    return report.results[0]
