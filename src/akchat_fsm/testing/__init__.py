"""Tools shipped for hosts and adapter authors.

* :func:`check_session_storage` — the storage conformance kit (function form); the pytest
  form is :class:`akchat_fsm.testing.pytest_plugin.SessionStorageConformance`.
* :mod:`akchat_fsm.testing.linearizability` — history recorder and WGL checker.
* :class:`FaultyStorage` / :class:`AsyncFaultyStorage` — seeded or scripted fault injection.
"""

from __future__ import annotations

from . import doubles as doubles  # recording upstream and chat memory (sync and asyncio)
from .conformance import CHECKS, PROPERTIES, CheckOutcome, ConformanceReport, check_session_storage
from .faulty import AsyncFaultyStorage, FaultyStorage, InjectedFault

__all__ = [
    "CHECKS",
    "PROPERTIES",
    "AsyncFaultyStorage",
    "CheckOutcome",
    "ConformanceReport",
    "FaultyStorage",
    "InjectedFault",
    "check_session_storage",
]
