"""Generated diagrams: deterministic, complete, and not drifted from docs/machines."""

from __future__ import annotations

from pathlib import Path

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.machines.diagrams import FORMATS, diagram, edges, main, markdown_page
from akchat_fsm.machines.tables import MACHINES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "machines"


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_docs_pages_match_the_machines(name: str) -> None:
    page = DOCS / f"{name}.md"
    assert page.read_text(encoding="utf-8") == markdown_page(name), (
        "run: python -m akchat_fsm.machines.diagrams --write"
    )


def test_check_mode_reports_drift(tmp_path: Path) -> None:
    assert main(["--write", "--docs", str(tmp_path)]) == 0
    assert main(["--check", "--docs", str(tmp_path)]) == 0
    (tmp_path / "confirmation.md").write_text("stale\n", encoding="utf-8")
    assert main(["--check", "--docs", str(tmp_path)]) == 1


def _enabled(label: str, holds: dict[str, bool]) -> bool:
    """Whether an edge's guard label (``""``, ``g``, ``!g``, joined by ``&``) holds."""
    literals = [part.strip() for part in label.split("&")] if label else []
    return all(holds[lit.removeprefix("!")] is not lit.startswith("!") for lit in literals)


def test_two_guard_labels_are_the_declared_conjunctions() -> None:
    drawn = list(edges(MACHINES["execution"]))
    assert ("executing", "claim", "!ours & idempotent", "executing") in drawn
    assert ("executing", "claim", "ours", "executing") in drawn
    assert ("executing", "finish", "ours", "executed") in drawn
    assert ("absent", "claim", "", "executing") in drawn


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_table_cell_is_drawn(name: str, fmt: str) -> None:
    spec = MACHINES[name]
    text = diagram(name, fmt)
    assert text == diagram(name, fmt)  # same bytes twice: no id()-based names
    drawn = list(edges(spec))
    # Every legal (state, event, guard) cell is covered by exactly one drawn edge.
    for (state, event, value), target in spec.table.items():
        holds = spec.assignment(value)
        matches = [e for e in drawn if e[:2] == (state, event) and _enabled(e[2], holds)]
        assert [m[3] for m in matches] == [target]
    for state in spec.states:  # and no edge is drawn for an illegal cell
        for event in spec.events:
            for value in spec.guard_values:
                if (state, event, value) not in spec.table:
                    holds = spec.assignment(value)
                    assert not [
                        e for e in drawn if e[:2] == (state, event) and _enabled(e[2], holds)
                    ]
    for source, event, guard, target in drawn:
        label = f"{event} [{guard}]" if guard else event
        expected = (
            f"{source} --> {target} : {label}"
            if fmt == "mermaid"
            else f'{source} -> {target} [label="{label}"];'
        )
        assert expected in text


def test_unknown_machine_or_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        diagram("nope")
    with pytest.raises(ConfigError):
        diagram("confirmation", "svg")
