"""``akchat-fsm check-storage``: run the storage conformance kit against a real store.

The kit is :func:`akchat_fsm.testing.check_session_storage` (round trips, cursor rules,
interleavings, thread and process races, linearizable histories, error mapping, leaks); this
command only shows its progress and report. TARGET is a storage URL, or ``module:factory``
naming a zero-argument callable that returns an adapter (for adapter authors).
"""

from __future__ import annotations

import importlib
import os
import re
import tempfile
from collections.abc import Callable
from typing import Any, Literal

import click
from rich import box
from rich.console import Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ..errors import ConfigError, StorageError
from ..testing import CHECKS, CheckOutcome, ConformanceReport, check_session_storage
from ..testing.conformance import _process_factory
from ._cleanup import NotingFactory, clean_up
from ._common import (
    EXIT_INVALID,
    EXIT_USAGE,
    describe,
    fail,
    inert,
    opened_storage,
    print_renderable,
    stderr_console,
)

__all__ = ["check_storage", "resolve_target"]

_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def resolve_target(target: str) -> Callable[[], Any] | str:
    """A storage URL as is, or the callable a ``module:attribute`` spec names."""
    if "://" in target or not _FACTORY.match(target):
        return target
    module_name, _, attribute = target.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        fail(f"cannot import factory {target!r}: {describe(exc)}", EXIT_USAGE)
    if not callable(found):
        fail(f"{target!r} is not callable", EXIT_USAGE)
    return found  # type: ignore[no-any-return]


def _report(outcomes: list[CheckOutcome], ok: bool, seed: int, profile: str, cleanup: str) -> Group:
    table = Table(box=box.SIMPLE_HEAD, expand=True, title="Conformance", title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("detail", ratio=1, overflow="fold")
    for outcome in outcomes:
        label = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}[outcome.status]
        style = {"passed": "green", "failed": "bold red", "skipped": "yellow"}[outcome.status]
        table.add_row(outcome.name, Text(label, style=style), inert(outcome.detail))
    failed = sum(o.status == "failed" for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes)
    verdict = Text(
        f"{'CONFORMANT' if ok else 'NOT CONFORMANT'}: {len(outcomes)} checks, {failed} failed, "
        f"{skipped} skipped (profile {profile}, seed {seed})",
        style="bold green" if ok else "bold red",
    )
    return Group(table, verdict, Text(cleanup))


@click.command("check-storage")
@click.argument("target", metavar="URL")
@click.option("--deep", is_flag=True, help="The deep profile: longer races and histories.")
@click.option(
    "--processes/--no-processes",
    default=None,
    help="Also race separate processes (default: only for a store other processes can open).",
)
@click.option("--seed", type=int, default=None, help="Replay the workloads of an earlier run.")
@click.option(
    "--only",
    multiple=True,
    type=click.Choice(list(CHECKS)),
    help="Run only this check (repeatable).",
)
def check_storage(
    target: str, deep: bool, processes: bool | None, seed: int | None, only: tuple[str, ...]
) -> None:
    """Check that the store at URL honours the compare-and-set storage contract.

    URL is any open_storage URL, or module:factory for your own adapter. Exits 1 when the
    store is not conformant.

    \b
    Examples:
      akchat-fsm check-storage sqlite:///sessions.db
      akchat-fsm check-storage postgresql://localhost/test --deep
      akchat-fsm check-storage mypackage.storage:make_storage --no-processes
    """
    factory = resolve_target(target)
    if isinstance(factory, str):
        # A bad URL or an unreachable store is a usage error, not 23 failed checks. Adapters
        # connect lazily, so one read proves the store answers.
        with opened_storage(factory) as probe:
            try:
                probe.load("akchat-check-storage-probe")
            except StorageError as exc:
                fail(f"cannot reach storage {factory!r}: {describe(exc)}", EXIT_USAGE)
    names = list(only) or list(CHECKS)
    profile: Literal["default", "deep"] = "deep" if deep else "default"
    # The kit decides when processes race (a URL others can open); that decision is kept,
    # and the kit gets the noting factory (picklable) in place of the target.
    shared = _process_factory(factory, processes) is not None
    with tempfile.TemporaryDirectory(prefix="akchat-check-") as scratch:
        journal = os.path.join(scratch, "written")
        report = _run_kit(NotingFactory(target, journal), names, profile, shared, seed)
        cleanup = clean_up(target, journal)
    print_renderable(_report(report.results, report.ok, report.seed, profile, cleanup))
    if not report.ok:
        raise SystemExit(EXIT_INVALID)


def _run_kit(
    factory: NotingFactory,
    names: list[str],
    profile: Literal["default", "deep"],
    processes: bool,
    seed: int | None,
) -> ConformanceReport:
    console = stderr_console()
    outcomes: list[CheckOutcome] = []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=True,
    ) as progress:
        task = progress.add_task("checking", total=len(names))

        def advance(outcome: CheckOutcome) -> None:
            outcomes.append(outcome)
            progress.update(task, advance=1, description=outcome.name)

        try:
            return check_session_storage(
                factory,
                profile=profile,
                processes=processes,
                seed=seed,
                progress=advance,
                only=names,
            )
        except ConfigError as exc:
            fail(describe(exc), EXIT_USAGE)
