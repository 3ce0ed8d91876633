"""The spawned-process check: the compare-and-set across processes, not just threads.

Processes use the ``spawn`` start method and rebuild the adapter from a picklable factory
(a storage URL for :func:`akchat_fsm.storage.url.open_storage`, or a module-level callable).
On by default: a factory that cannot be sent, a program a spawned process cannot start from
(its ``__main__`` is not a file it can re-run, or the factory lives in an unimportable
``__main__``), or a store a spawned process does not see (asked of one process first) skips
the check unless ``processes=True`` was asked for.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import multiprocessing.process
import os
import pickle
import queue as queue_module
import sys
import time
from typing import Any

from ._concurrent import one_winner, run_history_worker, verdict_of
from ._envelopes import fresh_session_id, make_snapshot, observe
from ._kit import CheckSkipped, KitContext, close_storage, describe, expect_save, has_delete, saved
from .linearizability import CasRegisterModel, check_history

__all__ = ["processes"]


def _build(factory: Any) -> Any:
    if isinstance(factory, str):
        from ..storage.url import open_storage

        return open_storage(factory)
    return factory()


def _process_main(
    factory: Any,
    worker: int,
    barrier: Any,
    plan: dict[str, Any],
    queue: Any,
) -> None:
    """One spawned racer: a create race, a CAS race, then a recorded workload.

    With ``plan["probe"]`` it only reports what it loads for the CAS session, which the
    parent created: whether the factory's store crosses the process boundary at all.
    """
    report: dict[str, Any] = {"worker": worker}
    try:
        storage = _build(factory)
        try:
            report["sees_parent"] = observe(storage.load(plan["cas_sid"])) == (1, "base")
            if plan.get("probe"):
                queue.put(report)
                return
            marker = f"proc-{worker}"
            create = make_snapshot(plan["create_sid"], 1, marker)
            update = make_snapshot(plan["cas_sid"], 2, marker)
            barrier.wait(60)
            report["create"] = saved(storage, create, None, "create race")
            barrier.wait(60)
            report["cas"] = saved(storage, update, 1, "cas race")
            report["ops"] = run_history_worker(
                storage,
                worker,
                plan["seed"],
                plan["keys"],
                plan["ops"],
                plan["deletes"],
                lambda: barrier.wait(60),
            )
        finally:
            close_storage(storage)
    except BaseException as exc:
        report["error"] = describe(exc)
        with contextlib.suppress(Exception):
            barrier.abort()
    queue.put(report)


def _spawn(factory: Any, k: int, plan: dict[str, Any], timeout: float) -> list[dict[str, Any]]:
    """Run ``k`` racers; their reports. A racer that dies without one (the factory did not
    unpickle there, the interpreter crashed) raises :class:`_Died` instead of a long wait."""
    spawn = multiprocessing.get_context("spawn")
    barrier = spawn.Barrier(k)
    queue = spawn.Queue()
    procs = [
        spawn.Process(target=_process_main, args=(factory, i, barrier, plan, queue), daemon=True)
        for i in range(k)
    ]
    for proc in procs:
        proc.start()
    reports: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(reports) < k and time.monotonic() < deadline:
        try:
            reports.append(queue.get(timeout=0.5))
        except queue_module.Empty:
            if all(not proc.is_alive() for proc in procs) and queue.empty():
                break
    for proc in procs:
        proc.join(30)
    if len(reports) < k:
        codes = sorted({proc.exitcode for proc in procs if proc.exitcode}, key=str)
        raise _Died(
            f"{k - len(reports)} of {k} spawned processes ended without a report "
            f"(exit codes {codes}): the factory could not be rebuilt there, or it crashed"
        )
    return reports


class _Died(Exception):
    pass


#: How to get the process check to run, said with every reason it could not.
HOW_TO_RACE = (
    "to race processes, run the check from a script file or an importable module "
    "(python -m ...), with a storage URL or a module-level factory of an importable module"
)


class _FindsMain(pickle.Pickler):
    """Pickles into nothing, noting whether anything is pickled by reference to ``__main__``."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.found = False

    def reducer_override(self, obj: Any) -> Any:
        if getattr(obj, "__module__", None) == "__main__":
            self.found = True
        return NotImplemented


def _refers_to_main(factory: Any) -> bool:
    finder = _FindsMain()
    finder.dump(factory)
    return finder.found


def cannot_start_here(factory: Any) -> str | None:
    """Why a spawned process could not rebuild ``factory`` from this program, or ``None``.

    A spawned process starts by re-running the parent's ``__main__`` the way ``multiprocessing``
    does: by module name (``python -m``), else from its file. A ``__main__`` read from stdin has
    no file to re-run, so every spawned process dies before it runs anything; one with neither
    (a notebook, ``python -c``, an interactive session) is not re-run, so only a factory that
    names nothing in ``__main__`` can be rebuilt.
    """
    main = sys.modules.get("__main__")
    if main is None:  # pragma: no cover - every interpreter has one
        return None
    name = getattr(getattr(main, "__spec__", None), "name", None)
    rerun = False
    if name is not None:
        rerun = not (name == "__main__" or name.endswith(".__main__"))
    else:
        path = getattr(main, "__file__", None)
        if path is not None:
            start: str | None = getattr(multiprocessing.process, "ORIGINAL_DIR", None)
            full = path if os.path.isabs(path) or start is None else os.path.join(start, path)
            if not os.path.isfile(full):
                return (
                    f"this program's __main__ ({path!r}) is not a file a spawned process can "
                    "re-run (a script piped to python -?), so no spawned process can start"
                )
            rerun = os.path.splitext(os.path.basename(full))[0] != "ipython"
    if not rerun and _refers_to_main(factory):
        return (
            "the storage factory is defined in __main__, which a spawned process cannot "
            "import (a notebook, python -c, an interactive session)"
        )
    return None


def _not_available(ctx: KitContext, why: str) -> CheckSkipped | AssertionError:
    """Skip when processes were only on by default; fail when they were asked for."""
    if ctx.processes_requested:
        return AssertionError(f"processes=True, but {why}")
    return CheckSkipped(why)


def processes(ctx: KitContext) -> str:
    """K spawned processes: one create winner, one CAS winner, a linearizable history."""
    factory = ctx.process_factory
    if factory is None:
        raise CheckSkipped("processes turned off (processes=False)")
    try:
        pickle.dumps(factory)
    except Exception as exc:
        raise _not_available(
            ctx,
            f"the storage factory cannot be sent to another process ({type(exc).__name__}): "
            "pass a storage "
            "URL or a module-level callable to race processes",
        ) from exc
    why = cannot_start_here(factory)
    if why is not None:
        raise _not_available(ctx, f"{why}; {HOW_TO_RACE}")
    storage = ctx.storage()
    p = ctx.profile
    k = p.process_racers
    plan: dict[str, Any] = {
        "create_sid": fresh_session_id(),
        "cas_sid": fresh_session_id(),
        "keys": [fresh_session_id() for _ in range(p.history_keys)],
        "seed": ctx.seed,
        "ops": p.process_ops,
        "deletes": has_delete(storage),
    }
    expect_save(storage, make_snapshot(plan["cas_sid"], 1, "base"), None, True, "create")
    timeout = p.timeout_s + 120
    if not isinstance(factory, str) or factory.startswith("memory:"):
        # A callable may hand each process a private store: ask one process first.
        try:
            (probe,) = _spawn(factory, 1, {**plan, "probe": True}, timeout)
        except _Died as exc:
            raise _not_available(ctx, str(exc)) from exc
        if "error" in probe:
            raise AssertionError(f"a spawned process could not use the factory: {probe['error']}")
        if not probe["sees_parent"]:
            raise _not_available(
                ctx,
                "a session saved in this process is invisible to a spawned one: the "
                "factory's store does not cross a process boundary (in-memory?)",
            )
    try:
        reports = _spawn(factory, k, plan, timeout)
    except _Died as exc:
        raise AssertionError(str(exc)) from exc
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise AssertionError(f"process racers failed: {errors[:3]}")
    if not any(r["sees_parent"] for r in reports):
        raise AssertionError(
            "no spawned process sees the session this process saved: instances in "
            "different processes do not share a store"
        )
    markers = [f"proc-{r['worker']}" for r in reports]
    one_winner(
        [r["create"] for r in reports],
        markers,
        observe(storage.load(plan["create_sid"]), plan["create_sid"]),
        "create race",
    )
    one_winner(
        [r["cas"] for r in reports],
        markers,
        observe(storage.load(plan["cas_sid"]), plan["cas_sid"]),
        "cas race",
    )
    ops = [op for r in reports for op in r["ops"]]
    result = check_history(
        ops,
        CasRegisterModel(),
        max_steps=p.max_steps,
        timeout_s=p.timeout_s,
        require_contention=True,
    )
    return f"{k} processes: one create winner, one CAS winner; " + verdict_of(result)
