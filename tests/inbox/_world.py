"""One inbox over real memory storage and a recording upstream, with a clock tests move."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette

from akchat_fsm import ChatDefinition, resume_chat_session
from akchat_fsm.inbox import create_inbox
from akchat_fsm.integrations.ledger import ToolLedger, ledger_key
from akchat_fsm.storage import MemoryStorage
from akchat_fsm.testing.doubles import RecordingUpstream

DEFINITION = ChatDefinition("support")
START_MS = 1_800_000_000_000


@dataclass
class Clock:
    now_ms: int = START_MS

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class World:
    storage: MemoryStorage = field(default_factory=MemoryStorage)
    upstream: RecordingUpstream = field(default_factory=RecordingUpstream)
    clock: Clock = field(default_factory=Clock)

    def propose(self, session_id: str, action: str, args: dict[str, Any], ttl_ms: int = 300_000):
        session = resume_chat_session(
            DEFINITION, session_id=session_id, storage=self.storage, clock=self.clock
        )
        return session.confirmations_for(self.upstream, ttl_ms=ttl_ms).propose(action, args)

    def stored(self, session_id: str) -> object:
        """The stored envelope, byte for byte: what "changes nothing" compares."""
        return self.storage.load(session_id)

    def status(self, session_id: str, token: str) -> str:
        session = resume_chat_session(DEFINITION, session_id=session_id, storage=self.storage)
        return next(b.status.value for b in session.confirmations if b.token == token)

    def app(self, **options: Any) -> Starlette:
        options.setdefault("upstream_for", lambda _sid: self.upstream)
        options.setdefault("clock", self.clock)
        options.setdefault("definition", DEFINITION)
        return create_inbox(self.storage, **options)


def by_header(request: Any) -> str | None:
    """The test host's authentication: a user name in a header (stands in for a session)."""
    user: str | None = request.headers.get("x-user")
    return user


def only_ana(principal: Any, pending: Any) -> bool:
    return bool(principal == "ana")


class ClaimantDied(BaseException):
    """Raised inside a tool body: the claimant is gone before it records an outcome."""


def crash_inside(
    storage: Any,
    session_id: str,
    tool_call_id: str,
    tool: str = "send",
    args: Any = None,
    owner: str = "worker-7:4242",
) -> None:
    """Leave an execution whose outcome is unknown: the body was claimed, then its process died.

    The real ledger claims the call; the body raises a ``BaseException`` the ledger does not
    record, as a killed process records nothing, so the entry stays ``executing``.
    """

    def died() -> None:
        raise ClaimantDied

    ledger = ToolLedger(storage, session_id, owner=owner)
    try:
        ledger.execute(tool_call_id, tool, args if args is not None else {"to": "a"}, died)
    except ClaimantDied:
        return
    raise AssertionError("the body ran to its end")


def ledger_bytes(storage: Any, session_id: str, tool_call_id: str) -> object:
    """The stored ledger entry of one call, byte for byte (version and text)."""
    return storage.load_record(session_id, ledger_key(tool_call_id))


def everyone(principal: Any, subject: Any) -> bool:
    return True
