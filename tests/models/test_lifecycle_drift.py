"""The model's ledger and run tables are generated from the python machines and must not drift.

``models/lifecycle_tables.pml`` is read back here as the model reads it: each ``*_NEXT`` macro
is evaluated for every (state, event, guard values) cell and compared with the core's table.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from statemachine import State, StateMachine

from akchat_fsm.machines.execution import ExecutionState as X
from akchat_fsm.machines.tables import MACHINES, derive_guarded_table

from ._loader import MODELS, load

gen = load("gen_lifecycles")
ROW = re.compile(r"^  \(\((?P<cond>.*)\) -> (?P<target>\w+) : \\$")


def _macro_rows(text: str, stem: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith(f"#define {stem}_NEXT("))
    rows = []
    for line in lines[start + 1 :]:
        match = ROW.match(line)
        if match is None:
            break
        rows.append((match["cond"], match["target"]))
    return rows


def _evaluate(text: str, name: str, state: Any, event: Any, values: tuple[bool, ...]) -> str:
    """What the generated macro gives for one cell, read the way Promela reads it."""
    states, events, stem, params = gen.LAYOUT[name]
    spec = MACHINES[name]
    env = {params[g]: v for g, v in zip(spec.guards, values, strict=True)}
    env["s"], env["ev"] = f"{states}_{state.name}", f"{events}_{event.name}"
    for cond, target in _macro_rows(text, stem):
        holds = True
        for part in cond.split(" && "):
            if m := re.fullmatch(r"\(s\) == (\w+)", part):
                holds &= env["s"] == m[1]
            elif m := re.fullmatch(r"\(ev\) == (\w+)", part):
                holds &= env["ev"] == m[1]
            elif m := re.fullmatch(r"(!?)\((\w+)\)", part):
                holds &= env[m[2]] is (m[1] == "")
            else:
                raise AssertionError(f"unreadable condition {part!r}")
        if holds:
            return target
    return f"{states}_NONE"


def test_checked_in_tables_are_what_the_machines_generate() -> None:
    on_disk = (MODELS / "lifecycle_tables.pml").read_text(encoding="utf-8")
    assert on_disk == gen.render(), "stale: run `python models/gen_lifecycles.py`"


@pytest.mark.parametrize("name", ["execution", "run"])
def test_every_cell_of_the_generated_macro_is_the_cores_table(name: str) -> None:
    text = (MODELS / "lifecycle_tables.pml").read_text(encoding="utf-8")
    spec = MACHINES[name]
    states = gen.LAYOUT[name][0]
    for state in spec.states:
        for event in spec.events:
            for values in spec.guard_values:
                target = spec.table.get((state, event, values))
                expected = f"{states}_NONE" if target is None else f"{states}_{target.name}"
                assert _evaluate(text, name, state, event, values) == expected
    for number, state in enumerate(spec.states):
        assert f"#define {states}_{state.name} {number}\n" in text


def test_the_model_includes_the_tables_and_spells_no_state_itself() -> None:
    model = (MODELS / "resolution.pml").read_text(encoding="utf-8")
    assert '#include "lifecycle_tables.pml"' in model
    assert not re.search(r"#define (RUN|EX)_[A-Z]+ \d", model)
    assert "lifecycle_tables.pml" in load("check").SOURCES
    # The moves the model takes go through the tables, not through hand-written states.
    for move in ("EX_NEXT(ex_st[k], EXEV_CLAIM", "EX_NEXT(ex_st[k], EXEV_FINISH"):
        assert move in model
    for move in ("RUN_NEXT(run_st, RUNEV_CLAIM", "RUN_NEXT(run_st, RUNEV_COMPLETE"):
        assert move in model


class _RerunsUnknown(StateMachine):
    """A ledger machine whose claim of an executing entry ignores both guards."""

    absent = State(initial=True, value=X.ABSENT)
    executing = State(value=X.EXECUTING)
    executed = State(final=True, value=X.EXECUTED)
    released = State(value=X.RELEASED)

    claim = absent.to(executing) | executing.to(executing) | released.to(executing)
    finish = executing.to(executed, cond="ours")
    settle_ran = executing.to(executed) | released.to(executed)
    release = executing.to(released) | released.to(released)


def _with_execution(machine: type[StateMachine]) -> dict[str, Any]:
    real = MACHINES["execution"]
    table = derive_guarded_table(machine, real.states, real.events, real.guards)
    return {**MACHINES, "execution": dataclasses.replace(real, machine=machine, table=table)}


def test_a_changed_machine_changes_the_generated_table() -> None:
    mutant = gen.render(_with_execution(_RerunsUnknown), seeded={})
    assert mutant != gen.render(seeded={})
    assert "((s) == EX_EXECUTING && (ev) == EXEV_CLAIM) -> EX_EXECUTING" in mutant
    assert "!(ours) && (idem)" not in mutant


def test_a_table_that_disagrees_with_its_machine_stops_generation() -> None:
    real = MACHINES["execution"]
    lying = dataclasses.replace(
        real, table=derive_guarded_table(_RerunsUnknown, real.states, real.events, real.guards)
    )
    with pytest.raises(gen.TableError, match="executed table"):
        gen.render({**MACHINES, "execution": lying})


def test_a_guard_the_model_cannot_feed_stops_generation() -> None:
    real = MACHINES["run"]
    renamed = dataclasses.replace(real, guard=("ours", "quota"))
    with pytest.raises(gen.TableError, match="quota"):
        gen.render({**MACHINES, "run": renamed})


def test_check_mode_reports_a_stale_file(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "lifecycle_tables.pml"
    stale.write_text("/* old */\n", encoding="utf-8")
    monkeypatch.setattr(gen, "OUTPUT", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0


def test_the_seeded_mutant_differs_from_the_machine_in_exactly_the_unknown_claim_cell() -> None:
    """BUG_RERUN_UNKNOWN is the real ledger machine with one cell changed: if the machine
    changes anywhere else, this fails until the mutant is updated with it."""
    real = dict(MACHINES["execution"].table)
    name, machine = gen.SEEDED_MACHINES["BUG_RERUN_UNKNOWN"]
    mutant = dict(gen.mutant_spec(name, machine).table)
    changed = {cell for cell in real.keys() | mutant.keys() if real.get(cell) != mutant.get(cell)}
    cell = (X.EXECUTING, "claim", (False, False))
    assert changed == {cell}
    assert (real.get(cell), mutant[cell]) == (None, X.EXECUTING)  # type: ignore[index]


def test_the_seeded_table_is_compiled_only_under_its_flag_and_the_runner_checks_it() -> None:
    text = gen.render()
    lines = text.splitlines()
    real_at = lines.index("#if !defined(BUG_RERUN_UNKNOWN)")
    bug_at = lines.index("#elif defined(BUG_RERUN_UNKNOWN)")
    unguarded = "  (((s) == EX_EXECUTING && (ev) == EXEV_CLAIM) -> EX_EXECUTING : \\"
    assert unguarded in lines[bug_at:] and unguarded not in lines[real_at:bug_at]
    assert gen.render(seeded={}).count("#define EX_NEXT(") == 1
    check = load("check")
    assert set(gen.SEEDED_MACHINES) <= set(check.LEDGER_BUGS)
    assert check.LEDGER_BUGS["BUG_RERUN_UNKNOWN"] == "body_once"
    model = (MODELS / "resolution.pml").read_text(encoding="utf-8")
    assert "#ifdef BUG_RERUN_UNKNOWN" not in model  # no hand-written copy of the bug is left
