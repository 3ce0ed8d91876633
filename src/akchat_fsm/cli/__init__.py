"""The ``akchat-fsm`` command: one click group, one module per verb."""

from __future__ import annotations

import click

from .. import __version__

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="akchat-fsm")
def main() -> None:
    """Crash-safe chat-session metadata and human approval of agent tool calls."""
