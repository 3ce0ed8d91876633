"""The pure, sans-I/O core: ``(state, command, now_ms, *, nonce) -> Step(state, save, then)``.

Layers: :mod:`.records`, :mod:`.cursor`, :mod:`.lease`, :mod:`.retention` are the kernel
(plain values, CrossHair contracts); :mod:`.state`, :mod:`.confirmations`, :mod:`.turns` map
the pydantic envelope to and from it. See ``docs/core.md``.
"""

from __future__ import annotations

from ..machines.confirmation import ConfirmationEvent
from ..machines.cursor import CursorEvent, CursorPhase
from .confirmations import (
    DEFAULT_TTL_MS,
    EXPIRED_REASON,
    Proposal,
    UpstreamCall,
    by_tool_call,
    claim_resolution,
    complete_resolution,
    find_binding,
    plan_proposal,
    random_suffix,
    reconcile,
    record_proposal,
)
from .cursor import CursorState
from .effects import CallApprove, CallDeny, Effect, ProposeUpstream, SaveSnapshot
from .records import Reconciliation, UpstreamToolStatus
from .retention import KEEP_TERMINAL, MAX_CONFIRMATIONS
from .state import (
    SessionState,
    Step,
    iso_ms,
    new_session,
    next_snapshot,
    persist,
    reloaded,
    resumed,
    save_settled,
    settle_uncertain,
)
from .turns import claim_turn, drop_decisions, record_decision, release_turn

__all__ = [
    "DEFAULT_TTL_MS",
    "EXPIRED_REASON",
    "KEEP_TERMINAL",
    "MAX_CONFIRMATIONS",
    "CallApprove",
    "CallDeny",
    "ConfirmationEvent",
    "CursorEvent",
    "CursorPhase",
    "CursorState",
    "Effect",
    "Proposal",
    "ProposeUpstream",
    "Reconciliation",
    "SaveSnapshot",
    "SessionState",
    "Step",
    "UpstreamCall",
    "UpstreamToolStatus",
    "by_tool_call",
    "claim_resolution",
    "claim_turn",
    "complete_resolution",
    "drop_decisions",
    "find_binding",
    "iso_ms",
    "new_session",
    "next_snapshot",
    "persist",
    "plan_proposal",
    "random_suffix",
    "reconcile",
    "record_decision",
    "record_proposal",
    "release_turn",
    "reloaded",
    "resumed",
    "save_settled",
    "settle_uncertain",
]
