"""Shared test configuration: Hypothesis profiles and the real-server fixtures.

Servers: PostgreSQL at ``AKCHAT_PG_URL`` (default ``postgresql://127.0.0.1:5432/test``) and
Redis at ``AKCHAT_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). A test that needs one
skips when it is not reachable, unless ``AKCHAT_REQUIRE_SERVERS=1`` (set by ``.ci/run``): then
the missing server is a failure, and so is any skipped test at all.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings

REQUIRE_SERVERS = os.environ.get("AKCHAT_REQUIRE_SERVERS") == "1"
PG_URL = os.environ.get("AKCHAT_PG_URL", "postgresql://127.0.0.1:5432/test")
REDIS_URL = os.environ.get("AKCHAT_REDIS_URL", "redis://127.0.0.1:6379/0")

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


# --------------------------------------------------------------------------- no silent skips
_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if REQUIRE_SERVERS and _skipped:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
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
