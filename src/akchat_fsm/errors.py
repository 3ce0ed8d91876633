"""Every exception akchat-fsm raises, in one hierarchy.

Catch the narrowest class that matches what you can do about it::

    AkchatError                    root: nothing else escapes a public call
    ├── InvalidInput               untrusted data was rejected (the same bytes always will be)
    │   ├── InvalidSessionSnapshot .code / .message / .retryable, as the reference diagnostic
    │   ├── InvalidMemoryRecord    a canonical chat-memory record broke a rule
    │   ├── InvalidControlledSnapshot   .layer == "shell" | "messages"
    │   │   └── StaleControlledSnapshot (akchat_fsm.controlled) an old or repeated sequence
    │   ├── InvalidJsonText        (akchat_fsm.wire.jsontext) not JSON as JSON.parse defines it
    │   └── MalformedHistory       (akchat_fsm.testing.linearizability) a history the checker
    │                              cannot use: a return before its call, NaN, unhashable
    ├── ConfigError                the reference's ConfigError: code "AK_CONFIG_INVALID", .hint;
    │   │                          bad options, bad stored bytes (never retryable), or state
    │   │                          that is not this definition's
    │   ├── IncompatibleSession    stored state: foreign, other definition/revision, no replay
    │   ├── StoredCursorMismatch   an adapter's cursor column disagrees with its stored body
    │   ├── InvalidConfirmationToken    unknown here, or another session's token (inert)
    │   ├── LimitExceeded          a documented bound would be crossed (before any side effect)
    │   ├── MissingCapability      (akchat_fsm.storage) the adapter lacks a storage capability
    │   │                          the call needs; .capability names it (nothing was read)
    │   └── ToolCallMismatch       (akchat_fsm.integrations.ledger) a call id reused for
    │                              another tool or other arguments; nothing ran
    ├── IllegalTransition          a machine refused (state, event); names both; unchanged
    ├── ConfirmationError          the resolution did not run here; .record is the stored one
    │   │                          (raised as such when reconcile released our claim meanwhile)
    │   ├── AlreadyResolved        terminal already; nothing was called
    │   ├── ResolutionInProgress   another client holds the claim (approving/rejecting/expiring)
    │   ├── ArgumentsMismatch      the decision named arguments other than the stored call's;
    │   │                          nothing was written or called
    │   ├── EditNotAllowed         a reviewer edit the call's runtime or tool config does not
    │   │                          offer; nothing was written or called
    │   └── UpstreamFailed         (akchat_fsm.session) upstream raised; the record stays
    │                              processing, never falsely complete: reconcile it
    ├── BridgeError                (akchat_fsm.integrations) a bridge or ledger call did not
    │   │                          do it; .record is the ledger entry or run record stored
    │   ├── ExecutionUnknown       (integrations.ledger) a tool body was claimed and its
    │   │                          outcome is unknown: never re-run by default; settle it
    │   ├── ExecutionClaimLost     (integrations.ledger) our execution claim was settled or
    │   │                          re-claimed while the body ran; its outcome not recorded
    │   ├── SettleRefused          (integrations.ledger) an operator's verdict wrote nothing:
    │   │                          the entry was not unknown when read, or changed after
    │   ├── RunInProgress          (integrations) another process holds the run's continuation
    │   ├── RunClaimLost           (integrations) our continuation claim was taken over
    │   ├── RunBlocked             (integrations) the runtime cannot continue the run from
    │   │                          what it holds; .next_step is the operator's, nothing ran
    │   └── RecordedToolFailure    (integrations.ledger) the body already ran and raised;
    │                              it is not run again
    ├── SessionConflict            CAS refused: the stored cursor moved; reload, re-apply
    └── StorageError               the storage call failed
        ├── StorageUnavailable     not applied (or, after an unknown outcome, not when
        │                          re-read); a retry is safe: CAS applies at most one
        └── OutcomeUnknown         the write may have applied: re-read to settle, never guess

A timeout is never reported as ``SessionConflict``: a conflict is a definite "not applied
because the cursor moved", while a timeout after the request left is ``OutcomeUnknown``.
Driver exceptions are mapped to ``StorageError`` subclasses once, at each adapter's boundary,
with ``raise ... from`` so the original stays on ``__cause__``.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "AkchatError",
    "AlreadyResolved",
    "ArgumentsMismatch",
    "ConfigError",
    "ConfirmationError",
    "EditNotAllowed",
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
    "StoredCursorMismatch",
]

# The reference's hints, quoted because hosts written against it match on them.
CONVERSATION_HINT = "Define valid conversation states, routes, and transition targets."
CONFIRMATION_HINT = "Use the pending confirmation token in the session that created it."
MEMORY_RECORD_HINT = "Pass a version 1 MemoryRecord produced by serializeMessages()."


class AkchatError(Exception):
    """Root of every error raised by akchat-fsm."""


# --------------------------------------------------------------------------- bad input


class InvalidInput(AkchatError):
    """Untrusted data was rejected. The same bytes will be rejected again."""


class InvalidSessionSnapshot(InvalidInput):
    """A session envelope that does not decode.

    Carries the reference diagnostic: ``code`` is ``SESSION_INVALID_SNAPSHOT`` or
    ``SESSION_UNSUPPORTED_VERSION`` and ``message`` is the reference's exact text.
    """

    def __init__(self, code: str, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


class InvalidMemoryRecord(InvalidInput):
    """A canonical memory record (messages) that breaks the upstream rules."""

    def __init__(self, message: str = "Serialized message record is invalid.") -> None:
        super().__init__(message)
        self.message = message
        self.code = "AK_CONFIG_INVALID"
        self.hint = MEMORY_RECORD_HINT


class InvalidControlledSnapshot(InvalidInput):
    """A controlled-chat snapshot that fails closed.

    ``layer`` is ``"shell"`` when the strict outer object is wrong (the reference throws a
    ZodError) and ``"messages"`` when a message record is (the reference throws TypeError).
    """

    def __init__(self, layer: Literal["shell", "messages"], message: str) -> None:
        super().__init__(message)
        self.layer = layer
        self.message = message


# --------------------------------------------------------------------------- configuration


class ConfigError(AkchatError):
    """The reference's ``ConfigError``: ``code`` is always ``AK_CONFIG_INVALID``."""

    code = "AK_CONFIG_INVALID"
    #: The same call fails again: a configuration or stored-data problem, never transient.
    retryable = False

    def __init__(self, message: str, *, hint: str = CONVERSATION_HINT) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class IncompatibleSession(ConfigError):
    """Stored state exists but may not be resumed by this definition or session id."""


class StoredCursorMismatch(ConfigError):
    """The adapter's cursor column and the stored body's ``cursor`` disagree.

    Every compare-and-set compares against the column, so such a session could never be saved
    again (each write a ``SessionConflict``); it is refused at load, naming both values. The
    same bytes fail again: repair the row (or delete the session), never retry.
    """

    def __init__(self, session_id: str, column: object, body: object) -> None:
        super().__init__(
            f"Stored session {session_id!r} is inconsistent: its cursor column is {column!r} "
            f"but its body says cursor {body!r}.",
            hint="Repair or delete the stored row; retrying cannot help.",
        )
        self.session_id = session_id
        self.column = column
        self.body = body


class InvalidConfirmationToken(ConfigError):
    """The token is unknown to this session. A token from another session is inert."""

    def __init__(
        self, message: str = "Action confirmation token is invalid for this session."
    ) -> None:
        super().__init__(message, hint=CONFIRMATION_HINT)


class LimitExceeded(ConfigError):
    """A documented bound would be crossed. Always raised before any upstream side effect."""

    def __init__(self, message: str, *, limit: str = "", hint: str = CONFIRMATION_HINT) -> None:
        super().__init__(message, hint=hint)
        self.limit = limit


# --------------------------------------------------------------------------- machines


class IllegalTransition(AkchatError):
    """A state machine refused an event. The state is unchanged.

    ``machine``, ``state`` and ``event`` name exactly what was refused (h11 style).
    """

    def __init__(self, machine: str, state: str, event: str, detail: str = "") -> None:
        message = f"{machine} can't handle event {event!r} in state {state!r}"
        if detail:
            message = f"{message}: {detail}"
        super().__init__(message)
        self.machine = machine
        self.state = state
        self.event = event


# --------------------------------------------------------------------------- confirmations


class ConfirmationError(AkchatError):
    """A resolution did not run in this call. ``record`` is the record as stored."""

    def __init__(self, message: str, *, record: Any = None) -> None:
        super().__init__(message)
        self.record = record


class AlreadyResolved(ConfirmationError):
    """The record is terminal; nothing was called and nothing changed."""


class ResolutionInProgress(ConfirmationError):
    """Another client (or a crashed one) holds the claim; reconcile to settle it."""


class ArgumentsMismatch(ConfirmationError):
    """The decision carried the digest of arguments other than the stored call's.

    Refused before any write or upstream call: the person decided on something else than
    what would run (a stale page, a tampered form). ``record`` is the stored binding;
    ``expected`` its arguments' digest, ``given`` the one the decision carried.
    """

    def __init__(self, message: str, *, record: Any = None, expected: str, given: str) -> None:
        super().__init__(message, record=record)
        self.expected = expected
        self.given = given


class EditNotAllowed(ConfirmationError):
    """A reviewer edit (new arguments for the call) that this call does not accept: its
    runtime has no edits (the OpenAI Agents SDK), or its tool's configuration does not allow
    them (LangGraph's ``allowed_decisions``, the pydantic-ai bridge's ``editable_tools``).

    Refused before any write: the call stays as it was, to approve or reject as shown.
    ``record`` is the stored binding (``None`` when the call was not read).
    """


# --------------------------------------------------------------------------- persistence


class SessionConflict(AkchatError):
    """The compare-and-set save was refused because the stored cursor moved.

    Nothing was written. The session object is *not* poisoned: reload it and re-apply the
    intent. ``expected_cursor`` is what this client expected (``None`` for create-only).
    """

    default_message = "Session snapshot changed in another client."

    def __init__(
        self,
        message: str = default_message,
        *,
        session_id: str = "",
        expected_cursor: int | None = None,
    ) -> None:
        super().__init__(message)
        self.session_id = session_id
        self.expected_cursor = expected_cursor


class StorageError(AkchatError):
    """A storage call failed. Subclasses say whether the write may have applied."""

    retryable: bool = False


class StorageUnavailable(StorageError):
    """Not applied: the call failed before applying, or an unknown outcome's re-read found the
    stored cursor unchanged (a server may still land that write later). Either way the same call
    may be retried: it expects the same cursor, so compare-and-set lets at most one apply."""

    retryable = True


class OutcomeUnknown(StorageError):
    """The write may or may not have applied. Re-read to settle it; never assume either."""

    retryable = False
