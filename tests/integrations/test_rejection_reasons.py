"""Which reason the model reads when rejecters race: the decision's, never a loser's.

A bridge's ``reject`` keeps its reason in a create-only record *before* its claim (so a
rejecter killed after its claim still gets its reason to the model, ADR-0106 item 6). The first
reason written stands in that record, and it may be a rejecter's whose claim never applied.
The audit entry of the claim that did apply holds the deciding rejecter's own reason
(ADR-0132), so the model is told that one: the same reason the audit trail names.
"""

from __future__ import annotations

from typing import Any

import pytest
from bridge_harness import ForwardingStorage, RecordsBackend
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.integrations.runs import REJECTED_MESSAGE
from akchat_fsm.session import audit_trail

DEFINITION = ChatDefinition("support")
SID = "chat-reasons"
T0 = 1_000_000
REFUND = Call("refund", {"amount": 5}, "c2")


class Killed(BaseException):
    """The rejecter's process dies (not an ``Exception``: nothing may handle it)."""


class DiesBeforeItsEntry(ForwardingStorage):
    """A store on which the rejecter dies right after its reason record, before its audit
    entry (so before any claim): its reason is stored, its decision never happens."""

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        if key.startswith("audit:"):
            raise Killed()
        return super().save_record(session_id, key, text, *args, **kw)


def _bridge(storage: Any, agent: Any) -> PydanticAIBridge:
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: T0)
    return PydanticAIBridge(agent, session, storage, ttl_ms=60_000)


@pytest.mark.parametrize(
    ("second_reason", "the_model_reads"),
    [("no: over budget", "no: over budget"), (None, REJECTED_MESSAGE)],
    ids=["its-own-reason", "no-reason-the-generic-text"],
)
def test_the_model_reads_the_deciding_rejecters_reason_not_a_dead_rivals(
    records_backend: RecordsBackend, second_reason: str | None, the_model_reads: str
) -> None:
    counts = Counts()
    agent = build_agent([REFUND], counts)
    storage = records_backend.sync()
    paused = _bridge(storage, agent).run("do it", run_id="r1")
    token = paused.pending[0].token
    with pytest.raises(Killed):  # its reason is written, its decision never made
        _bridge(DiesBeforeItsEntry(storage), agent).reject(token, "a rival's reason")
    done = _bridge(storage, agent).reject(token, second_reason, decided_by="bob")
    assert done.run is not None and done.run.status == "completed", done
    assert done.run.output == f"c2={the_model_reads}"
    [entry] = [e for e in audit_trail(storage, SID) if e.decided]
    assert entry.principal == "bob" and entry.reason == second_reason  # the trail agrees
    assert counts.bodies == []
