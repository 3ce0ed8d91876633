"""The pytest form: one generated test per check, failing where the function form fails."""

from __future__ import annotations

import importlib.metadata
import threading
from pathlib import Path
from typing import Any

import pytest
from doubles import AsyncDictStorage, DictStorage, MapsTimeouts

from akchat_fsm.testing import CHECKS
from akchat_fsm.testing.pytest_plugin import SessionStorageConformance

pytest_plugins = ["pytester"]

_DATA: dict[str, Any] = {}
_LOCK = threading.Lock()


def _healthy() -> DictStorage:
    storage = DictStorage()
    storage._data = _DATA
    storage._lock = _LOCK
    return storage


class TestDictStorageThroughTheMixin(SessionStorageConformance):
    """A correct adapter with every capability: every generated test passes."""

    def make_storage(self) -> Any:
        return _healthy()

    def make_async_storage(self) -> Any:
        return AsyncDictStorage()

    def make_faulty_storage(self) -> Any:
        return MapsTimeouts(_DATA, _LOCK)

    # processes: a dict is private to the process; the async double has no open_connections().
    skip_checks = frozenset({"processes", "no_open_connections"})


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
from doubles import LastWriteWins

class TestBroken(SessionStorageConformance):
    def make_storage(self):
        return LastWriteWins()
"""


def test_a_broken_adapter_fails_its_generated_tests(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert(str(Path(__file__).parent))
    pytester.makepyfile(test_broken=BROKEN_MODULE)
    # Load the plugin by hand unless the installed package already registers it (pytest11).
    registered = any(
        ep.value == "akchat_fsm.testing.pytest_plugin"
        for ep in importlib.metadata.entry_points(group="pytest11")
    )
    plugin = [] if registered else ["-p", "akchat_fsm.testing.pytest_plugin"]
    result = pytester.runpytest_inprocess(
        *plugin,
        "--akchat-conformance-seed=5",
        "-k",
        "create_only or cas_race_threads or round_trip",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 2, result.stdout.str()
    assert outcomes.get("passed") == 3  # round_trip, _unicode, _large: the bug is elsewhere
    result.stdout.fnmatch_lines(["*create_only (replay: --akchat-conformance-seed=5)*"])
