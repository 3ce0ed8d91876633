"""The ledger's and the run record's decisions are lookups in their machines' tables.

Each decision is compared, over every stored state, guard value and request, with the if/elif
chain it replaced (kept here as the oracle, verbatim in meaning), so "behaviour identical" is
checked, not assumed; and each one is checked to follow its table cell.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from akchat_fsm.errors import AkchatError, AlreadyResolved, ConfigError
from akchat_fsm.integrations.ledger import (
    BodyOutcome,
    ClaimAction,
    ClaimRequest,
    ExecutionClaimLost,
    LedgerEntry,
    decide_claim,
    decide_finish,
    decide_settle,
)
from akchat_fsm.integrations.runs import (
    ContinueAction,
    PendingCall,
    RunClaimLost,
    RunInProgress,
    RunRecord,
    decide_continuation,
    decide_continue,
    decide_release_run,
    decide_settle_run,
    decide_start_run,
)
from akchat_fsm.machines.execution import ExecutionEvent, ExecutionState
from akchat_fsm.machines.run import RunEvent, RunState
from akchat_fsm.machines.tables import EXECUTION_TABLE, RUN_TABLE

X, R = ExecutionState, RunState
STORED_X = [None, X.EXECUTING, X.EXECUTED, X.RELEASED]
STORED_R = [None, R.PAUSED, R.CONTINUING, R.COMPLETED]


def _entry(state: ExecutionState | None, claim: str) -> LedgerEntry | None:
    if state is None:
        return None
    return LedgerEntry("c1", "send", "d", state, 2, claim, "o", 1, version=5)


def _outcome(fn: Any) -> Any:
    """What a decision did: its value, or the type of the error it raised."""
    try:
        return fn()
    except AkchatError as exc:
        return type(exc)


# --------------------------------------------------------------------------- the old chains


def _old_claim(stored: LedgerEntry | None, request: ClaimRequest) -> tuple[str, Any, Any, Any]:
    def claimed(attempt: int) -> LedgerEntry:
        return LedgerEntry(
            request.tool_call_id,
            request.tool,
            request.args_digest,
            X.EXECUTING,
            attempt,
            request.claim,
            request.owner,
            request.now_ms,
        )

    if stored is None:
        return ("run", None, claimed(1), None)
    if stored.state is X.EXECUTED:
        return ("replay", stored, None, None)
    if stored.state is X.EXECUTING and stored.claim == request.claim:
        return ("run", stored, None, None)
    if stored.state is X.RELEASED or request.idempotent:
        return ("run", None, claimed(stored.attempt + 1), stored.version)
    return ("unknown", stored, None, None)


def _old_finish(stored: LedgerEntry | None, claim: str) -> Any:
    if stored is None or stored.claim != claim or stored.state is X.RELEASED:
        return ExecutionClaimLost
    if stored.state is X.EXECUTED:
        return None
    return X.EXECUTED


def _old_settle(stored: LedgerEntry | None, ran: bool) -> Any:
    if stored is None:
        return ConfigError
    if stored.state is X.EXECUTED:
        return AlreadyResolved
    if not ran:
        return None if stored.state is X.RELEASED else X.RELEASED
    return X.EXECUTED


@pytest.mark.parametrize(
    ("state", "claim", "idempotent"),
    list(itertools.product(STORED_X, ("mine", "theirs"), (False, True))),
)
def test_the_claim_decision_is_the_old_chain(
    state: ExecutionState | None, claim: str, idempotent: bool
) -> None:
    stored = _entry(state, claim)
    request = ClaimRequest("c1", "send", "d", "me", "mine", 10, idempotent)
    decision = decide_claim(stored, request)
    assert isinstance(decision.action, ClaimAction)
    got = (str(decision.action), decision.entry, decision.write, decision.expected)
    assert got == _old_claim(stored, request)
    # ... and it follows the table: a run moves the entry to the claim cell's target.
    cell = EXECUTION_TABLE.get(
        (
            state or X.ABSENT,
            ExecutionEvent.CLAIM,
            (claim == "mine" and state is not None, idempotent),
        )
    )
    assert (decision.action is ClaimAction.RUN) is (cell is not None)


@pytest.mark.parametrize(
    ("state", "claim", "raised"),
    list(itertools.product(STORED_X, ("mine", "theirs"), (False, True))),
)
def test_the_finish_decision_is_the_old_chain(
    state: ExecutionState | None, claim: str, raised: bool
) -> None:
    stored = _entry(state, claim)
    outcome = BodyOutcome(error=ValueError("boom")) if raised else BodyOutcome(value=1)
    got = _outcome(lambda: decide_finish(stored, "mine", outcome, {"r": 1}, 99))
    expected = _old_finish(stored, "mine")
    if isinstance(got, LedgerEntry):
        assert stored is not None and expected is X.EXECUTED
        assert got == replace(
            stored,
            state=X.EXECUTED,
            finished_ms=99,
            outcome="raised" if raised else "returned",
            result=None if raised else {"r": 1},
            error="ValueError: boom" if raised else None,
            error_type="ValueError" if raised else None,
        )
    else:
        assert got == expected


@pytest.mark.parametrize(("state", "ran"), list(itertools.product(STORED_X, (False, True))))
def test_the_settle_decision_is_the_old_chain(state: ExecutionState | None, ran: bool) -> None:
    stored = _entry(state, "theirs")
    got = _outcome(lambda: decide_settle(stored, "c1", ran=ran, result=7, now_ms=99, operator="op"))
    expected = _old_settle(stored, ran)
    if isinstance(got, LedgerEntry):
        assert stored is not None
        assert got.state is expected and (got.owner, got.finished_ms) == ("op", 99)
        assert (got.outcome, got.result) == (("settled", 7) if ran else (None, None))
    else:
        assert got == expected


# --------------------------------------------------------------------------- the run record

CALLS = (PendingCall("a1", "t", {}), PendingCall("x1", "t", {}, kind="external"))


def _run(state: RunState | None, claim: str | None) -> RunRecord | None:
    if state is None:
        return None
    return RunRecord("r1", "rt", state, "snap", CALLS, 2, 3, claim, "o", {"x1": 1}, version=4)


def _old_continue(run: RunRecord | None, claim: str, recover: bool) -> Any:
    if run is None:
        return ConfigError
    if run.state is R.COMPLETED:
        return ("completed", run)
    if run.state is R.CONTINUING:
        if run.claim == claim:
            return ("hold", run)
        if not recover:
            return RunInProgress
    write = replace(
        run,
        state=R.CONTINUING,
        attempt=run.attempt + 1,
        claim=claim,
        owner="me",
        external={"x1": 1},
        updated_ms=10,
    )
    return ("claim", write)


@pytest.mark.parametrize(
    ("state", "claim", "recover"),
    list(itertools.product(STORED_R, ("mine", "theirs", None), (False, True))),
)
def test_the_continue_decision_is_the_old_chain(
    state: RunState | None, claim: str | None, recover: bool
) -> None:
    run = _run(state, claim)

    def decide() -> Any:
        action, record = decide_continue(
            run, run_id="r1", claim="mine", owner="me", now_ms=10, external={}, recover=recover
        )
        assert isinstance(action, ContinueAction)
        return (str(action), record)

    assert _outcome(decide) == _old_continue(run, "mine", recover)


def test_a_continuation_held_elsewhere_is_a_decision_not_an_error() -> None:
    run = _run(R.CONTINUING, "theirs")
    decision = decide_continuation(
        run, run_id="r1", claim="mine", owner="me", now_ms=1, external={}, recover=False
    )
    assert (decision.action, decision.record) == (ContinueAction.IN_PROGRESS, run)


def test_a_claim_decided_before_readiness_leaves_an_unanswered_external_out() -> None:
    run = replace(_run(R.PAUSED, None), external={})  # type: ignore[arg-type]
    decision = decide_continuation(
        run, run_id="r1", claim="mine", owner="me", now_ms=1, external={}, recover=False
    )
    assert decision.action is ContinueAction.CLAIM and dict(decision.record.external) == {}


@pytest.mark.parametrize(
    ("state", "claim", "paused"),
    list(itertools.product(STORED_R, ("mine", "theirs", None), (False, True))),
)
def test_the_settle_run_decision_is_the_old_chain(
    state: RunState | None, claim: str | None, paused: bool
) -> None:
    run = _run(state, claim)
    calls = CALLS if paused else None
    got = _outcome(
        lambda: decide_settle_run(run, "mine", snapshot="s2", calls=calls, output=1, now_ms=9)
    )
    if run is None or run.state is not R.CONTINUING or run.claim != "mine":
        assert got is RunClaimLost
        return
    assert got.state is (R.PAUSED if paused else R.COMPLETED)
    assert (got.batch, got.claim) == ((3, None) if paused else (2, "mine"))
    event = RunEvent.PAUSE if paused else RunEvent.COMPLETE
    assert RUN_TABLE[(run.state, event, (True, False))] is got.state


def test_release_and_start_follow_the_table() -> None:
    run = _run(R.CONTINUING, "mine")
    assert run is not None
    released = decide_release_run(run, "mine", now_ms=5)
    assert (released.state, released.claim, released.updated_ms) == (R.PAUSED, None, 5)
    with pytest.raises(RunClaimLost):
        decide_release_run(run, "theirs", now_ms=5)
    started = decide_start_run("r2", "rt", "snap", CALLS, 3)
    assert (started.state, started.updated_ms, started.claim) == (R.PAUSED, 3, None)


def test_a_stored_absent_state_is_refused() -> None:
    with pytest.raises(ConfigError):
        LedgerEntry.from_stored(
            (1, _entry(X.EXECUTING, "c").to_json().replace("executing", "absent"))  # type: ignore[union-attr]
        )
    with pytest.raises(ConfigError):
        RunRecord.from_stored((1, _run(R.PAUSED, None).to_json().replace('"paused"', '"absent"')))  # type: ignore[union-attr]
