"""``akchat-fsm inspect``: decode, validate and show one session envelope.

Two forms: ``inspect URL SESSION_ID`` reads what a store holds; ``inspect FILE`` (``-`` for
stdin) reads a JSON document. Invalid envelopes exit 1 with the reference's diagnostic.
"""

from __future__ import annotations

import click

from ._common import (
    DEFAULT_WIDTH,
    EXIT_USAGE,
    fail,
    opened_storage,
    print_renderable,
    read_source,
)
from ._envelope import Decoded, decode_or_fail, load_or_fail, render_snapshot, wire_json

__all__ = ["inspect"]


@click.command("inspect")
@click.argument("source", metavar="URL SESSION_ID | FILE")
@click.argument("session_id", required=False, metavar="")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the canonical wire JSON instead (control characters escaped).",
)
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help=f"Output width in columns (default: the terminal's, {DEFAULT_WIDTH} when not a TTY); "
    "rows whose tokens or ids need more are printed wider, never wrapped.",
)
def inspect(source: str, session_id: str | None, as_json: bool, width: int | None) -> None:
    """Show a session envelope: from a store (URL SESSION_ID) or a FILE (- for stdin).

    Confirmations are grouped by status; the turn lease, terminal turns, conversation state,
    decision count, cursor and updatedAt are shown, and a v0 input is flagged as migrated.
    Read-only: a store that does not exist is reported, never created. A FILE is read up to
    64 MiB.

    \b
    Examples:
      akchat-fsm inspect sqlite:///sessions.db support-42
      akchat-fsm inspect snapshot.json --json
    """
    if session_id is None:
        if "://" in source:
            fail("a storage URL needs a SESSION_ID: inspect URL SESSION_ID", EXIT_USAGE)
        decoded: Decoded = decode_or_fail(read_source(source), source)
    else:
        with opened_storage(source, create=False) as storage:
            decoded = load_or_fail(storage, session_id, source)
    if as_json:
        click.echo(wire_json(decoded.snapshot))
    else:
        print_renderable(render_snapshot(decoded), width)
