"""An operator's settle is audited: a create-only entry before its compare-and-set (ADR-0136).

Which entries applied is read off the verdict nonce the ledger entry carries (and each later
entry's ``follows``), never off a write after the compare-and-set: a settle killed right after
it is still named, and one whose compare-and-set lost is never said to have applied.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bridge_harness import ForwardingStorage, RecordsBackend, crash_inside_body

from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageUnavailable
from akchat_fsm.integrations.ledger import (
    SETTLE_AUDIT_PREFIX,
    ExecutionState,
    SettleRefused,
    ToolLedger,
    plan_settle_unknown,
    settle_trail,
    settle_trail_async,
)
from akchat_fsm.storage.memory import MemoryStorage

SID = "s-ledger"
ARGS = {"to": "a@example.com"}


class Killed(BaseException):
    """The operator's process dies (not an ``Exception``: nothing may handle it)."""


class DiesAtTheLedgerWrite(ForwardingStorage):
    """The settler dies when it sends its compare-and-set: before it (``after=False``) or
    right after it applied (``after=True``)."""

    def __init__(self, inner: Any, *, after: bool) -> None:
        super().__init__(inner)
        self.after = after

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        if key.startswith("call:"):
            if self.after:
                super().save_record(session_id, key, text, *args, **kw)
            raise Killed()
        return super().save_record(session_id, key, text, *args, **kw)


class EntryNeverLands(ForwardingStorage):
    """The audit entry's write times out and did not land."""

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        if key.startswith(SETTLE_AUDIT_PREFIX):
            raise OutcomeUnknown("timed out")
        return super().save_record(session_id, key, text, *args, **kw)


class LedgerWriteTimesOut(ForwardingStorage):
    """The settle's compare-and-set applies, but its answer is lost."""

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        applied = super().save_record(session_id, key, text, *args, **kw)
        if key.startswith("call:"):
            raise OutcomeUnknown("the answer was lost")
        return applied


def _unknown(storage: Any, call: str = "c1") -> None:
    crash_inside_body(storage, call, session_id=SID)


def test_a_settle_records_who_when_from_where_why_and_the_verdict(
    records_backend: RecordsBackend,
) -> None:
    storage = records_backend.sync()
    _unknown(storage)
    ledger = ToolLedger(storage, SID, owner="host:1", clock=lambda: 1_000)
    settled = ledger.settle(
        "c1", ran=True, result={"id": "r-1"}, operator="ana", reason="seen in the bank", via="cli"
    )
    (entry,) = settle_trail(storage, SID)
    assert entry.decided and entry.nonce == settled.verdict
    assert (entry.principal, entry.via, entry.reason, entry.at_ms) == (
        "ana",
        "cli",
        "seen in the bank",
        1_000,
    )
    assert entry.ran and entry.result == {"id": "r-1"}
    assert entry.version == settled.version - 1  # keyed by the version it wrote over
    assert (entry.settled_state, entry.settled_owner) == ("executing", "dead")
    assert entry.args_digest == settled.args_digest and entry.tool == "send"
    exported = entry.to_json()
    assert exported["kind"] == "settle" and exported["verdict"] == "ran"
    assert exported["decided"] is True and exported["sessionId"] == SID


def test_the_entry_is_durable_before_the_compare_and_set() -> None:
    inner = MemoryStorage()
    _unknown(inner)
    with pytest.raises(Killed):
        ToolLedger(DiesAtTheLedgerWrite(inner, after=False), SID).settle(
            "c1", ran=False, operator="ana"
        )
    (entry,) = settle_trail(inner, SID)
    assert entry.principal == "ana" and not entry.decided  # its verdict never applied
    assert ToolLedger(inner, SID).get("c1").state is ExecutionState.EXECUTING  # type: ignore[union-attr]


def test_a_settle_killed_right_after_its_write_is_still_named() -> None:
    inner = MemoryStorage()
    _unknown(inner)
    with pytest.raises(Killed):
        ToolLedger(DiesAtTheLedgerWrite(inner, after=True), SID).settle(
            "c1", ran=False, operator="ana"
        )
    (entry,) = settle_trail(inner, SID)
    assert entry.decided and entry.principal == "ana"


def test_a_settle_that_loses_its_race_is_not_said_to_have_applied() -> None:
    storage = MemoryStorage()
    _unknown(storage)
    plan = plan_settle_unknown(SID, "c1", ran=False, result=None, operator="bo", now_ms=1)
    load = next(plan)
    create = plan.send(storage.load_record(load.session_id, load.key))
    save = plan.send(storage.save_record(create.session_id, create.key, create.text, None))
    # Between bo's entry and bo's write, ana settles the call.
    ToolLedger(storage, SID).settle_unknown("c1", ran=True, result="r", operator="ana")
    assert storage.save_record(save.session_id, save.key, save.text, save.expected_version) is False
    reread = plan.send(False)
    with pytest.raises(SettleRefused):
        plan.send(storage.load_record(reread.session_id, reread.key))
    # The plan called as is names no principal: bo's attempt is the unnamed one.
    entries = {e.principal: e for e in settle_trail(storage, SID)}
    assert entries["ana"].decided and not entries[None].decided
    assert entries["ana"].version == entries[None].version  # both read the same version


def test_a_release_stays_named_through_the_re_run_and_a_second_round() -> None:
    storage = MemoryStorage()
    _unknown(storage)
    ledger = ToolLedger(storage, SID, owner="p")
    ledger.settle("c1", ran=False, operator="ana")  # did not run: released
    # The next continuation claims it again and dies inside the body once more ...
    _unknown(storage)
    # ... and a second operator settles that attempt.
    ledger.settle("c1", ran=True, result="ok", operator="bo")
    trail = settle_trail(storage, SID)
    assert [(e.principal, e.decided, e.settled_attempt) for e in trail] == [
        ("ana", True, 1),
        ("bo", True, 2),
    ]
    assert trail[1].follows == trail[0].nonce


def test_a_released_call_run_to_completion_keeps_its_settle_named() -> None:
    storage = MemoryStorage()
    _unknown(storage)
    ToolLedger(storage, SID).settle("c1", ran=False, operator="ana")
    ran = ToolLedger(storage, SID, owner="p2").execute("c1", "send", ARGS, lambda: "done")
    assert ran.ran and ran.entry.state is ExecutionState.EXECUTED
    (entry,) = settle_trail(storage, SID)
    assert entry.decided  # the re-claim and the finish kept the verdict's nonce


def test_a_compare_and_set_whose_answer_was_lost_is_recognised_as_ours() -> None:
    inner = MemoryStorage()
    _unknown(inner)
    settled = ToolLedger(LedgerWriteTimesOut(inner), SID).settle(
        "c1", ran=True, result=1, operator="ana"
    )
    assert settled.state is ExecutionState.EXECUTED and settled.owner == "ana"
    (entry,) = settle_trail(inner, SID)  # one attempt, not a second one on the settled entry
    assert entry.decided


class LostAnswerThenOthersMoveOn(ForwardingStorage):
    """The settle's compare-and-set applies and its answer is lost; before the settler's
    re-read, the next continuation re-claims the released call and dies in the body again,
    and a second operator settles that (the SPIN model's settle_told trail, models/README.md)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.lost = False

    def save_record(self, session_id: str, key: str, text: str, *args: Any, **kw: Any) -> bool:
        applied = super().save_record(session_id, key, text, *args, **kw)
        if key.startswith("call:") and not self.lost:
            self.lost = True
            _unknown(self.inner)  # the re-claim, and a body that died again
            ToolLedger(self.inner, SID).settle_unknown("c1", ran=True, result="r", operator="bo")
            raise OutcomeUnknown("the answer was lost")
        return applied


def test_a_lost_answer_whose_verdict_was_replaced_since_is_told_it_applied() -> None:
    """ana's "it did not run" applied (a body ran again because of it), but by the time she
    re-reads, bo's verdict has replaced hers: she must hear that hers applied, not "nothing
    written" (before the fix: ``SettleRefused``)."""
    inner = MemoryStorage()
    _unknown(inner)
    told = ToolLedger(LostAnswerThenOthersMoveOn(inner), SID).settle_unknown(
        "c1", ran=False, operator="ana"
    )
    assert told.verdict is not None and told.owner == "ana"
    trail = {e.principal: e for e in settle_trail(inner, SID)}
    assert trail["ana"].decided and trail["bo"].decided
    assert trail["ana"].nonce == told.verdict and trail["bo"].follows == told.verdict
    assert ToolLedger(inner, SID).get("c1").verdict == trail["bo"].nonce  # type: ignore[union-attr]


def test_a_lost_answer_whose_verdict_did_not_apply_is_still_refused() -> None:
    """The other side of the same re-read: a write that did not apply, answer lost, while bo
    settled first, is refused as before; the trail names no verdict of ana's."""

    class BoFirstThenLost(ForwardingStorage):
        def save_record(self, session_id: str, key: str, text: str, *a: Any, **kw: Any) -> bool:
            if key.startswith("call:"):
                ToolLedger(self.inner, SID).settle_unknown("c1", ran=True, operator="bo")
                super().save_record(session_id, key, text, *a, **kw)  # loses: bo moved it on
                raise OutcomeUnknown("the answer was lost")
            return super().save_record(session_id, key, text, *a, **kw)

    inner = MemoryStorage()
    _unknown(inner)
    with pytest.raises(SettleRefused, match=r"changed while settling.*nothing written"):
        ToolLedger(BoFirstThenLost(inner), SID).settle_unknown("c1", ran=False, operator="ana")
    trail = {e.principal: e for e in settle_trail(inner, SID)}
    assert trail["bo"].decided and not trail["ana"].decided


def test_an_entry_that_did_not_land_sends_no_verdict() -> None:
    inner = MemoryStorage()
    _unknown(inner)
    with pytest.raises(StorageUnavailable, match="audit entry could not be written"):
        ToolLedger(EntryNeverLands(inner), SID).settle_unknown("c1", ran=False, operator="ana")
    assert ToolLedger(inner, SID).get("c1").unknown  # type: ignore[union-attr]
    assert settle_trail(inner, SID) == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operator": ""}, "operator must be None or a printable str"),
        ({"operator": "a\nb"}, "operator must be None or a printable str"),
        ({"reason": 7}, "reason must be None or a str"),
        ({"reason": "x" * 4_001}, "reason must be None or a str"),
        ({"via": "sweep"}, "via must be one of api, inbox, cli"),
    ],
)
def test_bad_settler_arguments_are_typed_errors_before_any_write(
    kwargs: dict[str, Any], message: str
) -> None:
    storage = MemoryStorage()
    _unknown(storage)
    before = storage.load_record(SID, "call:c1")
    for settle in (ToolLedger(storage, SID).settle, ToolLedger(storage, SID).settle_unknown):
        with pytest.raises(ConfigError, match=message):
            settle("c1", ran=False, **kwargs)
    assert storage.load_record(SID, "call:c1") == before
    assert storage.list_records(SID, SETTLE_AUDIT_PREFIX) == []


def test_the_trail_filters_and_the_async_twin_agrees() -> None:
    storage = MemoryStorage()
    for call, at in (("c1", 5), ("c2", 9)):
        _unknown(storage, call)
        ToolLedger(storage, SID, clock=lambda at=at: at).settle(  # type: ignore[misc]
            call, ran=False, operator=f"op-{call}"
        )
    assert [e.tool_call_id for e in settle_trail(storage, SID, tool_call_id="c2")] == ["c2"]
    assert [e.tool_call_id for e in settle_trail(storage, SID, since_ms=6)] == ["c2"]
    assert asyncio.run(settle_trail_async(storage, SID)) == settle_trail(storage, SID)
    with pytest.raises(ConfigError):
        settle_trail(storage, SID, since_ms="1h")  # type: ignore[arg-type]
