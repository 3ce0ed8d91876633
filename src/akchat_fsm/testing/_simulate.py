"""Histories a correct CAS store could have recorded, to calibrate the checker."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable
from typing import Any

from ._history import UNKNOWN, Operation

__all__ = ["simulated_cas_history", "simulated_lockstep_history"]


def simulated_cas_history(
    seed: int,
    ops: int,
    *,
    processes: int = 8,
    unknown: float = 0.2,
    deletes: float = 0.1,
    key: Hashable = "k",
    late: int = 0,
) -> list[Operation]:
    """A history a *correct* CAS store could produce, for benchmarks and calibration.

    ``processes`` clients run the kit's mix (30% load, 45% save from the cursor they saw,
    15% save from a wrong cursor, ``deletes`` delete) on one key; each operation takes
    effect at one instant inside its call. A fraction ``unknown`` ends with an unknown
    outcome (half of those applied, half not). Times are event counts. ``late``: an applied
    unknown outcome lands up to ``late`` events after its client gave up on it (a write
    stuck in a queue), while the others go on.
    """
    rng = random.Random(seed)
    stored: Any = None
    out: list[Operation] = []
    view: dict[int, Any] = {}
    busy: dict[int, dict[str, Any]] = {}
    landing: list[tuple[int, dict[str, Any]]] = []  # (when, call) of late unknown outcomes
    started = clock = 0
    while len(out) < ops:
        clock += 1
        for due in [item for item in landing if item[0] <= clock]:
            landing.remove(due)
            stored, _ = _simulated_effect(due[1], stored)
        p = rng.randrange(processes)
        call = busy.get(p)
        if call is None:
            if started == ops:
                continue
            started += 1
            busy[p] = _simulated_call(rng, p, started, view.get(p, "?"), unknown, deletes)
            busy[p]["call"] = clock
        elif "output" not in call:  # the instant it takes effect
            if late and call["fate"] == "applied":
                landing.append((clock + rng.randrange(late), dict(call)))
                call["output"] = None
            else:
                stored, call["output"] = _simulated_effect(call, stored)
        else:
            del busy[p]
            if call["fate"] == "ok":
                out.append(
                    Operation(
                        p, call["kind"], call["input"], call["output"], call["call"], clock, key
                    )
                )
                view[p] = _simulated_view(call, view.get(p, "?"))
            else:
                out.append(
                    Operation(p, call["kind"], call["input"], UNKNOWN, call["call"], math.inf, key)
                )
                view[p] = "?"
    return out


def _simulated_call(
    rng: random.Random, p: int, n: int, seen: Any, unknown: float, deletes: float
) -> dict[str, Any]:
    roll = rng.random()
    fate = rng.random()
    call: dict[str, Any] = {
        "fate": "ok" if fate >= unknown else ("lost" if fate < unknown / 2 else "applied"),
        "kind": "load",
        "input": None,
    }
    if seen == "?" or roll < 0.3:
        return call
    if roll < 0.3 + deletes:
        call["kind"] = "delete"
        return call
    good = None if seen is None else seen[0]
    expected = (
        good
        if roll < 0.75 + deletes / 2
        else rng.choice([None, 1, (good or 1) - 1, (good or 0) + 1])
    )
    call["kind"] = "save"
    call["input"] = (expected, ((expected or 0) + 1, f"p{p}-{n}"))
    return call


def _simulated_effect(call: dict[str, Any], stored: Any) -> tuple[Any, Any]:
    """(the stored value after the call, its output)."""
    if call["fate"] == "lost":
        return stored, None
    if call["kind"] == "load":
        return stored, stored
    if call["kind"] == "delete":
        return None, None
    expected, value = call["input"]
    matches = (stored is None and expected is None) or (
        stored is not None and expected is not None and stored[0] == expected
    )
    return (value, True) if matches else (stored, False)


def _simulated_view(call: dict[str, Any], seen: Any) -> Any:
    if call["kind"] == "load":
        return call["output"]
    if call["kind"] == "save":
        return call["input"][1] if call["output"] else "?"
    return None


def simulated_lockstep_history(
    seed: int,
    ops: int,
    *,
    processes: int = 8,
    unknown: float = 0.2,
    deletes: float = 0.1,
    key: Hashable = "k",
) -> list[Operation]:
    """What the kit's history workers record against a *correct* CAS store (the other shape).

    ``processes`` clients run the same mix as :func:`simulated_cas_history`, in lockstep as
    ``run_history_worker`` does: each takes its call time, waits at a barrier shared by all,
    then calls. So every operation of a round overlaps every other one of that round, and the
    next round's calls start while this round's last operations are still returning. Each
    operation takes effect at one instant after the barrier, in a random order; a fraction
    ``unknown`` ends with an unknown outcome (half applied), after which its client goes on.
    Times are event counts.
    """
    rng = random.Random(seed)
    stored: Any = None
    out: list[Operation] = []
    view: dict[int, Any] = {}
    clock = 0
    calls: dict[int, int] = {}
    for p in range(processes):
        clock += 1
        calls[p] = clock
    n = 0
    while len(out) < ops:
        # The barrier opened: every client calls, each takes effect in a random order and
        # returns some time after its own effect, then takes its next call time.
        round_ops = min(processes, ops - len(out))
        order = rng.sample(range(processes), round_ops)
        pending = []
        effects: dict[int, tuple[dict[str, Any], Any]] = {}
        for p in order:
            n += 1
            call = _simulated_call(rng, p, n, view.get(p, "?"), unknown, deletes)
            stored, output = _simulated_effect(call, stored)
            effects[p] = (call, output)
            clock += 1
            pending.append(p)
            # Some of the clients whose effect is done return now, in any order.
            while pending and rng.random() < 0.5:
                _lockstep_return(rng, pending, effects, calls, view, out, clock, key)
                clock += 1
        while pending:
            _lockstep_return(rng, pending, effects, calls, view, out, clock, key)
            clock += 1
    return out[:ops]


def _lockstep_return(
    rng: random.Random,
    pending: list[int],
    effects: dict[int, tuple[dict[str, Any], Any]],
    calls: dict[int, int],
    view: dict[int, Any],
    out: list[Operation],
    clock: int,
    key: Hashable,
) -> None:
    p = pending.pop(rng.randrange(len(pending)))
    call, output = effects[p]
    if call["fate"] == "ok":
        out.append(Operation(p, call["kind"], call["input"], output, calls[p], clock, key))
        call["output"] = output
        view[p] = _simulated_view(call, view.get(p, "?"))
    else:
        out.append(Operation(p, call["kind"], call["input"], UNKNOWN, calls[p], math.inf, key))
        view[p] = "?"
    calls[p] = clock + 1  # its next call time, taken before the next barrier
