"""akchat-fsm: crash-safe chat-session metadata and human approval of agent tool calls.

The public API, by layer (dependencies point one way: wire ← machines ← core ← storage/session):

* wire — :func:`decode_session_snapshot` (never raises), :class:`SessionSnapshot`,
  :func:`validate_memory_record`, :func:`parse_controlled_snapshot`.
* storage — the compare-and-set :class:`SessionStorage` port, :func:`open_storage` and the
  shipped adapters (PostgreSQL and Redis live in :mod:`akchat_fsm.storage`, imported lazily).
* session — :func:`resume_chat_session` / :func:`resume_chat_session_async`, confirmations
  resolved with two CAS saves, :func:`reconcile` after crashes.
* controlled — :func:`create_controlled_chat` for hosts that already own the session.
* errors — one hierarchy rooted in :class:`AkchatError` (see :mod:`akchat_fsm.errors`).

The conformance kit, the linearizability checker, fault injection and Hypothesis strategies
are in :mod:`akchat_fsm.testing`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Imports are lazy (PEP 562) so that importing one layer never drags in another: the controlled
# driver must not load the storage or session modules, and a CLI verb pays only for what it uses.
if TYPE_CHECKING:
    from .controlled import (
        ControlledActions,
        ControlledChat,
        ControlledConfirmations,
        SnapshotSequence,
        StaleControlledSnapshot,
        create_controlled_chat,
    )
    from .errors import (
        AkchatError,
        AlreadyResolved,
        ArgumentsMismatch,
        ConfigError,
        ConfirmationError,
        IllegalTransition,
        IncompatibleSession,
        InvalidConfirmationToken,
        InvalidControlledSnapshot,
        InvalidInput,
        InvalidMemoryRecord,
        InvalidSessionSnapshot,
        LimitExceeded,
        OutcomeUnknown,
        ResolutionInProgress,
        SessionConflict,
        StorageError,
        StorageUnavailable,
    )
    from .session import (
        AsyncChatMemory,
        AsyncChatSession,
        AsyncConfirmationCoordinator,
        AsyncToolCallStatusMemory,
        AsyncUpstreamChat,
        ChatDefinition,
        ChatMemory,
        ChatSession,
        ConfirmationCoordinator,
        ConversationFlow,
        Route,
        SessionEvent,
        SessionEventKind,
        ToolCallProposal,
        ToolCallStatusMemory,
        UpstreamChat,
        UpstreamFailed,
        resolve_chat_session,
        resume_chat_session,
        resume_chat_session_async,
    )
    from .session.reconcile import ReconcileOutcome, reconcile, reconcile_async
    from .session.sweep import reconcile_all, reconcile_all_async
    from .storage import (
        AsyncMemoryStorage,
        AsyncSessionStorage,
        AsyncSQLiteStorage,
        MemoryStorage,
        SessionStorage,
        SQLiteStorage,
        open_async_storage,
        open_storage,
    )
    from .wire import (
        ActiveTurn,
        ConfirmationBinding,
        ConfirmationStatus,
        ControlledSnapshot,
        Conversation,
        DecisionKind,
        DecodeResult,
        Diagnostic,
        MemoryRecord,
        Message,
        RouteDecision,
        SessionSnapshot,
        TerminalTurn,
        ToolCall,
        ToolCallStatus,
        TurnOutcome,
        arguments_digest,
        decode_session_snapshot,
        parse_controlled_snapshot,
        parse_session_snapshot,
        validate_memory_record,
    )

__version__ = "0.1.0"

#: Where each public name lives. ``tests/test_public_api.py`` pins this against ``__all__``.
_EXPORTS: dict[str, tuple[str, ...]] = {
    ".controlled": (
        "ControlledActions",
        "ControlledChat",
        "ControlledConfirmations",
        "SnapshotSequence",
        "StaleControlledSnapshot",
        "create_controlled_chat",
    ),
    ".errors": (
        "AkchatError",
        "AlreadyResolved",
        "ArgumentsMismatch",
        "ConfigError",
        "ConfirmationError",
        "IllegalTransition",
        "IncompatibleSession",
        "InvalidConfirmationToken",
        "InvalidControlledSnapshot",
        "InvalidInput",
        "InvalidMemoryRecord",
        "InvalidSessionSnapshot",
        "LimitExceeded",
        "OutcomeUnknown",
        "ResolutionInProgress",
        "SessionConflict",
        "StorageError",
        "StorageUnavailable",
    ),
    ".session": (
        "AsyncChatMemory",
        "AsyncChatSession",
        "AsyncConfirmationCoordinator",
        "AsyncToolCallStatusMemory",
        "AsyncUpstreamChat",
        "ChatDefinition",
        "ChatMemory",
        "ChatSession",
        "ConfirmationCoordinator",
        "ConversationFlow",
        "ReconcileOutcome",
        "Route",
        "SessionEvent",
        "SessionEventKind",
        "ToolCallProposal",
        "ToolCallStatusMemory",
        "UpstreamChat",
        "UpstreamFailed",
        "reconcile",
        "reconcile_all",
        "reconcile_all_async",
        "reconcile_async",
        "resolve_chat_session",
        "resume_chat_session",
        "resume_chat_session_async",
    ),
    ".storage": (
        "AsyncMemoryStorage",
        "AsyncSessionStorage",
        "AsyncSQLiteStorage",
        "MemoryStorage",
        "SessionStorage",
        "SQLiteStorage",
        "open_async_storage",
        "open_storage",
    ),
    ".wire": (
        "ActiveTurn",
        "ConfirmationBinding",
        "ConfirmationStatus",
        "ControlledSnapshot",
        "Conversation",
        "DecisionKind",
        "DecodeResult",
        "Diagnostic",
        "MemoryRecord",
        "Message",
        "RouteDecision",
        "SessionSnapshot",
        "TerminalTurn",
        "ToolCall",
        "ToolCallStatus",
        "TurnOutcome",
        "arguments_digest",
        "decode_session_snapshot",
        "parse_controlled_snapshot",
        "parse_session_snapshot",
        "validate_memory_record",
    ),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "ActiveTurn",
    "AkchatError",
    "AlreadyResolved",
    "ArgumentsMismatch",
    "AsyncChatMemory",
    "AsyncChatSession",
    "AsyncConfirmationCoordinator",
    "AsyncMemoryStorage",
    "AsyncSQLiteStorage",
    "AsyncSessionStorage",
    "AsyncToolCallStatusMemory",
    "AsyncUpstreamChat",
    "ChatDefinition",
    "ChatMemory",
    "ChatSession",
    "ConfigError",
    "ConfirmationBinding",
    "ConfirmationCoordinator",
    "ConfirmationError",
    "ConfirmationStatus",
    "ControlledActions",
    "ControlledChat",
    "ControlledConfirmations",
    "ControlledSnapshot",
    "Conversation",
    "ConversationFlow",
    "DecisionKind",
    "DecodeResult",
    "Diagnostic",
    "IllegalTransition",
    "IncompatibleSession",
    "InvalidConfirmationToken",
    "InvalidControlledSnapshot",
    "InvalidInput",
    "InvalidMemoryRecord",
    "InvalidSessionSnapshot",
    "LimitExceeded",
    "MemoryRecord",
    "MemoryStorage",
    "Message",
    "OutcomeUnknown",
    "ReconcileOutcome",
    "ResolutionInProgress",
    "Route",
    "RouteDecision",
    "SQLiteStorage",
    "SessionConflict",
    "SessionEvent",
    "SessionEventKind",
    "SessionSnapshot",
    "SessionStorage",
    "SnapshotSequence",
    "StaleControlledSnapshot",
    "StorageError",
    "StorageUnavailable",
    "TerminalTurn",
    "ToolCall",
    "ToolCallProposal",
    "ToolCallStatus",
    "ToolCallStatusMemory",
    "TurnOutcome",
    "UpstreamChat",
    "UpstreamFailed",
    "__version__",
    "arguments_digest",
    "create_controlled_chat",
    "decode_session_snapshot",
    "open_async_storage",
    "open_storage",
    "parse_controlled_snapshot",
    "parse_session_snapshot",
    "reconcile",
    "reconcile_all",
    "reconcile_all_async",
    "reconcile_async",
    "resolve_chat_session",
    "resume_chat_session",
    "resume_chat_session_async",
    "validate_memory_record",
]
