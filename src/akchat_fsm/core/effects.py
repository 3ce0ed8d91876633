"""What the pure core asks its shell to do, as frozen values.

A shell (sync, async, or a test) performs the effects of a :class:`~akchat_fsm.core.state.Step`
**in order** and stops at the first failure: an upstream call is always preceded, in the same
step, by the save that records the claim, so it runs only after that save returned ``True``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..wire.session import SessionSnapshot

__all__ = ["CallApprove", "CallDeny", "Effect", "ProposeUpstream", "SaveSnapshot"]


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


Effect = SaveSnapshot | ProposeUpstream | CallApprove | CallDeny
