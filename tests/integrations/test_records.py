"""Reading a session's bridge records for operators (``integrations.records``): the same plan
through the sync and the asyncio driver, on each record-capable backend; no runtime needed."""

from __future__ import annotations

import asyncio

import pytest
from bridge_harness import RecordsBackend, crash_inside_body
from pai_agents import Call, Counts, build_agent

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.integrations.ledger import ExecutionState
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge
from akchat_fsm.integrations.records import (
    SETTLE_HINT,
    read_bridge_records,
    read_bridge_records_async,
)
from akchat_fsm.storage.memory import MemoryStorage

SID = "chat-1"


def test_both_drivers_read_the_runs_and_the_ledger_alike(records_backend: RecordsBackend) -> None:
    storage = records_backend.sync()
    session = resume_chat_session(ChatDefinition("support"), session_id=SID, storage=storage)
    agent = build_agent([Call("send_email", {"to": "a@example.com"}, "c1")], Counts())
    bridge = PydanticAIBridge(agent, session, storage)
    paused = bridge.run("do it", run_id="r1")
    bridge.approve(paused.pending[0].token)  # runs c1, completes r1
    crash_inside_body(storage, "c9", session_id=SID)
    records = read_bridge_records(storage, SID)
    assert records is not None
    assert [(r.run_id, r.state.value) for r in records.runs] == [("r1", "completed")]
    assert records.unfinished_runs == ()
    assert [(e.tool_call_id, e.state) for e in records.entries] == [
        ("c1", ExecutionState.EXECUTED),
        ("c9", ExecutionState.EXECUTING),
    ]
    assert [e.tool_call_id for e in records.unknown] == ["c9"]
    as_json = records.to_json()
    assert as_json["executionUnknown"] == ["c9"] and as_json["settle"] == SETTLE_HINT
    assert asyncio.run(read_bridge_records_async(records_backend.async_(), SID)) == records


def test_a_session_without_records_is_empty_and_a_storage_without_the_capability_is_none() -> None:
    empty = read_bridge_records(MemoryStorage(), "nobody")
    assert empty is not None and not empty and empty.unknown == ()

    class EnvelopeOnly:
        def load(self, session_id: str) -> None:
            return None

    assert read_bridge_records(EnvelopeOnly(), "s") is None
    assert asyncio.run(read_bridge_records_async(EnvelopeOnly(), "s")) is None


def test_an_invalid_run_record_is_a_config_error() -> None:
    from akchat_fsm.errors import ConfigError

    storage = MemoryStorage()
    storage.save_record(SID, "run:r1", '{"v": 1}', None)
    with pytest.raises(ConfigError, match="run record is not valid"):
        read_bridge_records(storage, SID)
