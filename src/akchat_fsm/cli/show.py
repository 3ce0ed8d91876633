"""``akchat-fsm show SNAPSHOT``: render a controlled snapshot for a human.

The snapshot is validated exactly as the driver validates it (strict shell, then canonical
messages). On invalid input one line goes to stderr, ``error: <layer>: <reason>``, and the exit
status is 1; an unreadable file exits 2. Nothing else is printed in either case. Input is read up
to 64 MiB (``_common.MAX_INPUT_BYTES``); a longer one stops there with one line (exit 1).

Output is deterministic when stdout is not a terminal: fixed width (100 columns unless
``--width``), no colour, no markup interpretation. Untrusted text is shown inert: terminal
control characters are escaped and lone surrogates replaced, so a snapshot cannot drive the
terminal.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, NoReturn

import click
from rich import box
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..errors import InvalidControlledSnapshot
from ..wire.controlled import ControlledSnapshot, parse_controlled_snapshot
from ..wire.memory import Message, ToolCallStatus, thaw_json
from ._common import DEFAULT_WIDTH, CliFailure, flush, inert, read_source, stdout_console

__all__ = ["show"]

MAX_SHOWN_UNITS = 1_000  # longer contents are cut for display only


def _cut(text: str) -> str:
    if len(text) <= MAX_SHOWN_UNITS:
        return inert(text)
    return f"{inert(text[:MAX_SHOWN_UNITS])}… (+{len(text) - MAX_SHOWN_UNITS} chars)"


def _json(value: Any) -> str:
    return _cut(json.dumps(thaw_json(value), ensure_ascii=False, sort_keys=True))


def _header(snap: ControlledSnapshot) -> Text:
    text = Text()
    text.append("Controlled chat ", style="bold")
    text.append(inert(snap.session_id), style="bold cyan")
    text.append(f"  status: {snap.status.value}  messages: {len(snap.messages)}")
    return text


def _message_table(messages: tuple[Message, ...]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, expand=True, title="Messages", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("role", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("created (UTC)", no_wrap=True)
    table.add_column("id / content", ratio=1, overflow="fold")
    for index, message in enumerate(messages, start=1):
        body = Text(inert(message.id), style="dim")
        body.append("\n")
        body.append(_cut(message.content) if message.content else "(empty)")
        for part in message.parts or ():
            described = part.text if part.type == "text" else getattr(part, "source", "")
            body.append(f"\n[{part.type}] {_cut(described)}", style="italic")
        table.add_row(
            str(index),
            message.role.value,
            message.status.value,
            message.created_at_iso,
            body,
        )
    return table


def _tool_table(messages: tuple[Message, ...]) -> Table | None:
    rows = [(m, c) for m in messages for c in m.tool_calls or ()]
    if not rows:
        return None
    table = Table(box=box.SIMPLE_HEAD, expand=True, title="Tool calls", title_justify="left")
    table.add_column("message", no_wrap=True, overflow="fold")
    table.add_column("call", overflow="fold")
    table.add_column("name", overflow="fold")
    table.add_column("status", no_wrap=True)
    table.add_column("args / result", ratio=1, overflow="fold")
    for message, call in rows:
        awaiting = call.status is ToolCallStatus.REQUIRES_CONFIRMATION
        status = Text(
            "AWAITING CONFIRMATION" if awaiting else call.status.value,
            style="bold yellow" if awaiting else "",
        )
        detail = Text(_json(call.args))
        if call.result is not None:
            detail.append(f"\nresult: {_cut(call.result)}")
        if call.error is not None:
            detail.append(f"\nerror: {_cut(call.error)}", style="red")
        table.add_row(inert(message.id), inert(call.id), inert(call.name), status, detail)
    return table


def render(snap: ControlledSnapshot) -> RenderableType:
    """The whole view of one snapshot, as one rich renderable."""
    parts: list[RenderableType] = [_header(snap)]
    if snap.error is not None:
        banner = Text(f"{inert(snap.error.name)}: {_cut(snap.error.message)}")
        parts.append(Panel(banner, title="error", title_align="left", style="bold red"))
    parts.append(_message_table(snap.messages))
    tools = _tool_table(snap.messages)
    if tools is not None:
        parts.append(tools)
    awaiting = [
        c.id
        for m in snap.messages
        for c in m.tool_calls or ()
        if c.status.value == "requires_confirmation"
    ]
    if awaiting:
        parts.append(Text(f"Awaiting confirmation: {', '.join(inert(i) for i in awaiting)}"))
    parts.append(Text(f"Draft input: {json.dumps(_cut(snap.input), ensure_ascii=False)}"))
    usage = snap.usage
    parts.append(
        Text(
            f"Usage: prompt {usage.prompt_tokens}, completion {usage.completion_tokens}, "
            f"total {usage.total_tokens}"
        )
    )
    return Group(*parts)


_LINE_BREAKS = re.compile("[\t\n\u2028\u2029]")


def _fail(message: str, code: int) -> NoReturn:
    # One line whatever the reason quotes: line breaks are escaped like other controls.
    line = _LINE_BREAKS.sub(lambda m: ascii(m.group())[1:-1], inert(message))
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


@click.command("show")
@click.argument("snapshot", metavar="SNAPSHOT")
@click.option(
    "--width",
    type=click.IntRange(40, 1000),
    default=None,
    help=f"Output width in columns (default: the terminal's, {DEFAULT_WIDTH} when not a TTY).",
)
def show(snapshot: str, width: int | None) -> None:
    """Render a controlled-chat SNAPSHOT file (``-`` for stdin) after validating it."""
    try:
        data = read_source(snapshot)  # at most MAX_INPUT_BYTES; an unreadable file exits 2
    except CliFailure as exc:  # one line, line breaks in the file name escaped too
        _fail(exc.message, exc.exit_code)
    try:
        parsed = parse_controlled_snapshot(data)
    except InvalidControlledSnapshot as exc:
        reason = exc.message
        notes = getattr(exc, "__notes__", ())
        if notes:
            reason = f"{reason.rstrip('.')}: {notes[0]}"
        _fail(f"{exc.layer}: {reason}", 1)
    console, buffer, tty = stdout_console(width)
    console.print(render(parsed))
    flush(buffer, tty)
