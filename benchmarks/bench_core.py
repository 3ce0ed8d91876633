"""Core benchmarks (not tests): why hot paths use the derived table, and claim cost vs size.

Part 1, one confirmation move decided two ways in the same run: a lookup in
``CONFIRMATION_TABLE`` (what the core does) against instantiating ``ConfirmationLifecycle`` at
the record's state and sending the event (what the core avoids; ADR-0010). Ratio = machine /
table.

Part 2, ``claim_resolution`` on a session holding 1 and 999 pending confirmations (the last
one claimed), against ``snapshot.to_json()`` of the same envelope (the serialization every
save pays anyway) as the raw baseline, and 999 against 1 (how the claim scales with the
envelope). Ratios are printed; nothing is asserted.

    .venv/bin/python benchmarks/bench_core.py [--repeat 2000]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

from akchat_fsm.core import (
    ConfirmationEvent,
    CursorEvent,
    SessionState,
    UpstreamCall,
    UpstreamToolStatus,
    claim_resolution,
    new_session,
    plan_proposal,
    record_proposal,
    save_settled,
)
from akchat_fsm.machines.confirmation import ConfirmationLifecycle, ConfirmationModel
from akchat_fsm.machines.tables import CONFIRMATION_TABLE
from akchat_fsm.wire.enums import ConfirmationStatus

T0 = 1_700_000_000_000


def per_call_us(fn: Callable[[], object], repeat: int) -> float:
    """Median over 5 rounds of the mean time of ``repeat`` calls, in microseconds."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        rounds.append((time.perf_counter() - started) / repeat * 1e6)
    return statistics.median(rounds)


def table_move() -> ConfirmationStatus:
    return CONFIRMATION_TABLE[(ConfirmationStatus.PENDING, ConfirmationEvent.APPROVE, False)]


def machine_move() -> ConfirmationStatus:
    model = ConfirmationModel(ConfirmationStatus.PENDING, expired=False)
    machine = ConfirmationLifecycle(model)
    machine.send("approve")
    assert model.state is not None
    return ConfirmationStatus(model.state)


def session_with(pending: int) -> tuple[SessionState, str]:
    state = new_session("bench-session", "bench", now_ms=T0)
    token = ""
    for _ in range(pending):
        plan = plan_proposal(state, "email.send", {"to": "a@example.com"}, T0, ttl_ms=60_000)
        call = UpstreamCall(
            plan.effect.tool_call_id, plan.name, plan.args, UpstreamToolStatus.REQUIRES_CONFIRMATION
        )
        step = record_proposal(state, plan, call, T0)
        state = save_settled(step.state, CursorEvent.SAVED)
        token = plan.token
    return state, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()

    assert table_move() == machine_move()  # the two ways agree before we time them
    table = per_call_us(table_move, args.repeat * 10)
    machine = per_call_us(machine_move, max(1, args.repeat // 4))
    print(f"table lookup      {table:9.3f} us/move")
    print(f"psm machine       {machine:9.3f} us/move   ratio machine/table {machine / table:8.0f}x")

    claims: dict[int, float] = {}
    for size in (1, 999):
        state, token = session_with(size)
        baseline = per_call_us(state.snapshot.to_json, max(1, args.repeat // 10))
        claim = per_call_us(
            functools.partial(claim_resolution, state, token, ConfirmationEvent.APPROVE, T0 + 1),
            max(1, args.repeat // (10 if size > 1 else 1)),
        )
        print(
            f"claim @ {size:>3} records {claim:9.1f} us/claim  "
            f"(to_json {baseline:7.1f} us; ratio {claim / baseline:5.1f}x)"
        )
        claims[size] = claim
    print(f"claim 999 / claim 1: {claims[999] / claims[1]:.0f}x for 999x the records")


if __name__ == "__main__":
    main()
