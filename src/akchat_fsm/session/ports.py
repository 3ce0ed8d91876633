"""The host's side of a session: the upstream chat controller and its canonical memory.

Both come in a sync and an asyncio flavour with the same meaning. akchat-fsm never calls
``approve``/``deny`` except from the single client whose claim was saved by compare-and-set,
and it only *reads* memory (to reconcile processing records).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfirmationError
from ..wire.memory import MemoryRecord

__all__ = [
    "AsyncChatMemory",
    "AsyncToolCallStatusMemory",
    "AsyncUpstreamChat",
    "ChatMemory",
    "MemoryContent",
    "ToolCallProposal",
    "ToolCallStatusMemory",
    "UpstreamChat",
    "UpstreamFailed",
]


@dataclass(frozen=True)
class ToolCallProposal:
    """What upstream returned for a proposal: the canonical call and its status.

    ``status`` is upstream's tool-call status; anything but ``"requires_confirmation"`` makes
    the binding born ``rejected`` with no deny call (docs/reference.md §3.2 step 4).
    """

    id: str
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    status: str = "requires_confirmation"


@runtime_checkable
class UpstreamChat(Protocol):
    """The upstream chat controller (``Pick<ChatReturn, 'proposeToolCall'|'approve'|'deny'>``)."""

    def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal | Mapping[str, Any]: ...

    def approve(self, tool_call_id: str) -> object: ...

    def deny(self, tool_call_id: str, reason: str) -> object: ...


@runtime_checkable
class AsyncUpstreamChat(Protocol):
    """The asyncio twin of :class:`UpstreamChat`."""

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal | Mapping[str, Any]: ...

    async def approve(self, tool_call_id: str) -> object: ...

    async def deny(self, tool_call_id: str, reason: str) -> object: ...


#: What ``ChatMemory.load`` returns: the memory record (wire mapping or model) or its messages.
MemoryContent = MemoryRecord | Mapping[str, Any] | Sequence[Mapping[str, Any]]


@runtime_checkable
class ChatMemory(Protocol):
    """The host's canonical message store (upstream ``ChatMemory``); only ``load`` is used.

    ``load`` returns a memory record ``{"version": 1, "messages": [...]}`` (or its
    :class:`~akchat_fsm.wire.memory.MemoryRecord`) or the bare list of messages. Reconcile
    reads only the tool calls' ids and statuses from it, so any chat length works; a memory
    that can answer for a few ids directly should also be a :class:`ToolCallStatusMemory`.
    """

    def load(self) -> MemoryContent: ...


@runtime_checkable
class AsyncChatMemory(Protocol):
    """The asyncio twin of :class:`ChatMemory`."""

    async def load(self) -> MemoryContent: ...


@runtime_checkable
class ToolCallStatusMemory(Protocol):
    """A memory that answers "the status of these tool-call ids" directly (preferred by reconcile).

    ``tool_call_statuses`` returns upstream's tool-call status (``"requires_confirmation"``,
    ``"running"``, ``"complete"``, ``"error"``...) for each id it knows; an id it leaves out is
    unknown (reconcile leaves that record as it is). Reconcile then never loads the whole chat,
    so it works at any chat length. A memory without it is read through ``load`` instead.
    """

    def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Mapping[str, str]: ...


@runtime_checkable
class AsyncToolCallStatusMemory(Protocol):
    """The asyncio twin of :class:`ToolCallStatusMemory`."""

    async def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> Mapping[str, str]: ...


class UpstreamFailed(ConfirmationError):
    """An upstream call raised. ``record`` is the binding exactly as it is stored now.

    For a resolution the record stays in its processing status (never a false completion,
    never retried automatically): reconcile it from memory. For a proposal nothing was saved.
    The upstream exception is on ``__cause__``.
    """
