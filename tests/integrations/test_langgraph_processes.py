"""SIGKILL at enumerated points of a LangGraph approve, then the sweep, with the real packages.

The session's store and LangGraph's own checkpointer are on one kind of server: SQLite storage
with ``SqliteSaver`` on a file, or PostgreSQL storage with ``PostgresSaver`` (a schema of its
own). A run pauses on HITL's per-call interrupt for the gated ``send_email`` (``c1``); a worker
process (:mod:`lg_worker`) approves it, which continues the run: ``c1``'s body, then the model
asks for the ungated ``lookup`` (``u1``), then it answers. The worker is SIGKILLed

* before and after each of its writes to the session's store: the decision's claim with its
  audit entry (one write, ADR-0141), its terminal CAS and its index record, the run claim,
  the ledger's claim and outcome of ``c1`` then of ``u1``, the run's persist;
* inside ``c1``'s body, before and after its side effect;
* before and after each write of LangGraph's checkpointer (the task writes and checkpoints
  it saves between those: "after the outcome, before the checkpoint" is one of them).

Right after each kill the start-up sweep runs here (another process) with the bridge hook.
Counted in the bodies file outside the library: each body ran at most once, exactly once when
the ledger recorded its outcome; a kill inside the body leaves ``c1`` an unknown execution,
reported to the operator (the sweep's next step for the run), never re-run; the sweep leaves
no run it could finish. Then the host recovers as an operator would (settle the unknown from
the bodies file, repeat the decision, reconcile) and the run completes with the output of a
run nobody killed, each body run exactly once, nothing left processing.

The cheap set kills at every point once, the points alternating between the two servers; the
``deep`` variant kills at every point on both.
"""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hosts
import pytest
from langchain_core.messages import ToolMessage, message_to_dict
from lg_agents import open_saver
from lg_worker import DEFINITION, LINES, OUTPUT, SID, USER, bridge_on, graph_on
from process_helpers import new_store_spec, open_store, sweep_leaves_only_people

from akchat_fsm.integrations.langgraph import LangGraphBridge
from akchat_fsm.integrations.ledger import ExecutionState
from akchat_fsm.integrations.runs import RunState
from akchat_fsm.session.sweep import SweepPorts
from cleanup import sql_tables

KINDS = ("sqlite", "postgres")
#: Each tool's result, as its body returns it (what an operator reads from the external truth).
RESULTS = {"c1": "sent to a@example.com", "u1": "order o-9 shipped"}
TOOLS = {"c1": "send_email", "u1": "lookup"}


def as_recorded(call_id: str) -> dict[str, Any]:
    """An operator's verdict "it ran, with this result", in the form the ledger records a
    ``ToolMessage``; a plain result (what ``akchat-fsm settle --result`` and the other bridges
    take) is handed to the model as the call's message too:
    :func:`test_a_plain_settled_result_is_replayed_to_the_model`."""
    message = ToolMessage(RESULTS[call_id], tool_call_id=call_id, name=TOOLS[call_id])
    return {"message": message_to_dict(message)}


class Cases:
    """``cases(name)``: a fresh case on the fixture's kind of server, as the worker's spec:
    the session's store, LangGraph's checkpointer and the bodies file."""

    def __init__(self, kind: str, where: Path, pg_url: str | None) -> None:
        self.kind = kind
        self.where = where
        self.pg_url = pg_url
        self.tables: list[str] = []
        self.schemas: list[str] = []

    def __call__(self, name: str) -> dict[str, str]:
        where = self.where / name
        where.mkdir()
        store, table = new_store_spec(self.kind, where, self.pg_url)
        saver = f"sqlite:{where / 'checkpoints.db'}"
        if self.kind == "postgres":
            import psycopg

            assert table is not None and self.pg_url is not None
            self.tables.append(table)
            schema = f"lg_{uuid.uuid4().hex[:12]}"
            with psycopg.connect(self.pg_url, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            self.schemas.append(schema)
            saver = f"postgres:{self.pg_url}|{schema}"
        return {"store": store, "saver": saver, "bodies": str(where / "bodies.txt")}

    def drop(self) -> None:
        if not (self.tables or self.schemas):
            return
        import psycopg

        assert self.pg_url is not None
        with psycopg.connect(self.pg_url, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            for table in self.tables:
                conn.execute(f"DROP TABLE IF EXISTS {sql_tables(table)}")


@pytest.fixture(params=KINDS)
def cases(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cases]:
    url = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    made = Cases(request.param, tmp_path, url)
    try:
        yield made
    finally:
        made.drop()


@contextlib.contextmanager
def opened(case: dict[str, str]) -> Iterator[tuple[LangGraphBridge, Any]]:
    """A host step that is not killed, in this process: the bridge on the case's stores."""
    storage = open_store(case["store"])
    saver, close = open_saver(case["saver"])
    try:
        yield bridge_on(storage, graph_on(saver, Path(case["bodies"]))), storage
    finally:
        close()
        storage.close()


def bodies(case: dict[str, str]) -> list[str]:
    path = Path(case["bodies"])
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def pause(case: dict[str, str]) -> str:
    with opened(case) as (bridge, _):
        paused = bridge.run(USER, thread_id="t1", run_id="r1")
    assert paused.status == "paused" and [b.tool_call_id for b in paused.pending] == ["c1"]
    assert bodies(case) == []
    return paused.pending[0].token


def approve_in_a_worker(
    case: dict[str, str], token: str, kill: str = "none"
) -> tuple[int, dict[str, Any] | None]:
    spec = {**case, "command": "approve", "token": token, "kill": kill}
    code, out = hosts.start("lg_worker.main", spec).finish(timeout=120)
    assert code in (0, -signal.SIGKILL), code
    return code, out


def sweep(case: dict[str, str]) -> dict[str, str]:
    """The start-up sweep with the bridge hook: 0 runs left that it could finish."""
    storage = open_store(case["store"])
    saver, close = open_saver(case["saver"])
    graph = graph_on(saver, Path(case["bodies"]))

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(DEFINITION, bridge=lambda s: LangGraphBridge(graph, s, storage))

    try:
        return sweep_leaves_only_people(storage, ports_for, (SID,))
    finally:
        close()
        storage.close()


def after_the_kill(case: dict[str, str], point: str) -> None:
    """Right after the kill and the sweep: each body at most once, exactly once when its
    outcome is recorded; a kill inside the body is an unknown execution for the operator."""
    waiting = sweep(case)
    ran = bodies(case)
    assert all(ran.count(line) <= 1 for line in LINES.values()), (point, ran)
    assert set(ran) <= set(LINES.values()), (point, ran)
    with opened(case) as (bridge, _):
        for call_id, line in LINES.items():
            entry = bridge.ledger.get(call_id)
            if entry is not None and entry.state is ExecutionState.EXECUTED:
                assert ran.count(line) == 1, (point, call_id, ran)
        unknown = [e.tool_call_id for e in bridge.unknown_executions()]
    if point.startswith("body:"):
        assert unknown == ["c1"], (point, unknown)
        assert list(waiting) == ["r1"] and waiting["r1"].startswith("an operator settles"), (
            point,
            waiting,
        )
        assert ran.count(LINES["c1"]) == (1 if point == "body:after" else 0), (point, ran)
    if not unknown and waiting:  # nothing unknown: only a decision can be missing
        assert waiting["r1"].startswith("a person approves"), (point, waiting)


def recover_and_check(case: dict[str, str], token: str, point: str) -> None:
    """The operator settles each unknown execution from the bodies file, the reviewer's
    decision is repeated (idempotent), reconcile; then every guarantee of a clean run."""
    with opened(case) as (bridge, _):
        for entry in bridge.unknown_executions():
            call_id = entry.tool_call_id
            ran = LINES[call_id] in bodies(case)
            bridge.settle_execution(call_id, ran=ran, result=as_recorded(call_id) if ran else None)
        bridge.approve(token)
        bridge.reconcile()
    with opened(case) as (bridge, storage):
        final = bridge.continue_run("r1")
        assert final.status == "completed" and final.output == OUTPUT, (point, final)
        statuses = {b.tool_call_id: b.status.value for b in bridge.session.confirmations}
        assert statuses == {"c1": "approved"}, point
        assert sorted(bodies(case)) == sorted(LINES.values()), (point, bodies(case))
        assert sorted((e.tool_call_id, e.state) for e in bridge.ledger.entries()) == [
            ("c1", ExecutionState.EXECUTED),
            ("u1", ExecutionState.EXECUTED),
        ], point
        record = bridge.run_record("r1")
        assert record is not None and record.state is RunState.COMPLETED, point
        assert storage.list_processing() == [], point


def every_point(cases: Cases) -> list[str]:
    """Every kill point of the approve, counted by a worker nobody kills."""
    case = cases("dry")
    token = pause(case)
    code, out = approve_in_a_worker(case, token)
    assert code == 0 and out is not None, out
    assert out["status"] == "completed" and out["output"] == OUTPUT, out
    after_the_kill(case, "none")
    recover_and_check(case, token, "none")
    writes, saver_writes = int(out["writes"]), int(out["saver_writes"])
    # the decision's claim with its audit entry (one write, ADR-0141), its terminal CAS and
    # its index record, the run claim, the ledger's claim and outcome of c1 and of u1, the
    # run's persist
    assert writes == 9, out
    assert saver_writes >= 4, out  # the task writes and checkpoints of two tool steps at least
    points = [f"write:{n}:{when}" for n in range(1, writes + 1) for when in ("before", "after")]
    points += ["body:before", "body:after"]
    points += [f"saver:{n}:{w}" for n in range(1, saver_writes + 1) for w in ("before", "after")]
    return points


def kill_at(cases: Cases, points: list[str]) -> None:
    for index, point in enumerate(points):
        case = cases(f"k{index}")
        token = pause(case)
        code, _ = approve_in_a_worker(case, token, point)
        assert code == -signal.SIGKILL, point  # every enumerated point was reached and killed
        after_the_kill(case, point)
        recover_and_check(case, token, point)


def test_sigkill_at_each_point_of_an_approve_then_the_sweep(cases: Cases) -> None:
    """Every point of the session's store and the body once, across the two servers (each
    server gets the before or the after of each write, in turn), and LangGraph's first and
    last checkpointer writes; every checkpointer write is in the deep variant."""
    points = every_point(cases)
    saver = [p for p in points if p.startswith("saver:")]
    cheap = [p for p in points if not p.startswith("saver:")] + saver[:2] + saver[-2:]
    mine = KINDS.index(cases.kind)
    kill_at(cases, [p for i, p in enumerate(cheap) if (i + i // 2) % len(KINDS) == mine])


@pytest.mark.deep
def test_sigkill_at_every_point_on_every_server_then_the_sweep(cases: Cases) -> None:
    kill_at(cases, every_point(cases))


@pytest.mark.parametrize("cases", ["sqlite"], indirect=True)
def test_a_plain_settled_result_is_replayed_to_the_model(cases: Cases) -> None:
    """Killed inside the body after its side effect: the operator reads the bodies file and
    settles ``c1`` as run, with the tool's result as the body would have returned it; the
    next reconcile continues the run, handing that result to the model as c1's message."""
    case = cases("plain")
    token = pause(case)
    code, _ = approve_in_a_worker(case, token, "body:after")
    assert code == -signal.SIGKILL
    after_the_kill(case, "body:after")
    with opened(case) as (bridge, _):
        bridge.settle_execution("c1", ran=True, result=RESULTS["c1"])
        report = bridge.reconcile()
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "completed")]
    with opened(case) as (bridge, _):
        final = bridge.continue_run("r1")
    assert final.status == "completed" and final.output == OUTPUT
    assert sorted(bodies(case)) == sorted(LINES.values())
