"""The ``akchat-fsm`` command: one click group, one module per verb.

Every failure ends as ONE line on stderr (``error: ...``) and a non-zero exit status, never a
traceback: 1 for invalid input, a non-conformant store or a failed invariant, 2 for a usage
error, an unreadable file or a store that cannot be opened (docs/cli.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

import click

from .. import __version__
from ..errors import AkchatError, StorageError
from ._common import EXIT_INVALID, EXIT_USAGE, describe, inert
from .audit import audit
from .check_storage import check_storage
from .demo import demo
from .diagram import diagram
from .inbox_cmd import inbox
from .inspect_cmd import inspect
from .pending import pending
from .reconcile import reconcile
from .schema import schema
from .settle import settle
from .show import show

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # the shell's convention for SIGINT


class _OneLineErrors(click.Group):
    """A group whose every failure is one ``error:`` line on stderr (exit codes as documented)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "akchat-fsm"
            message = f"{exc.format_message()} (see '{where} --help')"
            click.echo(f"error: {inert(' '.join(message.split()))}", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {inert(' '.join(exc.format_message().split()))}", err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(EXIT_INVALID)
        except StorageError as exc:  # the store could not be read or written: like a file
            click.echo(f"error: storage: {inert(describe(exc))}", err=True)
            sys.exit(EXIT_USAGE)
        except AkchatError as exc:
            click.echo(f"error: {inert(describe(exc))}", err=True)
            sys.exit(EXIT_INVALID)
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # the reader went away (`| head`): nothing left to say
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps the interpreter's flush quiet
            sys.exit(EXIT_INVALID)
        except Exception as exc:  # a bug must still not print a traceback at a user
            click.echo(f"error: internal error: {inert(describe(exc))}", err=True)
            sys.exit(EXIT_INVALID)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="akchat-fsm")
def main() -> None:
    """Crash-safe chat-session metadata and human approval of agent tool calls."""


for _command in (
    demo,
    check_storage,
    inspect,
    pending,
    audit,
    inbox,
    reconcile,
    settle,
    schema,
    diagram,
    show,
):
    main.add_command(_command)
