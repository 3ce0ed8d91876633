"""The inbox's bridge path with the real pydantic-ai bridge: a decision continues the agent run.

pydantic-ai's own offline ``FunctionModel`` asks for one approval-gated tool, then reports
what it was given; the tool body counts its runs. No network, no key.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from starlette.testclient import TestClient

from akchat_fsm import resume_chat_session
from akchat_fsm.integrations.ledger import ExecutionUnknown, ToolLedger
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

from ._world import DEFINITION, World, by_header, crash_inside, only_ana
from .test_http import FORM_DIGESTS, SHOWN


def scripted(messages: Any, info: Any) -> ModelResponse:
    results = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not results:
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "ana@example.com"})])
    return ModelResponse(parts=[TextPart(f"Done: {results[0].content}")])


@pytest.fixture
def agent_world() -> tuple[World, Any, list[str]]:
    world = World()
    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"email sent to {to}"

    return world, agent, sent


def bridge(world: World, agent: Any, session_id: str) -> PydanticAIBridge:
    session = resume_chat_session(
        DEFINITION, session_id=session_id, storage=world.storage, clock=world.clock
    )
    return PydanticAIBridge(agent, session, world.storage)


def tab(world: World, agent: Any, token: str) -> tuple[TestClient, str]:
    """A browser tab on the call's detail page: its client and the form's CSRF token."""
    app = world.app(
        authorize=by_header,
        can_decide=only_ana,
        bridge_for=lambda sid: bridge(world, agent, sid),
        upstream_for=None,
    )
    c = TestClient(app, base_url="http://127.0.0.1", headers={"x-user": "ana"})
    page = c.get(f"/call/{token}", params={"session": "chat-1"}).text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match
    SHOWN.update(FORM_DIGESTS.findall(page))
    return c, match.group(1)


def decide(opened: tuple[TestClient, str], token: str, verb: str, **fields: str) -> Any:
    c, csrf = opened
    return c.post(
        f"/call/{token}/{verb}",
        data={"csrf": csrf, "session": "chat-1", "args_digest": SHOWN.get(token, ""), **fields},
        headers={"origin": "http://127.0.0.1", "sec-fetch-site": "same-origin"},
    )


def test_approve_in_the_inbox_continues_the_run_and_runs_the_body_once(
    agent_world: tuple[World, Any, list[str]],
) -> None:
    world, agent, sent = agent_world
    paused = bridge(world, agent, "chat-1").run("Email Ana", run_id="run-1")
    assert paused.status == "paused"
    token = paused.pending[0].token
    first, second = tab(world, agent, token), tab(world, agent, token)
    response = decide(first, token, "approve")
    assert response.status_code == 200 and 'data-kind="won"' in response.text
    assert sent == ["ana@example.com"]
    again = bridge(world, agent, "chat-1").continue_run("run-1")
    assert again.replayed and again.output == "Done: email sent to ana@example.com"
    late = decide(second, token, "approve")  # the second tab: decided, nothing runs again
    assert late.status_code == 409 and 'data-kind="decided"' in late.text
    assert sent == ["ana@example.com"]


def test_a_reason_given_in_the_inbox_reaches_the_model(
    agent_world: tuple[World, Any, list[str]],
) -> None:
    world, agent, sent = agent_world
    paused = bridge(world, agent, "chat-1").run("Email Ana", run_id="run-1")
    token = paused.pending[0].token
    response = decide(tab(world, agent, token), token, "reject", reason="Ana has it")
    assert response.status_code == 200
    done = bridge(world, agent, "chat-1").continue_run("run-1")
    assert done.output == "Done: Ana has it" and sent == []


def test_settle_in_the_operator_page_continues_the_run_through_the_bridge(
    agent_world: tuple[World, Any, list[str]],
) -> None:
    world, agent, sent = agent_world
    paused = bridge(world, agent, "chat-1").run("Email Ana", run_id="run-1")
    call = paused.pending[0]
    bridge(world, agent, "chat-1").approve(call.token, continue_run=False)
    # The process that claimed the body died inside it: its outcome is unknown.
    crash_inside(world.storage, "chat-1", call.tool_call_id, "send_email", dict(call.input))
    with pytest.raises(ExecutionUnknown):
        bridge(world, agent, "chat-1").continue_run("run-1")
    app = world.app(
        authorize=by_header,
        can_settle=lambda principal, unknown: principal == "ana",
        bridge_for=lambda sid: bridge(world, agent, sid),
        upstream_for=None,
    )
    c = TestClient(app, base_url="http://127.0.0.1", headers={"x-user": "ana"})
    page = c.get("/operator").text
    assert f'data-tool-call="{call.tool_call_id}"' in page
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match
    response = c.post(
        "/operator/settle",
        data={
            "csrf": match.group(1),
            "session": "chat-1",
            "tool_call": call.tool_call_id,
            "verdict": "ran",
            "result": '"sent by hand"',
        },
        headers={"origin": "http://127.0.0.1", "sec-fetch-site": "same-origin"},
    )
    assert response.status_code == 200 and 'data-kind="settled"' in response.text
    assert "run-1: completed" in response.text  # the bridge continued the run
    record = bridge(world, agent, "chat-1").run_record("run-1")
    assert record is not None and record.state.value == "completed"
    again = bridge(world, agent, "chat-1").continue_run("run-1")
    assert again.output == "Done: sent by hand"  # the model read the settled result
    assert sent == []  # the body never ran here: the operator said it had
    entry = ToolLedger(world.storage, "chat-1").get(call.tool_call_id)
    assert entry is not None and entry.owner == "ana"
