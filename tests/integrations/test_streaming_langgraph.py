"""Streamed runs through the LangGraph bridge (``on_event=``), with the real ``langgraph`` /
``langchain`` packages, a ``create_agent`` graph and its offline scripted chat model
(:mod:`lg_agents`), sync (``graph.stream``) and asyncio (``graph.astream``).

* A streamed run that pauses is stored like an unstreamed one; its continuation, streamed
  through ``approve(on_event=...)``, hands the sink LangGraph's own ``StreamPart`` dicts of
  the bridge's ``stream_mode`` in the order the graph emits them, live (the body runs after
  the parts of the step before it) and all before the outcome; the body runs once.
* A streamed and an unstreamed run of one script leave the same run record, confirmations,
  ledger and outcome; the snapshot's checkpoint and interrupt ids (LangGraph's own, fresh in
  every thread) are each the thread's own.
* A sink that raises is detached and logged; the run is stored exactly as unstreamed, its
  body runs once, and the sweep has nothing left to finish. An async sink is awaited by the
  asyncio bridge and refused by the sync one before anything is written; a ``stream_mode``
  LangGraph does not have is refused when the bridge is built.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from bridge_harness import BACKENDS, RecordsBackend
from langchain_core.messages import BaseMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from lg_agents import Call, Counts, build_graph
from stream_helpers import Recorder, bridge_call, count_processing, stored_view

from akchat_fsm import ConfigError
from akchat_fsm.integrations.langgraph import AsyncLangGraphBridge, LangGraphBridge

FLAVOURS = ["sync", "async"]
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
USER = {"messages": [{"role": "user", "content": "mail a"}]}
OUTPUT = "c1=sent to a@example.com"


def graph_for(counts: Counts) -> Any:
    return build_graph([EMAIL], counts, InMemorySaver())


def builder(graph: Any, **options: Any) -> Any:
    def build(session: Any, storage: Any, is_async: bool) -> Any:
        kind = AsyncLangGraphBridge if is_async else LangGraphBridge
        return kind(graph, session, storage, **options)

    return build


def start(flavour: str, backend: Any, build: Any, sink: Any) -> Any:
    return bridge_call(
        flavour, backend, build, "run", USER, thread_id="t1", run_id="r1", on_event=sink
    )


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_run_pauses_and_continues_streamed_with_one_body(
    records_backend: RecordsBackend, flavour: str
) -> None:
    counts, first, go_on = Counts(), Recorder(), Recorder()
    build = builder(graph_for(counts))
    requests_then: list[int] = []  # the model requests made when each part was delivered

    def sink(part: Any) -> None:
        requests_then.append(counts.requests)
        go_on(part)

    paused = start(flavour, records_backend, build, first)
    first.returned = True
    assert paused.status == "paused" and [b.tool_call_id for b in paused.pending] == ["c1"]
    assert first.late == [] and {p["type"] for p in first.events} == {"messages", "updates"}
    assert "__interrupt__" in first.events[-1]["data"]  # the pause, as LangGraph streams it
    decided = bridge_call(
        flavour, records_backend, build, "approve", paused.pending[0].token, on_event=sink
    )
    go_on.returned = True
    assert decided.run.status == "completed" and decided.run.output == OUTPUT
    assert go_on.late == [] and counts.bodies == ["send_email:a@example.com"]
    updates = [next(iter(p["data"])) for p in go_on.events if p["type"] == "updates"]
    assert updates.index("tools") < updates.index("model"), updates
    tool_update = next(p for p in go_on.events if p["type"] == "updates" and "tools" in p["data"])
    (message,) = tool_update["data"]["tools"]["messages"]
    assert isinstance(message, ToolMessage) and message.tool_call_id == "c1"
    chunks = [p["data"][0] for p in go_on.events if p["type"] == "messages"]
    assert any(isinstance(c, BaseMessage) and c.type == "ai" and c.text == OUTPUT for c in chunks)
    # Delivered live: the tool's parts before the model's answer was even asked for.
    assert requests_then[0] == 1 and requests_then[-1] == 2, requests_then
    again = bridge_call(flavour, records_backend, build, "continue_run", "r1", on_event=go_on)
    assert again.replayed and again.output == OUTPUT and len(counts.bodies) == 1
    assert count_processing(records_backend) == 0


def _masked(record_json: str, graph: Any) -> dict[str, Any]:
    """The run record with LangGraph's fresh ids checked against the thread and masked."""
    body = json.loads(record_json)
    snapshot = json.loads(body.pop("snapshot"))
    head = graph.get_state({"configurable": {"thread_id": "t1"}})
    assert snapshot.pop("checkpoint_id") == head.config["configurable"]["checkpoint_id"]
    pending = {i.id for i in head.interrupts}  # none once the run completed
    assert set(snapshot.pop("interrupts").values()) == pending
    asked = {call["metadata"].pop("interrupt_id") for call in body["calls"]}
    assert asked == pending or (body["state"] == "completed" and not pending)
    for volatile in ("claim", "updatedMs", "leaseUntilMs"):
        body.pop(volatile)
    return {**body, "snapshot": snapshot}


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_and_an_unstreamed_run_leave_the_same_records(
    tmp_path: Any, request: pytest.FixtureRequest, flavour: str
) -> None:
    seen = []
    for streamed in (False, True):
        (tmp_path / str(streamed)).mkdir()
        backend = BACKENDS["sqlite"](tmp_path / str(streamed), request)
        counts = Counts()
        graph = graph_for(counts)
        build = builder(graph)
        sink = Recorder() if streamed else None
        paused = start(flavour, backend, build, sink)
        at_pause = stored_view(flavour, backend, build, "r1")
        at_pause.pop("run")  # its LangGraph ids are checked and masked by _masked
        pause_record = _masked(
            bridge_call(flavour, backend, build, "run_record", "r1").to_json(), graph
        )
        decided = bridge_call(
            flavour, backend, build, "approve", paused.pending[0].token, on_event=sink
        )
        record = bridge_call(flavour, backend, build, "run_record", "r1")
        at_end = stored_view(flavour, backend, build, "r1")
        at_end.pop("run")
        seen.append(
            (
                at_pause,
                pause_record,
                at_end,
                _masked(record.to_json(), graph),
                decided.run.output,
                counts.bodies,
            )
        )
        assert sink is None or sink.events
    assert seen[0] == seen[1]
    assert seen[1][4:] == (OUTPUT, ["send_email:a@example.com"])


class SinkBroke(Exception):
    pass


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_raising_sink_is_detached_and_the_run_is_stored_as_unstreamed(
    records_backend: RecordsBackend, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    counts = Counts()
    build = builder(graph_for(counts))
    calls: list[str] = []

    def broken(part: Any) -> None:
        calls.append(part["type"])
        raise SinkBroke("the client went away")

    with caplog.at_level(logging.ERROR, logger="akchat_fsm.integrations"):
        paused = start(flavour, records_backend, build, broken)
        decided = bridge_call(
            flavour, records_backend, build, "approve", paused.pending[0].token, on_event=broken
        )
    assert paused.status == "paused"
    assert decided.run.status == "completed" and decided.run.output == OUTPUT
    assert len(calls) == 2 and counts.bodies == ["send_email:a@example.com"]
    failures = [r for r in caplog.records if "on_event raised" in r.getMessage()]
    assert len(failures) == 2
    report = bridge_call(flavour, records_backend, build, "reconcile")
    assert report.runs == () and report.execution_unknown == ()
    assert count_processing(records_backend) == 0


def test_an_async_sink_is_awaited_by_the_asyncio_bridge_and_refused_by_the_sync_one(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    build = builder(graph_for(counts), stream_mode="updates")
    got: list[str] = []

    async def sink(part: Any) -> None:
        await asyncio.sleep(0)
        got.append(part["type"])

    with pytest.raises(ConfigError, match="AsyncLangGraphBridge"):
        start("sync", records_backend, build, sink)
    assert bridge_call("sync", records_backend, build, "run_record", "r1") is None
    paused = start("async", records_backend, build, sink)
    assert paused.status == "paused" and set(got) == {"updates"}  # only the bridge's modes
    decided = bridge_call(
        "async", records_backend, build, "approve", paused.pending[0].token, on_event=sink
    )
    assert decided.run.output == OUTPUT and counts.bodies == ["send_email:a@example.com"]
    with pytest.raises(ConfigError, match="stream_mode"):
        bridge_call(
            "sync",
            records_backend,
            builder(graph_for(counts), stream_mode="tokens"),
            "run_record",
            "r1",
        )
