"""Two clients race one upstream call, and a broken protocol fails the test instead of hanging.

The winner's upstream call is held open while the loser tries; the loser must get
:class:`ResolutionInProgress` without reaching upstream. Nothing here waits unboundedly:

- only the *first* upstream call blocks (on a gate); any further call is counted and returns at
  once, so a protocol that lets the loser through shows up as a second execution, not as a loser
  parked forever behind the gate;
- every wait (the winner reaching upstream, the loser's call, the winner finishing, a thread
  join) is bounded by ``HANG_GUARD`` and a wait that runs out *fails* the test. The bound is a
  hang guard, never a correctness condition: a healthy run takes milliseconds, and no sleep
  decides an outcome;
- the gate is always opened in ``finally``, so a failure never leaves a task or thread behind.

The same scenario runs on the asyncio driver and on the sync driver (two threads), and each is
run once against a coordinator that calls upstream before its claim, which must fail quickly.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from akchat_fsm import core
from akchat_fsm.errors import ResolutionInProgress
from akchat_fsm.machines.confirmation import ConfirmationEvent
from akchat_fsm.session import (
    ChatDefinition,
    ToolCallProposal,
    _confirm,
    resume_chat_session,
    resume_chat_session_async,
)
from akchat_fsm.session._state import SessionHolder, apply
from akchat_fsm.session.effects import Plan
from akchat_fsm.storage.memory import AsyncMemoryStorage, MemoryStorage

DEFINITION = ChatDefinition("support")
#: Seconds any one wait may take before the test fails as hung (a healthy wait takes < 0.1 s).
HANG_GUARD = 20.0


class GatedCalls:
    """Upstream bookkeeping shared by both drivers: the first call is the one that blocks."""

    def __init__(self) -> None:
        self.executed: Counter[str] = Counter()
        self.first = True
        self.lock = threading.Lock()

    def enter(self, tool_call_id: str) -> bool:
        """Count one call; ``True`` for the very first call (the one to hold at the gate)."""
        with self.lock:
            first, self.first = self.first, False
            return first

    def act(self, tool_call_id: str) -> None:
        with self.lock:
            self.executed[tool_call_id] += 1


def _proposal(id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
    return ToolCallProposal(id, name, dict(args), "requires_confirmation")


class AsyncGatedUpstream:
    def __init__(self) -> None:
        self.calls = GatedCalls()
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    async def propose_tool_call(
        self, id: str, name: str, args: Mapping[str, Any]
    ) -> ToolCallProposal:
        return _proposal(id, name, args)

    async def approve(self, tool_call_id: str) -> None:
        if self.calls.enter(tool_call_id):
            self.entered.set()
            await asyncio.wait_for(self.gate.wait(), HANG_GUARD)
        self.calls.act(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str) -> None:
        self.calls.act(tool_call_id)


class ThreadGatedUpstream:
    def __init__(self) -> None:
        self.calls = GatedCalls()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return _proposal(id, name, args)

    def approve(self, tool_call_id: str) -> None:
        if self.calls.enter(tool_call_id):
            self.entered.set()
            assert self.gate.wait(HANG_GUARD), "the gate was never opened"
        self.calls.act(tool_call_id)

    def deny(self, tool_call_id: str, reason: str) -> None:
        self.calls.act(tool_call_id)


# --------------------------------------------------------------------------- the scenario
async def _race_async() -> None:
    storage = AsyncMemoryStorage(MemoryStorage())
    upstream = AsyncGatedUpstream()
    first = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
    token = (await first.confirmations_for(upstream).propose("email.send", {})).token
    a = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
    b = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
    assert a.cursor == b.cursor == 1  # both resumed from the same stored snapshot
    winner = asyncio.create_task(a.confirmations_for(upstream).approve(token))
    try:
        entered = asyncio.create_task(upstream.entered.wait())
        done, _ = await asyncio.wait(
            {winner, entered}, timeout=HANG_GUARD, return_when=asyncio.FIRST_COMPLETED
        )
        entered.cancel()
        if winner in done:  # finished (or failed) without holding upstream: show why
            raise AssertionError(f"the winner never waited in upstream: {winner.result()!r}")
        assert done, "the winner never reached upstream"
        with pytest.raises(ResolutionInProgress) as lost:
            await asyncio.wait_for(b.confirmations_for(upstream).approve(token), HANG_GUARD)
    finally:
        upstream.gate.set()
    assert lost.value.record is not None and lost.value.record.status == "approving"
    assert (await asyncio.wait_for(winner, HANG_GUARD)).status == "approved"
    assert upstream.calls.executed == {lost.value.record.tool_call_id: 1}
    stored = await resume_chat_session_async(DEFINITION, session_id="s", storage=storage)
    assert stored.confirmations[0].status == "approved"


def _race_threads() -> None:
    storage = MemoryStorage()
    upstream = ThreadGatedUpstream()
    first = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    token = first.confirmations_for(upstream).propose("email.send", {}).token
    a = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    b = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert a.cursor == b.cursor == 1
    result: list[object] = []

    def win() -> None:
        try:
            result.append(a.confirmations_for(upstream).approve(token))
        except BaseException as exc:  # handed to the test thread below
            result.append(exc)
        finally:
            upstream.entered.set()  # never leave the test thread waiting on a dead winner

    thread = threading.Thread(target=win, daemon=True)
    thread.start()
    try:
        assert upstream.entered.wait(HANG_GUARD), "the winner never reached upstream"
        if result:
            raise AssertionError(f"the winner never waited in upstream: {result[0]!r}")
        with pytest.raises(ResolutionInProgress) as lost:
            b.confirmations_for(upstream).approve(token)
    finally:
        upstream.gate.set()
        thread.join(HANG_GUARD)
    assert not thread.is_alive(), "the winner is still running"
    (won,) = result
    if isinstance(won, BaseException):
        raise won
    assert lost.value.record is not None and lost.value.record.status == "approving"
    assert getattr(won, "status", None) == "approved"
    assert upstream.calls.executed == {lost.value.record.tool_call_id: 1}
    stored = resume_chat_session(DEFINITION, session_id="s", storage=storage)
    assert stored.confirmations[0].status == "approved"


SCENARIOS: dict[str, Callable[[], None]] = {
    "asyncio": lambda: asyncio.run(_race_async()),
    "threads": _race_threads,
}


@pytest.mark.parametrize("driver", sorted(SCENARIOS))
def test_two_clients_race_one_upstream_call(driver: str) -> None:
    SCENARIOS[driver]()


# --------------------------------------------------------------------------- it can fail
def _upstream_before_claim(
    holder: SessionHolder, token: str, intent: ConfirmationEvent, **_: Any
) -> Plan[Any]:
    """The seeded bug: call upstream on the (possibly stale) copy, then claim and complete."""
    step = core.claim_resolution(holder.core, token, intent, holder.clock())
    yield step.then
    yield from apply(
        holder,
        lambda state, now, nonce: core.claim_resolution(state, token, intent, now, nonce=nonce),
        4,
    )
    completed = yield from apply(holder, _confirm._complete(token), 16)
    return core.find_binding(completed.state, token)


@pytest.fixture
def upstream_before_claim(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(_confirm, "plan_resolve", _upstream_before_claim)
    yield


@pytest.mark.parametrize("driver", sorted(SCENARIOS))
@pytest.mark.usefixtures("upstream_before_claim")
def test_a_coordinator_calling_upstream_before_its_claim_fails_the_race(driver: str) -> None:
    # Fails at once (the loser's call is a second execution); before this file it hung.
    with pytest.raises((AssertionError, pytest.fail.Exception)) as info:
        SCENARIOS[driver]()
    assert "DID NOT RAISE" in str(info.value) or "executed" in str(info.value)
