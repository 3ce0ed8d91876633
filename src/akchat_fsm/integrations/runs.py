"""An agent run's record and every decision about it: pure functions of the stored run.

The public face of the bridges' run records (the bridges themselves are
:mod:`akchat_fsm.integrations.pydantic_ai` and :mod:`akchat_fsm.integrations.openai_agents`):
a host or an operator tool that reads ``run:<id>`` records, and the tests of the run
decisions, import them here. The decisions are read off ``RunLifecycle``'s table (ADR-0120),
as the ledger's are in :mod:`akchat_fsm.integrations.ledger`.
"""

from __future__ import annotations

from ._bridge_runs import (
    DENIAL_PREFIX,
    EXPIRED_MESSAGE,
    REJECTED_MESSAGE,
    RUN_PREFIX,
    CallDecision,
    ContinueAction,
    ContinueDecision,
    PendingCall,
    Readiness,
    RunClaimLost,
    RunInProgress,
    RunRecord,
    RunState,
    decide_continuation,
    decide_continue,
    decide_readiness,
    decide_release_run,
    decide_settle_run,
    decide_start_run,
    decision_key,
    denial_key,
    run_key,
)

__all__ = [
    "DENIAL_PREFIX",
    "EXPIRED_MESSAGE",
    "REJECTED_MESSAGE",
    "RUN_PREFIX",
    "CallDecision",
    "ContinueAction",
    "ContinueDecision",
    "PendingCall",
    "Readiness",
    "RunClaimLost",
    "RunInProgress",
    "RunRecord",
    "RunState",
    "decide_continuation",
    "decide_continue",
    "decide_readiness",
    "decide_release_run",
    "decide_settle_run",
    "decide_start_run",
    "decision_key",
    "denial_key",
    "run_key",
]
