"""Seeded bug: an upstream call allowed for a record that holds no claim (pending).

Same contracts as :func:`akchat_fsm.core.records.upstream_call`; CrossHair must refute them.
"""

from __future__ import annotations

from akchat_fsm.core.records import Record, UpstreamAction
from akchat_fsm.errors import IllegalTransition
from akchat_fsm.wire.enums import ConfirmationStatus

__all__ = ["IllegalTransition", "upstream_call_without_claim"]


def upstream_call_without_claim(claimed: Record) -> UpstreamAction:
    """
    raises: IllegalTransition
    post: claimed.status.is_processing
    post: (__return__ == UpstreamAction.APPROVE) == (claimed.status == ConfirmationStatus.APPROVING)
    """
    if claimed.status in (ConfirmationStatus.APPROVING, ConfirmationStatus.PENDING):
        return UpstreamAction.APPROVE
    if claimed.status in (ConfirmationStatus.REJECTING, ConfirmationStatus.EXPIRING):
        return UpstreamAction.DENY
    raise IllegalTransition("confirmation", str(claimed.status), "call upstream")
