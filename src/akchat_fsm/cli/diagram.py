"""``akchat-fsm diagram``: the state machines as Mermaid or Graphviz dot text.

The text is :func:`akchat_fsm.machines.diagrams.diagram`'s, byte for byte: the same diagrams
as ``docs/machines/*.md``, drawn from the machines' derived tables.
"""

from __future__ import annotations

import click

from ..machines.diagrams import FORMATS
from ..machines.diagrams import diagram as draw
from ..machines.tables import MACHINES

__all__ = ["diagram"]


@click.command("diagram")
@click.argument("machine", required=False, metavar="[MACHINE]", type=click.Choice(sorted(MACHINES)))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="mermaid",
    show_default=True,
    help="Diagram language.",
)
def diagram(machine: str | None, fmt: str) -> None:
    """Print the diagram of MACHINE (default: every machine, separated by a blank line).

    \b
    Example:
      akchat-fsm diagram confirmation --format dot | dot -Tsvg > confirmation.svg
    """
    names = [machine] if machine is not None else sorted(MACHINES)
    click.echo("\n".join(draw(name, fmt) for name in names), nl=False)
