"""The execution guard: what a runtime module runs tool bodies through, whatever the runtime.

A bridge hands its runtime module an :class:`ExecutionGuard` over its tool ledger: with
``resume(run, decisions, guard)`` for a continuation (its approved calls), or from
``bridge.execution_guard(ids)`` outside one (a new run's ungated calls). The runtime's tool
hook awaits ``guard.execute(...)`` for an approved call and ``guard.execute_ungated(...)``
for one that needs no approval, and ``guard.drain()`` before it leaves its event loop;
docs/integrations/ledger.md ("What every bridge shares") says what each guarantees. Public
for a host connecting a runtime the shipped modules do not cover, and for its tests.
"""

from __future__ import annotations

from ._bridge_ports import ExecutionGuard

__all__ = ["ExecutionGuard"]
