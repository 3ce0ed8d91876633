"""What every verb shares: one-line failures with exit codes, consoles, input reading, storage.

Exit codes (docs/cli.md): 0 success; 1 invalid input, not conformant, or an invariant failed;
2 usage error, unreadable file, or a store that cannot be opened or reached.
"""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

import click
from rich.console import Console, RenderableType

from ..errors import AkchatError, ConfigError, StorageError
from ..storage import open_storage
from ..storage.port import ManagedSessionStorage

__all__ = [
    "DEFAULT_WIDTH",
    "EXIT_INVALID",
    "EXIT_USAGE",
    "CliFailure",
    "CliUsageFailure",
    "describe",
    "fail",
    "inert",
    "opened_storage",
    "print_renderable",
    "read_source",
    "stdout_console",
]

EXIT_INVALID = 1
EXIT_USAGE = 2

#: Columns when stdout is not a terminal (stable files and diffs).
DEFAULT_WIDTH = 100

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    """Untrusted text made safe for a terminal: control characters escaped, lone surrogates
    replaced (a snapshot or an envelope must never drive the user's terminal)."""
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class CliFailure(click.ClickException):
    """A failure reported as one ``error: ...`` line on stderr with a chosen exit code."""

    exit_code = EXIT_INVALID

    def __init__(self, message: str) -> None:
        super().__init__(inert(message))


class CliUsageFailure(CliFailure):
    """A usage error, an unreadable file or an unreachable store (exit status 2)."""

    exit_code = EXIT_USAGE


def fail(message: str, code: int = EXIT_INVALID) -> NoReturn:
    """Stop the verb: one ``error:`` line on stderr, exit ``code`` (1 or 2)."""
    raise CliUsageFailure(message) if code == EXIT_USAGE else CliFailure(message)


def describe(exc: BaseException) -> str:
    """One line for an error: its message, a hint if it has one, never a traceback."""
    text = str(exc) or type(exc).__name__
    code = getattr(exc, "code", None)
    if isinstance(exc, AkchatError) and isinstance(code, str) and code not in text:
        text = f"{code}: {text}"
    notes = getattr(exc, "__notes__", ())
    if notes:
        text = f"{text.rstrip('.')}: {notes[0]}"
    hint = getattr(exc, "hint", None)
    if isinstance(hint, str) and hint:
        text = f"{text} ({hint})"
    return " ".join(text.split())


def read_source(source: str) -> bytes:
    """The bytes of a file, or of stdin for ``-``; an unreadable file exits 2."""
    try:
        if source == "-":
            return sys.stdin.buffer.read()
        with open(source, "rb") as handle:
            return handle.read()
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or exc}", EXIT_USAGE)


@contextmanager
def opened_storage(url: str) -> Iterator[ManagedSessionStorage]:
    """``open_storage(url)``, closed afterwards; a bad URL or an unreachable store exits 2."""
    try:
        storage = open_storage(url)
    except (ConfigError, StorageError) as exc:
        fail(f"cannot open storage {url!r}: {describe(exc)}", EXIT_USAGE)
    try:
        yield storage
    finally:
        with suppress(Exception):  # closing is best effort; the verb's outcome stands
            storage.close()


def _console(file: Any, tty: bool, width: int | None = None) -> Console:
    return Console(
        file=file,
        width=width or (None if tty else DEFAULT_WIDTH),
        force_terminal=tty,
        color_system="auto" if tty else None,
        highlight=False,
        markup=False,
        emoji=False,
        legacy_windows=False,
    )


def stdout_console(width: int | None = None) -> tuple[Console, io.StringIO, bool]:
    """A console writing to a buffer: colour on a TTY, plain fixed-width text otherwise.

    ``width``: columns (default: the terminal's, or 100 off a TTY). Pair with :func:`flush`.
    """
    tty = sys.stdout.isatty()
    buffer = io.StringIO()
    return _console(buffer, tty, width), buffer, tty


def flush(buffer: io.StringIO, tty: bool) -> None:
    """Echo a console buffer; off a TTY, trailing padding is stripped (stable files, diffs)."""
    text = buffer.getvalue()
    if not tty:
        text = "".join(line.rstrip() + "\n" for line in text.splitlines())
    click.echo(text, nl=False)


def print_renderable(renderable: RenderableType) -> None:
    """Print one rich renderable to stdout, deterministically when stdout is not a TTY."""
    console, buffer, tty = stdout_console()
    console.print(renderable)
    flush(buffer, tty)


def stderr_console() -> Console:
    """A console on stderr (progress bars): live only when stderr is a terminal."""
    return _console(sys.stderr, sys.stderr.isatty())
