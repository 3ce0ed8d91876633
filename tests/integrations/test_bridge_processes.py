"""Proof with real processes and the real pydantic-ai package, on SQLite and PostgreSQL.

* Two approver processes race on one deferred call: the body runs once, the loser gets a typed
  loser error, the run continues once.
* A worker is SIGKILLed at every enumerated point of approve → execute → continue → persist
  (before and after each of its storage writes, and inside the tool body around its side
  effect); then the host recovers the way an operator would (reconcile, settle unknown
  executions from the external truth, repeat the humans' decisions). Counted in a durable log
  outside the library (:mod:`bridge_worker`): every body ran at most once, every ``approved``
  record has exactly one execution, every execution has an ``approved`` record, nothing is
  left processing; and right after each kill, the sweep with the bridge hook leaves 0 runs it
  could finish (every run not completed waits for a person, with its next step).
"""

from __future__ import annotations

import signal
from pathlib import Path

import hosts
import pytest
from bridge_worker import DEFINITION, bridge_for, build_agent, read_log
from process_helpers import StoreFactory, open_store, sweep_leaves_only_people

from akchat_fsm.integrations.ledger import ExecutionState, ToolLedger
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.integrations.runs import RunState
from akchat_fsm.session.sweep import SweepPorts

ACTIONS = "reject:c2:too much,approve:c1"
LOSER_ERRORS = {"AlreadyResolved", "ResolutionInProgress"}
#: What each body returns (an operator settling an unknown execution records it).
RESULTS = {"c1": "sent to a@example.com", "u1": "noted done"}


def _pause(spec: str, log: Path) -> dict[str, str]:
    storage = open_store(spec)
    paused = bridge_for(storage, log).run("email a, refund 5", run_id="r1")
    assert paused.status == "paused"
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    storage.close()
    return tokens


def _spawn(spec: str, log: Path, kill: str, actions: str, go: Path | None = None) -> hosts.Host:
    args = [spec, "proof", str(log), kill, actions]
    if go is not None:
        args.append(str(go))
    return hosts.start("bridge_worker.run", args)


def _finish(host: hosts.Host) -> tuple[int, dict[str, object] | None]:
    code, result = host.finish(timeout=120)
    assert code in (0, -signal.SIGKILL), code
    return code, result


def _bodies(log: Path, call_id: str) -> int:
    return sum(1 for line in read_log(log) if line[:2] == ["body", call_id])


def _continuations(log: Path) -> int:
    return sum(1 for line in read_log(log) if line[:2] == ["model", "continue"])


# --------------------------------------------------------------------------- racing approvers


@pytest.mark.parametrize("rival", ["approve:c1", "reject:c1:no"])
def test_two_approver_processes_race_on_one_deferred_call(
    new_store: StoreFactory, tmp_path: Path, rival: str
) -> None:
    for round_ in range(3):
        spec, log, go = new_store(), tmp_path / f"race{round_}.log", tmp_path / f"go{round_}"
        tokens = _pause(spec, log)
        storage = open_store(spec)
        bridge_for(storage, log).reject(tokens["c2"], "not now", continue_run=False)
        storage.close()
        procs = [_spawn(spec, log, "none", "approve:c1", go), _spawn(spec, log, "none", rival, go)]
        go.touch()
        results = [_finish(p)[1] for p in procs]
        outcomes = [r["results"][0] for r in results if r is not None]  # type: ignore[index]
        assert len(outcomes) == 2
        assert _bodies(log, "c1") <= 1 and _bodies(log, "c2") == 0
        assert _continuations(log) == 1  # the run continued once
        storage = open_store(spec)
        bridge = bridge_for(storage, log)
        c1 = bridge.session.get_by_tool_call("c1")
        assert c1 is not None
        assert _bodies(log, "c1") == (1 if c1.status.value == "approved" else 0)
        final = bridge.continue_run("r1")
        assert final.status == "completed" and final.replayed
        if rival.startswith("reject"):
            # Different intents: exactly one wins, the other gets the typed loser error.
            assert sum(o in LOSER_ERRORS for o in outcomes) == 1, outcomes
        else:
            # Same intent: the loser is a typed error, or (no overlap) the idempotent repeat.
            assert set(outcomes) <= {"completed", "continuing"} | LOSER_ERRORS, outcomes
            assert "completed" in outcomes
        storage.close()


# --------------------------------------------------------------------------- SIGKILL points


def _sweep(spec: str, log: Path) -> None:
    """The start-up sweep with the bridge hook: 0 runs left that it could finish."""
    storage = open_store(spec)

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(
            DEFINITION, bridge=lambda s: PydanticAIBridge(build_agent(log), s, storage)
        )

    sweep_leaves_only_people(storage, ports_for, ("proof",))
    storage.close()


def _recover(spec: str, log: Path, tokens: dict[str, str]) -> None:
    """What a host does after a crash: reconcile, settle unknowns, repeat the decisions."""
    storage = open_store(spec)
    bridge = bridge_for(storage, log)
    report = bridge.reconcile()
    for entry in report.execution_unknown:  # the operator checks the external truth
        ran = _bodies(log, entry.tool_call_id) == 1
        result = RESULTS[entry.tool_call_id]
        bridge.settle_execution(entry.tool_call_id, ran=ran, result=result)
    bridge.reject(tokens["c2"], "too much")  # the humans' decisions, repeated: idempotent
    bridge.approve(tokens["c1"])
    bridge.reconcile()
    storage.close()


def _check(spec: str, log: Path, point: str) -> None:
    storage = open_store(spec)
    bridge = bridge_for(storage, log)
    final = bridge.continue_run("r1")
    assert final.status == "completed", point
    # the person's reason, whatever was killed (it is written before the rejecter's claim)
    assert final.output == "c1=sent to a@example.com; c2=too much; u1=noted done", (
        point,
        final.output,
    )
    statuses = {b.tool_call_id: b.status.value for b in bridge.session.confirmations}
    assert statuses == {"c1": "approved", "c2": "rejected"}, point
    # every approved record has exactly one execution; every execution an approved record;
    # the ungated call u1 ran once for its call id, though a kill after it repeats the
    # continuation (the model asks for u1 again; the ledger replays it)
    assert _bodies(log, "c1") == 1 and _bodies(log, "c2") == 0, (point, read_log(log))
    assert _bodies(log, "u1") == 1, (point, read_log(log))
    ledger = ToolLedger(storage, "proof")
    assert sorted((e.tool_call_id, e.state) for e in ledger.entries()) == [
        ("c1", ExecutionState.EXECUTED),
        ("u1", ExecutionState.EXECUTED),
    ], point
    record = bridge.run_record("r1")
    assert record is not None and record.state is RunState.COMPLETED
    assert storage.list_processing() == [], point  # nothing left processing
    storage.close()


def test_sigkill_at_every_step_then_reconcile(new_store: StoreFactory, tmp_path: Path) -> None:
    dry_spec, dry_log = new_store(), tmp_path / "dry.log"
    tokens = _pause(dry_spec, dry_log)
    code, result = _finish(_spawn(dry_spec, dry_log, "none", ACTIONS))
    assert code == 0 and result is not None and result["results"] == ["waiting", "completed"]
    _check(dry_spec, dry_log, "none")
    writes = int(result["writes"])  # type: ignore[call-overload]
    assert writes >= 8  # two resolutions (2 CAS each), a denial, claim, ledger x2, persist
    points = [f"write:{n}:{when}" for n in range(1, writes + 1) for when in ("before", "after")]
    points += ["body:before", "body:after"]
    killed = 0
    for point in points:
        spec, log = new_store(), tmp_path / f"{point.replace(':', '_')}.log"
        tokens = _pause(spec, log)
        code, _ = _finish(_spawn(spec, log, point, ACTIONS))
        killed += code == -signal.SIGKILL
        _sweep(spec, log)
        _recover(spec, log, tokens)
        _check(spec, log, point)
    assert killed == len(points)  # every enumerated point was reached and killed
