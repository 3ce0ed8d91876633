"""Deterministic diagrams of the machines, drawn from the derived tables.

``diagram(name, fmt)`` returns Mermaid (``stateDiagram-v2``) or Graphviz dot text; the same
input always gives the same bytes (python-statemachine's own dot output embeds ``id()`` s).
``python -m akchat_fsm.machines.diagrams --write`` regenerates ``docs/machines/*.md``;
``--check`` exits 1 when those files drifted.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .tables import MACHINES, MachineSpec

__all__ = ["FORMATS", "diagram", "edges", "markdown_page"]

FORMATS = ("mermaid", "dot")
# Relative to the repository root (the working directory of ``--write`` / ``--check``).
_DOCS = Path("docs") / "machines"


def _conjunctions(guards: tuple[str, ...]) -> list[tuple[tuple[str, bool], ...]]:
    """Every conjunction of guard literals, fewest literals first, then in guard order."""
    out: list[tuple[tuple[str, bool], ...]] = [()]
    for size in range(1, len(guards) + 1):
        for names in itertools.combinations(guards, size):
            for values in itertools.product((True, False), repeat=size):
                out.append(tuple(zip(names, values, strict=True)))
    return out


def _cover(spec: MachineSpec[Any, Any], values: list[Any]) -> list[str]:
    """Labels of disjoint guard conjunctions that together hold for exactly ``values``."""
    wanted = set(values)
    covered: set[Any] = set()
    labels = []
    for conjunction in _conjunctions(spec.guards):
        holds = {
            value
            for value in spec.guard_values
            if all(spec.assignment(value)[name] is want for name, want in conjunction)
        }
        if holds and holds <= wanted and not holds & covered:
            covered |= holds
            labels.append(" & ".join(name if want else f"!{name}" for name, want in conjunction))
        if covered == wanted:
            break
    return labels


def edges(spec: MachineSpec[Any, Any]) -> Iterator[tuple[str, str, str, str]]:
    """(source, event, guard label, target) in a stable order: states, then events, enum order.

    The guard label is ``""`` when every guard value leads to the same target, otherwise the
    guard literals (``guard``, ``!guard``, joined by ``&``) under which the edge is enabled;
    a target reached under guard values no one conjunction names gets one edge per conjunction.
    """
    for state in spec.states:
        for event in spec.events:
            targets = {v: spec.table.get((state, event, v)) for v in spec.guard_values}
            found = [t for t in targets.values() if t is not None]
            if len(found) == len(targets) and len(set(found)) == 1:
                yield str(state), str(event), "", str(found[0])
                continue
            for target in dict.fromkeys(found):
                for label in _cover(spec, [v for v, t in targets.items() if t == target]):
                    yield str(state), str(event), label, str(target)


def _label(event: str, guard: str) -> str:
    return f"{event} [{guard}]" if guard else event


def _mermaid(spec: MachineSpec[Any, Any]) -> str:
    lines = ["stateDiagram-v2", "    direction LR", f"    [*] --> {spec.initial}"]
    lines += [f"    {s} --> {t} : {_label(e, g)}" for s, e, g, t in edges(spec)]
    lines += [f"    {final} --> [*]" for final in spec.states if final in spec.finals]
    return "\n".join(lines) + "\n"


def _dot(spec: MachineSpec[Any, Any]) -> str:
    lines = [
        f"digraph {spec.name} {{",
        "    rankdir=LR;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        "    __start [shape=point];",
        f"    __start -> {spec.initial};",
    ]
    lines += [f"    {final} [peripheries=2];" for final in spec.states if final in spec.finals]
    lines += [f'    {s} -> {t} [label="{_label(e, g)}"];' for s, e, g, t in edges(spec)]
    return "\n".join([*lines, "}"]) + "\n"


def diagram(machine_name: str, fmt: str = "mermaid") -> str:
    """The diagram of machine ``machine_name`` (see ``MACHINES``) as ``fmt`` text."""
    spec = MACHINES.get(machine_name)
    if spec is None:
        raise ConfigError(
            f"Unknown machine {machine_name!r}.", hint=f"One of: {', '.join(sorted(MACHINES))}."
        )
    if fmt == "mermaid":
        return _mermaid(spec)
    if fmt == "dot":
        return _dot(spec)
    raise ConfigError(f"Unknown diagram format {fmt!r}.", hint=f"One of: {', '.join(FORMATS)}.")


def _guard_sentence(spec: MachineSpec[Any, Any]) -> str:
    if len(spec.guards) == 1:
        return f"Guard: the model's boolean `{spec.guards[0]}`."
    names = ", ".join(f"`{g}`" for g in spec.guards)
    return f"Guards: the model's booleans {names} (a label lists those an edge needs)."


def markdown_page(machine_name: str) -> str:
    """The generated ``docs/machines/<name>.md``: the diagram and the full table."""
    spec = MACHINES[machine_name]
    finals = ", ".join(f"`{s}`" for s in spec.states if s in spec.finals) or "none"
    rows = [f"| `{s}` | `{e}` | {f'`{g}`' if g else 'any'} | `{t}` |" for s, e, g, t in edges(spec)]
    return "\n".join(
        [
            f"# Machine `{spec.name}` (`{spec.machine.__name__}`)",
            "",
            "<!-- Generated by `python -m akchat_fsm.machines.diagrams --write`; do not edit. -->",
            "",
            f"{_guard_sentence(spec)} Initial state: `{spec.initial}`. "
            f"Final states: {finals}."
            f" Any (state, event, {'guard' if len(spec.guards) == 1 else 'guards'}) not listed"
            " is illegal and raises `IllegalTransition`.",
            "",
            "```mermaid",
            _mermaid(spec).rstrip("\n"),
            "```",
            "",
            "| from | event | guard | to |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate or check docs/machines/*.md.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="rewrite the generated pages")
    group.add_argument("--check", action="store_true", help="exit 1 if a page drifted")
    parser.add_argument("--docs", type=Path, default=_DOCS)
    args = parser.parse_args(argv)
    drifted = []
    for name in sorted(MACHINES):
        path = args.docs / f"{name}.md"
        page = markdown_page(name)
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(page, encoding="utf-8")
        elif not path.exists() or path.read_text(encoding="utf-8") != page:
            drifted.append(path)
    for path in drifted:
        print(f"drifted: {path}", file=sys.stderr)
    return 1 if drifted else 0


if __name__ == "__main__":
    raise SystemExit(main())
