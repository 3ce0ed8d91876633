"""Generate ``models/confirmation_table.pml`` from the python-statemachine declaration.

The SPIN model (``models/resolution.pml``) never spells the confirmation lifecycle itself: it
``#include`` s the table written here, which is derived from
:class:`akchat_fsm.machines.confirmation.ConfirmationLifecycle` in two independent ways that must
agree, both the core's own (:mod:`akchat_fsm.machines.tables`, ADR-0114), not copies:

* **executed** (``executed_table``): every (state, event, ``expired`` guard value) is sent to a
  fresh machine restored on a :class:`~akchat_fsm.machines.confirmation.ConfirmationModel` box;
  the resulting state (or ``TransitionNotAllowed``) is the row;
* **declared** (``derive_table``, which ``CONFIRMATION_TABLE`` comes from): the class's
  transitions are read, guards included.

The final and processing states (``IS_FINAL``, ``IS_PROCESSING``) are read off that table by
``confirmation_facts``, the derivation the kernel's ``MATCHING_TERMINAL`` and ``CLAIM_EVENTS``
come from. Any guard other than ``expired`` stops generation: the model has no variable for it
yet, and silently dropping a guard would make the model check a different machine than the
code runs.

Seeded machine bugs (``SEEDED_MACHINES``) are mutants of the real class, declared here and read
the same two ways; each is rendered as its own ``fsm_next`` under ``#ifdef <flag>``, so
``spin -D<flag>`` checks the protocol on the broken machine (``models/check.py`` requires a trail).

Usage: ``python models/gen_promela.py`` (write) or ``python models/gen_promela.py --check``
(exit 1 when the checked-in file is stale).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from statemachine import State, StateMachine

from akchat_fsm.machines.confirmation import (
    ConfirmationEvent,
    ConfirmationLifecycle,
    ConfirmationModel,
)
from akchat_fsm.machines.tables import (
    ConfirmationFacts,
    DefinitionError,
    confirmation_facts,
    derive_table,
    executed_table,
)
from akchat_fsm.wire.enums import ConfirmationStatus

OUTPUT = Path(__file__).with_name("confirmation_table.pml")
#: The only guard the model knows how to feed (``ConfirmationModel.expired``, ``exp`` in Promela).
MODELLED_GUARD = "expired"

Row = tuple[ConfirmationStatus, str, bool, ConfirmationStatus]


class TableError(RuntimeError):
    """The declared machine cannot be turned into the model's table faithfully."""


Machine = type[StateMachine]


class RejectIgnoresExpiry(StateMachine):
    """Seeded bug ``BUG_REJECT_IGNORES_EXPIRY``: the real machine with reject's expiry guard
    dropped (the reference's gap reopened), so a reject made after ``expiresAt`` claims
    ``rejecting`` instead of ``expiring``. Every other cell equals the real machine's
    (tests/models/test_table_drift.py pins the difference to that one cell)."""

    pending = State(initial=True, value=ConfirmationStatus.PENDING)
    approving = State(value=ConfirmationStatus.APPROVING)
    rejecting = State(value=ConfirmationStatus.REJECTING)
    expiring = State(value=ConfirmationStatus.EXPIRING)
    approved = State(final=True, value=ConfirmationStatus.APPROVED)
    rejected = State(final=True, value=ConfirmationStatus.REJECTED)
    expired = State(final=True, value=ConfirmationStatus.EXPIRED)

    approve = pending.to(approving, unless="expired") | pending.to(expiring, cond="expired")
    reject = pending.to(rejecting)
    expire = pending.to(expiring, cond="expired")
    complete = approving.to(approved) | rejecting.to(rejected) | expiring.to(expired)
    release = approving.to(pending) | rejecting.to(pending) | expiring.to(pending)


#: ``-D`` flag -> mutant machine; models/check.py must find a counterexample with each.
SEEDED_MACHINES: dict[str, Machine] = {"BUG_REJECT_IGNORES_EXPIRY": RejectIgnoresExpiry}


def events(machine: Machine = ConfirmationLifecycle) -> list[str]:
    """Event ids in declaration order (their Promela numbering)."""
    # On the class, ``events`` is a list; psm types it as the instance property.
    declared = cast("Iterable[Any]", machine.events)
    return [event.id for event in declared]


def executed_rows(machine: Machine = ConfirmationLifecycle) -> list[Row]:
    """Run every (state, event, guard) on a restored box; keep the moves that happened.

    The core's own reading (:func:`akchat_fsm.machines.tables.executed_table`), not a copy.
    """
    cells = executed_table(machine, ConfirmationStatus, ConfirmationEvent, _box)
    return [(s, str(e), x, t) for (s, e, x), t in cells.items()]


def declared_rows(machine: Machine = ConfirmationLifecycle) -> list[Row]:
    """Read the same table from the class's transitions, resolving the ``expired`` guard.

    The derivation the core's ``CONFIRMATION_TABLE`` comes from
    (:func:`akchat_fsm.machines.tables.derive_table`), so the model runs the core's table; a guard
    the model cannot feed stops generation.
    """
    try:
        cells = derive_table(machine, ConfirmationStatus, ConfirmationEvent, MODELLED_GUARD)
    except DefinitionError as exc:
        raise TableError(f"{exc} (models/resolution.pml cannot model it)") from exc
    rows = [(s, str(e), x, t) for (s, e, x), t in cells.items()]
    return sorted(rows, key=lambda row: _row_key(row, machine))


def _box(state: ConfirmationStatus, expired: bool) -> ConfirmationModel:
    return ConfirmationModel(state, expired=expired)


def _row_key(row: Row, machine: Machine) -> tuple[int, int, bool]:
    return (list(ConfirmationStatus).index(row[0]), events(machine).index(row[1]), row[2])


def table(machine: Machine = ConfirmationLifecycle) -> list[Row]:
    """The checked table: executed and declared rows, which must be identical.

    The declared reading runs first so that an unmodelled guard is reported as such rather
    than as whatever the box model lacks.
    """
    declared = declared_rows(machine)
    executed = sorted(executed_rows(machine), key=lambda row: _row_key(row, machine))
    if executed != declared:
        raise TableError(f"executed table {executed} differs from declared {declared}")
    return executed


def facts(machine: Machine = ConfirmationLifecycle) -> ConfirmationFacts:
    """The final and processing states (and the rest) of ``machine``, read off its checked
    table by the derivation the core uses (``machines.tables.confirmation_facts``)."""
    cells = {(s, ConfirmationEvent(e), x): t for s, e, x, t in table(machine)}
    try:
        return confirmation_facts(cells, ConfirmationStatus(machine.initial_state.value))
    except DefinitionError as exc:
        raise TableError(f"{machine.__name__}: {exc}") from exc


def _state_macro(state: ConfirmationStatus) -> str:
    return f"ST_{state.name}"


def _event_macro(event: str) -> str:
    return f"EV_{event.upper()}"


def _fsm_next(machine: Machine) -> Iterator[str]:
    yield "/* out = the state the machine moves to on event ev from state s, with the"
    yield " * `expired` guard equal to exp; ST_NONE when the machine refuses the event. */"
    yield "inline fsm_next(s, ev, exp, out) {"
    yield "  if"
    by_move: dict[tuple[ConfirmationStatus, str], dict[bool, ConfirmationStatus]] = {}
    for state, event, expired, target in table(machine):
        by_move.setdefault((state, event), {})[expired] = target
    for (state, event), targets in by_move.items():
        head = f"(s) == {_state_macro(state)} && (ev) == {_event_macro(event)}"
        if targets.get(False) == targets.get(True):
            yield f"  :: {head} -> out = {_state_macro(targets[False])}"
            continue
        for expired, target in sorted(targets.items()):
            guard = "(exp)" if expired else "!(exp)"
            yield f"  :: {head} && {guard} -> out = {_state_macro(target)}"
    yield "  :: else -> out = ST_NONE"
    yield "  fi"
    yield "}"


def _same_shape(machine: Machine, mutant: Machine) -> None:
    """A mutant must share the real machine's states, events, initial and final states, so
    that the ``#define`` s rendered from the real machine describe it too."""

    def shape(m: Machine) -> tuple[object, ...]:
        finals = sorted(str(s.value) for s in m.final_states)
        return (sorted(str(s.value) for s in m.states_map.values()), events(m), finals)

    if shape(machine) != shape(mutant) or machine.initial_state.value != mutant.initial_state.value:
        raise TableError(
            f"seeded machine {mutant.__name__} does not have {machine.__name__}'s shape"
        )


def _lines(machine: Machine, seeded: Mapping[str, Machine]) -> Iterator[str]:
    known = facts(machine)
    initial = machine.initial_state.value
    yield "/* GENERATED by models/gen_promela.py from"
    yield f" * akchat_fsm.machines.confirmation.{machine.__name__} -- do not edit by hand;"
    yield " * tests/models/test_table_drift.py fails when this file is stale. */"
    yield ""
    for number, state in enumerate(ConfirmationStatus):
        yield f"#define {_state_macro(state)} {number}"
    yield "#define ST_NONE 255 /* the event is not enabled: the machine raises */"
    yield ""
    for number, event in enumerate(events(machine)):
        yield f"#define {_event_macro(event)} {number}"
    yield ""
    yield f"#define ST_INITIAL {_state_macro(initial)}"
    final_test = " || ".join(
        f"(s) == {_state_macro(s)}" for s in ConfirmationStatus if s in known.terminal
    )
    yield f"#define IS_FINAL(s) ({final_test})"
    processing_test = " || ".join(
        f"(s) == {_state_macro(s)}" for s in ConfirmationStatus if s in known.processing
    )
    yield f"#define IS_PROCESSING(s) ({processing_test})"
    yield ""
    keyword = "#if"
    for flag, mutant in seeded.items():
        _same_shape(machine, mutant)
        yield f"{keyword} defined({flag})"
        yield f"/* Seeded bug: the table of models/gen_promela.py {mutant.__name__}. */"
        yield from _fsm_next(mutant)
        keyword = "#elif"
    if seeded:
        yield "#else"
    yield from _fsm_next(machine)
    if seeded:
        yield "#endif"


def render(
    machine: Machine = ConfirmationLifecycle,
    seeded: Mapping[str, Machine] = SEEDED_MACHINES,
) -> str:
    """The full text of ``confirmation_table.pml`` for ``machine`` (default: the real one),
    with each seeded mutant's table under its ``#ifdef``."""
    return "\n".join(_lines(machine, seeded)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python models/gen_promela.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
