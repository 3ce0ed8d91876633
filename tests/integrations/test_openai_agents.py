"""The OpenAI Agents SDK bridge against the real ``openai-agents`` package (scripted model).

Every scenario runs on the sync bridge and on the asyncio one; each call opens a fresh
session and bridge, as another process would. The execution log says what ran.
"""

from __future__ import annotations

import json

import pytest
from agents import Agent, handoff
from oai_harness import ExecutionLog, Host, make_agent

from akchat_fsm.errors import AlreadyResolved, ConfigError
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge
from akchat_fsm.session import resume_chat_session
from akchat_fsm.wire.enums import ConfirmationStatus

THREE = [("send_email", {"to": "a@x"}), ("lookup", {"q": "z"}), ("send_email", {"to": "b@x"})]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_interruptions_become_confirmations_keyed_by_the_sdk_call_id(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([THREE], log)
    host = Host(flavour, agent)
    out = host.run("mail both", run_id="r1")
    assert out.status == "paused"
    assert [(p.action, dict(p.input), p.status) for p in out.pending] == [
        ("send_email", {"to": "a@x"}, ConfirmationStatus.PENDING),
        ("send_email", {"to": "b@x"}, ConfirmationStatus.PENDING),
    ]
    stored = json.loads(host.storage.load_record("s1", "run:r1")[1])
    sdk_ids = [c["id"] for c in stored["calls"]]
    assert [p.tool_call_id for p in out.pending] == sdk_ids
    assert all(i.startswith("call_") for i in sdk_ids)
    # the session's envelope holds them as ordinary confirmations
    session = resume_chat_session(host_definition(), session_id="s1", storage=host.storage)
    assert [b.tool_call_id for b in session.confirmations] == sdk_ids
    assert log.read() == ["lookup:z"]  # the ungated sibling ran in the pausing run, once


def host_definition():  # type: ignore[no-untyped-def]
    from oai_harness import DEFINITION

    return DEFINITION


def test_several_interruptions_decided_by_different_clients_continue_once(flavour: str) -> None:
    log = ExecutionLog()
    agent, model = make_agent([THREE, [("send_email", {"to": "c@x"})]], log)
    host = Host(flavour, agent)
    first = host.run("mail three", run_id="r1")
    a, b = first.pending
    # the second call is decided first, by another client: the run is not continued yet
    after_b = host.reject(b.token, reason="not b, please")
    assert after_b.status == "paused" and [p.token for p in after_b.pending] == [a.token]
    assert log.read() == ["lookup:z"] and model.requests == 1
    after_a = host.approve(a.token)  # the last decision of the batch continues the run, once
    assert after_a.status == "paused"
    assert log.read() == ["lookup:z", "send_email:a@x"]
    (c,) = after_a.pending
    assert c.tool_call_id not in {a.tool_call_id, b.tool_call_id}
    done = host.approve(c.token)
    assert done.status == "completed"
    # the model saw each tool's output, and the rejection's own words
    assert done.final_output == "done: found z; sent to a@x; not b, please; sent to c@x"
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:c@x"]
    requests = model.requests
    # repeats: a settled decision again, and resume, return the recorded outcome; nothing runs
    assert host.approve(a.token) == done
    assert host.resume("r1") == done
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:c@x"]
    assert model.requests == requests


def test_the_loser_of_two_opposite_decisions_gets_the_typed_error(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent)
    (a,) = host.run("mail a", run_id="r1").pending
    assert host.approve(a.token).status == "completed"
    with pytest.raises(AlreadyResolved) as lost:
        host.reject(a.token)
    assert lost.value.record.status is ConfirmationStatus.APPROVED
    assert log.read() == ["send_email:a@x"]


def test_expiry_reaches_the_model_and_the_body_never_runs(flavour: str) -> None:
    now = [1_000_000]
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"}), ("send_email", {"to": "b@x"})]], log)
    host = Host(flavour, agent, clock=lambda: now[0], ttl_ms=60_000)
    a, b = host.run("mail two", run_id="r1").pending
    assert host.approve(a.token).status == "paused"
    now[0] += 60_000
    (outcome,) = host.expire_due()
    assert outcome.status == "completed"
    assert outcome.final_output == (
        "done: sent to a@x; The approval request expired before anyone decided; "
        "the tool did not run."
    )
    assert log.read() == ["send_email:a@x"]
    with pytest.raises(AlreadyResolved):  # too late: the expiry is recorded
        host.reject(a.token)
    assert host.approve(b.token) == outcome  # an approve after expiry is the expiry


def test_a_crash_after_the_bodies_ran_settles_as_acted_on_reconcile(flavour: str) -> None:
    """The continuation dies after the bodies ran and before the run's new state was saved
    (here: the model request that follows them fails). Reconcile takes the run over from its
    saved state: the bodies replay from the ledger, never run again, and the run completes."""
    log = ExecutionLog()
    agent, model = make_agent([THREE], log)
    host = Host(flavour, agent)
    a, b = host.run("mail both", run_id="r1").pending
    host.approve(a.token)
    model.fail_on = {model.requests + 1}
    with pytest.raises(ConnectionError):
        host.approve(b.token)
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:b@x"]
    assert json.loads(host.storage.load_record("s1", "run:r1")[1])["state"] == "continuing"
    assert host.resume("r1").status == "continuing"  # it belongs to its claimant
    report = host.reconcile()
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "completed")]
    assert report.runs[0].final_output == "done: found z; sent to a@x; sent to b@x"
    assert report.execution_unknown == ()
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:b@x"]
    assert host.reconcile().runs == ()  # nothing left to do


def test_a_body_killed_mid_execution_is_never_rerun(flavour: str) -> None:
    """A body that started and never recorded its outcome is an unknown execution: reconcile
    reports it and leaves the run continuing; it does not run the body again."""
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent)
    (a,) = host.run("mail a", run_id="r1").pending
    log.append = _dies_after(log.append)  # type: ignore[method-assign]
    with pytest.raises(_Killed):
        host.approve(a.token)
    del log.append
    assert log.read() == ["send_email:a@x"]
    report = host.reconcile()
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "continuing")]
    assert report.execution_unknown == (a.tool_call_id,)
    assert log.read() == ["send_email:a@x"]


class _Killed(BaseException):
    """Stands for the process dying inside the body (nothing after it runs)."""


def _dies_after(append):  # type: ignore[no-untyped-def]
    def dying(line: str) -> None:
        append(line)
        raise _Killed(line)

    return dying


def test_storage_without_records_is_refused() -> None:
    class Bare:
        def load(self, session_id: str) -> None:
            return None

        def save(self, snapshot: object, expected: int | None) -> bool:
            return True

    log = ExecutionLog()
    agent, _ = make_agent([THREE], log)
    session = resume_chat_session(host_definition(), session_id="s1", storage=Bare())
    with pytest.raises(ConfigError, match="RecordStorage"):
        OpenAIAgentsBridge(session, agent)


def test_a_handoff_object_is_refused_because_its_tools_cannot_be_guarded() -> None:
    log = ExecutionLog()
    agent, _ = make_agent([THREE], log)
    other = Agent(name="other")
    outer = agent.clone(handoffs=[handoff(other)])
    session = resume_chat_session(host_definition(), session_id="s1", storage=Host("sync", agent).storage)
    with pytest.raises(ConfigError, match="Handoff"):
        OpenAIAgentsBridge(session, outer)
