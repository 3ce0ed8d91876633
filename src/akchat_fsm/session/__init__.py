"""Sessions and confirmations: the I/O shell around the pure core, sync and asyncio.

Each operation is written once as a sans-I/O plan (a generator of :mod:`.effects`); the sync
and async classes only pick the driver that runs it (:mod:`.drivers`).
"""

from __future__ import annotations

from .audit import (
    AuditEntry,
    AuditLogEntry,
    AuditPage,
    audit_log,
    audit_log_async,
    audit_trail,
    audit_trail_async,
)
from .definition import ChatDefinition, ConversationFlow, Route
from .observers import Observer, SessionEvent, SessionEventKind
from .ports import (
    AsyncChatMemory,
    AsyncToolCallStatusMemory,
    AsyncUpstreamChat,
    ChatMemory,
    ToolCallProposal,
    ToolCallStatusMemory,
    UpstreamChat,
    UpstreamFailed,
)
from .reconcile import ReconcileOutcome, reconcile, reconcile_async
from .session import (
    AsyncChatSession,
    AsyncConfirmationCoordinator,
    ChatSession,
    ConfirmationCoordinator,
    resolve_chat_session,
    resume_chat_session,
    resume_chat_session_async,
)
from .sweep import reconcile_all, reconcile_all_async

__all__ = [
    "AsyncChatMemory",
    "AsyncChatSession",
    "AsyncConfirmationCoordinator",
    "AsyncToolCallStatusMemory",
    "AsyncUpstreamChat",
    "AuditEntry",
    "AuditLogEntry",
    "AuditPage",
    "ChatDefinition",
    "ChatMemory",
    "ChatSession",
    "ConfirmationCoordinator",
    "ConversationFlow",
    "Observer",
    "ReconcileOutcome",
    "Route",
    "SessionEvent",
    "SessionEventKind",
    "ToolCallProposal",
    "ToolCallStatusMemory",
    "UpstreamChat",
    "UpstreamFailed",
    "audit_log",
    "audit_log_async",
    "audit_trail",
    "audit_trail_async",
    "reconcile",
    "reconcile_all",
    "reconcile_all_async",
    "reconcile_async",
    "resolve_chat_session",
    "resume_chat_session",
    "resume_chat_session_async",
]
