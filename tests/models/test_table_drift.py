"""The Promela transition table is generated from the python machine and must not drift."""

from __future__ import annotations

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


def test_the_rendered_inline_has_one_branch_per_move() -> None:
    text = gen.render()
    branches = [line for line in text.splitlines() if line.startswith("  :: (s) ==")]
    rows = gen.table()
    guard_free = {(s, e) for s, e, x, t in rows if (s, e, not x, t) in rows}
    assert len(branches) == len(rows) - len(guard_free)
    for state in S:
        assert f"#define ST_{state.name} " in text


class _Mutant(StateMachine):
    """The real machine with the reference's gap reopened: reject ignores expiry."""

    pending = State(initial=True, value=S.PENDING)
    approving = State(value=S.APPROVING)
    rejecting = State(value=S.REJECTING)
    expiring = State(value=S.EXPIRING)
    approved = State(final=True, value=S.APPROVED)
    rejected = State(final=True, value=S.REJECTED)
    expired = State(final=True, value=S.EXPIRED)

    approve = pending.to(approving, unless="expired") | pending.to(expiring, cond="expired")
    reject = pending.to(rejecting)
    expire = pending.to(expiring, cond="expired")
    complete = approving.to(approved) | rejecting.to(rejected) | expiring.to(expired)
    release = approving.to(pending) | rejecting.to(pending) | expiring.to(pending)


def test_a_changed_machine_changes_the_generated_table() -> None:
    mutant = gen.render(_Mutant)
    assert mutant != gen.render()
    assert "(s) == ST_PENDING && (ev) == EV_REJECT -> out = ST_REJECTING" in mutant
    assert "(s) == ST_PENDING && (ev) == EV_REJECT && (exp) -> out = ST_EXPIRING" not in mutant


class _UnmodelledGuard(StateMachine):
    pending = State(initial=True, value=S.PENDING)
    approving = State(value=S.APPROVING)
    approved = State(final=True, value=S.APPROVED)

    approve = pending.to(approving, cond="has_quota")
    complete = approving.to(approved)


def test_a_guard_the_model_cannot_feed_stops_generation() -> None:
    with pytest.raises(gen.TableError, match="has_quota"):
        gen.render(_UnmodelledGuard)


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
