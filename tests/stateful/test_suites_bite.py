"""The suites bite: deliberately broken coordinators must be caught by the same machine.

Each broken plan is built from the library's own core commands and shell pieces, in the wrong
order, so the only difference from the real coordinator is the ordering the protocol forbids.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from akchat_fsm import core
from akchat_fsm.core.effects import CallApprove, CallDeny
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session._confirm import _complete
from akchat_fsm.session._state import SessionHolder, apply
from akchat_fsm.session.effects import Plan
from akchat_fsm.session.ports import UpstreamFailed
from akchat_fsm.storage.memory import MemoryStorage

from ._machine import ResolutionProtocol


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
    effect = step.effects[-1]
    assert isinstance(effect, CallApprove | CallDeny)
    yield from _upstream(holder, token, effect)  # before any CAS: two clients can both get here
    yield from apply(
        holder,
        lambda s, now: core.claim_resolution(s, token, intent, now, reason="no"),
        1,
    )
    yield from apply(holder, _complete(token), 16)


def terminal_before_upstream(
    holder: SessionHolder, token: str, intent: ConfirmationEvent
) -> Plan[Any]:
    """Claims, records the final status, and only then calls upstream."""
    step = yield from apply(
        holder,
        lambda s, now: core.claim_resolution(s, token, intent, now, reason="no"),
        4,
    )
    effect = step.effects[-1]
    yield from apply(holder, _complete(token), 16)
    yield from _upstream(holder, token, effect)  # a crash or failure here: a false completion


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
