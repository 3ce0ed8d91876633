"""A bridge decision bound to the arguments shown (ADR-0132), on the real ``openai-agents``
(which has no reviewer edits: an edit is refused before anything is written, ADR-0135).

The bridge writes one record before a rejection's claim (its reason, for the model): a
rejection for other arguments must be refused before that write too, so a refused decision
leaves every record as it was. Sync and asyncio bridges, one shared plan.
"""

from __future__ import annotations

import pytest
from oai_harness import ExecutionLog, Host, make_agent

from akchat_fsm import ArgumentsMismatch, arguments_digest
from akchat_fsm.errors import EditNotAllowed
from akchat_fsm.wire.enums import ConfirmationStatus

ONE = [("send_email", {"to": "a@x"})]


@pytest.fixture(params=["sync", "async"])
def flavour(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _records(host: Host) -> dict[str, object]:
    keys = host.storage.list_records(host.session_id)
    return {key: host.storage.load_record(host.session_id, key) for key in keys}


def test_a_rejection_for_other_arguments_writes_no_reason_and_decides_nothing(
    flavour: str,
) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([ONE, []], log)
    host = Host(flavour, agent)
    (call,) = host.run("mail a", run_id="r1").pending
    records, envelope = _records(host), host.storage.load(host.session_id)
    with pytest.raises(ArgumentsMismatch):
        host.reject(call.token, reason="wrong person", args_digest=arguments_digest({"to": "b@x"}))
    assert _records(host) == records
    assert host.storage.load(host.session_id) == envelope
    with pytest.raises(ArgumentsMismatch):
        host.approve(call.token, args_digest=arguments_digest({"to": "b@x"}))
    assert host.storage.load(host.session_id) == envelope
    assert log.read() == []


def test_an_approval_for_the_arguments_shown_runs_the_body_once(flavour: str) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([ONE, []], log)
    host = Host(flavour, agent)
    (call,) = host.run("mail a", run_id="r1").pending
    decided = host.approve(call.token, args_digest=arguments_digest(call.input))
    assert decided.binding.status is ConfirmationStatus.APPROVED
    assert decided.run is not None and decided.run.status == "completed"
    assert log.read() == ["send_email:a@x"]


def test_the_openai_agents_sdk_has_no_edits_and_a_refused_edit_writes_nothing(
    flavour: str,
) -> None:
    log = ExecutionLog()
    agent, _ = make_agent([ONE, []], log)
    host = Host(flavour, agent)
    (call,) = host.run("mail a", run_id="r1").pending
    records, envelope = _records(host), host.storage.load(host.session_id)
    with pytest.raises(EditNotAllowed, match="OpenAI Agents SDK"):
        host.edit(call.token, {"to": "b@x"}, args_digest=arguments_digest(call.input))
    assert _records(host) == records
    assert host.storage.load(host.session_id) == envelope
    decided = host.approve(call.token, args_digest=arguments_digest(call.input))
    assert decided.binding.status is ConfirmationStatus.APPROVED
    assert log.read() == ["send_email:a@x"]
