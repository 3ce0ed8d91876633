"""Pytest form of the storage conformance kit, and the ``akchat_fsm`` pytest plugin.

Subclass :class:`SessionStorageConformance` in a test module; every kit check becomes one
test (``test_round_trip``, ``test_cas_race_threads``, …)::

    from akchat_fsm.testing.pytest_plugin import SessionStorageConformance

    class TestMyStorage(SessionStorageConformance):
        def make_storage(self):
            return MyStorage(DSN)

or override the ``storage_factory`` fixture to use other fixtures::

    class TestMyStorage(SessionStorageConformance):
        @pytest.fixture
        def storage_factory(self, tmp_path):
            return lambda: MyStorage(tmp_path / "db")

Optional overrides: ``make_async_storage`` / fixture ``async_storage_factory`` (adds
``test_async_<check>`` tests), ``make_faulty_storage`` / ``faulty_storage_factory`` (the
``error_mapping`` check), ``processes`` (``None``, the default: spawn racers whenever the
factory can be sent to another process and its store is seen there; ``True``: fail when it
cannot; ``False``: off). A check the adapter lacks a capability for is skipped, unless the
class lists it in ``skip_checks`` (then no test is generated for it at all).

The checks driven by a seed or by thread scheduling (``SEEDED``) run with several seeds
in each test (3 by default); a failure names the seed that failed and how to replay it.

As a plugin (entry point ``pytest11``: ``akchat_fsm = akchat_fsm.testing.pytest_plugin``) it
adds ``--akchat-conformance-profile`` (``default``/``deep``), ``--akchat-conformance-seeds``
(how many seeds; raise it to soak an adapter) and ``--akchat-conformance-seed`` (replay one).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from .conformance import CHECKS, SYNC_ONLY, run_check

__all__ = ["DEFAULT_SEEDS", "SEEDED", "SessionStorageConformance", "pytest_addoption"]

#: Checks whose workload depends on the seed or on how threads interleave: each test runs
#: them with several seeds. The others are deterministic, or (processes, error mapping,
#: the ~170 ids of session_isolation) too slow to repeat by default.
SEEDED = frozenset(
    {
        "create_race_threads",
        "cas_race_threads",
        "counter_workload",
        "linearizability_threads",
        "record_cas_race",
    }
)
DEFAULT_SEEDS = 3


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("akchat_fsm", "akchat-fsm storage conformance kit")
    group.addoption(
        "--akchat-conformance-profile",
        default="default",
        choices=["default", "deep"],
        help="how hard the storage conformance checks push (default: default)",
    )
    group.addoption(
        "--akchat-conformance-seed",
        type=int,
        default=None,
        help="replay one seed of the conformance workloads (default: random, printed on failure)",
    )
    group.addoption(
        "--akchat-conformance-seeds",
        type=int,
        default=DEFAULT_SEEDS,
        help=f"seeds per randomized conformance check (default: {DEFAULT_SEEDS}; raise to soak)",
    )


def _option(config: pytest.Config, name: str, default: Any) -> Any:
    try:
        return config.getoption(name)
    except ValueError:  # the plugin is not registered: the class still works
        return default


class SessionStorageConformance:
    """Mixin: one test per conformance check against ``make_storage()``."""

    #: ``None``: race ``spawn`` processes when the factory allows it (skip otherwise);
    #: ``True``: fail when it does not; ``False``: never.
    processes: bool | None = None
    #: Checks this adapter declares it cannot pass (a missing optional capability, say
    #: ``{"no_open_connections"}``): no test is generated for them, instead of a skip.
    skip_checks: frozenset[str] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        has_sync = _overrides(cls, "make_storage", "storage_factory")
        has_async = _overrides(cls, "make_async_storage", "async_storage_factory")
        for name in CHECKS:
            if name in cls.skip_checks:
                continue
            if has_sync:
                setattr(cls, f"test_{name}", _sync_test(name))
            if has_async and name not in SYNC_ONLY:
                setattr(cls, f"test_async_{name}", _async_test(name))

    def make_storage(self) -> Any:
        """Return a new sync adapter. Override this or the ``storage_factory`` fixture."""
        raise NotImplementedError("override make_storage() or the storage_factory fixture")

    def make_async_storage(self) -> Any:
        """Return a new asyncio adapter (optional)."""
        raise NotImplementedError

    def make_faulty_storage(self) -> Any:
        """Return an adapter on the same data whose driver fails (optional)."""
        raise NotImplementedError

    @pytest.fixture
    def storage_factory(self) -> Callable[[], Any] | str:
        return self.make_storage

    @pytest.fixture
    def async_storage_factory(self) -> Callable[[], Any] | None:
        overridden = (
            type(self).make_async_storage is not SessionStorageConformance.make_async_storage
        )
        return self.make_async_storage if overridden else None

    @pytest.fixture
    def faulty_storage_factory(self) -> Callable[[], Any] | None:
        overridden = (
            type(self).make_faulty_storage is not SessionStorageConformance.make_faulty_storage
        )
        return self.make_faulty_storage if overridden else None

    def _run(
        self,
        name: str,
        request: pytest.FixtureRequest,
        sync_factory: Callable[[], Any] | str | None,
        async_factory: Callable[[], Any] | None,
        faulty_factory: Callable[[], Any] | None,
    ) -> None:
        replay = _option(request.config, "akchat_conformance_seed", None)
        count = max(1, _option(request.config, "akchat_conformance_seeds", DEFAULT_SEEDS))
        if replay is not None:
            seeds = [replay]
        else:
            base = random.randrange(2**32)
            seeds = [(base + n) % 2**32 for n in range(count if name in SEEDED else 1)]
        for n, seed in enumerate(seeds, start=1):
            outcome = run_check(
                name,
                sync_factory,
                make_async=async_factory,
                make_faulty_storage=faulty_factory,
                profile=_option(request.config, "akchat_conformance_profile", "default"),
                seed=seed,
                processes=self.processes,
            )
            if outcome.status == "skipped":
                pytest.skip(outcome.detail)
            if outcome.status == "failed":
                pytest.fail(
                    f"{outcome.name} failed with seed {seed} (seed {n} of {len(seeds)}; "
                    f"replay: --akchat-conformance-seed={seed}): {outcome.detail}",
                    pytrace=False,
                )


def _overrides(cls: type, *names: str) -> bool:
    """Whether a subclass (not the mixin itself) defines any of ``names``."""
    return any(
        name in klass.__dict__
        for klass in cls.__mro__
        if klass is not SessionStorageConformance and issubclass(klass, SessionStorageConformance)
        for name in names
    )


def _sync_test(name: str) -> Callable[..., None]:
    def test(
        self: SessionStorageConformance,
        request: pytest.FixtureRequest,
        storage_factory: Any,
        faulty_storage_factory: Any,
    ) -> None:
        self._run(name, request, storage_factory, None, faulty_storage_factory)

    test.__name__ = f"test_{name}"
    test.__doc__ = CHECKS[name].__doc__
    return test


def _async_test(name: str) -> Callable[..., None]:
    def test(
        self: SessionStorageConformance,
        request: pytest.FixtureRequest,
        async_storage_factory: Any,
    ) -> None:
        self._run(name, request, None, async_storage_factory, None)

    test.__name__ = f"test_async_{name}"
    test.__doc__ = CHECKS[name].__doc__
    return test
