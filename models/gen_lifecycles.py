"""Generate ``models/lifecycle_tables.pml`` from the ledger-entry and run-record machines.

The ``-DLEDGER`` part of the SPIN model (``models/resolution.pml``) never spells the execution
ledger's or the run record's lifecycle itself: it ``#include`` s the tables written here, read
from :class:`akchat_fsm.machines.execution.ExecutionLifecycle` and
:class:`akchat_fsm.machines.run.RunLifecycle` the way ``gen_promela.py`` reads the confirmation
machine, and in the same two independent ways that must agree (ADR-0120):

* **declared**: the core's own ``EXECUTION_TABLE`` / ``RUN_TABLE``
  (:func:`akchat_fsm.machines.tables.derive_guarded_table`), drawn as the guard conjunctions of
  :func:`akchat_fsm.machines.diagrams.edges`;
* **executed** (``executed_table``): every (state, event, guard values) sent to a real machine.

Each table becomes one Promela *expression* macro, ``EX_NEXT(s, ev, ours, idem)`` and
``RUN_NEXT(s, ev, ours, rec)``: the target state, or ``EX_NONE`` / ``RUN_NONE`` when the
machine refuses the event. Expressions (not inlines) so the model can use a move's legality as
a statement's guard. ``EX_FINAL`` / ``RUN_FINAL`` are the machines' final states.

Seeded machine bugs (``SEEDED_MACHINES``) are mutants of the real classes, declared here and
read the same two ways; each is rendered as its own ``*_NEXT`` under ``#ifdef <flag>``, so
``spin -D<flag>`` checks the protocol on the broken machine (``models/check.py`` requires a
trail): ``BUG_RERUN_UNKNOWN`` is the ledger machine whose claim takes over an executing entry
that is neither ours nor idempotent.

Usage: ``python models/gen_lifecycles.py`` (write) or ``python models/gen_lifecycles.py
--check`` (exit 1 when the checked-in file is stale).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from statemachine import State, StateMachine

from akchat_fsm.machines.diagrams import edges
from akchat_fsm.machines.execution import ExecutionState
from akchat_fsm.machines.tables import MACHINES, MachineSpec, derive_guarded_table, executed_table

OUTPUT = Path(__file__).with_name("lifecycle_tables.pml")


class TableError(RuntimeError):
    """A machine cannot be turned into the model's table faithfully."""


# machine name -> (state prefix, event prefix, macro stem, {guard name: macro parameter})
LAYOUT: Mapping[str, tuple[str, str, str, Mapping[str, str]]] = {
    "execution": ("EX", "EXEV", "EX", {"ours": "ours", "idempotent": "idem"}),
    "run": ("RUN", "RUNEV", "RUN", {"ours": "ours", "recover": "rec"}),
}


class RerunsUnknown(StateMachine):
    """Seeded bug ``BUG_RERUN_UNKNOWN``: the real ledger machine whose claim of an executing
    entry ignores both guards, so a claimant takes over an execution whose outcome is unknown
    and runs its body again. Every other cell equals the real machine's
    (tests/models/test_lifecycle_drift.py pins the difference to that one cell)."""

    absent = State(initial=True, value=ExecutionState.ABSENT)
    executing = State(value=ExecutionState.EXECUTING)
    executed = State(final=True, value=ExecutionState.EXECUTED)
    released = State(value=ExecutionState.RELEASED)

    claim = absent.to(executing) | executing.to(executing) | released.to(executing)
    finish = executing.to(executed, cond="ours")
    settle_ran = executing.to(executed) | released.to(executed)
    release = executing.to(released) | released.to(released)


#: ``-D`` flag -> (machine name, mutant class); models/check.py must find a counterexample.
SEEDED_MACHINES: Mapping[str, tuple[str, type[StateMachine]]] = {
    "BUG_RERUN_UNKNOWN": ("execution", RerunsUnknown),
}


def mutant_spec(name: str, machine: type[StateMachine]) -> MachineSpec[Any, Any]:
    """The real machine's spec with ``machine`` (same states, events, guards) in its place."""
    real = MACHINES[name]
    table = derive_guarded_table(machine, real.states, real.events, real.guards)
    mutant = dataclasses.replace(real, machine=machine, table=table)
    if mutant.initial != real.initial or mutant.finals != real.finals:
        raise TableError(f"seeded machine {machine.__name__} does not have {name}'s shape")
    return mutant


def checked_table(spec: MachineSpec[Any, Any]) -> Mapping[tuple[Any, Any, Any], Any]:
    """The machine's table, declared and executed, which must be identical."""
    executed = executed_table(spec.machine, spec.states, spec.events, spec.make_model, spec.guard)
    if dict(spec.table) != executed:
        raise TableError(f"{spec.name}: executed table {executed} differs from {spec.table}")
    return spec.table


def _literal(label: str, params: Mapping[str, str]) -> str:
    parts = []
    for lit in label.split(" & "):
        name = lit.removeprefix("!")
        if name not in params:
            raise TableError(f"guard {name!r} has no variable in models/resolution.pml")
        parts.append(f"!({params[name]})" if lit.startswith("!") else f"({params[name]})")
    return " && ".join(parts)


def _machine_lines(
    name: str, spec: MachineSpec[Any, Any], seeded: Mapping[str, type[StateMachine]]
) -> Iterator[str]:
    states, events, stem, params = LAYOUT[name]
    if set(spec.guards) != set(params):
        raise TableError(f"{name}: guards {spec.guards} are not the model's {tuple(params)}")
    yield f"/* {spec.machine.__name__}: states, events, final states, moves. */"
    for number, state in enumerate(spec.states):
        yield f"#define {states}_{state.name} {number}"
    yield f"#define {states}_NONE 255 /* the event is not enabled: the machine raises */"
    for number, event in enumerate(spec.events):
        yield f"#define {events}_{event.name} {number}"
    finals = " || ".join(f"(s) == {states}_{s.name}" for s in spec.states if s in spec.finals)
    yield f"#define {stem}_FINAL(s) ({finals or '0'})"
    args = ", ".join(params[g] for g in spec.guards)
    yield f"/* The state {spec.machine.__name__} moves to on event ev from state s, with the"
    yield f" * guards {', '.join(f'`{g}`' for g in spec.guards)} equal to {args}; {states}_NONE"
    yield " * when the machine refuses the event. */"
    flags = list(seeded)
    if flags:
        yield "#if " + " && ".join(f"!defined({flag})" for flag in flags)
    yield from _next_macro(name, spec)
    for flag, machine in seeded.items():
        yield f"#elif defined({flag})"
        yield f"/* Seeded bug: the table of models/gen_lifecycles.py {machine.__name__}. */"
        yield from _next_macro(name, mutant_spec(name, machine))
    if flags:
        yield "#endif"


def _next_macro(name: str, spec: MachineSpec[Any, Any]) -> Iterator[str]:
    states, events, stem, params = LAYOUT[name]
    checked_table(spec)
    args = ", ".join(params[g] for g in spec.guards)
    yield f"#define {stem}_NEXT(s, ev, {args}) \\"
    closing = 0
    by_name = {str(s): s for s in spec.states}
    by_event = {str(e): e for e in spec.events}
    for source, event, label, target in edges(spec):
        head = f"(s) == {states}_{by_name[source].name} && (ev) == {events}_{by_event[event].name}"
        if label:
            head += f" && {_literal(label, params)}"
        yield f"  (({head}) -> {states}_{by_name[target].name} : \\"
        closing += 1
    yield f"  {states}_NONE{')' * closing}"


def render(
    machines: Mapping[str, MachineSpec[Any, Any]] = MACHINES,
    seeded: Mapping[str, tuple[str, type[StateMachine]]] = SEEDED_MACHINES,
) -> str:
    """The full text of ``lifecycle_tables.pml`` for the ledger and run machines, with each
    seeded mutant's table under its ``#if defined``."""
    lines = [
        "/* GENERATED by models/gen_lifecycles.py from",
        " * akchat_fsm.machines.execution.ExecutionLifecycle and",
        " * akchat_fsm.machines.run.RunLifecycle -- do not edit by hand;",
        " * tests/models/test_lifecycle_drift.py fails when this file is stale. */",
    ]
    for name in LAYOUT:
        mutants = {flag: machine for flag, (of, machine) in seeded.items() if of == name}
        lines += ["", *_machine_lines(name, machines[name], mutants)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT} is stale: run python models/gen_lifecycles.py", file=sys.stderr)
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
