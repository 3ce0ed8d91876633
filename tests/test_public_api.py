"""The public surface is ``akchat_fsm.__all__``: pinned, sorted, and every name resolves."""

from __future__ import annotations

import subprocess
import sys

import akchat_fsm

# A change here is a change to the public API: make it on purpose, and note it in the changelog.
EXPECTED = [
    "ActiveTurn", "AkchatError", "AlreadyResolved", "ArgumentsMismatch", "AsyncChatMemory",
    "AsyncChatSession", "AsyncConfirmationCoordinator", "AsyncMemoryStorage", "AsyncSQLiteStorage",
    "AsyncSessionStorage", "AsyncToolCallStatusMemory", "AsyncUpstreamChat", "ChatDefinition",
    "ChatMemory", "ChatSession", "ConfigError", "ConfirmationBinding", "ConfirmationCoordinator",
    "ConfirmationError", "ConfirmationStatus", "ControlledActions", "ControlledChat",
    "ControlledConfirmations", "ControlledSnapshot", "Conversation", "ConversationFlow",
    "DecisionKind", "DecodeResult", "Diagnostic", "IllegalTransition", "IncompatibleSession",
    "InvalidConfirmationToken", "InvalidControlledSnapshot", "InvalidInput", "InvalidMemoryRecord",
    "InvalidSessionSnapshot", "LimitExceeded", "MemoryRecord", "MemoryStorage", "Message",
    "OutcomeUnknown", "ReconcileOutcome", "ResolutionInProgress", "Route", "RouteDecision",
    "SQLiteStorage", "SessionConflict", "SessionEvent", "SessionEventKind", "SessionSnapshot",
    "SessionStorage", "SnapshotSequence", "StaleControlledSnapshot", "StorageError",
    "StorageUnavailable", "TerminalTurn", "ToolCall", "ToolCallProposal", "ToolCallStatus",
    "ToolCallStatusMemory", "TurnOutcome", "UpstreamChat", "UpstreamFailed", "__version__",
    "arguments_digest", "create_controlled_chat", "decode_session_snapshot", "open_async_storage",
    "open_storage", "parse_controlled_snapshot", "parse_session_snapshot", "reconcile",
    "reconcile_all", "reconcile_all_async", "reconcile_async", "resolve_chat_session",
    "resume_chat_session", "resume_chat_session_async", "validate_memory_record",
]  # fmt: skip


def test_all_is_pinned_and_sorted() -> None:
    assert akchat_fsm.__all__ == EXPECTED
    assert sorted(akchat_fsm.__all__, key=str.casefold) == sorted(EXPECTED, key=str.casefold)


def test_every_exported_name_resolves_and_the_lazy_table_matches() -> None:
    lazy = {name for names in akchat_fsm._EXPORTS.values() for name in names}
    assert lazy | {"__version__"} == set(akchat_fsm.__all__)
    for name in akchat_fsm.__all__:
        assert getattr(akchat_fsm, name) is not None, name


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        akchat_fsm.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:  # pragma: no cover - the assertion is the test
        raise AssertionError("unknown attribute resolved")


def test_errors_are_one_hierarchy() -> None:
    errors = [getattr(akchat_fsm, n) for n in akchat_fsm.__all__ if n[0].isupper()]
    exceptions = [e for e in errors if isinstance(e, type) and issubclass(e, BaseException)]
    assert len(exceptions) >= 15
    assert all(issubclass(e, akchat_fsm.AkchatError) for e in exceptions)


def test_import_is_lazy() -> None:
    code = "import sys, akchat_fsm; print(sorted(m for m in sys.modules if 'akchat' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['akchat_fsm']"


def test_errors_docstring_draws_every_exception_class() -> None:
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(akchat_fsm.__path__, "akchat_fsm."):
        if ".cli" in info.name or info.name.endswith("pytest_plugin"):
            continue
        importlib.import_module(info.name)

    def subclasses(cls: type) -> set[type]:
        out = set(cls.__subclasses__())
        for sub in list(out):
            out |= subclasses(sub)
        return out

    public = {
        c
        for c in subclasses(akchat_fsm.AkchatError)
        if c.__module__.startswith("akchat_fsm.") and not c.__name__.startswith("_")
    }
    doc = akchat_fsm.errors.__doc__ or ""
    assert {c.__name__ for c in public if c.__name__ not in doc} == set()


# The public modules that re-export a private one's names for adapter and runtime authors: a
# change here is a change to the public API too (same rule as EXPECTED).
SUBMODULES = {
    "akchat_fsm.integrations.guard": ["ExecutionGuard"],
    "akchat_fsm.storage.cas": [
        "PendingRow", "PreparedRecordSave", "PreparedSave", "cas_allows", "check_stored_cursor",
        "holds_processing", "loaded_text", "prepare_record_save", "prepare_save",
    ],
}  # fmt: skip


def test_the_re_exporting_modules_are_pinned_and_documented() -> None:
    import importlib

    for name, expected in SUBMODULES.items():
        module = importlib.import_module(name)
        assert module.__all__ == expected, name
        for attr in expected:
            assert (getattr(module, attr).__doc__ or "").strip(), f"{name}.{attr}"
