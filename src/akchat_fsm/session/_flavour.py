"""Ports of the wrong flavour are refused at the entry points, before any I/O.

A sync port given to the asyncio API (or the reverse), a memory that is not a memory, or a
missing method would otherwise fail later and look like something else: a storage outage
("retry is safe", so a retry loop spins forever), an invalid stored snapshot, or, worst, a
coroutine object taken for upstream's answer and recorded as a completion of a tool that never
ran. So the entry points check the methods' flavour up front (:func:`check_ports`), and the
drivers check every returned value too (:func:`wrong_flavour`), for callables whose flavour
cannot be read from their definition. Each refusal is a :class:`ConfigError` naming the right
function.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Literal

from ..errors import ConfigError

__all__ = [
    "check_memory",
    "check_storage",
    "check_upstream",
    "wrong_flavour",
    "wrong_flavour_defined",
]

Flavour = Literal["sync", "async"]
#: The function to use instead, per flavour of the *port*.
RIGHT_API = {
    "async": "resume_chat_session_async (AsyncChatSession, reconcile_async)",
    "sync": "resume_chat_session (ChatSession, reconcile)",
}
MEMORY_METHODS = ("tool_call_statuses", "load")


def wrong_flavour(port: str, *, asyncio_port: bool, right: Mapping[str, str] | None = None) -> str:
    """The message for a port *call* whose result shows the wrong flavour (the drivers' check:
    the method was called, and its result says which flavour it is). ``right`` names the
    API to use per flavour of the port (default: the session's)."""
    use = RIGHT_API if right is None else right
    if asyncio_port:
        return (
            f"{port} is asyncio (it returned an awaitable) but was given to the synchronous "
            f"API; use {use['async']}."
        )
    return (
        f"{port} is synchronous (it did not return an awaitable) but was given to the asyncio "
        f"API; use {use['sync']}."
    )


def wrong_flavour_defined(port: str, *, asyncio_port: bool) -> str:
    """The message for a port *method* defined in the wrong flavour (the entry points' check,
    read from the definition: nothing was called)."""
    if asyncio_port:
        return (
            f"{port} is a coroutine function (async def), an asyncio port, but was given to "
            f"the synchronous API; nothing was called. Use {RIGHT_API['async']}."
        )
    return (
        f"{port} is a plain function (def, not async def), a synchronous port, but was given "
        f"to the asyncio API; nothing was called. Use {RIGHT_API['sync']}."
    )


def _method_flavour(obj: object, name: str) -> Literal["missing", "sync", "async", "unknown"]:
    method = getattr(obj, name, None)
    if method is None or not callable(method):
        return "missing"
    if inspect.iscoroutinefunction(method):
        return "async"
    if inspect.ismethod(method) or inspect.isfunction(method):
        return "sync"  # a plain ``def``: an asyncio port defines its methods ``async def``
    return "unknown"  # a callable object: its results are checked by the driver


def _check(kind: str, obj: object, methods: tuple[str, ...], flavour: Flavour) -> None:
    for name in methods:
        found = _method_flavour(obj, name)
        if found == "missing":
            which = "an asyncio" if flavour == "async" else "a synchronous"
            raise ConfigError(
                f"{kind} has no callable {name}(): expected {which} {kind} port, "
                f"got {type(obj).__name__}."
            )
        if found not in (flavour, "unknown"):
            port = f"{kind}.{name}"
            raise ConfigError(wrong_flavour_defined(port, asyncio_port=found == "async"))


def check_storage(storage: object, flavour: Flavour) -> None:
    """``storage`` has ``load`` and ``save`` of ``flavour``."""
    _check("storage", storage, ("load", "save"), flavour)


def check_upstream(upstream: object, flavour: Flavour) -> None:
    """``upstream`` (when given) has ``propose_tool_call``, ``approve``, ``deny`` of ``flavour``."""
    if upstream is not None:
        _check("upstream", upstream, ("propose_tool_call", "approve", "deny"), flavour)


def check_memory(memory: object, flavour: Flavour) -> None:
    """``memory`` (when given) answers ``tool_call_statuses`` or ``load``, of ``flavour``."""
    if memory is None:
        return
    present = [name for name in MEMORY_METHODS if callable(getattr(memory, name, None))]
    if not present:
        raise ConfigError(
            "memory has neither tool_call_statuses() nor load(): expected a ChatMemory or a "
            f"ToolCallStatusMemory{' (asyncio)' if flavour == 'async' else ''}, "
            f"got {type(memory).__name__}."
        )
    # Reconcile uses the first one present: that is the one whose flavour matters.
    _check("memory", memory, (present[0],), flavour)
