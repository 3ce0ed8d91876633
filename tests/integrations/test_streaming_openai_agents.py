"""Streamed runs through the OpenAI Agents bridge (``on_event=``), with the real
``openai-agents`` package and its offline scripted model (:mod:`oai_models`, whose streamed
reply is the SDK's own test model streaming the same reply), sync and asyncio.

* A streamed run that pauses is stored like an unstreamed one; its continuation, streamed
  through ``approve(on_event=...)``, hands the sink the SDK's own ``StreamEvent`` objects in
  the order ``stream_events()`` yields them, all before the outcome; the body runs once.
* A streamed and an unstreamed run of one script leave the same run record (the ``RunState``
  JSON byte for byte), confirmations, ledger and outcome.
* A sink that raises is detached and logged; the run is stored exactly as unstreamed, its
  body runs once, and the sweep has nothing left to finish. An async sink is awaited by the
  asyncio bridge and refused by the sync one before anything is written.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from agents import Agent, RawResponsesStreamEvent, RunConfig, RunItemStreamEvent, function_tool
from bridge_harness import BACKENDS, RecordsBackend
from oai_models import ScriptedModel
from stream_helpers import Recorder, bridge_call, count_processing, kinds, stored_view

from akchat_fsm import ConfigError
from akchat_fsm.integrations.openai_agents import AsyncOpenAIAgentsBridge, OpenAIAgentsBridge

FLAVOURS = ["sync", "async"]
OUTPUT = "done: sent to a@x"
RUN_CONFIG = RunConfig(tracing_disabled=True)


def build_agent(bodies: list[str]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def send_email(to: str) -> str:
        """Send an email."""
        bodies.append(to)
        return f"sent to {to}"

    return Agent(
        name="assistant", model=ScriptedModel([[("send_email", {"to": "a@x"})]]), tools=[send_email]
    )


def builder(agent: Agent[Any]) -> Any:
    def build(session: Any, storage: Any, is_async: bool) -> Any:
        kind = AsyncOpenAIAgentsBridge if is_async else OpenAIAgentsBridge
        return kind(agent, session, storage, run_config=RUN_CONFIG)

    return build


def item_names(events: list[Any]) -> list[str]:
    return [e.name for e in events if isinstance(e, RunItemStreamEvent)]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_run_pauses_and_continues_streamed_with_one_body(
    records_backend: RecordsBackend, flavour: str
) -> None:
    bodies: list[str] = []
    build = builder(build_agent(bodies))
    start, go_on = Recorder(), Recorder()
    paused = bridge_call(
        flavour, records_backend, build, "run", "mail a", run_id="r1", on_event=start
    )
    start.returned = True
    assert paused.status == "paused" and len(paused.pending) == 1 and start.late == []
    assert kinds(start.events)[0] == "AgentUpdatedStreamEvent"
    assert item_names(start.events) == ["tool_called"]  # the call that then asks for approval
    decided = bridge_call(
        flavour, records_backend, build, "approve", paused.pending[0].token, on_event=go_on
    )
    go_on.returned = True
    assert decided.run.status == "completed" and decided.run.output == OUTPUT
    assert go_on.late == [] and bodies == ["a@x"]
    names = item_names(go_on.events)
    assert names == ["tool_output", "message_output_created"], names
    raw = [i for i, e in enumerate(go_on.events) if isinstance(e, RawResponsesStreamEvent)]
    tool_output = kinds(go_on.events).index("RunItemStreamEvent")
    assert raw and tool_output < raw[0]  # the tool's output, then the model's streamed answer
    again = bridge_call(flavour, records_backend, build, "continue_run", "r1", on_event=go_on)
    assert again.replayed and again.output == OUTPUT and bodies == ["a@x"]
    assert count_processing(records_backend) == 0


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_streamed_and_an_unstreamed_run_leave_the_same_records(
    tmp_path: Any, request: pytest.FixtureRequest, flavour: str
) -> None:
    seen = []
    for streamed in (False, True):
        (tmp_path / str(streamed)).mkdir()
        backend = BACKENDS["sqlite"](tmp_path / str(streamed), request)
        bodies: list[str] = []
        build = builder(build_agent(bodies))
        sink = Recorder() if streamed else None
        paused = bridge_call(flavour, backend, build, "run", "mail a", run_id="r1", on_event=sink)
        at_pause = stored_view(flavour, backend, build, "r1")
        pause_snapshot = bridge_call(flavour, backend, build, "run_record", "r1").snapshot
        decided = bridge_call(
            flavour, backend, build, "approve", paused.pending[0].token, on_event=sink
        )
        record = bridge_call(flavour, backend, build, "run_record", "r1")
        seen.append(
            (
                at_pause,
                pause_snapshot,
                stored_view(flavour, backend, build, "r1"),
                record.snapshot,
                decided.run.output,
                bodies,
            )
        )
        assert sink is None or sink.events
    assert seen[0] == seen[1]
    assert seen[1][4:] == (OUTPUT, ["a@x"])


class SinkBroke(Exception):
    pass


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_a_raising_sink_is_detached_and_the_run_is_stored_as_unstreamed(
    records_backend: RecordsBackend, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    bodies: list[str] = []
    build = builder(build_agent(bodies))
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
    assert calls == ["AgentUpdatedStreamEvent", "AgentUpdatedStreamEvent"]  # then detached
    assert bodies == ["a@x"]
    failures = [r for r in caplog.records if "on_event raised" in r.getMessage()]
    assert len(failures) == 2
    report = bridge_call(flavour, records_backend, build, "reconcile")
    assert report.runs == () and report.execution_unknown == ()
    assert count_processing(records_backend) == 0


def test_an_async_sink_is_awaited_by_the_asyncio_bridge_and_refused_by_the_sync_one(
    records_backend: RecordsBackend,
) -> None:
    bodies: list[str] = []
    build = builder(build_agent(bodies))
    got: list[str] = []

    async def sink(event: Any) -> None:
        await asyncio.sleep(0)
        got.append(type(event).__name__)

    with pytest.raises(ConfigError, match="AsyncOpenAIAgentsBridge"):
        bridge_call("sync", records_backend, build, "run", "mail a", run_id="r1", on_event=sink)
    assert bridge_call("sync", records_backend, build, "run_record", "r1") is None
    paused = bridge_call(
        "async", records_backend, build, "run", "mail a", run_id="r1", on_event=sink
    )
    assert paused.status == "paused" and got[0] == "AgentUpdatedStreamEvent"
    decided = bridge_call(
        "async", records_backend, build, "approve", paused.pending[0].token, on_event=sink
    )
    assert decided.run.output == OUTPUT and bodies == ["a@x"] and got[-1] == "RunItemStreamEvent"
