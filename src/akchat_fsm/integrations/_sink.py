"""The caller's event sink of one bridge call: a streamed run's events, as the runtime emits them.

A bridge call that runs the agent (``run``, ``continue_run``, and the ``approve`` / ``reject``
/ ``edit`` / ``expire`` that continue a run) takes ``on_event=``: a callable given each of the
runtime's own event objects, in the order the runtime emits them, while the runtime runs
(ADR-0137). The sink travels with that one call to the runtime port, which then drives its
runtime's streaming API; nothing of it is stored, and the plans, the run record and the
ledger are those of a run without it.

What a sink does is the host's, and never the run's: a sink that raises (or, on a sync
bridge, returns an awaitable) is detached at once, logged on the ``akchat_fsm.integrations``
logger, and the runtime goes on to the end of its step with no one listening, so the run is stored
exactly as an unstreamed one would be and no body is cut short or run again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError

__all__ = ["EventSink", "Sink", "check_sink"]

#: ``on_event``: called with each of the runtime's events (an asyncio bridge also awaits
#: what it returns, so an ``async def`` sink is fine there).
EventSink = Callable[[Any], Any]

log = logging.getLogger("akchat_fsm.integrations")

NOT_CALLABLE = "on_event must be a callable taking one event, or None; got {kind}."
ASYNC_ON_SYNC = (
    "{bridge} calls on_event from the running agent and cannot await it; pass a plain "
    "callable, or use Async{bridge} for an async one."
)


class Sink:
    """One call's sink: delivers each event until the sink first fails, then drops the rest."""

    def __init__(self, on_event: EventSink, bridge: str) -> None:
        self.on_event = on_event
        self.bridge = bridge
        #: What the sink raised when it was detached (``None``: it never failed).
        self.failure: BaseException | None = None

    def _detach(self, exc: BaseException) -> None:
        self.failure = exc
        log.error(
            "%s: on_event raised %r; the sink is detached, the run goes on unstreamed",
            self.bridge,
            exc,
            exc_info=exc,
        )

    def __call__(self, event: Any) -> None:
        """Deliver ``event`` from a sync runtime loop (a returned awaitable is refused)."""
        if self.failure is not None:
            return
        try:
            returned = self.on_event(event)
        except Exception as exc:
            self._detach(exc)
            return
        if inspect.isawaitable(returned):
            close = getattr(returned, "close", None)
            if close is not None:
                close()  # never awaited: close it cleanly
            self._detach(ConfigError(ASYNC_ON_SYNC.format(bridge=self.bridge)))

    async def deliver(self, event: Any) -> None:
        """Deliver ``event`` from an asyncio runtime, awaiting what the sink returns."""
        if self.failure is not None:
            return
        try:
            returned = self.on_event(event)
            if inspect.isawaitable(returned):
                await returned
        except Exception as exc:
            self._detach(exc)


def check_sink(on_event: object, bridge: str, *, is_async: bool) -> Sink | None:
    """``on_event`` as a :class:`Sink` (``None``: no streaming), refused before anything runs
    when it is no callable, or an ``async def`` given to a sync bridge."""
    if on_event is None:
        return None
    if not callable(on_event):
        raise ConfigError(NOT_CALLABLE.format(kind=type(on_event).__name__))
    if not is_async and inspect.iscoroutinefunction(on_event):
        raise ConfigError(ASYNC_ON_SYNC.format(bridge=bridge))
    return Sink(on_event, bridge)
