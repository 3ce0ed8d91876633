"""The ledger's two protocol seams, each pinned by a test that fails when the seam is cut.

1. The claim write carries the processing flag itself. A claim saved without it, with the flag
   set by a second write, leaves a window where a crash hides a claimed (maybe running) body
   from the processing index that operators and sweeps list unknown executions from.
2. A finish re-checks that the stored entry is still its own claim. While a body runs, an
   operator may release the call, or an idempotent re-claim may take it; the first claimant
   must then get ``ExecutionClaimLost`` and write nothing over what is stored.

Every test runs on each record-capable backend (memory, SQLite) through the public ledger.
Mutants of ``plan_execute`` / ``_finish`` that the rest of the suite let through and these
tests kill: the claim saved with ``processing=False`` and re-saved with ``processing=True``; a
finish that, after its save is refused, re-reads only the version and keeps deciding on its
own copy of the claim (so it overwrites a release, a re-claim, or a finished re-claim).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from bridge_harness import RecordsBackend

from akchat_fsm.integrations.ledger import (
    ClaimRequest,
    ExecutionClaimLost,
    ExecutionState,
    LedgerEntry,
    LoadRecord,
    RunBody,
    SaveRecord,
    ToolLedger,
    args_digest,
    ledger_key,
    plan_execute,
)

SID = "s-seams"
ARGS = {"to": "a@example.com"}


class _Killed(BaseException):
    """The process died: not an ``Exception``, so no driver maps or retries it."""


class _DiesAfterSaves:
    """A record storage that dies right after its ``saves``-th applied save (a failed
    optimistic create does not count: it wrote nothing)."""

    def __init__(self, inner: Any, saves: int) -> None:
        self.inner = inner
        self.left = saves

    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        applied: bool = self.inner.save_record(
            session_id, key, text, expected_version, processing=processing
        )
        self.left -= applied
        if applied and self.left == 0:
            raise _Killed
        return applied

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return self.inner.list_records(session_id, prefix)  # type: ignore[no-any-return]

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)


def _processing_sessions(storage: Any) -> list[str]:
    return [row.session_id for row in storage.list_processing()]


# --------------------------------------------------------------------------- seam 1: the claim


def test_a_crash_right_after_the_claim_write_leaves_the_session_in_the_processing_index(
    records_backend: RecordsBackend,
) -> None:
    storage = records_backend.sync()
    runs: list[str] = []
    dying = ToolLedger(_DiesAfterSaves(storage, saves=1), SID, owner="dies")
    with pytest.raises(_Killed):
        dying.execute("c1", "send", ARGS, lambda: runs.append("ran"))
    assert runs == []  # it died before the body: only the claim write happened
    entry = ToolLedger(storage, SID).get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTING
    assert entry.owner == "dies"
    # The claim write alone must have put the session in the index.
    assert _processing_sessions(storage) == [SID]


def test_a_re_claim_after_a_release_is_listed_processing_by_its_own_write(
    records_backend: RecordsBackend,
) -> None:
    storage = records_backend.sync()
    with pytest.raises(_Killed):
        ToolLedger(_DiesAfterSaves(storage, saves=1), SID, owner="first").execute(
            "c1", "send", ARGS, lambda: None
        )
    ToolLedger(storage, SID, owner="operator").settle("c1", ran=False)
    assert _processing_sessions(storage) == []  # released: nothing unsettled is stored
    with pytest.raises(_Killed):
        ToolLedger(_DiesAfterSaves(storage, saves=1), SID, owner="second").execute(
            "c1", "send", ARGS, lambda: None
        )
    entry = ToolLedger(storage, SID).get("c1")
    assert entry is not None and entry.state is ExecutionState.EXECUTING
    assert (entry.owner, entry.attempt) == ("second", 2)
    assert _processing_sessions(storage) == [SID]


def _claim_effects(storage: Any, request: ClaimRequest) -> list[tuple[SaveRecord, bool]]:
    """Step the real plan up to its body; every save it asked for before it, and whether it
    applied (the optimistic create of a stored call is refused and re-decided)."""
    saves: list[tuple[SaveRecord, bool]] = []
    plan = plan_execute(SID, request)
    effect = next(plan)
    while not isinstance(effect, RunBody):
        value: Any
        if isinstance(effect, LoadRecord):
            value = storage.load_record(effect.session_id, effect.key)
        else:
            assert isinstance(effect, SaveRecord), effect
            value = storage.save_record(
                effect.session_id,
                effect.key,
                effect.text,
                effect.expected_version,
                processing=effect.processing,
            )
            saves.append((effect, value))
        effect = plan.send(value)
    plan.close()
    return saves


def _request(claim: str, *, idempotent: bool = False) -> ClaimRequest:
    return ClaimRequest("c1", "send", args_digest(ARGS), f"owner-{claim}", claim, 5, idempotent)


def test_the_claim_is_one_save_of_an_executing_entry_with_the_processing_flag(
    records_backend: RecordsBackend,
) -> None:
    storage = records_backend.sync()
    first = _claim_effects(storage, _request("n1"))
    # An idempotent re-claim of the entry the first claimant left executing.
    second = _claim_effects(storage, _request("n2", idempotent=True))
    assert [applied for _, applied in first] == [True]
    # The re-claim first tries the optimistic create (refused), then the claim itself.
    assert [applied for _, applied in second] == [False, True]
    for saves, expected, attempt in ((first, None, 1), (second, 1, 2)):
        claim, _ = saves[-1]  # the claim is the last write before the body: none follows
        assert claim.key == ledger_key("c1") and claim.expected_version == expected
        assert claim.processing is True
        written = json.loads(claim.text)
        assert written["state"] == ExecutionState.EXECUTING.value
        assert written["attempt"] == attempt
        # Every write before the body is a claim of an executing entry, flagged processing.
        assert all(save.processing for save, _ in saves)


def test_the_finish_save_clears_the_processing_flag(records_backend: RecordsBackend) -> None:
    storage = records_backend.sync()
    ToolLedger(storage, SID).execute("c1", "send", ARGS, lambda: "ok")
    assert _processing_sessions(storage) == []


# --------------------------------------------------------------------------- seam 2: the finish


def _interfering_run(
    storage: Any, interfere: Any, *, idempotent: bool = False
) -> tuple[ExecutionClaimLost, LedgerEntry | None, LedgerEntry | None]:
    """Run claimant A's body, which lets a second ledger on the same storage ``interfere``;
    returns A's error, the entry as the interference left it, and the entry afterwards."""
    seen: list[LedgerEntry | None] = []
    other = ToolLedger(storage, SID, owner="B")

    def body() -> str:
        interfere(other)
        seen.append(other.get("c1"))
        return "A's result"

    with pytest.raises(ExecutionClaimLost) as lost:
        ToolLedger(storage, SID, owner="A").execute("c1", "send", ARGS, body, idempotent=idempotent)
    return lost.value, seen[0], other.get("c1")


def test_a_release_while_the_body_runs_makes_the_claimant_lose_its_claim(
    records_backend: RecordsBackend,
) -> None:
    lost, left, after = _interfering_run(
        records_backend.sync(), lambda other: other.settle("c1", ran=False)
    )
    assert left is not None and left.state is ExecutionState.RELEASED
    assert after == left  # A wrote nothing over the operator's verdict
    assert lost.record == left


def test_an_idempotent_re_claim_that_finished_while_the_body_ran_is_not_overwritten(
    records_backend: RecordsBackend,
) -> None:
    runs: list[str] = []

    def re_claim(other: ToolLedger) -> None:
        done = other.execute(
            "c1", "send", ARGS, lambda: runs.append("B") or "B's result", idempotent=True
        )
        assert done.ran

    lost, left, after = _interfering_run(records_backend.sync(), re_claim, idempotent=True)
    assert runs == ["B"]
    assert left is not None and left.state is ExecutionState.EXECUTED
    assert (left.owner, left.attempt, left.result) == ("B", 2, "B's result")
    assert after == left
    assert lost.record == left


def test_an_idempotent_re_claim_still_executing_is_not_finished_by_the_first_claimant(
    records_backend: RecordsBackend,
) -> None:
    storage = records_backend.sync()

    def re_claim_and_die(other: ToolLedger) -> None:
        dying = ToolLedger(_DiesAfterSaves(storage, saves=1), SID, owner="B")
        with pytest.raises(_Killed):
            dying.execute("c1", "send", ARGS, lambda: "never", idempotent=True)

    lost, left, after = _interfering_run(storage, re_claim_and_die, idempotent=True)
    assert left is not None and left.state is ExecutionState.EXECUTING
    assert (left.owner, left.attempt) == ("B", 2)
    assert after == left  # still B's claim, still unknown: A did not record its result on it
    assert lost.record == left
    assert _processing_sessions(storage) == [SID]


def test_a_ran_verdict_while_the_body_runs_makes_the_claimant_lose_its_claim(
    records_backend: RecordsBackend,
) -> None:
    lost, left, after = _interfering_run(
        records_backend.sync(), lambda other: other.settle("c1", ran=True, result="op")
    )
    assert left is not None and left.outcome == "settled"
    assert after == left
    assert lost.record == left


def test_a_ran_verdict_while_the_body_runs_is_not_overwritten(
    records_backend: RecordsBackend,
) -> None:
    """What holds today of the case above: the operator's verdict stays as written."""
    storage = records_backend.sync()
    ledger = ToolLedger(storage, SID, owner="A")
    seen: list[LedgerEntry | None] = []

    def body() -> str:
        seen.append(ToolLedger(storage, SID, owner="B").settle("c1", ran=True, result="op"))
        return "A's result"

    with contextlib.suppress(ExecutionClaimLost):  # today it returns instead (see above)
        ledger.execute("c1", "send", ARGS, body)
    after = ledger.get("c1")
    assert after is not None and after == seen[0]
    assert (after.outcome, after.result, after.owner) == ("settled", "op", "B")


def test_the_body_outcome_is_recorded_when_nothing_interferes(
    records_backend: RecordsBackend,
) -> None:
    """The control for the tests above: the same run without interference records A's result."""
    storage = records_backend.sync()
    done = ToolLedger(storage, SID, owner="A").execute("c1", "send", ARGS, lambda: "A's result")
    assert done.ran and done.entry.owner == "A" and done.entry.result == "A's result"
