"""SIGKILL mid-stream, with real processes and the real packages: the streamed approve that
continues a run is killed while its sink is being handed events, then the start-up sweep runs
with the bridge hook, then the host recovers as after any crash. Reuses each bridge's process
harness (:mod:`bridge_worker`, :mod:`oai_worker`, :mod:`lg_worker`) in its streamed mode.

A few kill points per bridge: the first event of the continuation, one in the middle and the
last one (the full enumeration of storage writes, bodies and checkpoints is the unstreamed
process suites'; a streamed run makes the same writes). First a streamed run nobody kills:
its events are logged in the order the runtime emitted them, around the body's line, and it
ends as the unstreamed run does. After each kill: the sweep leaves nothing it could finish
(every run left waits for a person), every body ran at most once, and after recovery the run
completes with the unstreamed run's output, each body exactly once. On SQLite only, to stay
cheap: the servers are covered by the unstreamed suites, and streaming adds no write.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
import test_bridge_processes as pai
import test_langgraph_processes as lg
import test_openai_agents_processes as oai
from bridge_worker import read_log
from lg_worker import events_file
from process_helpers import StoreFactory

#: LangGraph's case fixture (the session's store, its checkpointer, the bodies file).
cases = lg.cases
ON_SQLITE = pytest.mark.parametrize("new_store", ["sqlite"], indirect=True)


def kill_points(count: int) -> list[str]:
    """The first, a middle and the last event."""
    return [f"event:{n}" for n in sorted({1, max(1, count // 2), count})]


# --------------------------------------------------------------------------- pydantic-ai


@ON_SQLITE
def test_pydantic_ai_killed_mid_stream_then_swept(new_store: StoreFactory, tmp_path: Path) -> None:
    spec, log = new_store(), tmp_path / "dry.log"
    pai._pause(spec, log)
    code, result = pai._finish(pai._spawn(spec, log, "stream:none", pai.ACTIONS))
    assert code == 0 and result is not None and result["results"] == ["waiting", "completed"]
    lines = [" ".join(line[:2]) for line in read_log(log)]
    events = [line for line in lines if line.startswith("event ")]
    # In the runtime's order, live: the approved call's event, its body, its result, the answer.
    assert lines.index("event FunctionToolCallEvent:c1") < lines.index("body c1")
    assert lines.index("body c1") < lines.index("event FunctionToolResultEvent:c1")
    assert events[-1].startswith("event PartEndEvent") and "event PartDeltaEvent:-" in events
    pai._check(spec, log, "stream:none")
    for point in kill_points(len(events)):
        spec, log = new_store(), tmp_path / f"{point.replace(':', '_')}.log"
        tokens = pai._pause(spec, log)
        code, _ = pai._finish(pai._spawn(spec, log, f"stream:{point}", pai.ACTIONS))
        assert code == -signal.SIGKILL, point  # the point was reached mid-stream
        pai._sweep(spec, log)
        assert pai._bodies(log, "c1") <= 1 and pai._bodies(log, "u1") <= 1, point
        pai._recover(spec, log, tokens)
        pai._check(spec, log, point)


# --------------------------------------------------------------------------- OpenAI Agents


def _oai_events(base: dict[str, Any]) -> list[str]:
    return [line for line in oai.log_lines(base) if line.startswith("event:")]


@ON_SQLITE
def test_openai_agents_killed_mid_stream_then_swept(
    new_store: StoreFactory, tmp_path: Path
) -> None:
    base, ((token_a, _), (token_b, _)) = oai.start(tmp_path / "dry", new_store)
    oai.here(base, command="approve", token=token_a)
    code, out = oai.call(base, command="approve", token=token_b, stream=True)
    assert code == 0 and out is not None and out["result"]["run"]["status"] == "completed"
    assert out["result"]["run"]["output"] == oai.CLEAN_OUTPUT
    lines = oai.log_lines(base)
    events = _oai_events(base)
    assert events[0] == "event:AgentUpdatedStreamEvent" and events[-1] == "event:RunItemStreamEvent"
    # The continuation's model request is streamed after both bodies ran, in the SDK's order.
    bodies_at = [i for i, line in enumerate(lines) if line.startswith("body:")]
    raw_at = lines.index("event:RawResponsesStreamEvent")
    assert bodies_at and max(bodies_at) < raw_at, lines
    for index, point in enumerate(kill_points(len(events))):
        case = tmp_path / f"k{index}"
        base, ((token_a, call_a), (token_b, call_b)) = oai.start(case, new_store)
        oai.here(base, command="approve", token=token_a)
        code, _ = oai.call(base, command="approve", token=token_b, stream=True, kill=point)
        assert code == -signal.SIGKILL, point
        oai.sweep(base)
        oai._settle_and_check(base, token_b, call_a, call_b)


# --------------------------------------------------------------------------- LangGraph


@pytest.mark.parametrize("cases", ["sqlite"], indirect=True)
def test_langgraph_killed_mid_stream_then_swept(cases: lg.Cases) -> None:
    case = cases("dry")
    token = lg.pause(case)
    spec = {**case, "stream": True}
    code, out = lg.approve_in_a_worker(spec, token)
    assert code == 0 and out is not None and out["output"] == lg.OUTPUT, out
    parts = events_file(case).read_text().splitlines()
    assert parts[0] == "messages" and parts[-1] == "updates", parts  # LangGraph's own order
    lg.after_the_kill(case, "stream:none")
    lg.recover_and_check(case, token, "stream:none")
    for index, point in enumerate(kill_points(len(parts))):
        case = cases(f"k{index}")
        token = lg.pause(case)
        code, _ = lg.approve_in_a_worker({**case, "stream": True}, token, point)
        assert code == -signal.SIGKILL, point
        lg.after_the_kill(case, point)
        lg.recover_and_check(case, token, point)
