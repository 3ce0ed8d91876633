"""A bridge builds its session coordinator once (ADR-0134), and still sees what changes.

Building a coordinator checks every port's flavour; a bridge used to pay that on each
proposal and each decision. The coordinator holds only its options, so one per bridge is
enough: observers added to the session later still get the bridge's events.
"""

from __future__ import annotations

from typing import Any

import pytest
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, MemoryStorage, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
REFUND = Call("refund", {"amount": 5}, "c2")


def test_one_bridge_builds_one_coordinator_for_every_proposal_and_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = MemoryStorage()
    session = resume_chat_session(ChatDefinition("support"), session_id="chat-1", storage=storage)
    built: list[Any] = []
    real = session.confirmations_for

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "confirmations_for", counting)
    counts = Counts()
    bridge = PydanticAIBridge(build_agent([EMAIL, REFUND], counts), session, storage)
    paused = bridge.run("do it", run_id="r1")
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    assert bridge.approve(tokens["c1"]).run.status == "waiting"  # type: ignore[union-attr]
    events: list[Any] = []
    session.add_observer(events.append)  # added after the coordinator was built
    done = bridge.approve(tokens["c2"])
    assert done.run is not None and done.run.status == "completed"
    assert len(counts.bodies) == 2
    assert len(built) == 1  # two proposals and two decisions, one coordinator
    assert events  # the later observer saw the second decision
