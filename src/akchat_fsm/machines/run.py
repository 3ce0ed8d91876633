"""The run record of one paused agent run (ADR-0100 §3), declared once.

    absent ──start──▶ paused ──claim──▶ continuing ──complete [ours]──▶ completed (final)
                        ▲                 │  ▲
                        │                 │  └──claim [ours] | [!ours & recover]
                        └──pause [ours] ──┤     (the next batch of calls)
                        └──release [ours]─┘     (the resume raised; bodies that ran replay)

``absent``: no record (never a stored state). ``paused``: the runtime's serialised state and
the calls awaiting decisions. ``continuing``: one process claimed the continuation.
``completed``: the run's output is recorded; nothing leaves it, so a claim there returns the
recorded outcome.

Two guards, read from the model: ``ours`` (the stored claim nonce is the caller's) and
``recover`` (reconcile takes over a continuation whose claimant the host judges gone). A claim
of a ``continuing`` run that is ``ours`` is the caller's own claim found again: the self-loop
writes nothing. Only the claimant pauses, completes or releases the run.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import State, StateMachine

__all__ = ["RunEvent", "RunLifecycle", "RunModel", "RunState"]


class RunState(StrEnum):
    """Where one agent run's record stands (``absent``: nothing is stored)."""

    ABSENT = "absent"
    PAUSED = "paused"
    CONTINUING = "continuing"
    COMPLETED = "completed"


class RunEvent(StrEnum):
    """Events of :class:`RunLifecycle`."""

    START = "start"
    CLAIM = "claim"
    PAUSE = "pause"
    COMPLETE = "complete"
    RELEASE = "release"


class RunModel:
    """The mutable box the machine runs on."""

    def __init__(
        self, state: RunState | None = None, *, ours: bool = False, recover: bool = False
    ) -> None:
        self.state = state
        self.ours = ours
        self.recover = recover


class RunLifecycle(StateMachine):
    """Lifecycle of one agent run's record. States are :class:`RunState` values."""

    absent = State(initial=True, value=RunState.ABSENT)
    paused = State(value=RunState.PAUSED)
    continuing = State(value=RunState.CONTINUING)
    completed = State(final=True, value=RunState.COMPLETED)

    start = absent.to(paused)
    # Declaration order matters: the first transition whose guards pass wins.
    claim = (
        paused.to(continuing)
        | continuing.to(continuing, cond="ours")
        | continuing.to(continuing, cond="recover", unless="ours")
    )
    pause = continuing.to(paused, cond="ours")
    complete = continuing.to(completed, cond="ours")
    release = continuing.to(paused, cond="ours")
