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
from akchat_fsm.machines.lease import TurnLeaseEvent, TurnLeaseState
from akchat_fsm.machines.tables import (
    CONFIRMATION_TABLE,
    CURSOR_TABLE,
    LEASE_TABLE,
    MACHINES,
    DefinitionError,
    derive_table,
    executed_table,
    step,
)
from akchat_fsm.wire.enums import ConfirmationStatus

C, CE = ConfirmationStatus, ConfirmationEvent
P, PE = CursorPhase, CursorEvent
L, LE = TurnLeaseState, TurnLeaseEvent


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
        spec.machine, spec.states, spec.events, spec.make_model
    )


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_tables_are_read_only(name: str) -> None:
    table: Any = MACHINES[name].table
    with pytest.raises(TypeError):
        table[next(iter(table))] = None


def _cells(name: str) -> st.SearchStrategy[tuple[Any, Any, bool]]:
    spec = MACHINES[name]
    states: list[Any] = [*cast("Iterable[Any]", spec.states)]
    events: list[Any] = [*cast("Iterable[Any]", spec.events)]
    return st.tuples(st.sampled_from(states), st.sampled_from(events), st.booleans())


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_cell_moves_to_its_target_or_raises_unchanged(name: str) -> None:
    spec = MACHINES[name]

    @given(_cells(name))
    def check(cell: tuple[Any, Any, bool]) -> None:
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
