"""Upstream and memory doubles for the scenario tests (sync and asyncio)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from typing import Any

from akchat_fsm.session import ToolCallProposal


class Upstream:
    """Counts executions; ``fail`` makes the next approve/deny raise before acting."""

    def __init__(self) -> None:
        self.executed: Counter[str] = Counter()
        self.denied: list[tuple[str, str]] = []
        self.status: dict[str, str] = {}
        self.fail = False

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        self.status.setdefault(id, "requires_confirmation")
        return ToolCallProposal(id, name, dict(args), self.status[id])

    def approve(self, tool_call_id: str) -> None:
        if self.fail:
            self.fail = False
            raise ConnectionError("upstream down")
        self.executed[tool_call_id] += 1
        self.status[tool_call_id] = "complete"

    def deny(self, tool_call_id: str, reason: str) -> None:
        if self.fail:
            self.fail = False
            raise ConnectionError("upstream down")
        self.denied.append((tool_call_id, reason))
        self.status[tool_call_id] = "error"


class AsyncUpstream:
    """The asyncio double; ``gate`` (when set) holds ``approve`` until released."""

    def __init__(self) -> None:
        self.sync = Upstream()
        self.gate: asyncio.Event | None = None
        self.entered = asyncio.Event()

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return self.sync.propose_tool_call(id, name, args)

    async def approve(self, tool_call_id: str) -> None:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        self.sync.approve(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str) -> None:
        self.sync.deny(tool_call_id, reason)


class Memory:
    """Canonical messages implied by the upstream double's tool-call statuses."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def load(self) -> dict[str, Any]:
        return {
            "version": 1,
            "messages": [
                {
                    "id": f"m-{i}",
                    "role": "assistant",
                    "content": "",
                    "status": "complete",
                    "createdAt": "2026-07-14T00:00:00.000Z",
                    "toolCalls": [{"id": call, "name": "email.send", "args": {}, "status": st}],
                }
                for i, (call, st) in enumerate(sorted(self.upstream.status.items()))
            ],
        }
