"""The table derivation refuses what a table cannot say, and the drift script's entry point.

Each test is a branch the derivation would otherwise take silently: a validator (which can
veto a move at run time, so no static cell is right), and a guard that is neither the machine's
guard nor its negation, in ``unless=`` form.
"""

from __future__ import annotations

from enum import StrEnum

import pytest
from statemachine import State, StateMachine

from akchat_fsm.machines.tables import DefinitionError, derive_table


class S(StrEnum):
    A = "a"
    B = "b"


class E(StrEnum):
    GO = "go"


def test_a_validator_is_refused() -> None:
    class Validated(StateMachine):
        a = State(initial=True)
        b = State(final=True)
        go = a.to(b, validators="check")

        def check(self) -> None:
            return None

    with pytest.raises(DefinitionError, match="validators"):
        derive_table(Validated, S, E, "expired")


def test_an_unless_on_another_guard_is_refused() -> None:
    class Unless(StateMachine):
        a = State(initial=True)
        b = State(final=True)
        go = a.to(b, unless="busy")

        def busy(self) -> bool:
            return False

    with pytest.raises(DefinitionError, match="busy"):
        derive_table(Unless, S, E, "expired")


def test_the_machine_guard_and_its_negation_derive_two_cells() -> None:
    class Guarded(StateMachine):
        a = State(initial=True)
        b = State(final=True)
        go = a.to(b, cond="expired") | a.to(a, unless="expired", internal=True)

        def expired(self) -> bool:
            return True

    table = derive_table(Guarded, S, E, "expired")
    assert table[(S.A, E.GO, True)] is S.B
    assert table[(S.A, E.GO, False)] is S.A
    assert (S.B, E.GO, True) not in table
