"""Reviewer edits on the pydantic-ai bridge (ADR-0135), with the real pydantic-ai package.

An edit is an approve for other arguments than the model's, recorded in the audit entry that
precedes the approve's claim: the body runs once, with the edited arguments
(``ToolApproved(override_args=...)``), the model reads that result, the trail names who
edited, and a refused edit writes nothing.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
from bridge_harness import RecordsBackend, crash_inside_body
from pai_agents import Call, Counts, build_agent

from akchat_fsm import (
    AlreadyResolved,
    ArgumentsMismatch,
    ChatDefinition,
    ConfigError,
    LimitExceeded,
    arguments_digest,
    reconcile_all,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.core.retention import KEEP_TERMINAL
from akchat_fsm.errors import EditNotAllowed
from akchat_fsm.integrations.ledger import ExecutionState, ToolLedger
from akchat_fsm.integrations.ledger import args_digest as ledger_digest
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge, PydanticAIBridge
from akchat_fsm.session import audit_trail
from akchat_fsm.session.ports import ToolCallProposal
from akchat_fsm.session.sweep import SweepPorts
from akchat_fsm.wire.enums import ConfirmationStatus

DEFINITION = ChatDefinition("support")
SID = "chat-1"
T0 = 1_000_000
TTL = 60_000
EMAIL = Call("send_email", {"to": "a@example.com"}, "c1")
REFUND = Call("refund", {"amount": 500}, "c2")
EDITABLE = ("refund", "send_email")
FIVE_MINUTES = 5 * 60_000


def later() -> int:
    return time.time_ns() // 1_000_000 + 10 * 60_000


def _bridge(
    backend: RecordsBackend, agent: Any, *, storage: Any = None, now: int = T0, **options: Any
) -> PydanticAIBridge:
    storage = storage if storage is not None else backend.sync()
    session = resume_chat_session(DEFINITION, session_id=SID, storage=storage, clock=lambda: now)
    options.setdefault("editable_tools", EDITABLE)
    return PydanticAIBridge(agent, session, storage, ttl_ms=TTL, **options)


def _records(storage: Any) -> dict[str, Any]:
    return {k: storage.load_record(SID, k) for k in storage.list_records(SID)}


def _start(backend: RecordsBackend, calls: list[Call], counts: Counts) -> tuple[Any, Any]:
    agent = build_agent(calls, counts)
    return agent, _bridge(backend, agent).run("do it", run_id="r1")


def test_an_edit_runs_the_body_once_with_the_edited_arguments_and_the_trail_names_it(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    shown = arguments_digest(call.input)
    decided = _bridge(records_backend, agent).edit(
        call.token,
        {"amount": 50},
        args_digest=shown,
        reason="capped at 50",
        decided_by="ana@example.com",
        via="inbox",
    )
    assert decided.binding.status is ConfirmationStatus.APPROVED
    assert decided.run is not None and decided.run.status == "completed"
    assert counts.bodies == ["refund:50"]  # once, with the reviewer's arguments
    assert decided.run.output == "c2={'refunded': 50}"  # what the model read
    (entry,) = audit_trail(records_backend.sync(), SID)
    assert (entry.intent, entry.claims, entry.decided) == ("edit", "approving", True)
    assert (entry.principal, entry.via, entry.reason) == (
        "ana@example.com",
        "inbox",
        "capped at 50",
    )
    assert entry.args_digest == shown  # what the reviewer was shown
    assert entry.edited_args == {"amount": 50}
    assert entry.effective_digest == arguments_digest({"amount": 50})
    assert entry.to_json()["editedArgs"] == {"amount": 50}
    ledger = ToolLedger(records_backend.sync(), SID).get("c2")
    assert ledger is not None and ledger.state is ExecutionState.EXECUTED
    assert ledger.args_digest == ledger_digest({"amount": 50})  # claimed under the edit
    # The envelope's binding stays the reference's own: the call as proposed, approved.
    assert dict(decided.binding.input) == {"amount": 500}
    # A repeat of the same edit is the same decision; a continuation replays, runs nothing.
    again = _bridge(records_backend, agent).edit(call.token, {"amount": 50}, args_digest=shown)
    assert again.run is not None and again.run.replayed
    assert counts.bodies == ["refund:50"] and counts.requests == 2


def test_an_edit_among_plain_decisions_changes_only_its_call(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL, REFUND], counts)
    by_id = {b.tool_call_id: b for b in paused.pending}
    first = _bridge(records_backend, agent).edit(
        by_id["c1"].token, {"to": "b@example.com"}, args_digest=arguments_digest(EMAIL.args)
    )
    assert first.run is not None and first.run.status == "waiting"
    done = _bridge(records_backend, agent).approve(by_id["c2"].token)
    assert done.run is not None and done.run.status == "completed"
    assert sorted(counts.bodies) == ["refund:500", "send_email:b@example.com"]
    assert done.run.output == "c1=sent to b@example.com; c2={'refunded': 500}"


def test_a_refused_edit_changes_nothing(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    storage = records_backend.sync()
    records, envelope = _records(storage), storage.load(SID)
    shown = arguments_digest(call.input)
    refusals: list[tuple[type[Exception], Any]] = [
        # a digest of other arguments than the ones stored: a stale page, a tampered form
        (ArgumentsMismatch, lambda b: b.edit(call.token, {"amount": 5}, args_digest="sha256:0")),
        # the tool is not editable on this bridge
        (
            EditNotAllowed,
            lambda b: _bridge(records_backend, agent, editable_tools=("send_email",)).edit(
                call.token, {"amount": 5}, args_digest=shown
            ),
        ),
        # hostile arguments: not a bounded JSON object
        (LimitExceeded, lambda b: b.edit(call.token, {"x": "y" * 20_000}, args_digest=shown)),
        (LimitExceeded, lambda b: b.edit(call.token, ["amount", 5], args_digest=shown)),
        (LimitExceeded, lambda b: b.edit(call.token, {"n": float("nan")}, args_digest=shown)),
        (LimitExceeded, lambda b: b.edit(call.token, _deep(40), args_digest=shown)),
        # no digest of what the reviewer saw, a bad decider
        (ConfigError, lambda b: b.edit(call.token, {"amount": 5}, args_digest=None)),
        (ConfigError, lambda b: b.edit(call.token, {"amount": 5}, args_digest=shown, via="x")),
    ]
    for error, attempt in refusals:
        with pytest.raises(error):
            attempt(_bridge(records_backend, agent))
        assert _records(storage) == records
        assert storage.load(SID) == envelope
    assert counts.bodies == [] and counts.requests == 1
    # Still pending: the reviewer can decide on the call as shown.
    done = _bridge(records_backend, agent).approve(call.token, args_digest=shown)
    assert done.run is not None and counts.bodies == ["refund:500"]


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels):
        value = {"down": value}
    return value


def test_a_call_decided_otherwise_refuses_the_edit(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    shown = arguments_digest(call.input)
    _bridge(records_backend, agent).approve(call.token)
    with pytest.raises(AlreadyResolved):
        _bridge(records_backend, agent).edit(call.token, {"amount": 5}, args_digest=shown)
    assert counts.bodies == ["refund:500"]


def test_approving_as_shown_a_call_that_runs_an_edit_is_not_the_same_decision(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    shown = arguments_digest(call.input)
    _bridge(records_backend, agent).edit(call.token, {"amount": 50}, args_digest=shown)
    with pytest.raises(AlreadyResolved, match="reviewer's edit"):
        _bridge(records_backend, agent).approve(call.token, args_digest=shown)
    with pytest.raises(AlreadyResolved, match="other arguments"):
        _bridge(records_backend, agent).edit(call.token, {"amount": 60}, args_digest=shown)
    assert counts.bodies == ["refund:50"] and len(audit_trail(records_backend.sync(), SID)) == 1


def test_an_editor_killed_after_its_claim_is_finished_by_the_sweep_and_runs_once(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    storage = _KilledAfterItsClaim(records_backend.sync())
    with pytest.raises(_Killed):
        _bridge(records_backend, agent, storage=storage).edit(
            call.token, {"amount": 50}, args_digest=arguments_digest(call.input), decided_by="ana"
        )
    assert _bridge(records_backend, agent).session.confirmations[0].status.is_processing
    sweep_storage = records_backend.sync()

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(
            DEFINITION,
            bridge=lambda s: PydanticAIBridge(agent, s, sweep_storage, editable_tools=EDITABLE),
        )

    [swept] = reconcile_all(
        sweep_storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later
    ).sessions
    assert counts.bodies == ["refund:50"]
    reconcile_all(sweep_storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later)
    again = _bridge(records_backend, agent).continue_run("r1")
    assert again.replayed and again.output == "c2={'refunded': 50}"
    assert counts.bodies == ["refund:50"] and counts.requests == 2
    (entry,) = audit_trail(records_backend.sync(), SID)
    assert (entry.intent, entry.principal, entry.decided) == ("edit", "ana", True)
    del swept


def test_a_body_killed_mid_edit_is_never_rerun_by_the_sweep(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    storage = records_backend.sync()
    _bridge(records_backend, agent).edit(
        call.token, {"amount": 50}, args_digest=arguments_digest(call.input), continue_run=False
    )
    # the executor claimed the body under the edited arguments, then died inside it
    crash_inside_body(storage, "c2", session_id=SID, tool="refund", args={"amount": 50})

    def ports_for(session_id: str) -> SweepPorts:
        return SweepPorts(
            DEFINITION,
            bridge=lambda s: PydanticAIBridge(agent, s, storage, editable_tools=EDITABLE),
        )

    for _ in range(2):
        [swept] = reconcile_all(
            storage, ports_for, older_than_ms=FIVE_MINUTES, clock=later
        ).sessions
        assert swept.execution_unknown == ("c2",)
    assert counts.bodies == []


def test_the_async_bridge_edits_with_the_same_plan(records_backend: RecordsBackend) -> None:
    counts = Counts()
    agent = build_agent([REFUND], counts)

    async def bridge() -> AsyncPydanticAIBridge:
        storage = records_backend.async_()
        session = await resume_chat_session_async(
            DEFINITION, session_id=SID, storage=storage, clock=lambda: T0
        )
        return AsyncPydanticAIBridge(agent, session, storage, ttl_ms=TTL, editable_tools=EDITABLE)

    async def scenario() -> None:
        paused = await (await bridge()).run("do it", run_id="r1")
        (call,) = paused.pending
        with pytest.raises(ArgumentsMismatch):
            await (await bridge()).edit(call.token, {"amount": 5}, args_digest="sha256:0")
        done = await (await bridge()).edit(
            call.token, {"amount": 7}, args_digest=arguments_digest(call.input)
        )
        assert done.run is not None and done.run.output == "c2={'refunded': 7}"

    asyncio.run(scenario())
    assert counts.bodies == ["refund:7"]


class _Killed(BaseException):
    """The process dies here (nothing in the library or pydantic-ai handles it)."""


class _KilledAfterItsClaim:
    """A storage whose process dies right after its next envelope save applies: for an
    editor, between its claim (CAS#1) and its terminal save (CAS#2)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, snapshot: Any, expected: int | None) -> bool:
        applied = bool(self.inner.save(snapshot, expected))
        if applied:
            raise _Killed()
        return applied

    def save_with_records(self, snapshot: Any, expected: int | None, records: Any) -> bool:
        # The claim with its audit entry, one write (ADR-0141): the same death after it.
        applied = bool(self.inner.save_with_records(snapshot, expected, records))
        if applied:
            raise _Killed()
        return applied


class _HostUpstream:
    """The host's own upstream for confirmations it proposes outside any agent run."""

    def __init__(self) -> None:
        self.proposed = 0

    def propose_tool_call(self, id: str, name: str, args: Any) -> ToolCallProposal:
        self.proposed += 1
        return ToolCallProposal(f"host-{self.proposed}", name, args)

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


def test_an_edit_pruned_by_retention_still_runs_the_edited_arguments(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL, REFUND], counts)
    by_id = {b.tool_call_id: b for b in paused.pending}
    first = _bridge(records_backend, agent).edit(
        by_id["c1"].token, {"to": "b@example.com"}, args_digest=arguments_digest(EMAIL.args)
    )
    assert first.run is not None and first.run.status == "waiting"
    session = _bridge(records_backend, agent).session
    host = session.confirmations_for(_HostUpstream())
    for i in range(KEEP_TERMINAL + 1):  # more decisions elsewhere in the session than it keeps
        host.reject(host.propose("refund", {"amount": i}).token)
    assert "c1" not in {b.tool_call_id for b in session.confirmations}
    done = _bridge(records_backend, agent).approve(by_id["c2"].token)
    assert done.run is not None and done.run.status == "completed"
    assert sorted(counts.bodies) == ["refund:500", "send_email:b@example.com"]


def test_an_edit_holding_a_lone_surrogate_is_stored_and_read_back(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [EMAIL], counts)
    (call,) = paused.pending
    edited = {"to": "half \ud83d of an emoji"}  # a JavaScript string may hold one (ADR-0080)
    _bridge(records_backend, agent).edit(
        call.token, edited, args_digest=arguments_digest(call.input), continue_run=False
    )
    (entry,) = audit_trail(records_backend.sync(), SID)
    assert entry.edited_args == edited and entry.effective_digest == arguments_digest(edited)


def test_an_edit_that_cannot_be_read_back_runs_neither_set_of_arguments(
    records_backend: RecordsBackend,
) -> None:
    counts = Counts()
    agent, paused = _start(records_backend, [REFUND], counts)
    (call,) = paused.pending
    _bridge(records_backend, agent).edit(
        call.token, {"amount": 50}, args_digest=arguments_digest(call.input), continue_run=False
    )
    storage = records_backend.sync()
    (key,) = [k for k in storage.list_records(SID) if k.startswith("audit:")]
    version, text = storage.load_record(SID, key)
    raw = json.loads(text)
    raw["editedArgs"] = {"amount": 5000}  # no longer what its effectiveDigest names
    assert storage.save_record(SID, key, json.dumps(raw), version)
    with pytest.raises(ConfigError, match="cannot be read back"):
        _bridge(records_backend, agent).continue_run("r1")
    assert counts.bodies == []
