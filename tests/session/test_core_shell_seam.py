"""The seam between the pure core and the shell (ADR-0112).

The core builds every write, write nonce included, and the shell sends it as built: what
storage receives is, byte for byte, the ``SaveSnapshot`` the core emitted. The shell draws a
fresh nonce for every write, performs a step's upstream call only after its save, and its
drivers refuse anything that is not an effect. An unknown outcome whose re-read found the
cursor unchanged is reported as "not applied when read", and a retry is safe (ADR-0066).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from akchat_fsm import core
from akchat_fsm.core.effects import SaveSnapshot
from akchat_fsm.errors import OutcomeUnknown, SessionConflict, StorageUnavailable
from akchat_fsm.session import ChatDefinition, resume_chat_session, resume_chat_session_async
from akchat_fsm.session.definition import ConversationFlow
from akchat_fsm.session.drivers import Ports, execute_sync, run_async, run_sync
from akchat_fsm.session.effects import Plan
from akchat_fsm.session.ports import UpstreamFailed
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.session import SessionSnapshot

from ._flows import SUPPORT_ROUTES, SupportFlow

FLOW = ChatDefinition("seam", 1, ConversationFlow(SupportFlow, SUPPORT_ROUTES))
#: ``updatedAt`` of a write: the core's millisecond, then the 12 digits of its write nonce.
NONCED = re.compile(r"\.\d{3}\d{12}Z\Z")
#: Every core command that can emit a save (the plans reach them through ``akchat_fsm.core``).
SAVING_COMMANDS = (
    "persist",
    "claim_turn",
    "release_turn",
    "record_decision",
    "record_proposal",
    "claim_resolution",
    "complete_resolution",
    "reconcile",
)


class ReceivingStorage(MemoryStorage):
    """Memory storage that keeps every ``save`` call exactly as it arrived, applied or not."""

    def __init__(self, log: list[tuple[Any, ...]] | None = None) -> None:
        super().__init__()
        self.received: list[tuple[SessionSnapshot, int | None]] = []
        self.log = log if log is not None else []

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        self.received.append((snapshot, expected_cursor))
        statuses = tuple(str(b.status) for b in snapshot.confirmations)
        self.log.append(("save", snapshot.cursor, statuses))
        return super().save(snapshot, expected_cursor)

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: Any
    ) -> bool:
        # An audited claim saves its envelope with its entry, in one write (ADR-0141).
        self.received.append((snapshot, expected_cursor))
        statuses = tuple(str(b.status) for b in snapshot.confirmations)
        self.log.append(("save", snapshot.cursor, statuses))
        return super().save_with_records(snapshot, expected_cursor, records)


class LoggingUpstream(RecordingUpstream):
    """The recording upstream, writing its approve/deny calls into a log shared with storage."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.log = log

    def approve(self, tool_call_id: str) -> None:
        self.log.append(("approve", tool_call_id))
        super().approve(tool_call_id)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.log.append(("deny", tool_call_id))
        super().deny(tool_call_id, reason)


@pytest.fixture
def emitted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[SaveSnapshot]]:
    """Every ``SaveSnapshot`` the core's commands emit while the test runs, in order."""
    saves: list[SaveSnapshot] = []
    for name in SAVING_COMMANDS:
        real = getattr(core, name)

        def recording(*args: Any, _real: Callable[..., core.Step] = real, **kw: Any) -> Any:
            step = _real(*args, **kw)
            if step.save is not None:
                saves.append(step.save)
            return step

        monkeypatch.setattr(core, name, recording)
    yield saves


class ActsThenFails(RecordingUpstream):
    """An upstream whose next approve acts, then fails to answer (a lost reply)."""

    lose_next_reply = False

    def approve(self, tool_call_id: str) -> None:
        super().approve(tool_call_id)
        if self.lose_next_reply:
            self.lose_next_reply = False
            raise ConnectionError("reply lost after upstream acted")


def _story(storage: MemoryStorage) -> None:
    """Every kind of write a session makes: persist, turn, decision, propose, the three
    resolutions, and reconcile's completion, release and resume (fence, upstream, completion).
    The clock never moves, so only a write's nonce tells it from another."""
    session = resume_chat_session(FLOW, session_id="seam", storage=storage, clock=lambda: 1_000)
    session.persist()
    assert session.claim_turn("turn-1", 60_000)
    session.record_decision("msg-1", "start")
    assert session.release_turn("turn-1")
    upstream = ActsThenFails()
    coordinator = session.confirmations_for(upstream)
    tokens = [coordinator.propose("email.send", {"n": n}).token for n in range(6)]
    coordinator.approve(tokens[0])
    coordinator.reject(tokens[1], reason="no")
    upstream.lose_next_reply = True  # upstream acted; the claim stays processing
    with pytest.raises(UpstreamFailed):
        coordinator.approve(tokens[5])
    completed = session.reconcile(RecordingChatMemory(upstream))
    assert [o.action for o in completed] == ["completed"]
    upstream.fail_next = 2  # two claims left processing: upstream never acted on them
    for token in tokens[2:4]:
        with pytest.raises(UpstreamFailed):
            coordinator.approve(token)
    memory = RecordingChatMemory(upstream)
    released = session.reconcile(memory, upstream=upstream, release_untouched=True)
    assert [o.action for o in released] == ["released", "released"]
    coordinator.approve(tokens[2])
    upstream.fail_next = 1
    with pytest.raises(UpstreamFailed):
        coordinator.approve(tokens[3])
    assert [o.action for o in session.reconcile(memory, upstream=upstream)] == ["resumed"]
    assert coordinator.expire_due() == ()  # the clock did not move: nothing is due


def test_storage_receives_byte_for_byte_the_saves_the_core_emitted(
    emitted: list[SaveSnapshot],
) -> None:
    storage = ReceivingStorage()
    _story(storage)
    assert len(emitted) == len(storage.received) == 25
    for save, (snapshot, expected) in zip(emitted, storage.received, strict=True):
        assert snapshot is save.snapshot  # the shell sends the core's value, never a rewrite
        assert (snapshot.to_json(), expected) == (save.snapshot.to_json(), save.expected_cursor)


def test_every_write_the_shell_makes_carries_its_own_nonce() -> None:
    # Same clock for every write, so only the nonce tells two writes apart (ADR-0062).
    storage = ReceivingStorage()
    _story(storage)
    stamps = [snapshot.updated_at for snapshot, _ in storage.received]
    assert all(NONCED.search(stamp) for stamp in stamps), stamps
    assert all(stamp.startswith("1970-01-01T00:00:01.000") for stamp in stamps)
    assert len(set(stamps)) == len(stamps)


def test_the_asyncio_driver_sends_the_core_s_save_as_built(emitted: list[SaveSnapshot]) -> None:
    received: list[SessionSnapshot] = []

    class Receiving(AsyncMemoryStorage):
        async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
            received.append(snapshot)
            return await super().save(snapshot, expected_cursor)

    async def story() -> None:
        session = await resume_chat_session_async(
            FLOW, session_id="seam", storage=Receiving(), clock=lambda: 1_000
        )
        await session.persist()
        await session.claim_turn("turn-1", 60_000)

    asyncio.run(story())
    assert [s.snapshot for s in emitted] == received
    assert all(a is b.snapshot for a, b in zip(received, emitted, strict=True))


def test_a_re_decided_attempt_is_a_new_write_with_its_own_nonce(
    emitted: list[SaveSnapshot],
) -> None:
    storage = ReceivingStorage()
    a = resume_chat_session(FLOW, session_id="seam", storage=storage, clock=lambda: 1_000)
    a.persist()
    b = resume_chat_session(FLOW, session_id="seam", storage=storage, clock=lambda: 1_000)
    a.persist()  # b's copy is now stale
    assert b.claim_turn("turn-b", 60_000)  # conflicts once, re-decides, lands
    first, second = storage.received[2:]
    assert (first[1], second[1]) == (1, 2)
    assert first[0].updated_at != second[0].updated_at  # same millisecond, two nonces
    assert [s.snapshot for s in emitted] == [snapshot for snapshot, _ in storage.received]


# --------------------------------------------------------------------------- then after save
def test_a_reconcile_resume_saves_its_fence_before_the_upstream_call() -> None:
    # ADR-0054 in the shell: the unchanged claim is saved again (cursor + 1) before upstream is
    # called, so an older write still in flight cannot land after upstream acted.
    log: list[tuple[Any, ...]] = []
    storage = ReceivingStorage(log)
    upstream = LoggingUpstream(log)
    session = resume_chat_session(FLOW, session_id="seam", storage=storage, clock=lambda: 1_000)
    coordinator = session.confirmations_for(upstream)
    binding = coordinator.propose("email.send", {})
    upstream.fail_next = 1
    with pytest.raises(UpstreamFailed):
        coordinator.approve(binding.token)
    claimed_at = session.cursor
    del log[:]
    (outcome,) = session.reconcile(RecordingChatMemory(upstream), upstream=upstream)
    assert outcome.action == "resumed"
    assert log == [
        ("save", claimed_at + 1, ("approving",)),
        ("approve", binding.tool_call_id),
        ("save", claimed_at + 2, ("approved",)),
    ]


# --------------------------------------------------------------------------- drivers
class NotAnEffect:
    """What a broken plan might yield: no port is meant to receive it."""


def _yielding(effect: object) -> Plan[str]:
    yield effect  # type: ignore[misc]
    return "the driver took it for an effect"


class NoPorts:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"a port was called: {name}")


def test_a_driver_given_an_unknown_effect_fails_loudly() -> None:
    ports = Ports(storage=NoPorts(), upstream=NoPorts(), memory=NoPorts())
    with pytest.raises(AssertionError, match="NotAnEffect"):
        run_sync(_yielding(NotAnEffect()), ports)
    with pytest.raises(AssertionError, match="NotAnEffect"):
        asyncio.run(run_async(_yielding(NotAnEffect()), ports))
    with pytest.raises(AssertionError, match="NotAnEffect"):
        execute_sync(NotAnEffect(), ports)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- not applied when read
class LateLanding(MemoryStorage):
    """A server whose answer to one save is lost: the client hears "unknown" while the request
    is still in flight, and it lands later (applied iff its expected cursor is current then)."""

    def __init__(self) -> None:
        super().__init__()
        self.hold_next = False
        self.in_flight: list[tuple[SessionSnapshot, int | None]] = []

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        if self.hold_next:
            self.hold_next = False
            self.in_flight.append((snapshot, expected_cursor))
            raise OutcomeUnknown("timed out; the request is still in flight")
        return super().save(snapshot, expected_cursor)

    def land(self) -> list[bool]:
        flying, self.in_flight = self.in_flight, []
        return [super(LateLanding, self).save(s, e) for s, e in flying]

    def stored(self) -> SessionSnapshot:
        snapshot = decode_session_snapshot(self.load("seam")).snapshot
        assert snapshot is not None
        return snapshot


def _not_applied_when_read(storage: LateLanding) -> tuple[Any, SessionSnapshot]:
    session = resume_chat_session(FLOW, session_id="seam", storage=storage, clock=lambda: 1_000)
    session.persist()
    storage.hold_next = True
    with pytest.raises(StorageUnavailable) as error:
        session.persist()
    assert isinstance(error.value.__cause__, OutcomeUnknown)
    # What is true on a server: the re-read saw no change; it cannot know the request's fate.
    message = str(error.value)
    assert "when read" in message and "retry is safe" in message
    assert "did not apply" not in message
    assert message.startswith("save outcome unknown; a re-read found the stored cursor unchanged")
    (late,) = [snapshot for snapshot, _ in storage.in_flight]
    return session, late


def test_a_late_landing_write_makes_the_retry_conflict_never_both_apply() -> None:
    storage = LateLanding()
    session, late = _not_applied_when_read(storage)
    assert storage.land() == [True]  # "not applied when read", and yet it applied later
    with pytest.raises(SessionConflict):
        session.persist()  # the retry expects the cursor the late write moved: refused
    assert storage.stored().to_json() == late.to_json()  # exactly one of the two applied
    assert (session.cursor, storage.stored().cursor) == (2, 2)


def test_a_retry_that_lands_first_makes_the_late_write_conflict() -> None:
    storage = LateLanding()
    session, late = _not_applied_when_read(storage)
    assert session.persist() == 2  # the retry lands first
    retried = storage.stored()
    assert storage.land() == [False]  # the old request arrives: its expected cursor is gone
    assert storage.stored() == retried != late
    assert retried.cursor == 2
