"""The kit passes a correct adapter and fails each broken one on the check that names its bug."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from doubles import (
    AcceptsStaleCursor,
    AsyncDictStorage,
    CheckThenAct,
    CreateOverwrites,
    DictStorage,
    LastWriteWins,
    LeaksConnections,
    LeaksDriverError,
    LosesAcknowledgedWrite,
    MapsTimeouts,
    RaisesOnConflict,
    StaleReads,
    TimeoutAsConflict,
)

from akchat_fsm.errors import ConfigError
from akchat_fsm.testing import CHECKS, FaultyStorage, check_session_storage
from akchat_fsm.testing.conformance import CheckOutcome


def _shared() -> tuple[Callable[[], DictStorage], dict[str, Any], threading.Lock]:
    """A healthy factory whose adapters share one dict (as adapters share one database)."""
    data: dict[str, Any] = {}
    lock = threading.Lock()

    def healthy() -> DictStorage:
        storage = DictStorage()
        storage._data = data
        storage._lock = lock
        return storage

    return healthy, data, lock


def test_a_correct_adapter_passes_every_check() -> None:
    healthy, data, lock = _shared()
    seen: list[CheckOutcome] = []
    report = check_session_storage(
        healthy,
        make_async=AsyncDictStorage,
        make_faulty_storage=lambda: MapsTimeouts(data, lock),
        seed=11,
        progress=seen.append,
    )
    assert report.ok, str(report)
    assert [r.name for r in seen] == [r.name for r in report.results]
    skipped = {r.name for r in report.skipped}
    # processes: not requested; the async double has no open_connections().
    assert skipped == {"processes", "async:no_open_connections"}
    assert {r.name for r in report.results} >= set(CHECKS)
    assert "0 failed" in str(report)


def test_faulty_storage_wrapper_satisfies_the_error_mapping_check() -> None:
    healthy, _, _ = _shared()
    report = check_session_storage(
        healthy,
        make_faulty_storage=lambda: FaultyStorage(
            healthy(), seed=5, p_unavailable=0.2, p_unknown_after_apply=0.2
        ),
        only=["error_mapping"],
    )
    assert report.ok, str(report)
    assert "StorageUnavailable" in report["error_mapping"].detail


BROKEN = [
    (
        LastWriteWins,
        {"create_only", "stale_cursor_refused", "cas_race_threads", "counter_workload"},
    ),
    (AcceptsStaleCursor, {"stale_cursor_refused", "cas_race_threads", "linearizability_threads"}),
    (CheckThenAct, {"create_race_threads", "cas_race_threads", "counter_workload"}),
    (LosesAcknowledgedWrite, {"counter_workload", "linearizability_threads"}),
    (CreateOverwrites, {"create_only", "interleaving_create_create", "create_race_threads"}),
    (RaisesOnConflict, {"create_only", "stale_cursor_refused", "cas_race_threads"}),
    (LeaksConnections, {"no_open_connections"}),
    # Only the history check sees stale reads: CAS retry loops hide them from the counter.
    (StaleReads, {"linearizability_threads"}),
]


@pytest.mark.parametrize(("adapter", "must_fail"), BROKEN, ids=[b[0].__name__ for b in BROKEN])
def test_each_broken_adapter_fails_the_right_checks(
    adapter: Callable[[], Any], must_fail: set[str]
) -> None:
    report = check_session_storage(adapter, seed=3)
    assert not report.ok
    failed = {r.name for r in report.failed}
    assert must_fail <= failed, str(report)
    assert "round_trip" not in failed  # the bug is named, not everything


def test_raising_on_conflict_is_reported_as_an_untyped_error() -> None:
    report = check_session_storage(RaisesOnConflict, only=["create_only"])
    assert "UNTYPED RuntimeError" in report["create_only"].detail


@pytest.mark.parametrize(
    ("faulty", "message"),
    [(TimeoutAsConflict, "reported as a conflict"), (LeaksDriverError, "UNTYPED TimeoutError")],
)
def test_bad_error_mapping_fails_error_mapping(faulty: Any, message: str) -> None:
    healthy, data, lock = _shared()
    report = check_session_storage(
        healthy, make_faulty_storage=lambda: faulty(data, lock), only=["error_mapping"]
    )
    assert not report.ok
    assert message in report["error_mapping"].detail


def test_a_faulty_factory_that_injects_nothing_proves_nothing() -> None:
    healthy, _, _ = _shared()
    report = check_session_storage(healthy, make_faulty_storage=healthy, only=["error_mapping"])
    assert "injected no fault" in report["error_mapping"].detail


def test_broken_async_adapter_fails_under_the_async_prefix() -> None:
    class AsyncLastWriteWins(AsyncDictStorage):
        def __init__(self) -> None:
            self._sync = LastWriteWins()

    report = check_session_storage(None, make_async=AsyncLastWriteWins, only=["cas_race_threads"])
    assert [(r.name, r.status) for r in report.results] == [("async:cas_race_threads", "failed")]


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        check_session_storage(DictStorage, profile="huge")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        check_session_storage(DictStorage, only=["no_such_check"])
    with pytest.raises(ConfigError):
        check_session_storage(None)


def test_importing_the_kit_does_not_import_pytest() -> None:
    import subprocess
    import sys

    code = "import sys, akchat_fsm.testing; print('pytest' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_history_without_contention_fails_the_kit_instead_of_passing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One history worker can overlap with nobody: the kit must say so, not report a pass."""
    import dataclasses

    from akchat_fsm.testing import _kit

    lonely = dataclasses.replace(_kit.PROFILES["default"], history_workers=1)
    monkeypatch.setitem(_kit.PROFILES, "default", lonely)
    healthy, _, _ = _shared()
    report = check_session_storage(healthy, only=["linearizability_threads"], seed=7)
    assert not report.ok
    assert "no contention" in report["linearizability_threads"].detail
