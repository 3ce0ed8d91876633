"""Each lifecycle fact is stated once and read from there (ADR-0114).

The one hand-written statements: the transition graph (``ConfirmationLifecycle``) and the
terminal set (``wire.enums._TERMINAL``, which the machine reads for its ``final`` flags). Every
other view -- claims, processing, matching final state, the approving and expiring claims, the
wire's ``is_processing``, the kernel's names, the SPIN include -- is derived, and these tests
fail when a view stops following its source or a second statement appears.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import MappingProxyType

import pytest
from statemachine.exceptions import InvalidDefinition

from akchat_fsm.core import records
from akchat_fsm.errors import IllegalTransition
from akchat_fsm.machines import confirmation as machine_module
from akchat_fsm.machines.confirmation import ConfirmationEvent, ConfirmationLifecycle
from akchat_fsm.machines.tables import (
    CONFIRMATION_FACTS,
    CONFIRMATION_TABLE,
    ConfirmationTable,
    DefinitionError,
    _check_wire_agrees,
    confirmation_facts,
)
from akchat_fsm.wire import enums
from akchat_fsm.wire.enums import ConfirmationStatus
from akchat_fsm.wire.memory import ToolCallStatus

S, E = ConfirmationStatus, ConfirmationEvent


def _without(table: ConfirmationTable, drop: object) -> ConfirmationTable:
    """``table`` minus every cell that mentions ``drop`` (as source, event or target)."""
    return {cell: t for cell, t in table.items() if drop not in (*cell[:2], t)}


def test_the_facts_are_what_the_lifecycle_says() -> None:
    # Literal on purpose: a change to the machine shows up here as a reviewed diff.
    assert CONFIRMATION_FACTS.claim_events == {E.APPROVE, E.REJECT, E.EXPIRE}
    assert CONFIRMATION_FACTS.processing == {S.APPROVING, S.REJECTING, S.EXPIRING}
    assert CONFIRMATION_FACTS.terminal == {S.APPROVED, S.REJECTED, S.EXPIRED}
    assert dict(CONFIRMATION_FACTS.matching_terminal) == {
        S.APPROVING: S.APPROVED,
        S.REJECTING: S.REJECTED,
        S.EXPIRING: S.EXPIRED,
    }
    assert (CONFIRMATION_FACTS.approving, CONFIRMATION_FACTS.expiring) == (S.APPROVING, S.EXPIRING)


def test_a_table_without_reject_derives_other_claims_processing_and_finals() -> None:
    changed = confirmation_facts(_without(_without(CONFIRMATION_TABLE, E.REJECT), S.REJECTING))
    assert changed.claim_events == {E.APPROVE, E.EXPIRE}
    assert changed.processing == {S.APPROVING, S.EXPIRING}
    # ``rejecting`` is left with no way out, so the derivation counts it final.
    assert changed.terminal == {S.APPROVED, S.REJECTED, S.EXPIRED, S.REJECTING}
    assert S.REJECTING not in changed.matching_terminal


def test_a_table_whose_completions_swap_derives_the_swapped_matching_final() -> None:
    swapped = {
        **CONFIRMATION_TABLE,
        (S.APPROVING, E.COMPLETE, False): S.REJECTED,
        (S.APPROVING, E.COMPLETE, True): S.REJECTED,
        (S.REJECTING, E.COMPLETE, False): S.APPROVED,
        (S.REJECTING, E.COMPLETE, True): S.APPROVED,
    }
    facts = confirmation_facts(swapped)
    assert facts.matching_terminal[S.APPROVING] is S.REJECTED
    assert facts.matching_terminal[S.REJECTING] is S.APPROVED
    assert facts.matching_terminal != CONFIRMATION_FACTS.matching_terminal


def test_a_table_where_approve_claims_rejecting_moves_the_upstream_approve() -> None:
    moved = {
        **_without(CONFIRMATION_TABLE, S.APPROVING),
        (S.PENDING, E.APPROVE, False): S.REJECTING,
    }
    assert confirmation_facts(moved).approving is S.REJECTING


@pytest.mark.parametrize(
    ("why", "table"),
    [
        (
            "a final state entered without a claim",
            {**CONFIRMATION_TABLE, (S.PENDING, E.COMPLETE, False): S.APPROVED},
        ),
        (
            "a processing state with two final states",
            {**CONFIRMATION_TABLE, (S.APPROVING, E.COMPLETE, True): S.EXPIRED},
        ),
        (
            "two processing states sharing one final state",
            {
                **CONFIRMATION_TABLE,
                (S.REJECTING, E.COMPLETE, False): S.APPROVED,
                (S.REJECTING, E.COMPLETE, True): S.APPROVED,
            },
        ),
        ("no expire claim", _without(CONFIRMATION_TABLE, E.EXPIRE)),
    ],
)
def test_a_table_the_protocol_cannot_run_is_refused(why: str, table: ConfirmationTable) -> None:
    with pytest.raises(DefinitionError):
        confirmation_facts(table)


def test_the_wire_names_the_sets_the_table_derives() -> None:
    assert {s for s in S if s.is_terminal} == CONFIRMATION_FACTS.terminal
    assert {s for s in S if s.is_processing} == CONFIRMATION_FACTS.processing
    finals = {S(state.value) for state in ConfirmationLifecycle.final_states}
    assert finals == CONFIRMATION_FACTS.terminal


def test_a_wire_that_disagrees_with_the_table_is_refused_at_import() -> None:
    drifted = confirmation_facts(_without(_without(CONFIRMATION_TABLE, E.REJECT), S.REJECTING))
    with pytest.raises(DefinitionError, match="wire says final"):
        _check_wire_agrees(drifted)


def _load_machine_module() -> None:
    """Execute machines/confirmation.py again, as a fresh module of the same package."""
    path = Path(machine_module.__file__ or "")
    spec = importlib.util.spec_from_file_location("akchat_fsm.machines._facts_probe", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_the_machine_module_loads_again_with_the_real_terminal_set() -> None:
    _load_machine_module()  # the probe below refuses only what it changes


@pytest.mark.parametrize(
    ("changed", "refusal"),
    [
        (enums._TERMINAL - {S.EXPIRED}, "no outgoing transition"),
        (enums._TERMINAL | {S.EXPIRING}, "final state"),
    ],
)
def test_the_machine_reads_its_final_states_from_the_wire_and_the_graph_checks_them(
    monkeypatch: pytest.MonkeyPatch, changed: frozenset[ConfirmationStatus], refusal: str
) -> None:
    monkeypatch.setattr(enums, "_TERMINAL", changed)
    with pytest.raises(InvalidDefinition, match=refusal):
        _load_machine_module()


def test_the_kernel_names_are_the_derived_facts() -> None:
    assert records.CLAIM_EVENTS is CONFIRMATION_FACTS.claim_events
    assert records.MATCHING_TERMINAL is CONFIRMATION_FACTS.matching_terminal
    assert isinstance(records.MATCHING_TERMINAL, MappingProxyType)


@pytest.mark.parametrize("status", list(S))
def test_upstream_call_and_deny_reason_follow_the_facts(status: ConfirmationStatus) -> None:
    record = records.Record("confirm-x", "pay", "app-x", 0, status)
    if not status.is_processing:
        with pytest.raises(IllegalTransition):
            records.upstream_call(record)
        return
    approves = records.upstream_call(record) is records.UpstreamAction.APPROVE
    assert approves is (status is CONFIRMATION_FACTS.approving)
    reason = records.deny_reason(record, "no")
    assert reason == (records.EXPIRED_REASON if status is CONFIRMATION_FACTS.expiring else "no")


@pytest.mark.parametrize("upstream", list(ToolCallStatus))
def test_a_proposal_is_born_pending_only_when_upstream_waits(upstream: ToolCallStatus) -> None:
    born = records.born_status(upstream)
    if upstream is ToolCallStatus.REQUIRES_CONFIRMATION:
        assert born is S.PENDING and born is S(ConfirmationLifecycle.initial_state.value)
    else:
        assert born is S.REJECTED and born.is_terminal
