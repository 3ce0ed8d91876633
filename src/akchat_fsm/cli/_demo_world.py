"""The demo's host side: one upstream chat controller with its canonical memory, a clock, ids.

:class:`DemoUpstream` is what a real host's chat controller does, in memory: it keeps canonical
messages (``ChatMemory.load`` returns a memory record), proposes tool calls that require
confirmation, and executes ``approve``/``deny`` only while a call is still
``requires_confirmation`` (upstream's own idempotency). It counts every call it *receives*, so
the demo can check that akchat-fsm never sent a second one.

A client's view of it is a :class:`ClientUpstream`, which can simulate that client's process
dying just before or just after the upstream call (:class:`ClientCrashed`, a ``BaseException``
so that nothing in the library can catch it and tidy up: the client object is simply abandoned,
as a killed process would be).
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..core import iso_ms
from ..session.ports import ToolCallProposal

__all__ = ["ClientCrashed", "ClientUpstream", "DemoClock", "DemoUpstream", "id_maker"]

#: 2026-07-11T00:00:00.000Z, the reference's example date; the demo clock starts there.
EPOCH_MS = 1_783_728_000_000
TICK_MS = 250

Crash = Literal["before_upstream", "after_upstream"] | None


class ClientCrashed(BaseException):  # a simulated process death, not an error
    """The simulated death of one client process (never caught by the library)."""


@dataclass
class DemoClock:
    """Deterministic epoch milliseconds: each reading advances by :data:`TICK_MS`."""

    now_ms: int = EPOCH_MS

    def __call__(self) -> int:
        self.now_ms += TICK_MS
        return self.now_ms

    def iso(self) -> str:
        return iso_ms(self.now_ms)


def id_maker(seed: int) -> Callable[[], str]:
    """Confirmation id suffixes from ``seed``: the same seed gives the same tokens."""
    rng = random.Random(seed)
    return lambda: f"{rng.getrandbits(48):012x}"


@dataclass
class DemoUpstream:
    """Upstream chat controller + ``ChatMemory`` in one object (sync ports)."""

    clock: DemoClock
    messages: list[dict[str, Any]] = field(default_factory=list)
    approve_calls: Counter[str] = field(default_factory=Counter)
    deny_calls: Counter[str] = field(default_factory=Counter)
    #: Called with the tool-call id at the start of an approve, to interleave another client.
    during_approve: Callable[[str], None] | None = None

    def _call(self, tool_call_id: str) -> dict[str, Any] | None:
        for message in self.messages:
            for call in message.get("toolCalls", ()):
                if call["id"] == tool_call_id:
                    return call  # type: ignore[no-any-return]
        return None

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        existing = self._call(id)
        if existing is None:
            self.clock()
            existing = {
                "id": id,
                "name": name,
                "args": copy.deepcopy(dict(args)),
                "status": "requires_confirmation",
            }
            self.messages.append(
                {
                    "id": f"msg-{len(self.messages) + 1}",
                    "role": "assistant",
                    "content": "",
                    "status": "complete",
                    "createdAt": self.clock.iso(),
                    "toolCalls": [existing],
                }
            )
        return ToolCallProposal(
            existing["id"], existing["name"], existing["args"], existing["status"]
        )

    def approve(self, tool_call_id: str) -> None:
        self.approve_calls[tool_call_id] += 1
        hook, self.during_approve = self.during_approve, None
        if hook is not None:
            hook(tool_call_id)
        call = self._call(tool_call_id)
        if call is not None and call["status"] == "requires_confirmation":
            call["status"], call["result"] = "complete", "done"

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.deny_calls[tool_call_id] += 1
        call = self._call(tool_call_id)
        if call is not None and call["status"] == "requires_confirmation":
            call["status"], call["error"] = "error", reason

    def load(self) -> dict[str, Any]:
        """``ChatMemory.load``: the canonical memory record, as a copy."""
        return {"version": 1, "messages": copy.deepcopy(self.messages)}

    def tool_status(self, tool_call_id: str) -> str:
        call = self._call(tool_call_id)
        return "missing" if call is None else str(call["status"])


@dataclass
class ClientUpstream:
    """One client's handle on the shared upstream, optionally dying around one call."""

    shared: DemoUpstream
    crash: Crash = None

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self.shared.propose_tool_call(id, name, args)

    def _resolve(self, act: Callable[[], None]) -> None:
        if self.crash == "before_upstream":
            raise ClientCrashed("died after its claim was saved, before calling upstream")
        act()
        if self.crash == "after_upstream":
            raise ClientCrashed("died after upstream acted, before recording the result")

    def approve(self, tool_call_id: str) -> None:
        self._resolve(lambda: self.shared.approve(tool_call_id))

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._resolve(lambda: self.shared.deny(tool_call_id, reason))
