"""What the pure core asks its shell to do, as frozen values.

A :class:`~akchat_fsm.core.state.Step` names its effects by role, not by position: ``save``
(a :class:`SaveSnapshot`, or ``None``) and ``then`` (the upstream call a won claim allows, or
``None``). A shell performs ``save`` exactly as given: its snapshot is the bytes to store,
including the write nonce the shell passed in. Only if that save applied (storage answered
``True``, or an unknown outcome was settled as applied by re-reading) does the shell perform
``then``; after a conflict it asks the core again on the fresh state, and ``then`` of the
step that lost is never performed. ``Step`` refuses ``then`` without ``save``, so an upstream
call always follows the save that records its claim (ADR-0112).

:class:`ProposeUpstream` is not part of a ``Step``: a propose is planned first
(:class:`~akchat_fsm.core.confirmations.Proposal`) and its binding saved only after upstream
answered (ADR-0016).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..wire.session import SessionSnapshot

__all__ = [
    "CallApprove",
    "CallDeny",
    "ClaimedCall",
    "Effect",
    "ProposeUpstream",
    "SaveSnapshot",
]


@dataclass(frozen=True)
class SaveSnapshot:
    """``storage.save(snapshot, expected_cursor)``; ``None`` means create-only."""

    snapshot: SessionSnapshot
    expected_cursor: int | None


@dataclass(frozen=True)
class ProposeUpstream:
    """``chat.propose_tool_call(id=tool_call_id, name=name, args=args)``."""

    tool_call_id: str
    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class CallApprove:
    """``chat.approve(tool_call_id)``: executes the tool. Emitted only after a won claim."""

    tool_call_id: str


@dataclass(frozen=True)
class CallDeny:
    """``chat.deny(tool_call_id, reason)``. Emitted only after a won claim."""

    tool_call_id: str
    reason: str


#: The upstream call a claim allows: a step's ``then``, performed only after its ``save`` applied.
ClaimedCall: TypeAlias = CallApprove | CallDeny
Effect: TypeAlias = SaveSnapshot | ProposeUpstream | CallApprove | CallDeny
