"""The suites bite: deliberately broken coordinators must be caught by the same machine.

Each broken plan is built from the library's own core commands and shell pieces, in the wrong
order, so the only difference from the real coordinator is the ordering the protocol forbids.

The unknown-outcome mutants (a resume without its fence, a write nonce dropped from
``updatedAt``, an unknown outcome settled by cursor alone) are each killed by a unit test; here
they must also fail the stateful suite with lost and late-landing writes
(``test_late_writes.py``), a second layer that does not know how they are built.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from akchat_fsm import core
from akchat_fsm.core.effects import SaveSnapshot
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import _confirm
from akchat_fsm.session._confirm import ReconcileOutcome, _complete
from akchat_fsm.session._state import SessionHolder, apply
from akchat_fsm.session.effects import Plan
from akchat_fsm.session.ports import UpstreamFailed
from akchat_fsm.storage.memory import MemoryStorage
from akchat_fsm.wire.session import ConfirmationBinding

from ._machine import ResolutionProtocol
from .test_late_writes import LateWritesProtocol


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
    machine = type(
        "Broken",
        (ResolutionProtocol,),
        {"make_storage": staticmethod(MemoryStorage), "resolve_plan": staticmethod(plan)},
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


def _run_late_writes() -> None:
    machine = type("Mutated", (LateWritesProtocol,), {"make_storage": staticmethod(MemoryStorage)})
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
    # The control: the failures above come from the mutants, not from an unfair world.
    _run_late_writes()
