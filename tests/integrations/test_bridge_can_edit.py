"""``bridge.can_edit(token)``: whether a call accepts a reviewer edit (ADR-0135), the query the
inbox asks before it shows "Edit and approve". It applies the rule ``edit`` applies, on the
real runtimes, and writes nothing: never on the OpenAI Agents SDK, on LangGraph only for a
tool whose ``allowed_decisions`` has ``edit`` (the pydantic-ai bridge's ``editable_tools``:
tests/inbox/test_edit.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from bridge_harness import RecordsBackend
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langgraph.checkpoint.memory import InMemorySaver
from lg_agents import Call, Counts, ScriptedModel, tools
from oai_harness import ExecutionLog, Host, make_agent

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.langgraph import LangGraphBridge, ToolBoundaryMiddleware

SID = "chat-1"
INTERRUPT_ON: dict[str, Any] = {
    "pay": {"allowed_decisions": ["approve", "edit", "reject"]},
    "send_email": {"allowed_decisions": ["approve", "reject"]},
}


def _everything(storage: Any, session_id: str) -> tuple[object, dict[str, object]]:
    keys = storage.list_records(session_id)
    return storage.load(session_id), {k: storage.load_record(session_id, k) for k in keys}


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_the_openai_agents_sdk_bridge_never_offers_an_edit(flavour: str) -> None:
    agent, _ = make_agent([[("send_email", {"to": "a@x"})], []], ExecutionLog())
    host = Host(flavour, agent)
    (call,) = host.run("mail a", run_id="r1").pending
    before = _everything(host.storage, host.session_id)
    assert host.can_edit(call.token) is False
    assert _everything(host.storage, host.session_id) == before


def test_langgraph_offers_an_edit_only_where_allowed_decisions_has_it(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    hitl = HumanInTheLoopMiddleware(INTERRUPT_ON, interrupt_mode="per_call")
    script = [Call("send_email", {"to": "a@example.com"}, "c1"), Call("pay", {"amount": 5}, "c2")]
    model = ScriptedModel(responses=[], script=script, counts=counts)
    graph = create_agent(
        model,
        tools(counts),
        middleware=[hitl, ToolBoundaryMiddleware(hitl)],
        checkpointer=InMemorySaver(),
    )
    storage = records_backend.sync()

    def bridge() -> LangGraphBridge:
        session = resume_chat_session(ChatDefinition("support"), session_id=SID, storage=storage)
        return LangGraphBridge(graph, session, storage)

    user = {"messages": [{"role": "user", "content": "do it"}]}
    paused = bridge().run(user, thread_id="t1", run_id="r1")
    pending = {b.tool_call_id: b for b in paused.pending}
    before = _everything(storage, SID)
    assert bridge().can_edit(pending["c2"].token) is True
    assert bridge().can_edit(pending["c1"].token) is False
    assert _everything(storage, SID) == before and counts.bodies == []
