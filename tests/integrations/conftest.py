"""Fixtures for the bridge tests (backends in :mod:`bridge_harness`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bridge_harness import BACKENDS, RecordsBackend


@pytest.fixture(params=sorted(BACKENDS))
def records_backend(tmp_path: Path, request: pytest.FixtureRequest) -> RecordsBackend:
    return BACKENDS[request.param](tmp_path, request)
