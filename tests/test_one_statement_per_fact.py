"""No second statement of a lifecycle fact creeps back (ADR-0114). Read from the source.

The behaviour tests (tests/machines/test_facts.py, tests/controlled/test_controlled_ids.py)
catch a restatement once it drifts; these catch it the day it is written, while it still agrees.
"""

from __future__ import annotations

import ast
from pathlib import Path

import akchat_fsm.controlled as controlled
from akchat_fsm.core import confirmations as core_confirmations

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "akchat_fsm"
VOCABULARIES = {"ConfirmationStatus", "ConfirmationEvent"}
#: The one hand-written list of members anywhere in the package: the terminal set.
THE_STATEMENT = (
    "wire/enums.py",
    {"ConfirmationStatus.APPROVED", "ConfirmationStatus.REJECTED", "ConfirmationStatus.EXPIRED"},
)


def _members(node: ast.AST) -> set[str]:
    return {
        f"{n.value.id}.{n.attr}"
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id in VOCABULARIES
    }


def _lists_of_members(path: Path, root: Path = SRC) -> list[tuple[str, set[str]]]:
    """Every set, list, tuple, dict, ``and``/``or`` or conditional naming two or more members:
    the shapes a restated status set, claim set, matching map or status rule takes."""
    shapes = (ast.Set, ast.List, ast.Tuple, ast.Dict, ast.BoolOp, ast.IfExp)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, shapes) and len(members := _members(node)) >= 2:
            found.append((path.relative_to(root).as_posix(), members))
    return found


def test_the_package_lists_lifecycle_members_in_one_place_only() -> None:
    found = [hit for path in sorted(SRC.rglob("*.py")) for hit in _lists_of_members(path)]
    assert found == [THE_STATEMENT], "derive it from machines.tables.CONFIRMATION_FACTS instead"


def test_the_scan_finds_the_restatements_it_exists_for(tmp_path: Path) -> None:
    # The shapes the package held before ADR-0114 (records.py, controlled.py): each is found.
    sample = tmp_path / "sample.py"
    sample.write_text(
        "A = frozenset({ConfirmationEvent.APPROVE, ConfirmationEvent.REJECT})\n"
        "B = {ConfirmationStatus.APPROVING: ConfirmationStatus.APPROVED}\n"
        "c = s in (ConfirmationStatus.REJECTING, ConfirmationStatus.EXPIRING)\n"
        "d = ConfirmationStatus.PENDING if ok else ConfirmationStatus.REJECTED\n"
        "e = s is ConfirmationStatus.APPROVED or s is ConfirmationStatus.EXPIRED\n"
        "f = ConfirmationStatus.PENDING\n",
        encoding="utf-8",
    )
    assert len(_lists_of_members(sample, tmp_path)) == 5


def test_the_controlled_driver_names_no_status_and_no_id_format() -> None:
    tree = ast.parse(Path(controlled.__file__ or "").read_text(encoding="utf-8"))
    statuses = {m for m in _members(tree) if m.startswith("ConfirmationStatus.")}
    assert not statuses, "the kernel decides statuses; controlled only performs calls"
    literals = {
        n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    assert not [s for s in literals if s.startswith(("confirm-", "app-", "confirmation expired"))]
    assert controlled.DEFAULT_TTL_MS is core_confirmations.DEFAULT_TTL_MS


def test_the_spin_generator_reads_the_machine_only_through_machines_tables() -> None:
    source = (ROOT / "models" / "gen_promela.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    attributes = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    # Its own walk of the transitions, or its own run of the machine, would be a second reading.
    assert not attributes & {"transitions", "send", "cond", "targets"}
    imported = {
        alias.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "akchat_fsm.machines.tables"
        for alias in n.names
    }
    assert {"derive_table", "executed_table", "confirmation_facts"} <= imported


def _module_string_constants(root: Path = SRC) -> dict[str, list[str]]:
    """Each module-level string constant of the package (12 characters or more: a message, a
    code, a name), with every ``path:NAME`` that states it."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(
                node.value, ast.Constant
            ):
                text = node.value.value
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if isinstance(text, str) and len(text) >= 12 and names:
                    where = f"{path.relative_to(root)}:{names[0]}"
                    found.setdefault(text, []).append(where)
    return found


def test_no_message_or_code_is_stated_by_two_constants() -> None:
    # A message or code defined twice drifts apart, or one module compares against the other's
    # copy ("confirmation rejected" was both in session/_confirm.py and integrations/).
    twice = {text: where for text, where in _module_string_constants().items() if len(where) > 1}
    assert not twice, twice


def test_the_constants_scan_sees_a_second_statement(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('REASON = "confirmation rejected"\n', encoding="utf-8")
    (tmp_path / "b.py").write_text('_COPY: str = "confirmation rejected"\n', encoding="utf-8")
    assert _module_string_constants(tmp_path) == {
        "confirmation rejected": ["a.py:REASON", "b.py:_COPY"]
    }
