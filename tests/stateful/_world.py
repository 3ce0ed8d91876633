"""The world the stateful suites run in: a counting upstream, its memory, a recording storage,
and a stepper that runs one plan effect at a time.

Nothing here decides anything about confirmations: the clients run the library's real plans
(``akchat_fsm.session._confirm`` / ``_ops``) and the stepper only performs their effects,
possibly with a fault, so a rule can stop a client between any two steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from akchat_fsm.errors import AkchatError
from akchat_fsm.session.drivers import Ports, execute_sync
from akchat_fsm.session.effects import Plan, Save
from akchat_fsm.session.ports import ToolCallProposal
from akchat_fsm.wire.session import SessionSnapshot


class UpstreamBoom(RuntimeError):
    """What a failing upstream raises."""


@dataclass
class FakeUpstream:
    """An upstream chat controller that counts every approve/deny per tool call.

    ``status`` is each tool call's upstream status, exactly what memory reports: a call acts
    (``complete`` after approve, ``error`` after deny) only while it is
    ``requires_confirmation``, like the real controller. ``calls`` counts *calls*, acted or
    not: the suites assert it never exceeds one per tool call. ``log`` is append-only.
    """

    status: dict[str, str] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    calls: Counter[str] = field(default_factory=Counter)
    acted: dict[str, str] = field(default_factory=dict)  # tool call -> "approve" | "deny"
    log: list[tuple[str, str, str]] = field(default_factory=list)
    born_other: set[str] = field(
        default_factory=set
    )  # proposals returned not requiring confirmation

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        if id not in self.status:
            # Every third proposal comes back already handled: the binding is born rejected.
            handled = len(self.status) % 3 == 2
            self.status[id] = "complete" if handled else "requires_confirmation"
            self.names[id] = name
            if handled:
                self.born_other.add(id)
        self.log.append(("propose", id, ""))
        return ToolCallProposal(id, self.names[id], dict(args), self.status[id])

    def _act(self, kind: str, tool_call_id: str, reason: str = "") -> None:
        self.calls[tool_call_id] += 1
        self.log.append((kind, tool_call_id, reason))
        if self.status.get(tool_call_id) == "requires_confirmation":
            self.status[tool_call_id] = "complete" if kind == "approve" else "error"
            self.acted[tool_call_id] = kind

    def approve(self, tool_call_id: str) -> None:
        self._act("approve", tool_call_id)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._act("deny", tool_call_id, reason)


@dataclass
class FakeMemory:
    """The host's canonical messages, derived from what upstream holds (one message per call)."""

    upstream: FakeUpstream

    def load(self) -> dict[str, Any]:
        messages = [
            {
                "id": f"msg-{i}",
                "role": "assistant",
                "content": "",
                "status": "complete",
                "createdAt": "2026-07-14T00:00:00.000Z",
                "toolCalls": [
                    {
                        "id": call_id,
                        "name": self.upstream.names[call_id],
                        "args": {},
                        "status": status,
                    }
                ],
            }
            for i, (call_id, status) in enumerate(sorted(self.upstream.status.items()))
        ]
        return {"version": 1, "messages": messages}


@dataclass
class RecordingStorage:
    """Wraps the real adapter; records every save that *applied*, whatever the caller heard."""

    inner: Any
    applied: dict[int, dict[str, Any]] = field(default_factory=dict)

    def load(self, session_id: str) -> object:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        ok = bool(self.inner.save(snapshot, expected_cursor))
        if ok:
            assert snapshot.cursor not in self.applied, "two saves applied at one cursor"
            self.applied[snapshot.cursor] = snapshot.to_wire()
        return ok


# --------------------------------------------------------------------------- stepping plans


@dataclass
class Stepper:
    """Runs a plan one effect at a time. ``next`` is the effect waiting to be performed."""

    plan: Plan[Any]
    next: Any = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    acked_saves: list[SessionSnapshot] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._resume(lambda: self.plan.send(None))

    def _resume(self, move: Callable[[], Any]) -> None:
        try:
            self.next = move()
        except StopIteration as stop:
            self.done, self.result, self.next = True, stop.value, None
        except AkchatError as exc:
            self.done, self.error, self.next = True, exc, None

    def feed(self, value: Any) -> None:
        if isinstance(self.next, Save) and value is True:
            self.acked_saves.append(self.next.snapshot)
        self._resume(lambda: self.plan.send(value))

    def throw(self, exc: BaseException) -> None:
        self._resume(lambda: self.plan.throw(exc))

    def crash(self) -> None:
        """The client process died here: the plan never runs again."""
        self.plan.close()
        self.done, self.next = True, None


def perform(effect: Any, storage: Any, upstream: FakeUpstream, memory: FakeMemory) -> Any:
    """Perform one effect for real (no fault), exactly as the sync driver does."""
    return execute_sync(effect, Ports(storage, upstream, memory))
