"""An agent run's record and every decision about it: pure functions of the stored run.

The public face of the bridges' run records (the bridges themselves are
:mod:`akchat_fsm.integrations.pydantic_ai` and :mod:`akchat_fsm.integrations.openai_agents`):
a host or an operator tool that reads ``run:<id>`` records, and the tests of the run
decisions, import them here. The decisions are read off ``RunLifecycle``'s table (ADR-0120),
as the ledger's are in :mod:`akchat_fsm.integrations.ledger`.
"""

from __future__ import annotations

from . import _bridge_runs
from ._bridge_runs import *  # noqa: F403  (the names of its __all__, below)

__all__ = list(_bridge_runs.__all__)
