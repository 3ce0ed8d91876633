"""The I/O a session operation asks for, as plain values (sans-I/O).

Every operation is written once, as a *plan*: a generator that yields these effects and
receives their results (or has the effect's exception thrown into it). Two drivers execute
them, one sync and one asyncio (:mod:`akchat_fsm.session.drivers`); a test can also step a
plan effect by effect, which is how the stateful suites interleave clients and inject crashes
between any two steps.

The save and upstream effects are the core's own (:mod:`akchat_fsm.core.effects`), under the
same names; the shell adds the reads (storage, memory) and observer delivery.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from ..core.effects import CallApprove, CallDeny, ProposeUpstream, SaveSnapshot
from .observers import SessionEvent

__all__ = [
    "CallApprove",
    "CallDeny",
    "Effect",
    "Emit",
    "Load",
    "MemoryRead",
    "Plan",
    "PortEffect",
    "ProposeUpstream",
    "ReadMemory",
    "SaveSnapshot",
]

T = TypeVar("T")

# The core's effects, each under its one name, and what a driver answers for each:
# SaveSnapshot → ``storage.save(snapshot, expected_cursor)``: ``True`` or ``False`` (conflict);
# ProposeUpstream → ``upstream.propose_tool_call(id, name, args)``: the call upstream returned;
# CallApprove / CallDeny → ``upstream.approve`` / ``upstream.deny``: the side effect a claim
# protects.


@dataclass(frozen=True)
class Load:
    """``storage.load(session_id)`` → the stored value (or ``None``)."""

    session_id: str


@dataclass(frozen=True)
class ReadMemory:
    """Ask memory for the status of ``tool_call_ids`` (used only by reconciliation).

    → :class:`MemoryRead`: ``memory.tool_call_statuses(ids)`` when the memory has it (a
    :class:`~akchat_fsm.session.ports.ToolCallStatusMemory`), else ``memory.load()``.
    """

    tool_call_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryRead:
    """What memory answered: ``statuses`` (id → status) or a whole memory ``record``."""

    statuses: Mapping[str, object] | None = None
    record: object = None


@dataclass(frozen=True)
class Emit:
    """Deliver an observer event. Never fails: observer errors are swallowed by drivers."""

    event: SessionEvent


#: What a driver performs through a port (storage, upstream, memory): everything but ``Emit``.
PortEffect: TypeAlias = Load | SaveSnapshot | ProposeUpstream | CallApprove | CallDeny | ReadMemory
Effect: TypeAlias = PortEffect | Emit
#: A plan yields effects, receives their results, and returns ``T``.
Plan: TypeAlias = Generator[Effect, Any, T]
