"""Generate ``models/confirmation_table.pml`` from the python-statemachine declaration.

The SPIN model (``models/resolution.pml``) never spells the confirmation lifecycle itself: it
``#include`` s the table written here, which is derived from
:class:`akchat_fsm.machines.confirmation.ConfirmationLifecycle` in two independent ways that must
agree:

* **executed**: every (state, event, ``expired`` guard value) is sent to a fresh machine restored
  on a :class:`~akchat_fsm.machines.confirmation.ConfirmationModel` box; the resulting state (or
  ``TransitionNotAllowed``) is the row;
* **declared**: the class's ``states_map`` / transitions are read, guards included.

Any guard other than ``expired`` stops generation: the model has no variable for it yet, and
silently dropping a guard would make the model check a different machine than the code runs.

Usage: ``python models/gen_promela.py`` (write) or ``python models/gen_promela.py --check``
(exit 1 when the checked-in file is stale).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from itertools import product
from pathlib import Path
from typing import Any, cast

from statemachine import StateMachine

from akchat_fsm.machines.confirmation import ConfirmationLifecycle, ConfirmationModel
from akchat_fsm.wire.enums import ConfirmationStatus

OUTPUT = Path(__file__).with_name("confirmation_table.pml")
#: The only guard the model knows how to feed (``ConfirmationModel.expired``).
MODELLED_GUARDS = frozenset({"expired"})

Row = tuple[ConfirmationStatus, str, bool, ConfirmationStatus]


class TableError(RuntimeError):
    """The declared machine cannot be turned into the model's table faithfully."""


Machine = type[StateMachine]


def events(machine: Machine = ConfirmationLifecycle) -> list[str]:
    """Event ids in declaration order (their Promela numbering)."""
    # On the class, ``events`` is a list; psm types it as the instance property.
    declared = cast("Iterable[Any]", machine.events)
    return [event.id for event in declared]


def executed_rows(machine: Machine = ConfirmationLifecycle) -> list[Row]:
    """Run every (state, event, guard) on a restored box; keep the moves that happened."""
    rows: list[Row] = []
    for state, event, expired in product(ConfirmationStatus, events(machine), (False, True)):
        box = ConfirmationModel(state, expired=expired)
        try:
            machine(model=box).send(event)
        except machine.TransitionNotAllowed:
            continue
        rows.append((state, event, expired, ConfirmationStatus(str(box.state))))
    return rows


def declared_rows(machine: Machine = ConfirmationLifecycle) -> list[Row]:
    """Read the same table from the class's transitions, resolving the ``expired`` guard."""
    rows: list[Row] = []
    for state in machine.states_map.values():
        for expired in (False, True):
            for event in events(machine):
                # psm picks the first declared transition whose guards pass, like this loop.
                for transition in state.transitions:
                    if transition.initial or event not in {e.id for e in transition.events}:
                        continue
                    if _guards_pass(transition, expired):
                        (target,) = transition.targets
                        rows.append((state.value, event, expired, target.value))
                        break
    return sorted(rows, key=lambda row: _row_key(row, machine))


def _guards_pass(transition: object, expired: bool) -> bool:
    passed = True
    for cond in getattr(transition, "cond", []):
        name = getattr(cond, "attr_name", None)
        if name not in MODELLED_GUARDS:
            raise TableError(f"guard {cond!s} is not modelled in models/resolution.pml")
        negated = str(cond).startswith("!")
        passed = passed and (expired != negated)
    if list(getattr(transition, "validators", [])):
        raise TableError("validators are not modelled in models/resolution.pml")
    return passed


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


def _state_macro(state: ConfirmationStatus) -> str:
    return f"ST_{state.name}"


def _event_macro(event: str) -> str:
    return f"EV_{event.upper()}"


def _lines(machine: Machine) -> Iterator[str]:
    rows = table(machine)
    finals = {s.value for s in machine.final_states}
    initial = machine.initial_state.value
    processing = [s for s in ConfirmationStatus if s not in finals and s != initial]
    yield "/* GENERATED by models/gen_promela.py from"
    yield " * akchat_fsm.machines.confirmation.ConfirmationLifecycle -- do not edit by hand;"
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
    final_test = " || ".join(f"(s) == {_state_macro(s)}" for s in ConfirmationStatus if s in finals)
    yield f"#define IS_FINAL(s) ({final_test})"
    processing_test = " || ".join(f"(s) == {_state_macro(s)}" for s in processing)
    yield f"#define IS_PROCESSING(s) ({processing_test})"
    yield ""
    yield "/* out = the state the machine moves to on event ev from state s, with the"
    yield " * `expired` guard equal to exp; ST_NONE when the machine refuses the event. */"
    yield "inline fsm_next(s, ev, exp, out) {"
    yield "  if"
    by_move: dict[tuple[ConfirmationStatus, str], dict[bool, ConfirmationStatus]] = {}
    for state, event, expired, target in rows:
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


def render(machine: Machine = ConfirmationLifecycle) -> str:
    """The full text of ``confirmation_table.pml`` for ``machine`` (default: the real one)."""
    return "\n".join(_lines(machine)) + "\n"


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
