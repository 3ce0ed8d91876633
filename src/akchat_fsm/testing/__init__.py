"""Tools shipped for hosts and adapter authors: fault injection, the storage conformance kit,
the linearizability checker.

Submodules import lazily so ``import akchat_fsm.testing.faulty`` does not pull in pytest.
"""

from __future__ import annotations

from .faulty import AsyncFaultyStorage, FaultyStorage, InjectedFault

__all__ = ["AsyncFaultyStorage", "FaultyStorage", "InjectedFault"]
