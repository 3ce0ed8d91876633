"""The execution-ledger entry of one tool call (ADR-0100), declared once.

    absent ──claim──▶ executing ──finish [ours]──▶ executed (final)
                        │  ▲  ──settle_ran──────────▲
                        │  └──claim [ours] | [!ours & idempotent]
                        └──release──▶ released ──claim──▶ executing
                                      released ──settle_ran──▶ executed

``absent``: nothing is stored for the call (never a stored state). ``executing``: a process
claimed the body and may be running it; its outcome is unknown to everyone else. ``executed``:
the body's outcome (or an operator's "it ran") is recorded; nothing leaves it, so a claim there
replays the recorded outcome. ``released``: an operator said an unknown execution did not run,
or the claimant's own body declined to act (it deferred itself to an approval, see
docs/integrations/ledger.md), so the next claim may run it.

Two guards, read from the model: ``ours`` (the stored claim nonce is the caller's) and
``idempotent`` (the host declared the tool safe to run twice). A claim of an ``executing``
entry that is ``ours`` is the caller's own claim found again (its save's outcome was unknown):
the self-loop writes nothing. A claim that is not ours moves only for an idempotent tool (a
re-claim, attempt + 1); otherwise the outcome is unknown and nothing runs. Only the claimant
``finish`` es; an operator's verdict (``settle_ran`` / ``release``) needs no claim (a claimant
releasing a body that declined sends the same ``release``), and a release of a released entry
changes nothing.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import State, StateMachine

__all__ = ["ExecutionEvent", "ExecutionLifecycle", "ExecutionModel", "ExecutionState"]


class ExecutionState(StrEnum):
    """Where one tool call's ledger entry stands (``absent``: nothing is stored)."""

    ABSENT = "absent"
    EXECUTING = "executing"
    EXECUTED = "executed"
    RELEASED = "released"


class ExecutionEvent(StrEnum):
    """Events of :class:`ExecutionLifecycle`."""

    CLAIM = "claim"
    FINISH = "finish"
    SETTLE_RAN = "settle_ran"
    RELEASE = "release"


class ExecutionModel:
    """The mutable box the machine runs on."""

    def __init__(
        self, state: ExecutionState | None = None, *, ours: bool = False, idempotent: bool = False
    ) -> None:
        self.state = state
        self.ours = ours
        self.idempotent = idempotent


class ExecutionLifecycle(StateMachine):
    """Lifecycle of one tool call's ledger entry. States are :class:`ExecutionState` values."""

    absent = State(initial=True, value=ExecutionState.ABSENT)
    executing = State(value=ExecutionState.EXECUTING)
    executed = State(final=True, value=ExecutionState.EXECUTED)
    released = State(value=ExecutionState.RELEASED)

    # Declaration order matters: the first transition whose guards pass wins.
    claim = (
        absent.to(executing)
        | executing.to(executing, cond="ours")
        | executing.to(executing, cond="idempotent", unless="ours")
        | released.to(executing)
    )
    finish = executing.to(executed, cond="ours")
    settle_ran = executing.to(executed) | released.to(executed)
    release = executing.to(released) | released.to(released)
