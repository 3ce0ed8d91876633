"""Checks under concurrency: races behind a barrier, a counter, recorded histories.

Threads start together behind a :class:`threading.Barrier` and the interpreter switch
interval is lowered while they run (OpenTelemetry's trick) so check-then-act bugs show up.
The spawned-process races are in :mod:`akchat_fsm.testing._processes`.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import OutcomeUnknown, StorageError, StorageUnavailable
from ._envelopes import fresh_session_id, make_snapshot, observe
from ._kit import (
    STALE_READS,
    CheckSkipped,
    KitContext,
    adapter_errors,
    catches_up,
    describe,
    expect_save,
    has_delete,
    raise_if_workers_raised,
    saved,
)
from .linearizability import UNKNOWN, CasRegisterModel, CheckResult, Operation, check_history


@contextlib.contextmanager
def _high_contention() -> Iterator[None]:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def run_threads(count: int, target: Callable[[int, threading.Barrier], Any]) -> list[Any]:
    """Run ``target(i, barrier)`` on ``count`` threads; results or the exceptions raised."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        try:
            results[i] = target(i, barrier)
        except BaseException as exc:
            results[i] = exc
            barrier.abort()  # release the others instead of leaving them waiting

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    with _high_contention():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return results


def errors_of(results: list[Any]) -> list[str]:
    """What the adapter raised in the workers, never the kit's own broken barrier."""
    return [describe(exc) for exc in adapter_errors(results)]


def one_winner(
    results: list[Any],
    markers: list[str],
    stored: Any,
    what: str,
    reader: Any = None,
    sid: str = "",
) -> str:
    """The one winner's marker; ``reader``/``sid``: where to ask whether a wrong stored
    envelope is a stale read (:func:`catches_up`), if the caller can tell."""
    raise_if_workers_raised(results, f"{what}: racers")
    winners = [markers[i] for i, r in enumerate(results) if r is True]
    if len(winners) != 1:
        raise AssertionError(f"{what}: {len(winners)} of {len(results)} racers won, expected 1")
    if stored is None or stored[1] != winners[0]:
        stale = reader is not None and catches_up(
            reader, sid, lambda seen: seen is not None and seen[1] == winners[0]
        )
        raise AssertionError(
            f"{what}: the stored envelope {stored} is not the winner's"
            + (f": {STALE_READS}" if stale else "")
        )
    return winners[0]


def create_race_threads(ctx: KitContext) -> str:
    """K racers (over several instances) create the same session at once: exactly one wins."""
    clients = ctx.instances()
    k, rounds = ctx.profile.racers, ctx.profile.race_rounds
    markers = [f"racer-{i}" for i in range(k)]
    for _ in range(rounds):
        sid = fresh_session_id()

        def race(i: int, barrier: threading.Barrier, sid: str = sid) -> bool:
            snapshot = make_snapshot(sid, 1, markers[i])
            barrier.wait()
            return saved(clients[i % len(clients)], snapshot, None, "create race")

        results = run_threads(k, race)
        one_winner(results, markers, _final(clients, sid), "create race", clients[0], sid)
    return f"{rounds} rounds of {k} racers: one winner each"


def cas_race_threads(ctx: KitContext) -> str:
    """K racers (over several instances) update from the same cursor at once: one wins."""
    clients = ctx.instances()
    k, rounds = ctx.profile.racers, ctx.profile.race_rounds
    markers = [f"racer-{i}" for i in range(k)]
    for _ in range(rounds):
        sid = fresh_session_id()
        expect_save(clients[0], make_snapshot(sid, 1, "base"), None, True, "create")
        for client in clients:  # every client has seen the base (and may cache it)
            observe(client.load(sid), sid)

        def race(i: int, barrier: threading.Barrier, sid: str = sid) -> bool:
            snapshot = make_snapshot(sid, 2, markers[i])
            barrier.wait()
            return saved(clients[i % len(clients)], snapshot, 1, "cas race")

        results = run_threads(k, race)
        one_winner(results, markers, _final(clients, sid), "cas race", clients[0], sid)
    return f"{rounds} rounds of {k} racers: one winner each"


def _final(clients: list[Any], sid: str) -> Any:
    """What every client loads after a race; they must agree."""
    seen = [observe(client.load(sid), sid) for client in clients]
    if any(other != seen[0] for other in seen):
        raise AssertionError(
            f"after the race the instances load different envelopes {sorted(set(map(str, seen)))}"
            ": an instance serves a cached copy another instance's write did not invalidate"
        )
    return seen[0]


#: Refusals in a row, with load returning the same cursor each time, that mean it is stuck
#: (a healthy store moves on after at most one refusal per other worker's save).
_STUCK = 200


def counter_workload(ctx: KitContext) -> str:
    """N workers x M increments through read/CAS retry loops: final cursor == acknowledged saves."""
    clients = ctx.instances()
    sid = fresh_session_id()
    expect_save(clients[0], make_snapshot(sid, 1, "start"), None, True, "create")
    workers, increments = ctx.profile.counter_workers, ctx.profile.counter_increments

    def work(i: int, barrier: threading.Barrier) -> tuple[int, int, int]:
        storage = clients[i % len(clients)]
        acked = unknown = refused = 0
        barrier.wait()
        for n in range(increments):
            same = 0  # refusals in a row from the cursor load keeps returning
            last: Any = None
            while True:
                current = observe(storage.load(sid), sid)
                if current is None:
                    if catches_up(storage, sid, lambda seen: seen is not None):
                        raise AssertionError(
                            f"load returned nothing for the counter session, which exists: "
                            f"{STALE_READS}"
                        )
                    raise AssertionError("the counter session vanished")
                same = same + 1 if current == last else 0
                last = current
                if same >= _STUCK:
                    raise AssertionError(
                        f"save from cursor {current[0]} was refused {same} times in a row "
                        f"while load kept returning cursor {current[0]}: load serves a stale copy"
                    )
                snapshot = make_snapshot(sid, current[0] + 1, f"w{i}-{n}")
                try:
                    if saved(storage, snapshot, current[0], "increment"):
                        acked += 1
                        break
                    refused += 1
                except StorageUnavailable:
                    continue
                except OutcomeUnknown:
                    unknown += 1
                    break
        return acked, unknown, refused

    results = run_threads(workers, work)
    for result in results:
        if isinstance(result, AssertionError):  # a worker's own finding (a stuck stale read)
            raise result
    raise_if_workers_raised(results, "workers")
    acked = 1 + sum(r[0] for r in results)
    unknown = sum(r[1] for r in results)
    refused = sum(r[2] for r in results)
    final = _final(clients, sid)
    cursor = 0 if final is None else final[0]
    if not acked <= cursor <= acked + unknown:
        raise AssertionError(
            f"final cursor {cursor} but {acked} saves were acknowledged"
            f" ({unknown} unknown): "
            + ("lost updates (or a stale final read)" if cursor < acked else "phantom updates")
        )
    return f"{acked} acknowledged saves, final cursor {cursor}, {refused} conflicts retried"


# --------------------------------------------------------------------------- histories


def run_history_worker(
    storage: Any,
    worker: int,
    seed: int,
    keys: list[str],
    ops: int,
    deletes: bool,
    lockstep: Callable[[], Any],
) -> list[Operation]:
    """A random mix of load, create, good and stale CAS, delete; every call timed.

    Each operation takes its call time, then waits at ``lockstep`` (a barrier shared by all
    workers) before it calls the adapter. The operations of one round therefore overlap by
    construction, however the OS schedules the workers on a loaded machine; the interval
    only grows by the wait, which can make the checker more lenient, never wrong.

    ``StorageUnavailable`` drops the operation (nothing applied); ``OutcomeUnknown`` records
    it as unknown (``return_ns = inf``). Any other exception propagates.
    """
    rng = random.Random(f"{seed}:{worker}")
    view: dict[str, Any] = {}
    out: list[Operation] = []
    for n in range(ops):
        key = rng.choice(keys)
        roll = rng.random()
        kind = "load"
        op_input: Any = None
        if key in view and roll >= 0.3:
            seen = view[key]
            good = None if seen is None else seen[0]
            if roll < 0.75:
                expected = good
            elif roll < 0.92 or not deletes:
                expected = rng.choice([None, 1, (good or 1) - 1, (good or 0) + 1])
            else:
                kind = "delete"
            if kind == "load":
                kind = "save"
                op_input = (expected, ((expected or 0) + 1, f"p{worker}-{n}"))
        call = time.monotonic_ns()
        lockstep()
        try:
            if kind == "load":
                output: Any = observe(storage.load(key), key)
                view[key] = output
            elif kind == "save":
                expected, value = op_input
                output = saved(storage, make_snapshot(key, value[0], value[1]), expected, "save")
                if output:
                    view[key] = value
                else:
                    view.pop(key, None)  # reload before the next write on this key
            else:
                output = storage.delete(key)
                view.pop(key, None)
        except StorageUnavailable:
            continue
        except OutcomeUnknown:
            out.append(Operation(worker, kind, op_input, UNKNOWN, call, math.inf, key))
            view.pop(key, None)
            continue
        out.append(Operation(worker, kind, op_input, output, call, time.monotonic_ns(), key))
    return out


def verdict_of(result: CheckResult) -> str:
    if result.verdict == "illegal":
        raise AssertionError(
            "no order of the recorded calls, one at a time and each within its call's "
            "duration, explains what the calls returned: a read saw a value that was already "
            "overwritten or never acknowledged, an acknowledged write was lost, or two CAS "
            f"calls won from the same cursor. {result}"
        )
    if result.verdict != "ok":
        raise AssertionError(str(result))
    return (
        f"{result.operations} ops on {result.parts} keys linearizable "
        f"({result.overlapping_pairs} overlapping pairs, {result.refusals} conflicts, "
        f"{result.steps} search steps)"
    )


def linearizability_threads(ctx: KitContext) -> str:
    """A recorded random workload from K threads (over several instances) is linearizable,
    with real contention."""
    clients = ctx.instances()
    p = ctx.profile
    keys = [fresh_session_id() for _ in range(p.history_keys)]
    deletes = has_delete(clients[0])

    def work(i: int, barrier: threading.Barrier) -> list[Operation]:
        storage = clients[i % len(clients)]
        return run_history_worker(
            storage, i, ctx.seed, keys, p.history_ops, deletes, lambda: barrier.wait(60)
        )

    results = run_threads(p.history_workers, work)
    raise_if_workers_raised(results, "workers")
    ops = [op for part in results for op in part]
    result = check_history(
        ops,
        CasRegisterModel(),
        max_steps=p.max_steps,
        timeout_s=p.timeout_s,
        require_contention=True,
    )
    return verdict_of(result)


# --------------------------------------------------------------------------- error mapping


def error_mapping(ctx: KitContext) -> str:
    """Under driver faults every call ends as a bool, or a typed error chained to its cause.

    ``make_faulty_storage()`` must return an adapter on the *same data* as ``make_storage()``
    whose driver fails (times out, drops connections). Through it the kit saves with the
    correct expected cursor and compares what a healthy adapter reads before and after:
    ``False`` while nothing changed is a fault reported as a conflict; ``StorageUnavailable``
    while this very save is stored is a false "nothing applied". An ``OutcomeUnknown`` write
    may land later, so later comparisons accept any change that is not this call's own.
    """
    if ctx.make_faulty is None:
        raise CheckSkipped("no make_faulty_storage factory given")
    healthy = ctx.storage()
    sid = fresh_session_id()
    expect_save(healthy, make_snapshot(sid, 1, "v1"), None, True, "create (healthy)")
    faulty = ctx.make_faulty()  # after the create: a factory may start its faults now
    ctx.opened.append(faulty)
    counts = {"ok": 0, "refused": 0, "unavailable": 0, "unknown": 0}
    for n in range(ctx.profile.faulty_calls):
        before = observe(healthy.load(sid))
        if before is None:
            raise AssertionError(f"call {n}: the session vanished")
        mine = (before[0] + 1, f"f{n}")
        try:
            if n % 3 == 0:
                observe(faulty.load(sid))
                counts["ok"] += 1
                continue
            result = faulty.save(make_snapshot(sid, mine[0], mine[1]), before[0])
        except StorageError as exc:
            if exc.__cause__ is None:
                raise AssertionError(f"call {n}: {describe(exc)} has no __cause__") from exc
            if isinstance(exc, StorageUnavailable):
                counts["unavailable"] += 1
                if observe(healthy.load(sid)) == mine:
                    raise AssertionError(
                        f"call {n}: StorageUnavailable, yet this save is stored"
                    ) from exc
            else:
                counts["unknown"] += 1
            continue
        except Exception as exc:
            raise AssertionError(f"call {n}: {describe(exc)} escaped") from exc
        if not isinstance(result, bool):
            raise AssertionError(f"call {n}: save returned {result!r}")
        after = observe(healthy.load(sid))
        if result is False:
            counts["refused"] += 1
            if after == before:
                raise AssertionError(
                    f"call {n}: save returned False (conflict) with the correct expected cursor "
                    f"{before[0]} and nothing else changed: a fault was reported as a conflict"
                )
            continue
        counts["ok"] += 1
        if after != mine:
            raise AssertionError(f"call {n}: acknowledged save not visible (stored {after})")
    if counts["unavailable"] + counts["unknown"] == 0:
        raise AssertionError(
            f"the faulty factory injected no fault in {ctx.profile.faulty_calls} calls: "
            "the check proves nothing"
        )
    return (
        f"{counts['ok']} ok, {counts['unavailable']} StorageUnavailable, "
        f"{counts['unknown']} OutcomeUnknown, {counts['refused']} conflicts after a real change; "
        "all typed and chained"
    )
