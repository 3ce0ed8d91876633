"""``reconcile``: settle processing confirmation records from the host's canonical memory.

A record left ``approving`` / ``rejecting`` / ``expiring`` (a crash between the two saves of
a resolution, an upstream failure, an unsettled unknown outcome) is settled from the status
of its upstream tool call in ``ChatMemory``:

=========================  ===================================================================
upstream tool-call status   what reconcile does
=========================  ===================================================================
``requires_confirmation``   upstream never acted: issue the claimed call now and record the
                            final status (default), or back to ``pending`` with
                            ``release_untouched=True``
anything else               upstream acted: record the matching final status, call nothing
missing from memory         left as is, reported as ``"unknown"``
=========================  ===================================================================

A propose intent (a call upstream may hold without its binding, ADR-0093) is settled only once
its proposer's lease has ended (ADR-0133): within it the live proposer alone acts on the call,
and reconcile reports the intent ``"unknown"``; after it, a waiting call is bound, and an
intent whose call upstream does not hold is deleted.

Resume is safe even while the original claimant is alive (upstream executes the first call and
ignores the second); release is safe only when no claimant is alive. The record carries no claim
time, so the host decides when to run it: after a crash, from an operator command, or once its own
resolution timeout has passed (docs/reconciliation.md, core ADR-0012).
"""

from __future__ import annotations

from .ports import AsyncUpstreamChat, UpstreamChat
from .session import AsyncChatSession, AsyncMemory, ChatSession, Memory, ReconcileOutcome

__all__ = ["ReconcileOutcome", "reconcile", "reconcile_async"]


def reconcile(
    session: ChatSession,
    memory: Memory,
    *,
    upstream: UpstreamChat | None = None,
    release_untouched: bool = False,
) -> tuple[ReconcileOutcome, ...]:
    """Settle ``session``'s processing records from ``memory``; one outcome per record."""
    return session.reconcile(memory, upstream=upstream, release_untouched=release_untouched)


async def reconcile_async(
    session: AsyncChatSession,
    memory: AsyncMemory,
    *,
    upstream: AsyncUpstreamChat | None = None,
    release_untouched: bool = False,
) -> tuple[ReconcileOutcome, ...]:
    """Settle ``session``'s processing records from ``memory``; one outcome per record."""
    return await session.reconcile(memory, upstream=upstream, release_untouched=release_untouched)
