"""The Promela transition table is generated from the python machine and must not drift."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from statemachine import State, StateMachine

from akchat_fsm.machines.confirmation import ConfirmationLifecycle
from akchat_fsm.wire.enums import ConfirmationStatus as S

from ._loader import MODELS, load

gen = load("gen_promela")


def test_checked_in_table_is_what_the_machine_generates() -> None:
    on_disk = (MODELS / "confirmation_table.pml").read_text(encoding="utf-8")
    assert on_disk == gen.render(), "stale: run `python models/gen_promela.py`"


def test_executed_and_declared_tables_agree_and_cover_every_claim() -> None:
    rows = gen.table()
    assert rows == sorted(gen.executed_rows(), key=lambda r: gen._row_key(r, ConfirmationLifecycle))
    moves = {(s, e, x): t for s, e, x, t in rows}
    # Spot-check the rows the protocol's safety rests on, against the enum, not the generator.
    assert moves[(S.PENDING, "approve", False)] == S.APPROVING
    assert moves[(S.PENDING, "approve", True)] == S.EXPIRING
    assert (S.PENDING, "expire", False) not in moves
    assert not [r for r in rows if r[0].is_terminal], "a final state must have no way out"


def _inline_of(text: str, flag: str | None) -> list[str]:
    """The branches of the ``fsm_next`` that ``spin -D<flag>`` (or no flag) compiles."""
    lines = text.splitlines()
    if flag is None:
        start = lines.index("#else") if "#else" in lines else 0
    else:
        start = next(n for n, line in enumerate(lines) if line.endswith(f"defined({flag})"))
    end = lines.index("}", start)
    return [line for line in lines[start:end] if line.startswith("  :: (s) ==")]


def _branch_count(rows: list[tuple[S, str, bool, S]]) -> int:
    guard_free = {(s, e) for s, e, x, t in rows if (s, e, not x, t) in rows}
    return len(rows) - len(guard_free)


def test_the_rendered_inline_has_one_branch_per_move() -> None:
    text = gen.render()
    assert len(_inline_of(text, None)) == _branch_count(gen.table())
    for flag, mutant in gen.SEEDED_MACHINES.items():
        assert len(_inline_of(text, flag)) == _branch_count(gen.table(mutant))
    for state in S:
        assert f"#define ST_{state.name} " in text


def _cells(machine: object) -> dict[tuple[S, str, bool], S]:
    return {(s, e, x): t for s, e, x, t in gen.table(machine)}


def test_the_seeded_mutant_differs_from_the_machine_in_exactly_the_reject_expiry_cell() -> None:
    """BUG_REJECT_IGNORES_EXPIRY is the real machine with one cell changed: if the machine
    changes anywhere else, this fails until the mutant is updated with it."""
    real = _cells(ConfirmationLifecycle)
    mutant = _cells(gen.SEEDED_MACHINES["BUG_REJECT_IGNORES_EXPIRY"])
    changed = {cell for cell in real.keys() | mutant.keys() if real.get(cell) != mutant.get(cell)}
    assert changed == {(S.PENDING, "reject", True)}
    assert (real[(S.PENDING, "reject", True)], mutant[(S.PENDING, "reject", True)]) == (
        S.EXPIRING,
        S.REJECTING,
    )


def test_the_seeded_table_is_compiled_only_under_its_flag() -> None:
    text = gen.render()
    bug = _inline_of(text, "BUG_REJECT_IGNORES_EXPIRY")
    assert "  :: (s) == ST_PENDING && (ev) == EV_REJECT -> out = ST_REJECTING" in bug
    real = _inline_of(text, None)
    assert "  :: (s) == ST_PENDING && (ev) == EV_REJECT && (exp) -> out = ST_EXPIRING" in real
    assert not [line for line in real if "EV_REJECT -> out = ST_REJECTING" in line]
    assert gen.render(seeded={}).count("inline fsm_next") == 1


def test_every_seeded_machine_is_a_seeded_bug_the_runner_checks() -> None:
    check = load("check")
    assert set(gen.SEEDED_MACHINES) <= set(check.SEEDED_BUGS)
    assert check.SEEDED_BUGS["BUG_REJECT_IGNORES_EXPIRY"] == "expiry_honoured"


class _Mutant(StateMachine):
    """A machine whose approve ignores expiry (not a seeded bug: a changed declaration)."""

    pending = State(initial=True, value=S.PENDING)
    approving = State(value=S.APPROVING)
    rejecting = State(value=S.REJECTING)
    expiring = State(value=S.EXPIRING)
    approved = State(final=True, value=S.APPROVED)
    rejected = State(final=True, value=S.REJECTED)
    expired = State(final=True, value=S.EXPIRED)

    approve = pending.to(approving)
    reject = pending.to(rejecting, unless="expired") | pending.to(expiring, cond="expired")
    expire = pending.to(expiring, cond="expired")
    complete = approving.to(approved) | rejecting.to(rejected) | expiring.to(expired)
    release = approving.to(pending) | rejecting.to(pending) | expiring.to(pending)


def test_a_changed_machine_changes_the_generated_table() -> None:
    mutant = gen.render(_Mutant, seeded={})
    assert mutant != gen.render(seeded={})
    assert "(s) == ST_PENDING && (ev) == EV_APPROVE -> out = ST_APPROVING" in mutant
    assert "(s) == ST_PENDING && (ev) == EV_APPROVE && (exp) -> out = ST_EXPIRING" not in mutant


class _NoExpiringState(StateMachine):
    pending = State(initial=True, value=S.PENDING)
    approving = State(value=S.APPROVING)
    rejecting = State(value=S.REJECTING)
    approved = State(final=True, value=S.APPROVED)
    rejected = State(final=True, value=S.REJECTED)

    approve = pending.to(approving)
    reject = pending.to(rejecting)
    expire = pending.to(rejecting, cond="expired")
    complete = approving.to(approved) | rejecting.to(rejected)
    release = approving.to(pending) | rejecting.to(pending)


def test_a_seeded_machine_of_another_shape_stops_generation() -> None:
    # The #defines come from the real machine; a mutant with other states would be misread.
    with pytest.raises(gen.TableError, match="_NoExpiringState"):
        gen.render(seeded={"BUG_X": _NoExpiringState})


class _UnmodelledGuard(StateMachine):
    pending = State(initial=True, value=S.PENDING)
    approving = State(value=S.APPROVING)
    approved = State(final=True, value=S.APPROVED)

    approve = pending.to(approving, cond="has_quota")
    complete = approving.to(approved)


def test_a_guard_the_model_cannot_feed_stops_generation() -> None:
    with pytest.raises(gen.TableError, match="has_quota"):
        gen.render(_UnmodelledGuard, seeded={})


def test_check_mode_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "confirmation_table.pml"
    stale.write_text("/* old */\n", encoding="utf-8")
    monkeypatch.setattr(gen, "OUTPUT", stale)
    assert gen.main(["--check"]) == 1
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0


def test_the_model_table_equals_the_table_the_core_runs_on() -> None:
    """Three readings of one class agree: ours executed, ours declared, the core's frozen one."""
    from akchat_fsm.machines.tables import CONFIRMATION_TABLE

    core = {(s, str(e), g): t for (s, e, g), t in CONFIRMATION_TABLE.items()}
    assert {(s, e, g): t for s, e, g, t in gen.table()} == core


def test_the_final_and_processing_tests_are_the_cores_derived_facts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """IS_FINAL / IS_PROCESSING are read off the table by the core's derivation (ADR-0114)."""
    text = gen.render(seeded={})
    final = " || ".join(f"(s) == ST_{s.name}" for s in S if s.is_terminal)
    processing = " || ".join(f"(s) == ST_{s.name}" for s in S if s.is_processing)
    assert f"#define IS_FINAL(s) ({final})" in text
    assert f"#define IS_PROCESSING(s) ({processing})" in text
    derive = gen.confirmation_facts

    def approving_only(*args: object) -> object:
        return dataclasses.replace(derive(*args), processing=frozenset({S.APPROVING}))

    monkeypatch.setattr(gen, "confirmation_facts", approving_only)
    assert "#define IS_PROCESSING(s) ((s) == ST_APPROVING)" in gen.render(seeded={})
