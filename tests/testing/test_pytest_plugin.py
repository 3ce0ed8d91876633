"""The pytest form: one generated test per check, failing where the function form fails."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest
from doubles import AsyncDictStorage, DictStorage, MapsTimeouts, Store

from akchat_fsm.testing import CHECKS
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance

pytest_plugins = ["pytester"]

_STORE = Store()
_ASYNC_STORE = Store()


def _healthy() -> DictStorage:
    return DictStorage(_STORE)


class TestDictStorageThroughTheMixin(SessionStorageConformance):
    """A correct adapter with every capability: every generated test passes."""

    def make_storage(self) -> Any:
        return _healthy()

    def make_async_storage(self) -> Any:
        return AsyncDictStorage(_ASYNC_STORE)

    def make_faulty_storage(self) -> Any:
        return MapsTimeouts(_STORE)

    # processes: a dict is private to the process; the async double has no open_connections();
    # the doubles have no records, no processing index and no pending index.
    skip_checks = frozenset(
        {
            "processes",
            "no_open_connections",
            "records_cas",
            "records_isolation",
            "record_cas_race",
            "processing_index",
            "pending_index",
            "pending_index_filters",
            "pending_index_pages",
            "audit_index",
            "save_with_records",
        }
    )


def test_one_test_per_check_and_async_only_when_given() -> None:
    class SyncOnly(SessionStorageConformance):
        skip_checks = frozenset({"delete"})

        def make_storage(self) -> Any:
            return DictStorage()

    generated = {name for name in dir(SyncOnly) if name.startswith("test_")}
    assert generated == {f"test_{name}" for name in CHECKS if name != "delete"}
    asynchronous = {n for n in dir(TestDictStorageThroughTheMixin) if n.startswith("test_async_")}
    assert "test_async_cas_race_threads" in asynchronous
    assert "test_async_processes" not in asynchronous


BROKEN_MODULE = """
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance
from doubles import LastWriteWins, Store

STORE = Store()

class TestBroken(SessionStorageConformance):
    def make_storage(self):
        return LastWriteWins(STORE)
"""

# An adapter that notes the sessions linearizability_threads writes: each run of the check
# records a history on three fresh sessions, so their count / 3 is the number of runs.
COUNTING_MODULE = """
import re
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance
from doubles import DictStorage, Store

STORE = Store()
WRITTEN = set()

class Counting(DictStorage):
    def save(self, snapshot, expected_cursor):
        if re.fullmatch(r"p\\d+-\\d+", snapshot.conversation.state):  # a history worker's
            WRITTEN.add(snapshot.session_id)
        return super().save(snapshot, expected_cursor)

class TestCounting(SessionStorageConformance):
    def make_storage(self):
        return Counting(STORE)

def test_zz_seeds_run():
    print(f"SEEDS RUN: {len(WRITTEN) / 3:g}")
"""


def _plugin() -> list[str]:
    """Load the plugin by hand unless the installed package already registers it (pytest11)."""
    registered = any(
        ep.value == "akchat_fsm.testing.pytest_plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    return [] if registered else ["-p", "akchat_fsm.testing.pytest_plugin"]


def test_a_broken_adapter_fails_its_generated_tests(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(str(Path(__file__).parent))
    pytester.makepyfile(test_broken=BROKEN_MODULE)
    result = pytester.runpytest_inprocess(
        *_plugin(),
        "--akchat-conformance-seed=5",
        "-k",
        "create_only or cas_race_threads or round_trip",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 2, result.stdout.str()
    assert outcomes.get("passed") == 3  # round_trip, _unicode, _large: the bug is elsewhere
    result.stdout.fnmatch_lines(
        ["*create_only failed with seed 5 (seed 1 of 1; replay: --akchat-conformance-seed=5)*"]
    )
    # The message states the broken property before what the kit saw.
    result.stdout.fnmatch_lines(["*save(snapshot, None) must create only*"])


def test_a_failure_without_a_seed_option_names_the_seed_that_failed(
    pytester: pytest.Pytester,
) -> None:
    pytester.syspathinsert(str(Path(__file__).parent))
    pytester.makepyfile(test_broken=BROKEN_MODULE)
    result = pytester.runpytest_inprocess(*_plugin(), "-k", "cas_race_threads")
    assert result.parseoutcomes().get("failed") == 1
    found = re.search(
        r"failed with seed (\d+) \(seed 1 of 3; replay: --akchat-conformance-seed=(\d+)\)",
        result.stdout.str(),
    )
    assert found is not None, result.stdout.str()
    assert found[1] == found[2]


@pytest.mark.parametrize(("args", "runs"), [((), 3), (("--akchat-conformance-seeds=5",), 5)])
def test_randomized_checks_run_several_seeds(
    pytester: pytest.Pytester, args: tuple[str, ...], runs: int
) -> None:
    pytester.syspathinsert(str(Path(__file__).parent))
    pytester.makepyfile(test_counting=COUNTING_MODULE)
    result = pytester.runpytest_inprocess(
        *_plugin(), *args, "-s", "-k", "test_linearizability_threads or seeds_run"
    )
    assert result.parseoutcomes().get("passed") == 2, result.stdout.str()
    result.stdout.fnmatch_lines([f"*SEEDS RUN: {runs}*"])
