"""Histories a correct CAS store could have recorded, to calibrate the checker."""

from __future__ import annotations

import math
import random
from collections.abc import Hashable
from typing import Any

from ._history import UNKNOWN, Operation

__all__ = ["simulated_cas_history"]


def simulated_cas_history(
    seed: int,
    ops: int,
    *,
    processes: int = 8,
    unknown: float = 0.2,
    deletes: float = 0.1,
    key: Hashable = "k",
) -> list[Operation]:
    """A history a *correct* CAS store could produce, for benchmarks and calibration.

    ``processes`` clients run the kit's mix (30% load, 45% save from the cursor they saw,
    15% save from a wrong cursor, ``deletes`` delete) on one key; each operation takes
    effect at one instant inside its call. A fraction ``unknown`` ends with an unknown
    outcome (half of those applied, half not). Times are event counts.
    """
    rng = random.Random(seed)
    stored: Any = None
    out: list[Operation] = []
    view: dict[int, Any] = {}
    busy: dict[int, dict[str, Any]] = {}
    started = clock = 0
    while len(out) < ops:
        clock += 1
        p = rng.randrange(processes)
        call = busy.get(p)
        if call is None:
            if started == ops:
                continue
            started += 1
            busy[p] = _simulated_call(rng, p, started, view.get(p, "?"), unknown, deletes)
            busy[p]["call"] = clock
        elif "output" not in call:  # the instant it takes effect
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
