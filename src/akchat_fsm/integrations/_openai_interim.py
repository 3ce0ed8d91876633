"""INTERIM stand-in for the shared bridge modules (ledger, run record, call→confirmation).

The pai branch owns the real ones (docs/adr/0100-tool-execution-ledger.md); this file exists
only until they are merged, so the OpenAI bridge can be built and tested against the real SDK
meanwhile. Nothing here is public; it is deleted at the merge.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from ..errors import AkchatError, ConfigError, OutcomeUnknown, StorageUnavailable
from ..session.ports import ToolCallProposal
from ..storage._cas import check_record_key
from ..wire.enums import ConfirmationStatus
from ..wire.session import ConfirmationBinding

T = TypeVar("T")

NEEDS_RECORDS = "The bridge needs storage with the RecordStorage capability (records beside the envelope)."
REJECTED_MESSAGE = "Tool execution was rejected by the approver."
EXPIRED_MESSAGE = "The approval request expired before anyone decided; the tool did not run."


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class LoadRecord:
    key: str


@dataclass(frozen=True)
class SaveRecord:
    key: str
    text: str
    expected: int | None
    processing: bool = False


Effect: TypeAlias = Any
Plan: TypeAlias = Generator[Effect, Any, T]


def record_key(prefix: str, ident: str) -> str:
    key = f"{prefix}:{ident}"
    try:
        return check_record_key(key)
    except ConfigError:
        return f"{prefix}:h-{hashlib.sha256(ident.encode()).hexdigest()}"


def dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


# --------------------------------------------------------------------------- calls


@dataclass(frozen=True)
class Call:
    """A runtime's tool call awaiting a decision: the confirmation's toolCallId, action, input."""

    call_id: str
    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.call_id, "tool": self.tool, "args": dict(self.args)}

    @classmethod
    def from_wire(cls, raw: Mapping[str, Any]) -> Call:
        return cls(raw["id"], raw["tool"], raw.get("args", {}))


@dataclass(frozen=True)
class Decision:
    approved: bool
    message: str | None = None


class CallUpstream:
    """An upstream with no side effect: it names the call, and remembers a denial's text."""

    def __init__(self, call: Call, denials: Callable[[str, str], object] | None = None) -> None:
        self.call = call
        self._denials = denials

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return ToolCallProposal(self.call.call_id, name, args)

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


class AsyncCallUpstream(CallUpstream):
    async def propose_tool_call(  # type: ignore[override]
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return ToolCallProposal(self.call.call_id, name, args)

    async def approve(self, tool_call_id: str) -> None:  # type: ignore[override]
        return None

    async def deny(self, tool_call_id: str, reason: str) -> None:  # type: ignore[override]
        return None


def decision_for(binding: ConfirmationBinding, denial: str | None) -> Decision | None:
    status = binding.status
    if status is ConfirmationStatus.APPROVED:
        return Decision(True)
    if status is ConfirmationStatus.REJECTED:
        return Decision(False, denial or REJECTED_MESSAGE)
    if status is ConfirmationStatus.EXPIRED:
        return Decision(False, EXPIRED_MESSAGE)
    return None


# --------------------------------------------------------------------------- run record


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    version: int
    state: str
    calls: tuple[Call, ...]
    runtime_state: Any
    owner: str | None = None
    attempt: int = 0
    output: Any = None
    #: Every call id this run ever interrupted on (a late decision still finds its run).
    seen: tuple[str, ...] = ()

    def to_text(self) -> str:
        return dumps({"run_id": self.run_id, "state": self.state, "calls": [c.to_wire() for c in self.calls],
                      "runtime_state": self.runtime_state, "owner": self.owner,
                      "attempt": self.attempt, "output": self.output,
                      "seen": list(self.seen)})

    @classmethod
    def from_stored(cls, run_id: str, stored: tuple[int, str]) -> RunRecord:
        raw = json.loads(stored[1])
        return cls(run_id, stored[0], raw["state"], tuple(Call.from_wire(c) for c in raw["calls"]),
                   raw["runtime_state"], raw.get("owner"), raw.get("attempt", 0), raw.get("output"),
                   tuple(raw.get("seen", ())))


def new_owner() -> str:
    return secrets.token_hex(8)


async def as_awaitable(value: T) -> T:
    return value


Runner: TypeAlias = Callable[[Plan[Any]], Awaitable[Any]]
