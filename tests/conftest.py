"""Shared test configuration: Hypothesis profiles and the real-server fixtures.

Servers: PostgreSQL at ``AKCHAT_PG_URL`` (default ``postgresql://127.0.0.1:5432/test``) and
Redis at ``AKCHAT_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``), MySQL / MariaDB at
``AKCHAT_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306/test``), and a Redis Cluster the
run starts from the installed ``redis-server`` (``redis_cluster``, tests/redis_cluster.py). A
test that needs one skips when it is not reachable, unless ``AKCHAT_REQUIRE_SERVERS=1`` (set
by ``.ci/run``): then the missing server is a failure, and so is any skipped test at all.
"""

from __future__ import annotations

import os
import shlex
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from redis_cluster import LocalCluster

REQUIRE_SERVERS = os.environ.get("AKCHAT_REQUIRE_SERVERS") == "1"
PG_URL = os.environ.get("AKCHAT_PG_URL", "postgresql://127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AKCHAT_REDIS_URL", "redis://127.0.0.1:6379/0")
MYSQL_URL = os.environ.get("AKCHAT_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")

# --------------------------------------------------------------------------- Hypothesis
# `ci` is derandomized so a CI failure replays byte for byte; `deep` is >= 10x the examples.
settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=600,
    stateful_step_count=80,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
_default_profile = "ci" if os.environ.get("CI") else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default_profile))


def _hypothesis_seed(config: pytest.Config) -> str | None:
    seed = config.getoption("--hypothesis-seed", default=None)
    return None if seed is None else str(seed)


def pytest_configure(config: pytest.Config) -> None:
    # A seed given on the command line (tox gives each interpreter its own, docs/proof.md)
    # must choose the examples. Hypothesis lets ``derandomize`` win over a forced seed, so a
    # seeded run drops it: the run is still reproducible, from the seed instead of the digest.
    if _hypothesis_seed(config) is not None and settings.default.derandomize:
        name = f"{settings.get_current_profile_name()}-seeded"
        settings.register_profile(name, settings.default, derandomize=False)
        settings.load_profile(name)


def _replay_command(config: pytest.Config, nodeid: str) -> str:
    seed = _hypothesis_seed(config)
    parts = [f"HYPOTHESIS_PROFILE={settings.get_current_profile_name().removesuffix('-seeded')}"]
    parts += ["python", "-m", "pytest", "-p", "no:cacheprovider"]
    if seed is not None:
        parts.append(f"--hypothesis-seed={seed}")
    parts.append(shlex.quote(nodeid))
    return " ".join(parts)


def pytest_report_header(config: pytest.Config) -> str:
    seed = _hypothesis_seed(config)
    how = (
        f"seed {seed}"
        if seed is not None
        else "derandomized"
        if settings.default.derandomize
        else "random"
    )
    return f"akchat-fsm: Hypothesis {settings.get_current_profile_name()!r}, {how}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        # What replays this failure, seed and profile included, whatever ran it (tox, xdist).
        report.sections.append(("replay", _replay_command(item.config, item.nodeid)))


# --------------------------------------------------------------------------- run once
#: Tests that judge files, not the interpreter: scans of the sources and docs, the type checker
#: run, the SPIN quick run and the seeded mutants of the suites. tox runs them in py311 only
#: (``-m "not once"`` elsewhere, docs/proof.md); a plain ``pytest`` runs them like any test.
ONCE = (
    "tests/test_async_twins.py",
    "tests/test_ci_guard.py",
    "tests/test_ci_times.py",
    "tests/test_coverage_floors.py",
    "tests/test_docs_index.py",
    "tests/test_import_boundaries.py",
    "tests/test_one_statement_per_fact.py",
    "tests/test_private_imports.py",
    "tests/test_public_api.py",
    "tests/test_readme.py",
    "tests/test_rewrite_script.py",
    "tests/test_seeds.py",
    "tests/test_server_hygiene.py",
    "tests/test_source_pointers.py",
    "tests/test_test_extra.py",
    "tests/cli/test_cli_docs.py",
    "tests/core/test_layering.py",
    "tests/integrations/test_docs_pages.py",
    "tests/machines/test_diagrams.py",
    "tests/models/test_check.py",
    "tests/models/test_lifecycle_drift.py",
    "tests/models/test_table_drift.py",
    "tests/session/test_typing.py",
    "tests/stateful/test_suites_bite.py",
)
_ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if Path(__file__).resolve() != _ROOT / "tests" / "conftest.py":
        return  # a copy of this file outside the repository (tests/test_ci_guard.py)
    missing = [name for name in ONCE if not (_ROOT / name).is_file()]
    if missing:  # a renamed module would silently start running everywhere again
        raise pytest.UsageError(f"tests/conftest.py ONCE names missing files: {missing}")
    once = {_ROOT / name for name in ONCE}
    for item in items:
        if item.path in once:
            item.add_marker(pytest.mark.once)


# --------------------------------------------------------------------------- servers
def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def _need(name: str, url: str, default_port: int) -> str:
    if _reachable(url, default_port):
        return url
    message = f"{name} is not reachable at {url}"
    if REQUIRE_SERVERS:
        pytest.fail(f"{message} (AKCHAT_REQUIRE_SERVERS=1)")
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_url() -> str:
    """URL of the real PostgreSQL server; skips (or fails in CI) when it is absent."""
    return _need("PostgreSQL", PG_URL, 5432)


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the real Redis server; skips (or fails in CI) when it is absent."""
    return _need("Redis", REDIS_URL, 6379)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A real 3-primary, 3-replica Redis Cluster on loopback, once per test process.

    Skips when ``redis-server``/``redis-cli`` are not installed, fails instead under
    ``AKCHAT_REQUIRE_SERVERS=1``. Ports from ``AKCHAT_REDIS_CLUSTER_PORT`` (7100), a block
    per xdist worker.
    """
    from redis_cluster import CLI, SERVER, LocalCluster, free_base

    if SERVER is None or CLI is None:
        message = "redis-server and redis-cli are needed for a Redis Cluster"
        if REQUIRE_SERVERS:
            pytest.fail(f"{message} (AKCHAT_REQUIRE_SERVERS=1)")
        pytest.skip(message)
    cluster = LocalCluster(free_base(), tmp_path_factory.mktemp("redis-cluster"), 2000)
    yield cluster.start()
    cluster.stop()


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """URL of the real MySQL / MariaDB server; skips (or fails in CI) when it is absent."""
    return _need("MySQL", MYSQL_URL, 3306)


# --------------------------------------------------------------------------- no silent skips
_skipped: list[str] = []
#: Seconds per test id (setup + call + teardown), for the budget report below.
_spent: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slowest",
        type=int,
        default=30 if os.environ.get("CI") else 0,
        metavar="N",
        help="print the N slowest tests with their share of the run (default 30 under CI)",
    )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[report.nodeid] = _spent.get(report.nodeid, 0.0) + report.duration
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def budget_lines(spent: dict[str, float], count: int) -> list[str]:
    """The ``count`` slowest tests, each with its seconds and its share of all test time.

    With xdist the shares are of the summed time of every worker, not of the wall time: what
    one test costs the budget whichever worker ran it.
    """
    total = sum(spent.values())
    if count <= 0 or total <= 0:
        return []
    lines = [f"the {min(count, len(spent))} slowest of {len(spent)} tests ({total:.1f} s in all):"]
    for nodeid, seconds in sorted(spent.items(), key=lambda kv: (-kv[1], kv[0]))[:count]:
        lines.append(f"{seconds:8.2f} s {100 * seconds / total:5.1f}%  {nodeid}")
    return lines


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REQUIRE_SERVERS and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = budget_lines(_spent, terminalreporter.config.getoption("--slowest"))
    if lines:
        terminalreporter.section("time budget (docs/proof.md)")
        for line in lines:
            terminalreporter.write_line(line)
    if REQUIRE_SERVERS and _skipped:
        terminalreporter.write_line(
            f"AKCHAT_REQUIRE_SERVERS=1: {len(_skipped)} skipped test(s) count as failures:",
            red=True,
        )
        for nodeid in _skipped:
            terminalreporter.write_line(f"  {nodeid}", red=True)


@pytest.fixture
def unique_id(request: pytest.FixtureRequest) -> Iterator[str]:
    """A session id no other test (or earlier run on a shared server) uses."""
    import uuid

    yield f"t-{uuid.uuid4().hex[:16]}"
