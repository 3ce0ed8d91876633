"""Shared fixtures for the controlled-driver tests: vectors and recording host actions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VECTORS = Path(__file__).resolve().parent / "vectors"


def vector(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def snapshot(name: str = "controlled-synthetic-session") -> dict[str, Any]:
    data: dict[str, Any] = vector(name)["input"]
    return data


class RecordingActions:
    """Host actions that record every call; extra attributes try to shadow validated state."""

    # These must never leak into the view (docs/reference.md §5.4 "explicitly picked").
    status = "private-state"
    session_id = "spoofed"
    sessionId = "spoofed"
    messages: tuple[Any, ...] = ()
    mode = "uncontrolled"
    input = "spoofed"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _record(self, name: str, *args: Any, **kwargs: Any) -> str:
        self.calls.append((name, args, kwargs))
        return f"{name}-result"

    def send(self, text: str) -> str:
        return self._record("send", text)

    def stop(self) -> str:
        return self._record("stop")

    def retry(self) -> str:
        return self._record("retry")

    def edit(self, message_id: str, new_content: str, *, regenerate: bool = False) -> str:
        return self._record("edit", message_id, new_content, regenerate=regenerate)

    def regenerate(self, message_id: str | None = None) -> str:
        return self._record("regenerate", message_id)

    def set_input(self, value: str) -> str:
        return self._record("set_input", value)

    def clear(self) -> str:
        return self._record("clear")

    def propose_tool_call(self, call: dict[str, Any]) -> str:
        return self._record("propose_tool_call", call)

    def approve(self, tool_call_id: str) -> str:
        return self._record("approve", tool_call_id)

    def deny(self, tool_call_id: str, reason: str | None = None) -> str:
        return self._record("deny", tool_call_id, reason)
