"""Keeping a continuation's lease while its tool bodies run (ADR-0106, items 5 and 7).

A bridge built with ``lease_ms`` claims a continuation until ``now + lease_ms``; a sweep takes
over only a run whose lease has passed. The claim is renewed before each tool body, and, while
a body runs, every third of the lease by a keeper thread, so a live owner's long body keeps the
run and only a dead (or stalled) owner's run is taken over.

Why a thread, and not a task on the guard's event loop: a sync body may block the loop the
guard runs on (a sync LangGraph graph gives each body a loop of its own and calls the body on
it), and a task on a blocked loop never runs. The keeper renews through the sync driver on the
bridge's own storage when that storage is sync (every shipped sync adapter serialises its
calls under a lock, so a second thread is safe); an asyncio storage belongs to its loop, so
the keeper hands each renewal to that loop (an asyncio body that blocks its loop blocks the
renewal too: such a body should be ``async`` or run in a thread, as the runtimes do for plain
functions).

The renewal is the same plan as the one before each body (a CAS on the run record that
re-reads on conflict and raises :class:`RunClaimLost` when the claim is no longer ours). The
keeper stops for good when the claim is lost (the body runs on and records its outcome against
its own ledger claim; the continuation learns at its next renewal or at its final save) and
tries again at the next tick after a transient storage error. It is stopped, and joined, before
the body's execution returns, so it never races the continuation's own saves after the bodies.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..errors import AkchatError, ConfigError
from ..session.drivers import Ports, run_async, run_sync
from ._bridge_io import Plan, sync_records
from ._bridge_runs import RunClaimLost

__all__ = ["BodyLease", "renewal_interval_s"]

log = logging.getLogger(__name__)


def renewal_interval_s(lease_ms: int) -> float:
    """Seconds between renewals while a body runs: a third of the lease, so two renewals in
    a row may fail (a storage hiccup) before the lease passes."""
    return lease_ms / 3 / 1000


class BodyLease:
    """Our continuation's claim on a run: renewed before each body (:meth:`renew`) and kept
    alive while one runs (:meth:`kept`)."""

    def __init__(self, plan: Callable[[], Plan[None]], io: Any, lease_ms: int) -> None:
        self._plan = plan
        self._io = io
        self.interval_s = renewal_interval_s(lease_ms)

    async def renew(self) -> None:
        """Renew once, now; :class:`RunClaimLost` if the claim is no longer ours."""
        await run_async(self._plan(), Ports(self._io))

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        """Renew every :attr:`interval_s` until the block ends (then stop and join)."""
        stop = threading.Event()
        keeper = threading.Thread(
            target=self._keep, args=(stop, self._renew_once()), name="akchat-lease", daemon=True
        )
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            # Joined off the loop: an asyncio storage's renewal in flight needs the loop free.
            await asyncio.to_thread(keeper.join)

    def _renew_once(self) -> Callable[[], None]:
        inner = sync_records(self._io)
        if inner is not None:
            return lambda: run_sync(self._plan(), Ports(inner))
        loop = asyncio.get_running_loop()
        return lambda: asyncio.run_coroutine_threadsafe(self.renew(), loop).result()

    def _keep(self, stop: threading.Event, renew_once: Callable[[], None]) -> None:
        while not stop.wait(self.interval_s):
            try:
                renew_once()
            except (RunClaimLost, ConfigError):
                return  # not ours any more, or a record no renewal can fix: stop renewing
            except AkchatError:
                continue  # the store is unreachable or busy: the lease still holds; retry
            except Exception:  # never let the keeper die loudly inside a host's body
                log.exception("renewing the continuation's lease failed; renewal stopped")
                return
