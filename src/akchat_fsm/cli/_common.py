"""What every verb shares: one-line failures with exit codes, consoles, input reading, storage.

Exit codes (docs/cli.md): 0 success; 1 invalid input, not conformant, or an invariant failed;
2 usage error, unreadable file, or a store that cannot be opened or reached; 3 (``reconcile``)
work is left for a person or for one more command, each printed as its exact next step.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, NoReturn

import click
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.table import Table

from ..errors import AkchatError, ConfigError, StorageError
from ..storage import open_storage
from ..storage.port import ManagedSessionStorage
from ._existing import MissingStore, check_exists

__all__ = [
    "DEFAULT_WIDTH",
    "EXIT_INVALID",
    "EXIT_NEEDS_PERSON",
    "EXIT_USAGE",
    "MAX_INPUT_BYTES",
    "MAX_INPUT_DEPTH",
    "CliFailure",
    "CliUsageFailure",
    "InputTooDeep",
    "InputTooLarge",
    "describe",
    "fail",
    "inert",
    "inert_json",
    "load_callable",
    "opened_storage",
    "pinned_rows",
    "print_renderable",
    "read_source",
    "stdout_console",
]

EXIT_INVALID = 1
EXIT_USAGE = 2
#: ``reconcile``: the store still holds work that needs a person or one more command (an
#: execution to settle, a decision to make, a memory file or a bridge to sweep with); every
#: piece of it is printed with its exact next step.
EXIT_NEEDS_PERSON = 3

#: The session id a read-only verb loads once to check its store before using it.
_PROBE_ID = "akchat-fsm-read-only-probe"

#: Columns when stdout is not a terminal (stable files and diffs).
DEFAULT_WIDTH = 100

#: The most a verb reads from a file or stdin (64 MiB): an endless or huge input (``/dev/zero``)
#: ends with :class:`InputTooLarge` after that much, never by exhausting memory.
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: The deepest nesting of arrays and objects a verb accepts: far above anything the library
#: reads (an envelope's inputs stop at 20 levels, a stored record at 512), and checked before
#: any parse, so a small file nested millions deep costs a scan of its first brackets, never a
#: parse of the whole (that took 29 s and 1.6 GB for 20 MB nested 10^7 deep).
MAX_INPUT_DEPTH = 512
_NESTING = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What json.dumps(ensure_ascii=False) leaves raw but a terminal must never receive: DEL and
# the C1 controls (U+009B is a CSI), the line/paragraph separators, and lone surrogates
# (escaped as JSON.stringify does). C0 controls are always escaped by json.dumps itself.
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def inert(text: str) -> str:
    """Untrusted text made safe for a terminal: control characters escaped, lone surrogates
    replaced (a snapshot or an envelope must never drive the user's terminal)."""
    text = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def inert_json(text: str) -> str:
    """JSON text with every control character escaped as ``\\uXXXX``: still the same JSON
    value, and nothing in it can drive a terminal."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


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


_SPEC = re.compile(r"[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*")


def load_callable(spec: str, option: str) -> Any:
    """The callable ``module:attribute`` names (``attribute`` may be dotted), imported from the
    current environment with the working directory on the path, as an ASGI server names an app.

    Anything wrong with ``spec`` (no colon, a module that cannot be imported, a missing
    attribute, something not callable) is one usage line, exit 2, never a traceback: a host
    module that raises while importing is reported with its error, too.
    """
    if not _SPEC.fullmatch(spec):
        fail(
            f"{option} {spec!r} is not module:callable (e.g. myhost.bridges:bridge_for)", EXIT_USAGE
        )
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or the host module failing at import time
        fail(f"{option} {spec!r}: cannot import {module_name!r}: {describe(exc)}", EXIT_USAGE)
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            fail(f"{option} {spec!r}: {module_name!r} has no attribute {attribute!r}", EXIT_USAGE)
    if not callable(found):
        fail(f"{option} {spec!r} is not callable (it is a {type(found).__name__})", EXIT_USAGE)
    return found


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


class InputTooLarge(CliFailure):
    """A file or stdin holds more than :data:`MAX_INPUT_BYTES`; reading stopped there."""


class InputTooDeep(CliFailure):
    """A file or stdin nests arrays or objects deeper than :data:`MAX_INPUT_DEPTH`."""


def _too_deep(data: bytes) -> bool:
    """Whether ``data`` nests deeper than :data:`MAX_INPUT_DEPTH` (strings skipped).

    Stops at the first bracket past the limit; a text with too few brackets to be that deep
    is not scanned at all.
    """
    if data.count(b"[") + data.count(b"{") <= MAX_INPUT_DEPTH:
        return False
    depth = 0
    for match in _NESTING.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > MAX_INPUT_DEPTH:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def read_source(source: str) -> bytes:
    """The bytes of a file, or of stdin for ``-``, at most :data:`MAX_INPUT_BYTES` of them.

    An unreadable file exits 2; a longer input exits 1 with :class:`InputTooLarge` after
    reading one byte past the limit (so memory stays bounded whatever the input is), and a
    deeper one with :class:`InputTooDeep` before anything parses it.
    """
    limit = MAX_INPUT_BYTES
    try:
        if source == "-":
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(source, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as exc:
        fail(f"cannot read {source}: {exc.strerror or exc}", EXIT_USAGE)
    if len(data) > limit:
        raise InputTooLarge(f"{source}: input larger than {limit} bytes; stopped reading there")
    if _too_deep(data):
        raise InputTooDeep(
            f"{source}: nested deeper than {MAX_INPUT_DEPTH} levels; refused before parsing "
            "(no envelope, memory record or snapshot is)"
        )
    return data


@contextmanager
def opened_storage(
    url: str, *, create: bool = True, read_only: bool = False
) -> Iterator[ManagedSessionStorage]:
    """``open_storage(url)``, closed afterwards; a bad URL or an unreachable store exits 2.

    ``create=False`` (verbs that write into an existing store): a store that does not exist
    exits 2 and is not created (see :mod:`._existing`), and it is read once here, so a table
    of the wrong shape exits 2 too. ``read_only=True`` (``inspect``, a dry run): also that,
    and the adapter is opened read-only, so nothing in the store changes whatever it finds.
    """
    try:
        storage = open_storage(url, read_only=read_only)
    except (ConfigError, StorageError) as exc:
        fail(f"cannot open storage {url!r}: {describe(exc)}", EXIT_USAGE)
    existing = read_only or not create  # a store the verb reads or writes, never makes
    if existing:
        try:
            check_exists(url, storage)
        except (MissingStore, StorageError) as exc:
            with suppress(Exception):
                storage.close()
            fail(f"no store at {url}: {describe(exc)}", EXIT_USAGE)
    if existing:
        try:
            storage.load(_PROBE_ID)  # connects and checks the table's shape, reading only
        except (ConfigError, StorageError) as exc:
            with suppress(Exception):
                storage.close()
            fail(f"cannot read storage {url!r}: {describe(exc)}", EXIT_USAGE)
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


def pinned_rows(table: Table, rows: Iterable[Sequence[str]]) -> Table:
    """Add ``rows`` to ``table`` and pin every ``no_wrap`` column at its widest cell, so rich
    never shrinks (cuts) a token or an id; :func:`print_renderable` widens the line instead."""
    rows = [tuple(row) for row in rows]
    for index, column in enumerate(table.columns):
        if column.no_wrap:
            cells = [cell_len(str(column.header)), *(cell_len(row[index]) for row in rows)]
            column.min_width = max(cells)
    for row in rows:
        table.add_row(*row)
    return table


#: Wider than any terminal: measuring at this width finds a renderable's natural minimum.
_UNBOUNDED = 10_000


def print_renderable(renderable: RenderableType, width: int | None = None) -> None:
    """Print one rich renderable to stdout, deterministically when stdout is not a TTY.

    Lines are made as wide as the renderable's minimum needs, even past ``width`` (the
    terminal's, or 100): a column that must not wrap (tokens, ids) is never broken or cut,
    so a copied token works; the terminal folds the long line instead. Tables that should
    behave so are built with ``expand=False`` and ``no_wrap`` id columns.
    """
    console, buffer, tty = stdout_console(width)
    needed = Measurement.get(console, console.options.update_width(_UNBOUNDED), renderable)
    if console.width < needed.minimum < _UNBOUNDED:
        console, buffer, tty = stdout_console(needed.minimum)
    console.print(renderable)
    flush(buffer, tty)


def stderr_console() -> Console:
    """A console on stderr (progress bars): live only when stderr is a terminal."""
    return _console(sys.stderr, sys.stderr.isatty())
