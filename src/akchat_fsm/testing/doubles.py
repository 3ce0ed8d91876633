"""Test doubles of the host's ports: a recording upstream and a chat memory, sync and asyncio.

They behave like the real thing where the library's guarantees depend on it, so a host's tests
(and this project's) can assert on what happened upstream instead of writing doubles by hand:

* :class:`RecordingUpstream` is an upstream chat controller. ``propose_tool_call`` creates a
  tool call (``requires_confirmation`` unless ``born`` says otherwise); ``approve`` / ``deny``
  act only while the call is ``requires_confirmation`` (then it is ``complete`` / ``error``),
  like a controller that executes a call at most once. Every call is recorded, acted or not.
  ``fail_next`` makes the next approve/deny calls raise :class:`UpstreamDown` before acting.
* :class:`RecordingChatMemory` is the canonical memory implied by an upstream's tool-call
  statuses (or by any mapping id → status). It answers both ways reconcile reads memory:
  ``tool_call_statuses(ids)`` (:class:`~akchat_fsm.session.ToolCallStatusMemory`) and
  ``load()`` (the whole memory record, :class:`~akchat_fsm.session.ChatMemory`);
  :meth:`RecordingChatMemory.load_only` gives a view with ``load`` alone.
* :class:`AsyncRecordingUpstream` / :class:`AsyncRecordingChatMemory` are the asyncio twins;
  each wraps a sync one (``.sync``), so both flavours share one record of what happened.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..session.ports import ToolCallProposal

__all__ = [
    "AsyncRecordingChatMemory",
    "AsyncRecordingUpstream",
    "RecordingChatMemory",
    "RecordingUpstream",
    "UpstreamDown",
]

REQUIRES_CONFIRMATION = "requires_confirmation"
#: The ``createdAt`` of every message the memory double writes (any valid timestamp would do).
CREATED_AT = "2026-07-14T00:00:00.000Z"


class UpstreamDown(ConnectionError):
    """What :class:`RecordingUpstream` raises for a call scheduled to fail (``fail_next``)."""


class RecordingUpstream:
    """A synchronous upstream chat controller that records every call (see the module doc).

    ``born``: the status of a new tool call, or a function of its id that returns it (e.g. to
    have some proposals come back already handled). ``proposed``: every proposed id, in order
    (a repeat too). ``created``: each tool call's status when it was created. ``calls``: every
    approve/deny, ``("approve", id)`` or ``("deny", id, reason)``, acted or not. ``statuses``:
    each tool call's upstream status now. ``acted``: what each call did to its tool call
    (``"approve"`` or ``"deny"``), at most one entry per call.
    """

    def __init__(self, born: str | Callable[[str], str] = REQUIRES_CONFIRMATION) -> None:
        self.born = born
        self.proposed: list[str] = []
        self.created: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.calls: list[tuple[str, ...]] = []
        self.statuses: dict[str, str] = {}
        self.acted: dict[str, str] = {}
        self.fail_next = 0

    # -- the port --------------------------------------------------------------------------
    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        self.proposed.append(id)
        if id not in self.created:
            self.created[id] = self.born if isinstance(self.born, str) else self.born(id)
            self.statuses[id] = self.created[id]
            self.names[id] = name
        return ToolCallProposal(id, self.names[id], dict(args), self.statuses[id])

    def approve(self, tool_call_id: str) -> None:
        self._act(("approve", tool_call_id), "complete")

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._act(("deny", tool_call_id, reason), "error")

    # -- what happened ---------------------------------------------------------------------
    @property
    def executed(self) -> Counter[str]:
        """Approve calls per tool call, acted or not (a guarantee test expects at most 1)."""
        return Counter(call[1] for call in self.calls if call[0] == "approve")

    @property
    def calls_per_tool_call(self) -> Counter[str]:
        """Approve and deny calls per tool call, acted or not (the guarantee: at most 1)."""
        return Counter(call[1] for call in self.calls)

    @property
    def denied(self) -> list[tuple[str, str]]:
        """Every deny call, ``(tool_call_id, reason)``, acted or not."""
        return [(call[1], call[2]) for call in self.calls if call[0] == "deny"]

    def calls_for(self, tool_call_id: str) -> list[tuple[str, ...]]:
        """Every approve/deny call made for ``tool_call_id``."""
        return [call for call in self.calls if call[1] == tool_call_id]

    def _act(self, call: tuple[str, ...], status: str) -> None:
        if self.fail_next > 0:
            self.fail_next -= 1
            raise UpstreamDown(f"upstream unavailable ({call[0]} {call[1]} not performed)")
        self.calls.append(call)
        tool_call_id = call[1]
        if self.statuses.get(tool_call_id) == REQUIRES_CONFIRMATION:
            self.statuses[tool_call_id] = status
            self.acted[tool_call_id] = call[0]


class AsyncRecordingUpstream:
    """The asyncio twin of :class:`RecordingUpstream`; what happened is on ``.sync``.

    ``gate``: when set, ``approve`` waits for it before acting (``entered`` is set on entry),
    so a test can hold one resolution mid-call while another client races it.
    """

    def __init__(
        self,
        born: str | Callable[[str], str] = REQUIRES_CONFIRMATION,
        *,
        sync: RecordingUpstream | None = None,
    ) -> None:
        self.sync = sync if sync is not None else RecordingUpstream(born)
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        await asyncio.sleep(0)
        return self.sync.propose_tool_call(id, name, args)

    async def approve(self, tool_call_id: str) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.sync.approve(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str) -> None:
        await asyncio.sleep(0)
        self.sync.deny(tool_call_id, reason)

    # -- what happened (read from ``.sync``, so both flavours answer the same questions) ------
    @property
    def executed(self) -> Counter[str]:
        """Approve calls per tool call, acted or not (a guarantee test expects at most 1)."""
        return self.sync.executed

    @property
    def calls_per_tool_call(self) -> Counter[str]:
        """Approve and deny calls per tool call, acted or not (the guarantee: at most 1)."""
        return self.sync.calls_per_tool_call

    @property
    def denied(self) -> list[tuple[str, str]]:
        """Every deny call, ``(tool_call_id, reason)``, acted or not."""
        return self.sync.denied

    def calls_for(self, tool_call_id: str) -> list[tuple[str, ...]]:
        """Every approve/deny call made for ``tool_call_id``."""
        return self.sync.calls_for(tool_call_id)


StatusSource = RecordingUpstream | AsyncRecordingUpstream | Mapping[str, str]


class RecordingChatMemory:
    """The canonical memory implied by ``source``'s tool-call statuses (a live view).

    ``messages``: wire messages placed before the tool-call messages (e.g. a long chat).
    ``loads`` / ``status_queries`` count how memory was read.
    """

    def __init__(self, source: StatusSource, *, messages: Sequence[Mapping[str, Any]] = ()) -> None:
        self.source = source
        self.messages = list(messages)
        self.loads = 0
        self.status_queries: list[tuple[str, ...]] = []

    def _statuses(self) -> Mapping[str, str]:
        source = self.source
        if isinstance(source, AsyncRecordingUpstream):
            source = source.sync
        return source.statuses if isinstance(source, RecordingUpstream) else source

    def _name(self, tool_call_id: str) -> str:
        source = self.source
        if isinstance(source, AsyncRecordingUpstream):
            source = source.sync
        names = source.names if isinstance(source, RecordingUpstream) else {}
        return names.get(tool_call_id, "tool")

    def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> dict[str, str]:
        """The status of each id memory knows; an unknown id is left out."""
        self.status_queries.append(tuple(tool_call_ids))
        statuses = self._statuses()
        return {i: statuses[i] for i in tool_call_ids if i in statuses}

    def load(self) -> dict[str, Any]:
        """The whole memory record: ``messages``, then one assistant message per tool call."""
        self.loads += 1
        calls = [
            {
                "id": f"call-msg-{n}",
                "role": "assistant",
                "content": "",
                "status": "complete",
                "createdAt": CREATED_AT,
                "toolCalls": [{"id": call, "name": self._name(call), "args": {}, "status": status}],
            }
            for n, (call, status) in enumerate(sorted(self._statuses().items()))
        ]
        return {"version": 1, "messages": [*self.messages, *calls]}

    def load_only(self) -> _LoadOnly:
        """A view of this memory with ``load`` alone (a plain chat memory of its flavour)."""
        return _LoadOnly(self)


class _LoadOnly:
    def __init__(self, memory: RecordingChatMemory) -> None:
        self._memory = memory

    def load(self) -> dict[str, Any]:
        return self._memory.load()


class AsyncRecordingChatMemory:
    """The asyncio twin of :class:`RecordingChatMemory`; the counters are on ``.sync``."""

    def __init__(self, source: StatusSource, *, messages: Sequence[Mapping[str, Any]] = ()) -> None:
        self.sync = RecordingChatMemory(source, messages=messages)

    async def tool_call_statuses(self, tool_call_ids: Sequence[str]) -> dict[str, str]:
        """The status of each id memory knows; an unknown id is left out."""
        await asyncio.sleep(0)
        return self.sync.tool_call_statuses(tool_call_ids)

    async def load(self) -> dict[str, Any]:
        """The whole memory record: ``messages``, then one assistant message per tool call."""
        await asyncio.sleep(0)
        return self.sync.load()

    def load_only(self) -> _AsyncLoadOnly:
        """A view of this memory with ``load`` alone (a plain chat memory of its flavour)."""
        return _AsyncLoadOnly(self)


class _AsyncLoadOnly:
    def __init__(self, memory: AsyncRecordingChatMemory) -> None:
        self._memory = memory

    async def load(self) -> dict[str, Any]:
        return await self._memory.load()
