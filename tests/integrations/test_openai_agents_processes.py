"""Separate host processes on one store (SQLite, PostgreSQL), with the real ``openai-agents``.

* Racing approvers: several processes approve the same call at once; the tool body runs
  once, the run continues once (one model request after the decisions), and every loser is
  told so with a typed error or the recorded outcome.
* Enumerated SIGKILL points: the approve that settles a run's last call is killed before and
  after each of its storage writes in turn, and inside the tool body before and after its
  side effect; then reconcile (and, for an unknown execution, the operator's verdict read
  from the log). Counted in the durable
  execution log: every body ran at most once, every ``approved`` call exactly once, every
  execution has an ``approved`` record, nothing is left processing, and the run completes
  with the same output as without a crash; right after each kill, the sweep with the bridge
  hook leaves 0 runs it could finish (every run not completed waits for a person).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import hosts
from agents import RunConfig
from oai_harness import DEFINITION, ExecutionLog
from oai_worker import agent_for, describe, open_bridge, perform
from process_helpers import StoreFactory, open_store, sweep_leaves_only_people

from akchat_fsm.errors import AkchatError
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge
from akchat_fsm.session.sweep import SweepPorts

CLEAN_OUTPUT = "done: found z; sent to a@x; sent to b@x"
#: The recipient of each gated call, by the last digit of its call id (the batch order).
TO = {"0": "a@x", "2": "b@x"}


def spawn(spec: dict[str, Any]) -> hosts.Host:
    return hosts.start("oai_worker.main", spec)


def finish(host: hosts.Host) -> tuple[int, dict[str, Any] | None]:
    return host.finish(timeout=240)


def call(base: dict[str, Any], **spec: Any) -> tuple[int, dict[str, Any] | None]:
    """One host process runs one command (and may be killed doing it)."""
    return finish(spawn({**base, **spec}))


def here(base: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A host step that is not killed runs in this process, against the same SQLite file."""
    bridge, storage = open_bridge({**base, **spec})
    try:
        return {"result": describe(perform(bridge, {**base, **spec}))}
    except AkchatError as exc:  # a typed answer (a loser, an unknown execution) is an outcome
        return {"error": type(exc).__name__}
    finally:
        storage.close()


def start(case: Path, new_store: StoreFactory) -> tuple[dict[str, Any], list[list[str]]]:
    case.mkdir(exist_ok=True)
    base = {"store": new_store(case), "log": str(case / "exec.log")}
    out = here(base, command="start", run_id="r1", prompt="mail both")
    assert out["result"]["status"] == "paused"
    return base, out["result"]["pending"]


def log_lines(base: dict[str, Any]) -> list[str]:
    path = Path(base["log"])
    return path.read_text().splitlines() if path.exists() else []


def bodies(base: dict[str, Any]) -> list[str]:
    return [line.split(":", 1)[1] for line in log_lines(base) if line.startswith("body:")]


def stored(base: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any], list[Any]]:
    storage = open_store(base["store"])
    try:
        envelope = json.loads(storage.load("s1"))
        statuses = {c["toolCallId"]: c["status"] for c in envelope["confirmations"]}
        run = json.loads(storage.load_record("s1", "run:r1")[1])
        return statuses, run, storage.list_processing()
    finally:
        storage.close()


def test_racing_approver_processes_run_the_body_once(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    base, pending = start(tmp_path, new_store)
    (token_a, call_a), (token_b, call_b) = pending
    assert here(base, command="approve", token=token_a)["result"]["run"]["status"] == "waiting"
    go = tmp_path / "go"
    racers = [
        spawn({**base, "command": "approve", "token": token_b, "go": str(go)}) for _ in range(4)
    ]
    go.touch()
    results = [finish(p)[1] for p in racers]
    # exactly one racer continued the run; the others lost to it, typed or with its record
    runs = [r["result"]["run"] for r in results if "result" in r]
    assert all(runs)  # a decider that came late still learns where the run stands
    continued = [r for r in runs if r["status"] == "completed" and not r["replayed"]]
    assert len(continued) == 1 and continued[0]["output"] == CLEAN_OUTPUT
    for r in results:  # every other racer lost, typed, or was told what the winner recorded
        assert r.get("error") in (None, "ResolutionInProgress"), r
        if "result" in r:
            assert r["result"]["binding"]["binding"][2] == "approved"
    others = [r for r in runs if r not in continued]
    assert all(r["status"] in ("completed", "continuing") and r["replayed"] for r in others)
    sibling = bodies(base)[0]  # the ungated lookup ran in the pausing run
    assert sorted(bodies(base)) == sorted([sibling, call_a, call_b])
    models = [line for line in log_lines(base) if line.startswith("model:")]
    assert models == [f"model:{call_a},{sibling},{call_b}", "model:text"]  # continued once
    statuses, run, processing = stored(base)
    assert statuses == {call_a: "approved", call_b: "approved"}
    assert run["state"] == "completed" and processing == []


def sweep(base: dict[str, Any]) -> None:
    """The start-up sweep with the bridge hook: 0 runs left that it could finish."""
    storage = open_store(base["store"])
    log = ExecutionLog(Path(base["log"]))

    def ports_for(session_id: str) -> SweepPorts:
        def bridge(session: Any) -> OpenAIAgentsBridge:
            config = RunConfig(tracing_disabled=True)
            return OpenAIAgentsBridge(agent_for(log), session, storage, run_config=config)

        return SweepPorts(DEFINITION, bridge=bridge)

    try:
        sweep_leaves_only_people(storage, ports_for, ("s1",))
    finally:
        storage.close()


def _settle_and_check(base: dict[str, Any], token_b: str, call_a: str, call_b: str) -> None:
    """Recover as a host and an operator would after a crash, then check every guarantee:
    reconcile; the reviewer repeats the decision whose request died (an idempotent repeat);
    the operator settles each unknown execution from the log; reconcile again."""
    report = here(base, command="reconcile")
    here(base, command="approve", token=token_b)  # may be typed (unknown); checked below
    report = here(base, command="reconcile")
    for _ in range(3):  # each round settles every unknown execution the last reconcile listed
        if not report["result"]["unknown"]:
            break
        for call_id in report["result"]["unknown"]:
            # an unknown execution is never re-run: the operator reads the log and says
            # whether the body acted; the next reconcile continues the run with that verdict
            ran = call_id in bodies(base)
            result = f"sent to {TO[call_id[-1]]}" if ran else None
            here(base, command="settle", call_id=call_id, ran=ran, result=result)
        report = here(base, command="reconcile")
    assert report["result"]["unknown"] == [], report
    statuses, run, processing = stored(base)
    ran = bodies(base)
    assert len(ran) == len(set(ran)), ran  # every tool body ran at most once
    approved = [c for c, s in statuses.items() if s == "approved"]
    assert sorted(approved) == sorted([call_a, call_b])
    for call_id in approved:
        assert ran.count(call_id) == 1, (call_id, ran)  # every approval: exactly one execution
    gated = [c for c in ran if c in statuses]
    assert all(statuses[c] == "approved" for c in gated)  # no execution without an approval
    assert run["state"] == "completed" and run["output"] == CLEAN_OUTPUT
    assert processing == []  # nothing left processing


def _approve_last_writes(case: Path, new_store: StoreFactory) -> int:
    """How many storage writes the approve that settles the run's last call makes."""
    base, ((token_a, _), (token_b, _)) = start(case, new_store)
    here(base, command="approve", token=token_a)
    code, out = call(base, command="approve", token=token_b)
    assert code == 0 and out is not None and out["result"]["run"]["status"] == "completed"
    return int(out["writes"])


def test_sigkill_at_every_point_of_the_last_approval_then_reconcile(
    tmp_path: Path, new_store: StoreFactory
) -> None:
    writes = _approve_last_writes(tmp_path / "measure", new_store)
    # claim approving, approved, run continuing, ledger executing and executed for each of the
    # two gated calls, run completed: before and after each, and around the body's effect
    assert writes >= 8, writes
    points = [f"write:{n}:{when}" for n in range(1, writes + 1) for when in ("before", "after")]
    points += ["body:before", "body:after"]
    killed = 0
    for index, point in enumerate(points):
        base, ((token_a, call_a), (token_b, call_b)) = start(tmp_path / f"k{index}", new_store)
        here(base, command="approve", token=token_a)
        code, _ = call(base, command="approve", token=token_b, kill=point)
        killed += code == -9
        sweep(base)
        _settle_and_check(base, token_b, call_a, call_b)
    assert killed == len(points)  # every enumerated point was really reached and killed
