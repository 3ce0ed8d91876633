"""The suites bite: deliberately broken coordinators must be caught by the same machine.

Each broken plan is built from the library's own core commands and shell pieces, in the wrong
order, so the only difference from the real coordinator is the ordering the protocol forbids.

The unknown-outcome mutants (a resume without its fence, a write nonce dropped from
``updatedAt``, an unknown outcome settled by cursor alone) are each killed by a unit test; here
they must also fail the stateful suite with lost and late-landing writes
(``test_late_writes.py``), a second layer that does not know how they are built.

These runs switch the history checker off, so the suites' invariants bite on their own. The
last section is the checker's own layer (code -> model, ``_history.py``, ADR-0056): code-only
mutants, each of which the checker must refuse, with its message, before any invariant fires.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from akchat_fsm import core
from akchat_fsm.core.effects import SaveSnapshot
from akchat_fsm.integrations import ledger
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import _confirm, _state
from akchat_fsm.session._confirm import ReconcileOutcome, _complete
from akchat_fsm.session._state import SessionHolder, apply, decode_stored
from akchat_fsm.session.effects import Load, Plan
from akchat_fsm.session.ports import UpstreamFailed
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.session import ConfirmationBinding

from ._history import Disallowed
from ._machine import ResolutionProtocol
from .test_late_writes import LateWritesProtocol
from .test_ledger_history import run_ledger


def _upstream(holder: SessionHolder, token: str, effect: Any) -> Plan[None]:
    try:
        yield effect
    except Exception as exc:
        raise UpstreamFailed(
            "upstream failed", record=core.find_binding(holder.core, token)
        ) from exc


def delegate_before_claim(
    holder: SessionHolder, token: str, intent: ConfirmationEvent
) -> Plan[Any]:
    """Calls upstream first (decided on a possibly stale snapshot), then claims and completes."""
    step = core.claim_resolution(holder.core, token, intent, holder.clock(), reason="no")
    yield from _upstream(holder, token, step.then)  # before any CAS: two clients can both get here
    yield from apply(
        holder,
        lambda s, now, nonce: core.claim_resolution(
            s, token, intent, now, reason="no", nonce=nonce
        ),
        1,
    )
    yield from apply(holder, _complete(token), 16)


def terminal_before_upstream(
    holder: SessionHolder, token: str, intent: ConfirmationEvent
) -> Plan[Any]:
    """Claims, records the final status, and only then calls upstream."""
    step = yield from apply(
        holder,
        lambda s, now, nonce: core.claim_resolution(
            s, token, intent, now, reason="no", nonce=nonce
        ),
        4,
    )
    yield from apply(holder, _complete(token), 16)
    yield from _upstream(holder, token, step.then)  # a crash or failure here: a false completion


def _run_broken(plan: Any) -> None:
    # The suite's own invariants, without the history checker (its own layer, below).
    machine = type(
        "Broken",
        (ResolutionProtocol,),
        {
            "make_storage": staticmethod(MemoryStorage),
            "resolve_plan": staticmethod(plan),
            "check_history": False,
        },
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            settings(),
            max_examples=200,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            # Finding is the point here; shrinking the counterexample only costs time.
            phases=[Phase.explicit, Phase.generate],
        ),
    )


@pytest.mark.parametrize(
    ("plan", "symptom"),
    [
        (delegate_before_claim, "upstream replayed"),
        (terminal_before_upstream, "but upstream did"),
    ],
    ids=["delegate-before-claim", "terminal-before-upstream"],
)
def test_broken_coordinator_is_caught(plan: Any, symptom: str) -> None:
    with pytest.raises((AssertionError, Flaky)) as info:
        _run_broken(plan)
    assert symptom in str(info.value)


# --------------------------------------------------------------------------- unknown outcomes
_real_settle = core.settle_uncertain
_real_reconcile_one = _confirm._reconcile_one


def resume_without_fence(
    holder: SessionHolder,
    binding: ConfirmationBinding,
    status: core.UpstreamToolStatus,
    release_untouched: bool,
) -> Plan[ReconcileOutcome]:
    """Reconcile, but a resume re-issues the claimed call without first re-saving the claim.

    A ``Step`` cannot say "call upstream" without its save (ADR-0112), so this mutant lives in
    the shell: on a resume it skips the step's fence save (the state as loaded: no save moved
    the cursor) and goes straight to the upstream call and the completion.
    """
    current = core.find_binding(holder.core, binding.token)
    if (
        holder.needs_reload
        or current is None
        or not current.status.is_processing
        or core.records.reconcile_decision(current.status, status, release_untouched)
        is not core.Reconciliation.RESUME
    ):
        return (yield from _real_reconcile_one(holder, binding, status, release_untouched))
    step = core.reconcile(
        holder.core,
        binding.token,
        status,
        holder.clock(),
        release_untouched=release_untouched,
        reason=_confirm.RECONCILED_REJECT_REASON,
    )
    assert step.then is not None
    done = yield from _confirm._call_upstream(holder, binding.token, step.then)
    return ReconcileOutcome(binding.token, binding.tool_call_id, binding.status, "resumed", done)


def no_write_nonce(updated_at: str, nonce: int) -> str:
    """Every write keeps the core's millisecond ``updatedAt``: same-ms writes are identical."""
    return updated_at


def settled_by_cursor(
    state: core.SessionState, attempted: SaveSnapshot, stored: Any
) -> tuple[core.SessionState, bool]:
    """An unknown save counts as applied when the stored cursor is the one it wrote."""
    settled, _ = _real_settle(state, attempted, stored)
    return settled, stored is not None and stored.cursor == attempted.snapshot.cursor


MUTANTS: dict[str, tuple[Any, str, Any]] = {
    "resume-without-fence": (_confirm, "_reconcile_one", resume_without_fence),
    "nonce-dropped": (core.state, "with_write_nonce", no_write_nonce),
    "settled-by-cursor": (core, "settle_uncertain", settled_by_cursor),
}


def _run_late_writes(check_history: bool = False) -> None:
    machine = type(
        "Mutated",
        (LateWritesProtocol,),
        {"make_storage": staticmethod(MemoryStorage), "check_history": check_history},
    )
    run_state_machine_as_test(
        machine,
        settings=settings(
            settings(),
            max_examples=300,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
        ),
    )


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_unknown_outcome_mutant_fails_the_late_writes_suite(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, name, broken = MUTANTS[mutant]
    monkeypatch.setattr(module, name, broken)
    with pytest.raises((AssertionError, Flaky)) as info:
        _run_late_writes()
    print(f"{mutant}: {str(info.value).splitlines()[0]}")


def test_the_late_writes_suite_passes_the_real_coordinator_at_the_same_settings() -> None:
    # The control: the failures above come from the mutants, not from an unfair world; with
    # the history checker on, it also controls the conformance mutants below.
    _run_late_writes(check_history=True)


# --------------------------------------------------------------------------- intent leases
_real_read_intent = _confirm._read_intent


def lease_ignored(text: object) -> Any:
    """Every intent reads as stale: reconcile settles it beside a live proposer (ADR-0093's
    reconcile, before ADR-0133), deleting one whose call memory does not know yet."""
    intent = _real_read_intent(text)
    return None if intent is None else replace(intent, lease_ends_at=0)


def test_a_reconcile_ignoring_proposer_leases_fails_the_intents_suite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_confirm, "_read_intent", lease_ignored)
    machine = type(
        "LeaseIgnored",
        (ResolutionProtocol,),
        {"make_storage": staticmethod(MemoryStorage), "check_history": False, "intents": True},
    )
    with pytest.raises((AssertionError, Flaky)) as info:
        run_state_machine_as_test(
            machine,
            settings=settings(
                settings(),
                max_examples=200,
                database=None,
                print_blob=False,
                report_multiple_bugs=False,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
            ),
        )
    symptoms = ("neither binding nor intent", "is pending but upstream did", "upstream replayed")
    assert any(symptom in str(info.value) for symptom in symptoms), info.value


# --------------------------------------------------------------------------- code -> model
# Code-only mutants: the model stays correct, the library is broken. Each must be refused by the
# history checker (``_history.py``) as its own layer: the suite runs with its invariants on, and
# the failure must be the checker's, at the step the model does not allow.
_real_claim = core.claim_resolution


def rebase_without_reload(holder: SessionHolder) -> Plan[None]:
    """After a conflict the session does not reload: it takes the stored cursor and keeps its
    own (stale) envelope, so its next decision is made on records another client changed."""
    raw = yield Load(holder.session_id)
    stored = decode_stored(raw, holder.definition, holder.session_id)
    if stored is None:
        holder.adopt_stored(None)
        return
    holder.adopt_stored((holder.snapshot.model_copy(update={"cursor": stored[0].cursor}), None))


def _as_status(state: core.SessionState, token: str, status: Any) -> core.SessionState:
    bindings = tuple(
        b.model_copy(update={"status": status}) if b.token == token else b
        for b in state.snapshot.confirmations
    )
    return replace(state, snapshot=state.snapshot.model_copy(update={"confirmations": bindings}))


def final_over_final(
    state: core.SessionState, token: str, event: ConfirmationEvent, now_ms: int, **options: Any
) -> core.Step:
    """A repeat resolution of a final record saves its own verdict's final status over it."""
    binding = core.find_binding(state, token)
    if binding is None or not binding.status.is_terminal:
        return _real_claim(state, token, event, now_ms, **options)
    expired = core.records.is_expired(binding.expires_at, now_ms)
    claimed = core.records.confirmation_step(ConfirmationStatus.PENDING, event, expired)
    reopened = _as_status(state, token, claimed)
    return core.complete_resolution(reopened, token, now_ms, nonce=options.get("nonce"))


def loser_completes(
    state: core.SessionState, token: str, event: ConfirmationEvent, now_ms: int, **options: Any
) -> core.Step:
    """A claim that finds another client's claim in progress completes it itself."""
    binding = core.find_binding(state, token)
    if binding is not None and binding.status.is_processing:
        return core.complete_resolution(state, token, now_ms, nonce=options.get("nonce"))
    return _real_claim(state, token, event, now_ms, **options)


def never_expired(expires_at: int, now_ms: int) -> bool:
    """Expiry is never read: an approve or reject after ``expiresAt`` claims as before it."""
    return False


def never_busy(ledger: Any, now_ms: int) -> bool:
    """A turn claim never sees a live lease: it takes over a lease that has not expired."""
    return False


#: name -> (module, attribute, mutant, the rule the checker must name)
CONFORMANCE_MUTANTS: dict[str, tuple[Any, str, Any, str]] = {
    "resume-without-fence": (_confirm, "_reconcile_one", resume_without_fence, "fence:"),
    "no-reload-after-conflict": (_state, "reload", rebase_without_reload, "table:"),
    "final-over-final": (core, "claim_resolution", final_over_final, "table:"),
    "non-owner-completes": (
        core,
        "claim_resolution",
        loser_completes,
        "completion: only the claimant",
    ),
    "expiry-ignored": (core.records, "is_expired", never_expired, "table:"),
    "live-lease-taken-over": (core.lease, "_busy", never_busy, "lease:"),
    # A resumed rejection goes upstream without its reason (the reconcile's reason is dropped).
    "reason-dropped-on-resume": (_confirm, "RECONCILED_REJECT_REASON", None, "reason:"),
}


def _run_checked() -> None:
    machine = type("Checked", (ResolutionProtocol,), {"make_storage": staticmethod(MemoryStorage)})
    run_state_machine_as_test(
        machine,
        settings=settings(
            settings(),
            max_examples=400,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
        ),
    )


@pytest.mark.parametrize("mutant", sorted(CONFORMANCE_MUTANTS))
def test_code_only_mutant_is_caught_by_the_history_checker(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, name, broken, rule = CONFORMANCE_MUTANTS[mutant]
    monkeypatch.setattr(module, name, broken)
    with pytest.raises(Disallowed) as info:
        _run_checked()
    message = str(info.value)
    print(f"{mutant}:\n{message}")
    assert f"rule broken: {rule}" in message, message
    # Hypothesis' reproducer: the program that replays the failing history.
    notes = "\n".join(getattr(info.value, "__notes__", ()))
    assert "state = Checked()" in notes and "state.advance(" in notes, notes


# --------------------------------------------------------------------------- the ledger
_real_decide_claim = ledger.decide_claim
_real_decide_finish = ledger.decide_finish


def body_without_claim(
    stored: ledger.LedgerEntry | None, request: ledger.ClaimRequest
) -> ledger.ClaimDecision:
    """A first execution runs its body without saving its claim (it only looks for a result)."""
    decision = _real_decide_claim(stored, request)
    if stored is None and decision.write is not None:
        return ledger.ClaimDecision(ledger.ClaimAction.RUN, entry=None)
    return decision


def rerun_unknown(
    stored: ledger.LedgerEntry | None, request: ledger.ClaimRequest
) -> ledger.ClaimDecision:
    """An execution whose outcome is unknown is re-claimed and run again, idempotent or not."""
    return _real_decide_claim(stored, replace(request, idempotent=True))


def finish_without_claim(
    stored: ledger.LedgerEntry | None, claim: str, outcome: Any, result: Any, now_ms: int
) -> ledger.LedgerEntry | None:
    """A finish records the outcome over whatever claim is stored now, not only its own."""
    mine = claim if stored is None else stored.claim
    return _real_decide_finish(stored, mine, outcome, result, now_ms)


# ADR-0136 in the ledger history checker (the model's -DSETTLE part): code-only mutants of the
# operator's verdict, each refused by ``_history.LedgerChecker`` in the ledger suite.
def claim_drops_verdict(
    stored: ledger.LedgerEntry | None, request: ledger.ClaimRequest
) -> ledger.ClaimDecision:
    """A re-claim of a released call does not carry the verdict nonce (the model's
    ``BUG_CLAIM_DROPS_VERDICT``): an applied release then reads as not applied."""
    decision = _real_decide_claim(stored, request)
    if decision.write is not None and decision.write.verdict is not None:
        return replace(decision, write=replace(decision.write, verdict=None))
    return decision


def settle_without_entry(*args: Any, **kwargs: Any) -> Any:
    """The settle's audit entry is never written (its verdict names nobody)."""
    return None
    yield  # a plan that writes nothing


LEDGER_MUTANTS: dict[str, tuple[str, Any, str]] = {
    "body-without-claim": ("decide_claim", body_without_claim, "claim-first:"),
    "rerun-unknown": ("decide_claim", rerun_unknown, "table:"),
    "finish-without-claim": ("decide_finish", finish_without_claim, "table:"),
    "claim-drops-verdict": ("decide_claim", claim_drops_verdict, "verdict-kept:"),
    "settle-without-entry": ("_record_settle", settle_without_entry, "settle-entry-first:"),
}


@pytest.mark.parametrize("mutant", sorted(LEDGER_MUTANTS))
def test_ledger_mutant_is_caught_by_the_history_checker(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name, broken, rule = LEDGER_MUTANTS[mutant]
    monkeypatch.setattr(ledger, name, broken)
    with pytest.raises(Disallowed) as info:
        run_ledger(
            max_examples=100,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
        )
    message = str(info.value)
    print(f"{mutant}:\n{message}")
    assert f"rule broken: {rule}" in message, message
    notes = "\n".join(getattr(info.value, "__notes__", ()))
    assert "state = Ledger()" in notes, notes


# --------------------------------------------------------------------------- bridge runs
# Code-only mutants of the bridges' run protocol, each refused by the bridge history checker
# (``_history.BridgeChecker``) inside the pydantic-ai bridge suite, with its invariants on.
def no_lease(run: Any, now_ms: int) -> bool:
    """The sweep's recover guard ignores the lease: a continuation whose lease still holds is
    taken over (its owner may be alive and running a body)."""
    return True


def no_decision_records(ctx: Any, calls: Any) -> Any:
    """Readiness never reads the ``decided:`` records: a call retention pruned is proposed
    again (the reviewer asked twice)."""
    return {}, {}  # no statuses, no edits
    yield  # a plan that reads nothing


async def body_before_claim(self: Any, ctx: Any, **kw: Any) -> Any:
    """The tool hook runs the body first and only then records it in the ledger (the model's
    ``BUG_NO_LEDGER_CLAIM``; the bridge suite's own seeded bug)."""
    value = await kw["handler"](kw["args"])
    call = kw["call"]
    await self.guard.execute(call.tool_call_id, call.tool_name, call.args_as_dict(), lambda: value)
    return value


def no_denial_records(ctx: Any, run: Any, bindings: Any, recorded: Any) -> Any:
    """A resume never reads the denial records: the model reads the generic sentence instead of
    the reviewer's reason."""
    return {}
    yield  # a plan that reads nothing


#: name -> (module or class, attribute, mutant, the rule the checker names)
BRIDGE_MUTANTS: dict[str, tuple[str, str, Any, str]] = {
    "body-before-ledger-claim": (
        "_LedgerCapability",
        "wrap_tool_execute",
        body_before_claim,
        "claim-first: a body runs only under its own stored claim",
    ),
    "sweep-takes-live-lease": ("_bridge_runs", "lease_expired", no_lease, "recover:"),
    "decided-call-proposed-again": (
        "_bridge",
        "_recorded_decisions",
        no_decision_records,
        "propose: a decided call is never proposed again",
    ),
    "reason-dropped-on-resume": ("_bridge", "_denials", no_denial_records, "reason:"),
}


@pytest.mark.parametrize("mutant", sorted(BRIDGE_MUTANTS))
def test_bridge_mutant_is_caught_by_the_history_checker(
    mutant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from akchat_fsm.integrations import _bridge, _bridge_runs, pydantic_ai

    from .test_bridge_protocol import run_bridge_protocol

    where, name, broken, rule = BRIDGE_MUTANTS[mutant]
    targets = {
        "_bridge": _bridge,
        "_bridge_runs": _bridge_runs,
        "_LedgerCapability": pydantic_ai._LedgerCapability,
    }
    monkeypatch.setattr(targets[where], name, broken)
    with pytest.raises(Disallowed) as info:
        run_bridge_protocol(
            MemoryStorage,
            stateful_step_count=80,
            # Stops at the first example that breaks a rule; a bound, not a cost. Reads added
            # to a continuation (edits: the deciding entry of each approved call) shift which
            # generated program first takes over a live lease: 60 no longer reached it.
            max_examples=150,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
        )
    message = str(info.value)
    print(f"{mutant}:\n{message}")
    assert f"rule broken: {rule}" in message, message
    # Hypothesis' reproducer (the pinned program, run after the generated ones, has none).
    notes = "\n".join(getattr(info.value, "__notes__", ()))
    assert "state = Protocol()" in notes and "state.advance(" in notes, notes


# --------------------------------------------------------------------------- the LangGraph bridge
# Broken LangGraph boundaries and bridges run through the LangGraph machine
# (``test_langgraph_bridge.py``, SQLite with ``SqliteSaver``): its invariants must catch each on
# their own, and the history checker must refuse the body run without its claim.
def boundary_without_ledger(self: Any, request: Any, handler: Any) -> Any:
    """The boundary runs every body straight through: no ledger claim (nor the gate)."""
    return handler(request)


def reasons_dropped(real: Any) -> Any:
    """Continuations send every rejection without its message: the model never reads why."""

    def resume_command(run: Any, decisions: Any) -> Any:
        return real(run, [d if d.approved else replace(d, message="") for d in decisions])

    return resume_command


#: name -> (attribute of the langgraph module, the mutant, what the invariants' failure says)
LANGGRAPH_MUTANTS: dict[str, tuple[str, Any, str]] = {
    "boundary-without-ledger": ("wrap_tool_call", boundary_without_ledger, "': 2"),
    "reason-dropped": ("resume_command", reasons_dropped, "User rejected the tool call for"),
}


def _run_langgraph(tmp_path: Any, check_history: bool) -> None:
    from akchat_fsm.storage.sqlite import SQLiteStorage

    from .test_langgraph_bridge import run_protocol

    store = SQLiteStorage(tmp_path / "sessions.db")
    try:
        run_protocol(
            store,
            f"sqlite:{tmp_path / 'checkpoints.db'}",
            cls={"check_history": check_history},
            max_examples=20,
            database=None,
            print_blob=False,
            report_multiple_bugs=False,
            derandomize=True,
            phases=[Phase.explicit, Phase.generate],
        )
    finally:
        store.close()


@pytest.mark.parametrize("mutant", sorted(LANGGRAPH_MUTANTS))
def test_langgraph_mutant_is_caught_by_the_invariants(
    mutant: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from akchat_fsm.integrations import langgraph

    name, broken, symptom = LANGGRAPH_MUTANTS[mutant]
    if name == "wrap_tool_call":
        monkeypatch.setattr(langgraph.ToolBoundaryMiddleware, name, broken)
    else:
        monkeypatch.setattr(langgraph, name, broken(getattr(langgraph, name)))
    with pytest.raises((AssertionError, Flaky)) as info:
        _run_langgraph(tmp_path, check_history=False)
    message = str(info.value)
    print(f"{mutant}: {message[:300]}")
    assert not isinstance(info.value, Disallowed) and symptom in message, message


def test_langgraph_body_without_its_claim_is_refused_by_the_history_checker(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from akchat_fsm.integrations import langgraph

    monkeypatch.setattr(langgraph.ToolBoundaryMiddleware, "wrap_tool_call", boundary_without_ledger)
    with pytest.raises(Disallowed) as info:
        _run_langgraph(tmp_path, check_history=True)
    message = str(info.value)
    assert "rule broken: claim-first: a body runs only under its own stored claim" in message


# --------------------------------------------------------------------------- reviewer edits
# ADR-0135: the execution guard refuses an edited call that reaches its body with arguments
# other than the reviewer's. The pydantic-ai machine's runtime may hand the bodies the model's
# arguments (its ``args:model`` fault); with the guard's check gone, its invariants must catch
# the body that ran with them.
def test_a_guard_ignoring_the_edit_fails_the_bridge_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated programs (a failure stops the run; no shrinking) must catch it; the
    pinned program, run after them, drives the fault on an edited call every time. About
    30 s: the first generated program whose runtime drops an edit on a resume that runs the
    edited call comes after about a hundred examples (``max_examples`` is only a bound)."""
    from akchat_fsm.integrations._bridge_ports import ExecutionGuard

    from .test_bridge_protocol import run_bridge_protocol

    real = ExecutionGuard.execute

    async def ignores_edits(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.edited = {}  # the edited digests never checked
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(ExecutionGuard, "execute", ignores_edits)
    with pytest.raises((AssertionError, Flaky, BaseExceptionGroup)) as caught:
        run_bridge_protocol(
            MemoryStorage,
            False,  # the invariants on their own
            stateful_step_count=80,
            # stops at the first example that fails: a bound, not a cost
            max_examples=400,
            database=None,
            derandomize=True,
            phases=(Phase.explicit, Phase.generate),
        )
    errors: list[BaseException] = [caught.value]
    every = [caught.value]
    while any(isinstance(e, BaseExceptionGroup) for e in errors):
        errors = [x for e in errors for x in getattr(e, "exceptions", [e])]
        every += errors
    wrong = re.compile(r"ran with n=.*an edit|binds \S+ to other arguments .*\(an edit")
    assert any(wrong.search(str(e)) for e in errors), errors
    notes = "\n".join(note for e in every for note in getattr(e, "__notes__", []))
    assert "state = Protocol()" in notes, "only the pinned program caught it: " + str(errors)
