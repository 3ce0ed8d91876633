"""Streamed runs through the pydantic-ai bridge (``on_event=``), with the real pydantic-ai
package and its offline ``FunctionModel`` (a ``stream_function`` that streams what the plain
function answers, :mod:`stream_helpers`), sync and asyncio, on every records backend.

* A streamed run that pauses is stored like an unstreamed one; its continuation, streamed
  through ``approve(on_event=...)``, hands the sink pydantic-ai's own events in order, live
  (the body runs between its call event and its result event) and all before the outcome;
  the body runs once.
* A streamed and an unstreamed run of one script leave the same run record, confirmations,
  ledger and outcome (the message history compared part by part: pydantic-ai itself records
  a streamed tool call's arguments as JSON text, and its timestamps and ids differ).
* A sink that raises is detached and logged; the run goes on and is stored exactly as
  unstreamed, its body runs once, and the sweep has nothing left to finish.
* An ``async def`` sink is awaited by the asyncio bridge, and refused by the sync one before
  anything is written.
* Every call that continues a run streams it: ``continue_run``, ``reject`` (the reason
  reaches the model), ``edit`` (the body runs once, with the reviewer's arguments).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from bridge_harness import RecordsBackend
from pai_agents import Counts, answer
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo
from stream_helpers import Recorder, bridge_call, count_processing, kinds, stored_view
from stream_helpers import streamed_function_model as streamed

from akchat_fsm import ConfigError
from akchat_fsm.integrations.pydantic_ai import (
    AsyncPydanticAIBridge,
    PydanticAIBridge,
    messages,
)

FLAVOURS = ["sync", "async"]
OUTPUT = "c1=sent to a@example.com"


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "a@example.com"}, "c1")])
    return ModelResponse(parts=[TextPart(answer(messages))])


def build_agent(counts: Counts, seen: Recorder | None = None) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(streamed(script), output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        # How many events the sink had when the body ran: streaming is live, not replayed.
        counts.bodies.append(f"send_email:{to}@{len(seen.events) if seen else -1}")
        return f"sent to {to}"

    return agent


def builder(agent: Agent[None, Any]) -> Any:
    def build(session: Any, storage: Any, is_async: bool) -> Any:
        kind = AsyncPydanticAIBridge if is_async else PydanticAIBridge
        return kind(agent, session, storage)

    return build


def history(snapshot: str) -> list[Any]:
    """The message history part by part, without timestamps, ids or usage."""
    view = []
    for message in messages(snapshot):
        for part in message.parts:
            args = part.args_as_dict() if isinstance(part, ToolCallPart) else None
            content = getattr(part, "content", None)
            view.append((part.part_kind, getattr(part, "tool_name", None), args, str(content)))
    return view


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_run_pauses_and_continues_streamed_with_one_body(
    records_backend: RecordsBackend, flavour: str
) -> None:
    counts, start, go_on = Counts(), Recorder(), Recorder()
    build = builder(build_agent(counts, go_on))
    paused = bridge_call(
        flavour, records_backend, build, "run", "mail a", run_id="r1", on_event=start
    )
    start.returned = True
    assert paused.status == "paused" and [b.tool_call_id for b in paused.pending] == ["c1"]
    first = start.events[0]  # the model's streamed tool call, as pydantic-ai emits it
    assert isinstance(first, PartStartEvent) and first.part.tool_call_id == "c1"
    assert kinds(start.events)[-1] == "DeferredToolRequestsEvent" and start.late == []
    decided = bridge_call(
        flavour, records_backend, build, "approve", paused.pending[0].token, on_event=go_on
    )
    go_on.returned = True
    assert decided.run.status == "completed" and decided.run.output == OUTPUT
    assert go_on.late == []  # every event came before the outcome
    order = kinds(go_on.events)
    assert order.index("FunctionToolCallEvent") < order.index("FunctionToolResultEvent")
    assert order.index("FunctionToolResultEvent") < order.index("PartDeltaEvent")
    call = next(e for e in go_on.events if isinstance(e, FunctionToolCallEvent))
    result = next(e for e in go_on.events if isinstance(e, FunctionToolResultEvent))
    assert call.part.tool_call_id == result.tool_call_id == "c1"
    starts = [e.part for e in go_on.events if isinstance(e, PartStartEvent)]
    deltas = [e.delta.content_delta for e in go_on.events if isinstance(e, PartDeltaEvent)]
    (text_part,) = [p for p in starts if isinstance(p, TextPart)]
    assert text_part.content + "".join(deltas) == OUTPUT and deltas  # streamed word by word
    # The body ran once, while the stream was live: after its call event, before its result.
    (body,) = counts.bodies
    at = int(body.rpartition("@")[2])
    assert 0 < at <= order.index("FunctionToolResultEvent"), (body, order)
    again = bridge_call(flavour, records_backend, build, "continue_run", "r1", on_event=go_on)
    assert again.replayed and again.output == OUTPUT and len(counts.bodies) == 1
    assert count_processing(records_backend) == 0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_and_an_unstreamed_run_leave_the_same_records(
    tmp_path: Any, request: pytest.FixtureRequest, flavour: str
) -> None:
    from bridge_harness import BACKENDS

    views, snapshots, outputs = [], [], []
    for streamed_run in (False, True):
        (tmp_path / str(streamed_run)).mkdir()
        backend = BACKENDS["sqlite"](tmp_path / str(streamed_run), request)
        counts = Counts()
        build = builder(build_agent(counts))
        sink = Recorder() if streamed_run else None
        paused = bridge_call(flavour, backend, build, "run", "mail a", run_id="r1", on_event=sink)
        pause_view = stored_view(flavour, backend, build, "r1")
        decided = bridge_call(
            flavour, backend, build, "approve", paused.pending[0].token, on_event=sink
        )
        views.append((pause_view, stored_view(flavour, backend, build, "r1")))
        record = bridge_call(flavour, backend, build, "run_record", "r1")
        snapshots.append(history(record.snapshot))
        outputs.append((paused.status, decided.run.status, decided.run.output, counts.bodies))
        assert sink is None or sink.events
    assert views[0] == views[1]
    assert snapshots[0] == snapshots[1]
    assert (
        outputs[0] == outputs[1] == ("paused", "completed", OUTPUT, ["send_email:a@example.com@-1"])
    )


class SinkBroke(Exception):
    pass


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_raising_sink_is_detached_and_the_run_is_stored_as_unstreamed(
    records_backend: RecordsBackend, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    counts = Counts()
    build = builder(build_agent(counts))
    calls: list[str] = []

    def broken(event: Any) -> None:
        calls.append(type(event).__name__)
        raise SinkBroke("the client went away")

    with caplog.at_level(logging.ERROR, logger="akchat_fsm.integrations"):
        paused = bridge_call(
            flavour, records_backend, build, "run", "mail a", run_id="r1", on_event=broken
        )
        decided = bridge_call(
            flavour, records_backend, build, "approve", paused.pending[0].token, on_event=broken
        )
    assert paused.status == "paused"
    assert decided.run.status == "completed" and decided.run.output == OUTPUT
    assert len(calls) == 2  # once per call: the first event, then the sink is detached
    assert counts.bodies == ["send_email:a@example.com@-1"]
    failures = [r for r in caplog.records if "on_event raised" in r.getMessage()]
    assert len(failures) == 2 and all(isinstance(r.exc_info[1], SinkBroke) for r in failures)
    report = bridge_call(flavour, records_backend, build, "reconcile")
    assert report.runs == () and report.execution_unknown == ()  # nothing left to finish
    assert count_processing(records_backend) == 0


def test_an_async_sink_is_awaited_by_the_asyncio_bridge_and_refused_by_the_sync_one(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    build = builder(build_agent(counts))
    got: list[str] = []

    async def sink(event: Any) -> None:
        await asyncio.sleep(0)
        got.append(type(event).__name__)

    with pytest.raises(ConfigError, match="AsyncPydanticAIBridge"):
        bridge_call("sync", records_backend, build, "run", "mail a", run_id="r1", on_event=sink)
    with pytest.raises(ConfigError, match="callable"):
        bridge_call("async", records_backend, build, "run", "x", run_id="r1", on_event="nope")
    assert bridge_call("sync", records_backend, build, "run_record", "r1") is None
    # Refused before the run id was claimed: the same id starts now.
    paused = bridge_call(
        "async", records_backend, build, "run", "mail a", run_id="r1", on_event=sink
    )
    assert paused.status == "paused" and got[-1] == "DeferredToolRequestsEvent"


def test_on_event_and_event_stream_handler_together_are_refused(
    records_backend: RecordsBackend,
) -> None:
    build = builder(build_agent(Counts()))

    async def handler(ctx: Any, events: Any) -> None:
        async for _ in events:
            pass

    with pytest.raises(ConfigError, match="not both"):
        bridge_call(
            "sync",
            records_backend,
            build,
            "run",
            "mail a",
            run_id="r1",
            on_event=print,
            event_stream_handler=handler,
        )
    # Refused before the run id was claimed: the same id still starts the run.
    again = bridge_call("sync", records_backend, build, "run", "mail a", run_id="r1")
    assert again.status == "paused"


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("how", ["continue_run", "reject", "edit"])
def test_every_call_that_continues_a_run_streams_it(
    records_backend: RecordsBackend, flavour: str, how: str
) -> None:
    from akchat_fsm import arguments_digest

    counts = Counts()
    agent = build_agent(counts)

    def build(session: Any, storage: Any, is_async: bool) -> Any:
        kind = AsyncPydanticAIBridge if is_async else PydanticAIBridge
        return kind(agent, session, storage, editable_tools=["send_email"])

    paused = bridge_call(flavour, records_backend, build, "run", "mail a", run_id="r1")
    call, sink = paused.pending[0], Recorder()
    if how == "continue_run":
        bridge_call(flavour, records_backend, build, "approve", call.token, continue_run=False)
        outcome = bridge_call(flavour, records_backend, build, "continue_run", "r1", on_event=sink)
    elif how == "reject":
        decided = bridge_call(
            flavour, records_backend, build, "reject", call.token, "not now", on_event=sink
        )
        outcome = decided.run
    else:
        decided = bridge_call(
            flavour,
            records_backend,
            build,
            "edit",
            call.token,
            {"to": "b@example.com"},
            args_digest=arguments_digest(call.input),
            on_event=sink,
        )
        outcome = decided.run
    expected = {
        "continue_run": OUTPUT,
        "reject": "c1=not now",
        "edit": "c1=sent to b@example.com",
    }[how]
    assert outcome.status == "completed" and outcome.output == expected
    results = [e for e in sink.events if isinstance(e, FunctionToolResultEvent)]
    assert [r.tool_call_id for r in results] == ["c1"]  # the continuation was streamed
    assert len(counts.bodies) == (0 if how == "reject" else 1)
