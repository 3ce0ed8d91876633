"""A bridged run's decided confirmations outlive retention (issue 16's "noticed" list).

Retention (ADR-0013) prunes the oldest terminal confirmations when a new one is admitted and
more than ``keep_terminal`` (256) are kept. A paused run whose first call was decided, then
waits while more than 256 other decisions happen in the same session, must not lose that
decision: proposing the call again would ask the reviewer twice (and could run it twice).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from bridge_harness import RecordsBackend
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.core.retention import KEEP_TERMINAL
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.session.ports import ToolCallProposal

SID = "chat-retention"


class HostUpstream:
    """The host's own upstream for confirmations it proposes outside any agent run."""

    def __init__(self) -> None:
        self.proposed = 0

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        self.proposed += 1
        return ToolCallProposal(f"host-{self.proposed}", name, args)

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
REFUND = Call("refund", {"amount": 5}, "c2")


def _bridge(backend: RecordsBackend, agent: Any) -> PydanticAIBridge:
    storage = backend.sync()
    session = resume_chat_session(ChatDefinition("support"), session_id=SID, storage=storage)
    return PydanticAIBridge(agent, session, storage)


@pytest.mark.parametrize(
    ("verdict", "c1_said"),
    [("approve", "sent to a@example.com"), ("reject", "too risky")],
)
def test_a_decision_pruned_by_retention_is_not_proposed_again(
    records_backend: RecordsBackend, verdict: str, c1_said: str
) -> None:
    counts = Counts()
    agent = build_agent([EMAIL, REFUND], counts)
    paused = _bridge(records_backend, agent).run("do it", run_id="r1")
    tokens = {b.tool_call_id: b.token for b in paused.pending}
    bridge = _bridge(records_backend, agent)
    if verdict == "approve":
        first = bridge.approve(tokens["c1"])
    else:
        first = bridge.reject(tokens["c1"], "too risky")
    assert first.run is not None and first.run.status == "waiting"

    # Elsewhere in the same session: KEEP_TERMINAL + 1 more decisions (the host's own tools).
    session = _bridge(records_backend, agent).session
    host = session.confirmations_for(HostUpstream())
    for i in range(KEEP_TERMINAL + 1):
        host.reject(host.propose("refund", {"amount": i}).token)
    assert "c1" not in {b.tool_call_id for b in session.confirmations}  # pruned by retention

    done = _bridge(records_backend, agent).approve(tokens["c2"])
    assert done.run is not None and done.run.status == "completed", done.run
    ran = ["refund:5", "send_email:a@example.com"] if verdict == "approve" else ["refund:5"]
    assert sorted(counts.bodies) == ran  # each approved body once, the rejected one never
    assert done.run.output == f"c1={c1_said}; c2={{'refunded': 5}}"  # the reviewer's reason too
    again = _bridge(records_backend, agent).session.confirmations
    assert [b for b in again if b.tool_call_id == "c1"] == []  # never proposed a second time


def test_a_released_continuation_keeps_its_decisions_beyond_retention(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent = build_agent([EMAIL], counts)
    paused = _bridge(records_backend, agent).run("do it", run_id="r1")
    counts.fail_next_answer = 1  # the model fails after the body ran: the run is released
    with pytest.raises(ConnectionError):
        _bridge(records_backend, agent).approve(paused.pending[0].token)

    session = _bridge(records_backend, agent).session
    host = session.confirmations_for(HostUpstream())
    for i in range(KEEP_TERMINAL + 1):
        host.reject(host.propose("refund", {"amount": i}).token)
    assert "c1" not in {b.tool_call_id for b in session.confirmations}  # pruned by retention

    done = _bridge(records_backend, agent).continue_run("r1")
    assert done.status == "completed" and done.output == "c1=sent to a@example.com"
    assert counts.bodies == ["send_email:a@example.com"]  # replayed from the ledger, not re-run
    again = _bridge(records_backend, agent).session.confirmations
    assert [b for b in again if b.tool_call_id == "c1"] == []  # never proposed a second time


class Killed(BaseException):
    """The process died here (no ``except Exception`` in the library can catch it)."""


class DiesAfterContinuingClaim:
    """The session's storage, through which the host process dies right after the run's
    continuation claim is stored: the run is left ``continuing`` with nobody continuing it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        saved = self.inner.save_record(session_id, key, text, *args, **kw)
        if saved and key.startswith("run:") and '"state":"continuing"' in text:
            raise Killed
        return bool(saved)


def test_a_continuation_killed_after_its_claim_keeps_its_decisions_beyond_retention(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent = build_agent([EMAIL], counts)
    paused = _bridge(records_backend, agent).run("do it", run_id="r1")
    dying = DiesAfterContinuingClaim(records_backend.sync())
    session = resume_chat_session(ChatDefinition("support"), session_id=SID, storage=dying)
    with pytest.raises(Killed):
        PydanticAIBridge(agent, session, dying).approve(paused.pending[0].token)
    assert counts.bodies == []  # killed before the body ran: the decision is all there is

    session = _bridge(records_backend, agent).session
    host = session.confirmations_for(HostUpstream())
    for i in range(KEEP_TERMINAL + 1):
        host.reject(host.propose("refund", {"amount": i}).token)
    assert "c1" not in {b.tool_call_id for b in session.confirmations}  # pruned by retention

    report = _bridge(records_backend, agent).reconcile()  # the sweep recovers the run
    assert [r.status for r in report.runs] == ["completed"], report
    assert counts.bodies == ["send_email:a@example.com"]
    again = _bridge(records_backend, agent).session.confirmations
    assert [b for b in again if b.tool_call_id == "c1"] == []  # never proposed a second time
