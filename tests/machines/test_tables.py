"""The machines, their derived tables, and the bridge between the two."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st
from statemachine import State, StateMachine
from statemachine.exceptions import TransitionNotAllowed

from akchat_fsm.errors import IllegalTransition
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.machines.cursor import CursorEvent, CursorPhase
from akchat_fsm.machines.execution import ExecutionEvent, ExecutionState
from akchat_fsm.machines.lease import TurnLeaseEvent, TurnLeaseState
from akchat_fsm.machines.run import RunEvent, RunState
from akchat_fsm.machines.tables import (
    CONFIRMATION_TABLE,
    CURSOR_TABLE,
    EXECUTION_TABLE,
    LEASE_TABLE,
    MACHINES,
    RUN_TABLE,
    DefinitionError,
    derive_guarded_table,
    derive_table,
    executed_table,
    step,
)
from akchat_fsm.wire.enums import ConfirmationStatus

C, CE = ConfirmationStatus, ConfirmationEvent
P, PE = CursorPhase, CursorEvent
L, LE = TurnLeaseState, TurnLeaseEvent
X, XE = ExecutionState, ExecutionEvent
R, RE = RunState, RunEvent


def both(state: Any, event: Any, target: Any) -> dict[tuple[Any, Any, bool], Any]:
    return {(state, event, False): target, (state, event, True): target}


# The literal tables: a change to a machine shows up here as a diff to review.
EXPECTED_CONFIRMATION = {
    (C.PENDING, CE.APPROVE, False): C.APPROVING,
    (C.PENDING, CE.APPROVE, True): C.EXPIRING,
    (C.PENDING, CE.REJECT, False): C.REJECTING,
    (C.PENDING, CE.REJECT, True): C.EXPIRING,
    (C.PENDING, CE.EXPIRE, True): C.EXPIRING,
    **both(C.APPROVING, CE.COMPLETE, C.APPROVED),
    **both(C.REJECTING, CE.COMPLETE, C.REJECTED),
    **both(C.EXPIRING, CE.COMPLETE, C.EXPIRED),
    **both(C.APPROVING, CE.RELEASE, C.PENDING),
    **both(C.REJECTING, CE.RELEASE, C.PENDING),
    **both(C.EXPIRING, CE.RELEASE, C.PENDING),
}
EXPECTED_CURSOR = {
    **both(P.NEW, PE.SAVE, P.SAVING),
    **both(P.IN_SYNC, PE.SAVE, P.SAVING),
    **both(P.SAVING, PE.SAVED, P.IN_SYNC),
    **both(P.SAVING, PE.CONFLICT, P.CONFLICTED),
    **both(P.SAVING, PE.UNKNOWN, P.UNCERTAIN),
    (P.NEW, PE.RELOAD, False): P.NEW,
    (P.NEW, PE.RELOAD, True): P.IN_SYNC,
    (P.IN_SYNC, PE.RELOAD, False): P.NEW,
    (P.IN_SYNC, PE.RELOAD, True): P.IN_SYNC,
    (P.CONFLICTED, PE.RELOAD, False): P.NEW,
    (P.CONFLICTED, PE.RELOAD, True): P.IN_SYNC,
    (P.UNCERTAIN, PE.RELOAD, False): P.NEW,
    (P.UNCERTAIN, PE.RELOAD, True): P.IN_SYNC,
}
EXPECTED_LEASE = {
    (L.FREE, LE.CLAIM, False): L.HELD,
    (L.HELD, LE.CLAIM, False): L.HELD,
    (L.HELD, LE.SUPERSEDE, False): L.FREE,
    **both(L.HELD, LE.RELEASE, L.RELEASED),
}


def every(state: Any, event: Any, target: Any) -> dict[tuple[Any, Any, tuple[bool, bool]], Any]:
    """The cell under every value of two guards."""
    return {(state, event, (a, b)): target for a in (False, True) for b in (False, True)}


def ours(state: Any, event: Any, target: Any) -> dict[tuple[Any, Any, tuple[bool, bool]], Any]:
    """The cell when the first guard (``ours``) holds, whatever the second."""
    return {(state, event, (True, b)): target for b in (False, True)}


# Guards (ours, idempotent). An executing entry claimed by another: only an idempotent re-claim
# moves; (executing, claim, (False, False)) is absent: the outcome is unknown, nothing runs.
EXPECTED_EXECUTION = {
    **every(X.ABSENT, XE.CLAIM, X.EXECUTING),
    **ours(X.EXECUTING, XE.CLAIM, X.EXECUTING),
    (X.EXECUTING, XE.CLAIM, (False, True)): X.EXECUTING,
    **every(X.RELEASED, XE.CLAIM, X.EXECUTING),
    **ours(X.EXECUTING, XE.FINISH, X.EXECUTED),
    **every(X.EXECUTING, XE.SETTLE_RAN, X.EXECUTED),
    **every(X.RELEASED, XE.SETTLE_RAN, X.EXECUTED),
    **every(X.EXECUTING, XE.RELEASE, X.RELEASED),
    **every(X.RELEASED, XE.RELEASE, X.RELEASED),
}
# Guards (ours, recover).
EXPECTED_RUN = {
    **every(R.ABSENT, RE.START, R.PAUSED),
    **every(R.PAUSED, RE.CLAIM, R.CONTINUING),
    **ours(R.CONTINUING, RE.CLAIM, R.CONTINUING),
    (R.CONTINUING, RE.CLAIM, (False, True)): R.CONTINUING,
    **ours(R.CONTINUING, RE.PAUSE, R.PAUSED),
    **ours(R.CONTINUING, RE.COMPLETE, R.COMPLETED),
    **ours(R.CONTINUING, RE.RELEASE, R.PAUSED),
}


def test_execution_table_is_pinned() -> None:
    assert dict(EXECUTION_TABLE) == EXPECTED_EXECUTION


def test_run_table_is_pinned() -> None:
    assert dict(RUN_TABLE) == EXPECTED_RUN


def test_confirmation_table_is_pinned() -> None:
    assert dict(CONFIRMATION_TABLE) == EXPECTED_CONFIRMATION


def test_cursor_table_is_pinned() -> None:
    assert dict(CURSOR_TABLE) == EXPECTED_CURSOR


def test_lease_table_is_pinned() -> None:
    assert dict(LEASE_TABLE) == EXPECTED_LEASE


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_bridge_table_equals_executed_machine(name: str) -> None:
    spec = MACHINES[name]
    assert dict(spec.table) == executed_table(
        spec.machine, spec.states, spec.events, spec.make_model, spec.guard
    )


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_tables_are_read_only(name: str) -> None:
    table: Any = MACHINES[name].table
    with pytest.raises(TypeError):
        table[next(iter(table))] = None


def _cells(name: str) -> st.SearchStrategy[tuple[Any, Any, Any]]:
    spec = MACHINES[name]
    states: list[Any] = [*cast("Iterable[Any]", spec.states)]
    events: list[Any] = [*cast("Iterable[Any]", spec.events)]
    guards = st.sampled_from(spec.guard_values)
    return st.tuples(st.sampled_from(states), st.sampled_from(events), guards)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_cell_of_every_machine_is_executed_on_the_class(name: str) -> None:
    """Exhaustively (the tables are small): each (state, event, guard) cell is sent to a real
    machine restored there; it moves to the table's target, or raises and stays put."""
    spec = MACHINES[name]
    for state in spec.states:
        for event in spec.events:
            for guard in spec.guard_values:
                model = spec.make_model(state, guard)
                target = spec.table.get((state, event, guard))
                if target is None:
                    with pytest.raises(TransitionNotAllowed):
                        spec.machine(model=model).send(event.value)
                    assert model.state == state
                else:
                    spec.machine(model=model).send(event.value)
                    assert model.state == target


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_cell_moves_to_its_target_or_raises_unchanged(name: str) -> None:
    spec = MACHINES[name]

    @given(_cells(name))
    def check(cell: tuple[Any, Any, Any]) -> None:
        state, event, guard = cell
        model = spec.make_model(state, guard)
        machine = spec.machine(model=model)
        target = spec.table.get(cell)
        if target is None:
            with pytest.raises(TransitionNotAllowed):
                machine.send(event.value)
            assert model.state == state
            with pytest.raises(IllegalTransition) as info:
                step(name, spec.table, state, event, guard)
            assert (info.value.machine, info.value.state, info.value.event) == (
                name,
                str(state),
                str(event),
            )
        else:
            machine.send(event.value)
            assert model.state == target
            assert step(name, spec.table, state, event, guard) == target

    check()


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_nothing_leaves_a_final_state(name: str) -> None:
    spec = MACHINES[name]
    assert not [cell for cell in spec.table if cell[0] in spec.finals]


def test_confirmation_final_states_only_from_their_processing_state() -> None:
    into_final = {(s, t) for (s, _, _), t in CONFIRMATION_TABLE.items() if t.is_terminal}
    assert into_final == {
        (C.APPROVING, C.APPROVED),
        (C.REJECTING, C.REJECTED),
        (C.EXPIRING, C.EXPIRED),
    }


def test_after_expiry_every_claim_is_expiring() -> None:
    for event in (CE.APPROVE, CE.REJECT, CE.EXPIRE):
        assert CONFIRMATION_TABLE[(C.PENDING, event, True)] is C.EXPIRING
    assert (C.PENDING, CE.EXPIRE, False) not in CONFIRMATION_TABLE


def test_derivation_refuses_guards_it_cannot_express() -> None:
    class Odd(StateMachine):
        a = State(initial=True)
        b = State(final=True)
        go = a.to(b, cond="something_else")

        def something_else(self) -> bool:
            return True

    from enum import StrEnum

    class S(StrEnum):
        A = "a"
        B = "b"

    class E(StrEnum):
        GO = "go"

    with pytest.raises(DefinitionError):
        derive_table(Odd, S, E, "expired")


def test_the_new_machines_name_their_guards_in_key_order() -> None:
    assert (MACHINES["execution"].guards, MACHINES["run"].guards) == (
        ("ours", "idempotent"),
        ("ours", "recover"),
    )
    assert MACHINES["confirmation"].guards == ("expired",)


def test_an_illegal_ledger_or_run_move_names_machine_state_and_event() -> None:
    with pytest.raises(IllegalTransition) as info:
        step("execution", EXECUTION_TABLE, X.EXECUTING, XE.CLAIM, (False, False))
    assert (info.value.machine, info.value.state, info.value.event) == (
        "execution",
        "executing",
        "claim",
    )
    with pytest.raises(IllegalTransition) as info:
        step("run", RUN_TABLE, R.COMPLETED, RE.CLAIM, (True, True))
    assert (info.value.machine, info.value.state, info.value.event) == ("run", "completed", "claim")


def test_guarded_derivation_refuses_an_unnamed_guard_and_a_single_name() -> None:
    class Odd(StateMachine):
        a = State(initial=True)
        b = State(final=True)
        go = a.to(b, cond="ours") | a.to(b, cond="quota")

        def ours(self) -> bool:
            return True

        def quota(self) -> bool:
            return True

    from enum import StrEnum

    class S(StrEnum):
        A = "a"
        B = "b"

    class E(StrEnum):
        GO = "go"

    with pytest.raises(DefinitionError, match="quota"):
        derive_guarded_table(Odd, S, E, ("ours", "recover"))
    with pytest.raises(DefinitionError):
        derive_guarded_table(Odd, S, E, ("ours",))
