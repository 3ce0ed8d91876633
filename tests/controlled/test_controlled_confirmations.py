"""ControlledConfirmations: in-memory, session-bound, single-flight, kernel-decided."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from controlled_helpers import snapshot

from akchat_fsm.controlled import ControlledConfirmations, create_controlled_chat
from akchat_fsm.errors import AlreadyResolved, ConfigError, InvalidConfirmationToken
from akchat_fsm.wire.enums import ConfirmationStatus

SESSION = "synthetic-session"


class Upstream:
    """A host whose tool calls need confirmation; async with a yield point, or sync."""

    def __init__(self, *, status: str = "requires_confirmation", fail: int = 0) -> None:
        self.status = status
        self.fail = fail
        self.proposed: list[dict[str, Any]] = []
        self.approved: list[str] = []
        self.denied: list[tuple[str, str | None]] = []
        self.error = RuntimeError("upstream down")

    async def propose_tool_call(self, call: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self.proposed.append(call)
        return {**call, "status": self.status, "future": "dropped"}

    async def approve(self, tool_call_id: str) -> None:
        await asyncio.sleep(0)
        if self.fail:
            self.fail -= 1
            raise self.error
        self.approved.append(tool_call_id)

    async def deny(self, tool_call_id: str, reason: str | None = None) -> None:
        await asyncio.sleep(0)
        self.denied.append((tool_call_id, reason))

    def send(self, text: str) -> None: ...
    def stop(self) -> None: ...
    def retry(self) -> None: ...
    def edit(self, message_id: str, new_content: str) -> None: ...
    def regenerate(self, message_id: str | None = None) -> None: ...
    def set_input(self, value: str) -> None: ...
    def clear(self) -> None: ...


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def coordinator(
    upstream: Upstream, clock: Clock | None = None, ttl_ms: int = 300_000
) -> ControlledConfirmations:
    chat = create_controlled_chat(snapshot(), upstream)
    ids = iter(f"choice-{n}" for n in range(1, 100))
    return ControlledConfirmations(
        chat, ttl_ms=ttl_ms, now=clock or Clock(100), create_id=lambda: next(ids)
    )


def test_propose_binds_a_pending_record_to_the_snapshot_session() -> None:
    upstream = Upstream()
    confirmations = coordinator(upstream)
    record = asyncio.run(confirmations.propose("pay", {"amount": 3}))
    assert upstream.proposed == [{"id": "app-choice-1", "name": "pay", "args": {"amount": 3}}]
    assert record.session_id == SESSION
    assert (record.token, record.tool_call_id) == ("confirm-choice-1", "app-choice-1")
    assert (record.expires_at, record.status) == (300_100, ConfirmationStatus.PENDING)
    assert dict(record.input) == {"amount": 3}
    assert confirmations.by_tool_call("app-choice-1") == record
    assert confirmations.by_tool_call("nope") is None


def test_upstream_status_other_than_requires_confirmation_is_rejected_at_birth() -> None:
    upstream = Upstream(status="complete")
    record = asyncio.run(coordinator(upstream).propose("pay", {}))
    assert record.status is ConfirmationStatus.REJECTED
    assert upstream.denied == []


def test_concurrent_approves_call_upstream_once() -> None:
    upstream = Upstream()
    confirmations = coordinator(upstream)

    async def scenario() -> list[Any]:
        record = await confirmations.propose("pay", {})
        return await asyncio.gather(
            confirmations.approve(record.token, SESSION),
            confirmations.approve(record.token, SESSION),
            confirmations.reject(record.token, SESSION, "changed my mind"),
        )

    results = asyncio.run(scenario())
    assert [r.status for r in results] == [ConfirmationStatus.APPROVED] * 3
    assert upstream.approved == ["app-choice-1"]
    assert upstream.denied == []


def test_terminal_record_is_inert() -> None:
    upstream = Upstream()
    confirmations = coordinator(upstream)

    async def scenario() -> None:
        record = await confirmations.propose("pay", {})
        await confirmations.approve(record.token, SESSION)
        with pytest.raises(AlreadyResolved) as caught:
            await confirmations.reject(record.token, SESSION)
        assert caught.value.record.status is ConfirmationStatus.APPROVED

    asyncio.run(scenario())
    assert upstream.approved == ["app-choice-1"]
    assert upstream.denied == []


def test_reject_denies_with_the_reason() -> None:
    upstream = Upstream()
    confirmations = coordinator(upstream)

    async def scenario() -> ConfirmationStatus:
        record = await confirmations.propose("pay", {})
        return (await confirmations.reject(record.token, SESSION, "too expensive")).status

    assert asyncio.run(scenario()) is ConfirmationStatus.REJECTED
    assert upstream.denied == [("app-choice-1", "too expensive")]


@pytest.mark.parametrize("event", ["approve", "reject"])
def test_expiry_boundary_denies_and_records_expired(event: str) -> None:
    upstream = Upstream()
    clock = Clock(10)
    confirmations = coordinator(upstream, clock, ttl_ms=5)

    async def scenario() -> ConfirmationStatus:
        record = await confirmations.propose("pay", {})
        assert record.expires_at == 15
        clock.now = 15
        resolve = getattr(confirmations, event)
        return (await resolve(record.token, SESSION)).status

    assert asyncio.run(scenario()) is ConfirmationStatus.EXPIRED
    assert upstream.approved == []
    assert upstream.denied == [("app-choice-1", "confirmation expired")]


def test_token_of_another_session_or_unknown_is_inert() -> None:
    upstream = Upstream()
    confirmations = coordinator(upstream)

    async def scenario() -> None:
        record = await confirmations.propose("pay", {})
        with pytest.raises(InvalidConfirmationToken):
            await confirmations.approve(record.token, "other-session")
        with pytest.raises(InvalidConfirmationToken):
            await confirmations.approve("confirm-unknown", SESSION)
        assert confirmations.records()[0].status is ConfirmationStatus.PENDING

    asyncio.run(scenario())
    assert upstream.approved == [] and upstream.denied == []


def test_upstream_failure_propagates_and_leaves_the_record_pending_for_a_retry() -> None:
    upstream = Upstream(fail=1)
    confirmations = coordinator(upstream)

    async def scenario() -> ConfirmationStatus:
        record = await confirmations.propose("pay", {})
        with pytest.raises(RuntimeError) as caught:
            await confirmations.approve(record.token, SESSION)
        assert caught.value is upstream.error
        assert confirmations.records()[0].status is ConfirmationStatus.PENDING
        return (await confirmations.approve(record.token, SESSION)).status

    assert asyncio.run(scenario()) is ConfirmationStatus.APPROVED
    assert upstream.approved == ["app-choice-1"]


def test_joiners_of_a_failed_flight_see_the_same_error() -> None:
    upstream = Upstream(fail=1)
    confirmations = coordinator(upstream)

    async def scenario() -> list[Any]:
        record = await confirmations.propose("pay", {})
        return await asyncio.gather(
            confirmations.approve(record.token, SESSION),
            confirmations.approve(record.token, SESSION),
            return_exceptions=True,
        )

    assert asyncio.run(scenario()) == [upstream.error, upstream.error]


def test_sync_callbacks_work_too() -> None:
    calls: list[str] = []

    class SyncUpstream(Upstream):
        def propose_tool_call(self, call: dict[str, Any]) -> dict[str, Any]:  # type: ignore[override]
            return {**call, "status": "requires_confirmation"}

        def approve(self, tool_call_id: str) -> None:  # type: ignore[override]
            calls.append(tool_call_id)

    confirmations = coordinator(SyncUpstream())

    async def scenario() -> ConfirmationStatus:
        record = await confirmations.propose("pay", {})
        return (await confirmations.approve(record.token, SESSION)).status

    assert asyncio.run(scenario()) is ConfirmationStatus.APPROVED
    assert calls == ["app-choice-1"]


@pytest.mark.parametrize("suffix", ["", "-x", "a" * 121, "bad id", 7])
def test_invalid_ids_are_refused_before_upstream(suffix: Any) -> None:
    upstream = Upstream()
    chat = create_controlled_chat(snapshot(), upstream)
    confirmations = ControlledConfirmations(chat, create_id=lambda: suffix)
    with pytest.raises(ConfigError):
        asyncio.run(confirmations.propose("pay", {}))
    assert upstream.proposed == []


@pytest.mark.parametrize("ttl", [0, -1, 1.5, True])
def test_invalid_options(ttl: Any) -> None:
    chat = create_controlled_chat(snapshot(), Upstream())
    with pytest.raises(ConfigError):
        ControlledConfirmations(chat, ttl_ms=ttl)


def test_invalid_upstream_tool_call_is_a_config_error() -> None:
    class Broken(Upstream):
        async def propose_tool_call(self, call: dict[str, Any]) -> Any:
            return {"id": "", "name": "x", "args": [], "status": "pending"}

    with pytest.raises(ConfigError):
        asyncio.run(coordinator(Broken()).propose("pay", {}))


def test_failed_propose_leaves_no_ghost_record() -> None:
    class Failing(Upstream):
        async def propose_tool_call(self, call: dict[str, Any]) -> dict[str, Any]:
            raise self.error

    upstream = Failing()
    confirmations = coordinator(upstream)
    with pytest.raises(RuntimeError) as caught:
        asyncio.run(confirmations.propose("pay", {}))
    assert caught.value is upstream.error
    assert confirmations.records() == ()
    assert confirmations.by_tool_call("app-choice-1") is None


def test_args_sent_upstream_are_a_copy() -> None:
    upstream = Upstream()
    args = {"items": [1, 2]}
    record = asyncio.run(coordinator(upstream).propose("pay", args))
    upstream.proposed[0]["args"]["items"].append(3)
    args["items"].append(4)
    assert record.input["items"] == (1, 2)
