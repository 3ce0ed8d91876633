"""A storage's optional capabilities are found the same way on every Python version.

Records (audit entries, propose intents), the processing index and the pending index are each
found by looking their methods up on the storage (``akchat_fsm.storage.capabilities``), never
by ``isinstance`` on the runtime-checkable port protocols. Why it matters from Python 3.12:
there ``isinstance`` looks attributes up statically (``inspect.getattr_static``) and so ignores
``__getattr__``, so a logging or metrics wrapper that forwards every call to a real adapter was
seen as keeping no records: its sessions silently wrote no audit entries and no propose
intents, the inbox refused it and the CLI said it had no index, while on 3.11 the same wrapper
worked. This suite runs on every interpreter tox has (py311, py312, py313).
"""

from __future__ import annotations

from typing import Any

import pytest

from akchat_fsm.errors import ConfigError
from akchat_fsm.inbox.app import create_inbox
from akchat_fsm.session import ChatDefinition, audit_trail, resume_chat_session
from akchat_fsm.storage.capabilities import (
    has_audit_index,
    has_pending_index,
    has_processing_index,
    keeps_records,
)
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import RecordingUpstream

DEFINITION = ChatDefinition("wrapped")
INTENTS = "propose-intent:"


class Forwarding:
    """A wrapper that spells out no method: every call reaches ``inner`` through
    ``__getattr__`` (the shape of a host's logging, metrics or tracing wrapper)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class RecordsSwitchedOff(Forwarding):
    """A wrapper that turns the records capability off by binding its names to a
    non-callable marker: ``isinstance`` on the protocol (any version) still said "keeps
    records", and a session then called ``False(...)`` on its first propose."""

    load_record = save_record = list_records = delete_record = False


class ProposeDies(RecordingUpstream):
    """Upstream's ``propose_tool_call`` never returns (the proposer died in it)."""

    def propose_tool_call(self, id: str, name: str, args: Any) -> Any:
        raise KeyboardInterrupt(id)


@pytest.mark.parametrize("inner", [MemoryStorage(), AsyncMemoryStorage(MemoryStorage())])
def test_a_forwarding_wrapper_has_every_capability_of_what_it_wraps(inner: Any) -> None:
    wrapped = Forwarding(inner)
    assert keeps_records(wrapped) and has_processing_index(wrapped)
    assert has_pending_index(wrapped) and has_audit_index(wrapped)
    bare = Forwarding(object())
    assert not (keeps_records(bare) or has_processing_index(bare) or has_pending_index(bare))
    assert not has_audit_index(bare)


def test_a_session_over_a_forwarding_wrapper_writes_its_intent_and_its_audit_entry() -> None:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    storage = Forwarding(inner)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    with pytest.raises(KeyboardInterrupt):
        session.confirmations_for(ProposeDies()).propose("email.send", {"to": "a"})
    assert len(inner.list_records("s", INTENTS)) == 1  # the intent covers the call

    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    token = coordinator.propose("email.send", {"to": "b"}).token
    coordinator.approve(token, decided_by="ana")
    assert [(e.token, e.principal) for e in audit_trail(inner, "s")] == [(token, "ana")]


def test_a_method_bound_to_something_not_callable_is_no_capability() -> None:
    inner, upstream = MemoryStorage(), RecordingUpstream()
    storage = RecordsSwitchedOff(inner)
    assert not keeps_records(storage)
    session = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    coordinator = session.confirmations_for(upstream)
    token = coordinator.propose("email.send", {"to": "a"}).token
    assert coordinator.approve(token, decided_by="ana").status == "approved"
    assert inner.list_records("s") == []  # a store without records: nothing beside the envelope


def test_the_inbox_takes_a_forwarding_wrapper_of_a_store_with_the_pending_index() -> None:
    upstream = RecordingUpstream()
    app = create_inbox(
        Forwarding(MemoryStorage()),  # type: ignore[arg-type]
        definition=DEFINITION,
        local_only=True,
        upstream_for=lambda session_id: upstream,
    )
    assert app is not None
    with pytest.raises(ConfigError, match="pending index"):
        create_inbox(
            Forwarding(object()),  # type: ignore[arg-type]
            definition=DEFINITION,
            local_only=True,
            upstream_for=lambda session_id: upstream,
        )
