"""akchat-fsm: crash-safe chat-session metadata and human approval of agent tool calls."""

from __future__ import annotations

__version__ = "0.1.0"
