"""Bridges to the agent runtimes Python hosts run, on one durable tool-execution ledger.

Each runtime has its own module behind its own extra (``akchat_fsm.integrations.pydantic_ai``
needs ``akchat-fsm[pydantic-ai]``, ``akchat_fsm.integrations.openai_agents`` needs
``akchat-fsm[openai-agents]``, ``akchat_fsm.integrations.langgraph`` needs
``akchat-fsm[langgraph]``); :mod:`akchat_fsm.integrations.ledger`, which they share, needs
none of them. See docs/adr/0100-tool-execution-ledger.md.

Every error a bridge or the ledger raises beyond the session's own is importable here (each a
:class:`BridgeError`, except :class:`ToolCallMismatch`, a ``ConfigError``); docs/errors.md says
what to do with each.
"""

from __future__ import annotations

from ._bridge_io import BridgeError
from ._bridge_runs import RunBlocked, RunClaimLost, RunInProgress
from .ledger import (
    ExecutionClaimLost,
    ExecutionUnknown,
    RecordedToolFailure,
    SettleRefused,
    ToolCallMismatch,
)

__all__ = [
    "BridgeError",
    "ExecutionClaimLost",
    "ExecutionUnknown",
    "RecordedToolFailure",
    "RunBlocked",
    "RunClaimLost",
    "RunInProgress",
    "SettleRefused",
    "ToolCallMismatch",
]
