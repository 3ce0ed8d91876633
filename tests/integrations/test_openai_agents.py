"""The OpenAI Agents SDK bridge against the real ``openai-agents`` package (scripted model).

Every scenario runs on the sync bridge and on the asyncio one; each call opens a fresh
session and bridge, as another process would. The execution log says what ran.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, handoff
from oai_harness import DEFINITION, RUN_CONFIG, ExecutionLog, Host, make_agent, make_tools
from oai_models import ScriptedModel

from akchat_fsm.errors import AlreadyResolved, ConfigError
from akchat_fsm.integrations.ledger import ExecutionState, ExecutionUnknown, ToolLedger
from akchat_fsm.integrations.openai_agents import OpenAIAgentsBridge, guard_agent
from akchat_fsm.session import resume_chat_session
from akchat_fsm.wire.enums import ConfirmationStatus

THREE = [("send_email", {"to": "a@x"}), ("lookup", {"q": "z"}), ("send_email", {"to": "b@x"})]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run_record(host: Host, run_id: str = "r1") -> dict[str, Any]:
    stored = host.storage.load_record(host.session_id, f"run:{run_id}")
    assert stored is not None
    return dict(json.loads(stored[1]))


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
    record = run_record(host)
    # the SDK's own call ids, and its RunState JSON, are what the run record holds
    sdk_state = json.loads(record["snapshot"])
    interrupted = [
        i["raw_item"]["call_id"] for i in sdk_state["current_step"]["data"]["interruptions"]
    ]
    assert [p.tool_call_id for p in out.pending] == interrupted
    assert [c["id"] for c in record["calls"]] == interrupted
    assert record["state"] == "paused" and record["runtime"] == "openai-agents"
    session = resume_chat_session(DEFINITION, session_id="s1", storage=host.storage)
    assert [b.tool_call_id for b in session.confirmations] == interrupted
    assert log.read() == ["lookup:z"]  # the ungated sibling ran in the pausing run, once


def test_several_interruptions_decided_by_different_clients_continue_once(flavour: str) -> None:
    log = ExecutionLog()
    agent, model = make_agent([THREE, [("send_email", {"to": "c@x"})]], log)
    host = Host(flavour, agent)
    first = host.run("mail three", run_id="r1")
    a, b = first.pending
    # the second call is decided first, by another client: the run is not continued yet
    after_b = host.reject(b.token, reason="not b, please")
    assert after_b.binding.status is ConfirmationStatus.REJECTED
    assert after_b.run.status == "waiting" and [p.token for p in after_b.run.pending] == [a.token]
    assert log.read() == ["lookup:z"] and model.requests == 1
    after_a = host.approve(a.token).run  # the batch's last decision continues the run, once
    assert after_a.status == "paused"
    assert log.read() == ["lookup:z", "send_email:a@x"]
    (c,) = after_a.pending
    assert c.tool_call_id not in {a.tool_call_id, b.tool_call_id}
    done = host.approve(c.token).run
    assert done.status == "completed" and not done.replayed
    # the model saw each tool's output, and the reviewer's own words for the rejection
    assert done.output == "done: found z; sent to a@x; not b, please; sent to c@x"
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:c@x"]
    requests = model.requests
    # repeats: a settled decision again, and continuing again, run nothing and ask no model
    late = host.approve(c.token)
    assert late.binding.status is ConfirmationStatus.APPROVED
    assert late.run.replayed and late.run.output == done.output
    again = host.continue_run("r1")
    assert again.replayed and again.output == done.output
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:c@x"]
    assert model.requests == requests


def test_the_loser_of_two_opposite_decisions_gets_the_typed_error(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent)
    (a,) = host.run("mail a", run_id="r1").pending
    assert host.approve(a.token).run.status == "completed"
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
    assert host.approve(a.token).run.status == "waiting"
    now[0] += 60_000
    (outcome,) = host.expire_due()
    assert outcome.status == "completed"
    assert outcome.output == (
        "done: sent to a@x; The approval request for this tool call expired; it was not run."
    )
    assert log.read() == ["send_email:a@x"]
    with pytest.raises(AlreadyResolved):  # too late: the approval is recorded
        host.reject(a.token)
    assert host.approve(b.token).binding.status is ConfirmationStatus.EXPIRED
    assert log.read() == ["send_email:a@x"]


def test_a_rejection_without_a_reason_reaches_the_model_as_a_fixed_sentence(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent)
    (a,) = host.run("mail a", run_id="r1").pending
    done = host.reject(a.token).run
    assert done.output == "done: A reviewer rejected this tool call; it was not run."
    assert log.read() == []


def test_a_failed_continuation_after_the_bodies_ran_never_reruns_them(flavour: str) -> None:
    """The continuation dies after the bodies ran and before the run's new state was saved
    (here: the model request that follows them fails). The next continuation restores the
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
    assert run_record(host)["state"] != "completed"
    report = host.reconcile()
    assert [(r.run_id, r.status) for r in report.runs] == [("r1", "completed")]
    assert report.runs[0].output == "done: found z; sent to a@x; sent to b@x"
    assert report.execution_unknown == ()
    assert log.read() == ["lookup:z", "send_email:a@x", "send_email:b@x"]
    assert host.reconcile().runs == ()  # nothing left to do


class _Killed(BaseException):
    """Stands for the process dying inside the body (nothing after it runs)."""


def die_inside_the_body(host: Host, log: ExecutionLog, token: str) -> None:
    """Approve ``token``; its body acts (logged), then the "process" dies before returning."""
    append = log.append

    def dying(line: str) -> None:
        append(line)
        raise _Killed(line)

    log.append = dying  # type: ignore[method-assign]
    try:
        with pytest.raises(_Killed):
            host.approve(token)
    finally:
        log.append = append  # type: ignore[method-assign]


def test_a_body_killed_mid_execution_is_never_rerun_until_an_operator_settles_it(
    flavour: str,
) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent)
    (a,) = host.run("mail a", run_id="r1").pending
    die_inside_the_body(host, log, a.token)
    assert log.read() == ["send_email:a@x"]
    report = host.reconcile()
    assert [e.tool_call_id for e in report.execution_unknown] == [a.tool_call_id]
    assert [r.status for r in report.runs] != ["completed"]
    assert log.read() == ["send_email:a@x"]  # unknown: not run again
    host.settle_execution(a.tool_call_id, ran=True, result="sent to a@x (operator)")
    (run,) = host.reconcile().runs
    assert run.status == "completed" and run.output == "done: sent to a@x (operator)"
    assert log.read() == ["send_email:a@x"]


def test_an_idempotent_tool_is_rerun_after_an_unknown_outcome(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([[("send_email", {"to": "a@x"})]], log)
    host = Host(flavour, agent, idempotent_tools=("send_email",))
    (a,) = host.run("mail a", run_id="r1").pending
    die_inside_the_body(host, log, a.token)
    (run,) = host.reconcile().runs
    assert run.status == "completed" and run.output == "done: sent to a@x"
    assert log.read() == ["send_email:a@x", "send_email:a@x"]


def test_ungated_tools_outside_a_bridge_run_still_run_at_most_once_per_call(flavour: str) -> None:
    """A guarded agent run straight through the SDK (no bridge run) keeps the ledger's rule."""

    log = ExecutionLog()
    agent, _ = make_agent([[("lookup", {"q": "z"})]], log)
    host = Host(flavour, agent)
    bridge = host.bridge()
    guarded = getattr(bridge, "inner", bridge).runtime.agent
    for _ in range(2):
        result = asyncio.run(Runner.run(guarded, "look z", run_config=RUN_CONFIG))
        assert result.final_output == "done: found z"
    assert log.read() == ["lookup:z"]


def test_storage_without_records_is_refused() -> None:
    class Bare:
        def load(self, session_id: str) -> None:
            return None

        def save(self, snapshot: object, expected: int | None) -> bool:
            return True

    agent, _ = make_agent([THREE], ExecutionLog())
    session = resume_chat_session(DEFINITION, session_id="s1", storage=Bare())
    with pytest.raises(ConfigError, match="RecordStorage"):
        OpenAIAgentsBridge(agent, session, Bare())


def test_a_handoff_object_is_refused_because_its_tools_cannot_be_guarded() -> None:
    agent, _ = make_agent([THREE], ExecutionLog())
    outer = agent.clone(handoffs=[handoff(Agent(name="other"))])

    async def nothing(inner: Any, ctx: Any, args: str) -> None:
        return None

    with pytest.raises(ConfigError, match="Handoff"):
        guard_agent(outer, nothing)


def test_agents_handed_off_to_are_guarded_too() -> None:
    agent, _ = make_agent([THREE], ExecutionLog())
    inner = agent.clone(name="inner")
    outer = agent.clone(name="outer", handoffs=[inner])
    outer_copy = guard_agent(outer, lambda *_: None)  # type: ignore[arg-type, return-value]
    (inner_copy,) = outer_copy.handoffs
    assert isinstance(inner_copy, Agent) and inner_copy.name == "inner"
    for copy, original in ((outer_copy, outer), (inner_copy, inner)):
        assert [t.name for t in copy.tools] == [t.name for t in original.tools]
        for new, old in zip(copy.tools, original.tools, strict=True):
            assert new.on_invoke_tool is not old.on_invoke_tool
            assert new.needs_approval == old.needs_approval
    assert [t.on_invoke_tool for t in agent.tools] == [t.on_invoke_tool for t in inner.tools]


def test_a_call_refused_as_unknown_does_not_strand_its_approved_sibling(flavour: str) -> None:
    """One call of a batch is an unknown execution (a dead process claimed it), so the
    continuation fails and the SDK cancels the other tool tasks. The sibling whose body was
    claimed and is running still finishes and records its outcome: it is not left an unknown
    execution, and the next continuation replays it instead of asking an operator."""
    log = ExecutionLog()

    @function_tool(needs_approval=True)
    async def post(text: str) -> str:
        """Post a message (its body awaits, so a sibling's failure lands mid-body)."""
        log.append(f"post:{text}")
        for _ in range(50):  # loop turns (not time): the SDK's sibling cancel lands in here
            await asyncio.sleep(0)
        return f"posted {text}"

    tools = [post, *make_tools(log)]
    model = ScriptedModel([[("post", {"text": "hi"}), ("send_email", {"to": "b@x"})]])
    host = Host(flavour, Agent(name="assistant", model=model, tools=tools))
    a, b = host.run("post and mail", run_id="r1").pending
    dead = ToolLedger(host.storage, "s1", owner="dead-process")

    def killed() -> None:
        raise _Killed("died inside b's body")

    with pytest.raises(_Killed):
        dead.execute(b.tool_call_id, "send_email", {"to": "b@x"}, killed)
    assert host.approve(b.token).run.status == "waiting"
    with pytest.raises(ExecutionUnknown):
        host.approve(a.token)
    assert log.read() == ["post:hi"]
    entry = dead.get(a.tool_call_id)
    assert entry is not None and entry.state is ExecutionState.EXECUTED
    report = host.reconcile()
    assert [e.tool_call_id for e in report.execution_unknown] == [b.tool_call_id]
    host.settle_execution(b.tool_call_id, ran=False)  # the operator: b's body never acted
    (run,) = host.reconcile().runs
    assert run.output == "done: posted hi; sent to b@x"
    assert log.read() == ["post:hi", "send_email:b@x"]


def test_the_sync_bridge_inside_a_running_loop_says_to_use_the_async_one() -> None:
    log = ExecutionLog()
    agent, model = make_agent([THREE], log)
    host = Host("sync", agent)

    async def inside() -> None:
        host.run("mail both", run_id="r1")

    with pytest.raises(ConfigError, match="AsyncOpenAIAgentsBridge"):
        asyncio.run(inside())
    assert model.requests == 0 and log.read() == []
    assert host.storage.list_records("s1") == []
