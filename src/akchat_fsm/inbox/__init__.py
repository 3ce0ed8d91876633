"""The approver's inbox (``pip install "akchat-fsm[inbox]"``): an ASGI app, docs/inbox.md.

A server-rendered page over the pending index where a person approves or rejects the calls
an agent is waiting on; it works without JavaScript and by keyboard, and a decision in it is
the session's own two-CAS decision (or the host's bridge for the session), ADR-0130.
"""

from __future__ import annotations

from ._render import Bounds, countdown, pretty_arguments
from ._security import principal_identity
from .app import (
    LOCAL_PRINCIPAL,
    MAX_CURSOR,
    AllowPrincipals,
    AsyncBridge,
    AsyncInboxStorage,
    Bridge,
    InboxApp,
    InboxStorage,
    UnknownExecution,
    create_inbox,
    pending_changes,
)

__all__ = [
    "LOCAL_PRINCIPAL",
    "MAX_CURSOR",
    "AllowPrincipals",
    "AsyncBridge",
    "AsyncInboxStorage",
    "Bounds",
    "Bridge",
    "InboxApp",
    "InboxStorage",
    "UnknownExecution",
    "countdown",
    "create_inbox",
    "pending_changes",
    "pretty_arguments",
    "principal_identity",
]
