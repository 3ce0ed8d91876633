"""The inbox over asyncio storage: the same routes, the asyncio session awaited on the loop.

Real asyncio adapters (memory and SQLite), the asyncio recording upstream, and the real
asyncio pydantic-ai bridge; everything runs on the TestClient's own event loop (its portal),
so the adapters' locks and the upstream's events live on one loop, as under a server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.function import FunctionModel
from starlette.testclient import TestClient

from akchat_fsm import resume_chat_session_async
from akchat_fsm.inbox import create_inbox
from akchat_fsm.integrations.ledger import AsyncToolLedger
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge
from akchat_fsm.storage import AsyncMemoryStorage, AsyncSQLiteStorage
from akchat_fsm.testing.doubles import AsyncRecordingUpstream

from ._world import DEFINITION, ClaimantDied, Clock, by_header, only_ana
from .test_bridge import scripted
from .test_http import FORM_DIGESTS, SHOWN

ORIGIN = "http://127.0.0.1"
SAME = {"origin": ORIGIN, "sec-fetch-site": "same-origin"}


@dataclass
class AsyncWorld:
    storage: Any
    upstream: AsyncRecordingUpstream = field(default_factory=AsyncRecordingUpstream)
    clock: Clock = field(default_factory=Clock)

    async def propose(self, session_id: str, action: str, args: dict[str, Any]) -> Any:
        session = await resume_chat_session_async(
            DEFINITION, session_id=session_id, storage=self.storage, clock=self.clock
        )
        return await session.confirmations_for(self.upstream).propose(action, args)

    async def status(self, session_id: str, token: str) -> str:
        session = await resume_chat_session_async(
            DEFINITION, session_id=session_id, storage=self.storage, clock=self.clock
        )
        return next(b.status.value for b in session.confirmations if b.token == token)

    def app(self, **options: Any) -> Any:
        options.setdefault("upstream_for", lambda _sid: self.upstream)
        options.setdefault("clock", self.clock)
        options.setdefault("definition", DEFINITION)
        return create_inbox(self.storage, authorize=by_header, can_decide=only_ana, **options)


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncWorld:
    if request.param == "memory":
        return AsyncWorld(AsyncMemoryStorage())
    return AsyncWorld(AsyncSQLiteStorage(tmp_path / "sessions.db"))


@pytest.fixture
def client(world: AsyncWorld) -> Iterator[TestClient]:
    """A browser on the app, its requests and our ``portal.call``s all on one event loop."""
    headers = {"x-user": "ana"}
    with TestClient(world.app(), base_url=ORIGIN, client=("127.0.0.1", 5), headers=headers) as c:
        yield c


def csrf(c: TestClient, token: str, session_id: str) -> str:
    page = c.get(f"/call/{token}", params={"session": session_id})
    assert page.status_code == 200, page.text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert match
    SHOWN.update(FORM_DIGESTS.findall(page.text))
    return match.group(1)


def decide(c: TestClient, token: str, verb: str, form: str, **fields: str) -> Any:
    data = {"csrf": form, "session": "s-1", "args_digest": SHOWN.get(token, ""), **fields}
    return c.post(f"/call/{token}/{verb}", data=data, headers=SAME)


def test_create_inbox_accepts_asyncio_storage(world: AsyncWorld) -> None:
    assert world.app().state.inbox.asyncio is True


def test_approve_over_asyncio_storage(world: AsyncWorld, client: TestClient) -> None:
    c = client
    record = c.portal.call(world.propose, "s-1", "email.send", {"to": "a"})
    assert record.token in c.get("/").text
    response = decide(c, record.token, "approve", csrf(c, record.token, "s-1"))
    assert response.status_code == 200 and 'data-kind="won"' in response.text
    assert world.upstream.sync.calls_for(record.tool_call_id) == [("approve", record.tool_call_id)]
    assert c.portal.call(world.status, "s-1", record.token) == "approved"
    assert record.token not in c.get("/").text  # it left the pending index


def test_reject_with_a_reason_over_asyncio_storage(world: AsyncWorld, client: TestClient) -> None:
    c = client
    record = c.portal.call(world.propose, "s-1", "email.send", {"to": "a"})
    form = csrf(c, record.token, "s-1")
    response = decide(c, record.token, "reject", form, reason="not today")
    assert response.status_code == 200 and 'data-kind="won"' in response.text
    assert world.upstream.sync.denied == [(record.tool_call_id, "not today")]
    assert c.portal.call(world.status, "s-1", record.token) == "rejected"


def test_two_approvals_of_one_call_one_wins(world: AsyncWorld, client: TestClient) -> None:
    record = client.portal.call(world.propose, "s-1", "email.send", {"to": "a"})
    forms = csrf(client, record.token, "s-1"), csrf(client, record.token, "s-1")  # two tabs
    won = decide(client, record.token, "approve", forms[0])
    lost = decide(client, record.token, "approve", forms[1])
    assert won.status_code == 200 and 'data-kind="won"' in won.text
    assert lost.status_code == 409 and 'data-kind="decided"' in lost.text
    assert world.upstream.sync.executed[record.tool_call_id] == 1


def test_an_async_bridge_continues_the_run_once() -> None:
    storage = AsyncMemoryStorage()
    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"email sent to {to}"

    async def bridge_for(session_id: str) -> AsyncPydanticAIBridge:  # an async hook
        session = await resume_chat_session_async(DEFINITION, session_id=session_id,
                                                  storage=storage)  # fmt: skip
        return AsyncPydanticAIBridge(agent, session, storage)

    app = create_inbox(storage, definition=DEFINITION, authorize=by_header,
                       can_decide=only_ana, bridge_for=bridge_for)  # fmt: skip
    with TestClient(app, base_url=ORIGIN, headers={"x-user": "ana"}) as c:

        async def start() -> Any:
            return await (await bridge_for("s-1")).run("Email Ana", run_id="run-1")

        paused = c.portal.call(start)
        assert paused.status == "paused"
        token = paused.pending[0].token
        form = csrf(c, token, "s-1")
        response = decide(c, token, "approve", form)
        assert response.status_code == 200 and 'data-kind="won"' in response.text
        assert sent == ["ana@example.com"]
        late = decide(c, token, "approve", form)
        assert late.status_code == 409 and sent == ["ana@example.com"]


def test_the_operator_page_settles_over_asyncio_storage(world: AsyncWorld) -> None:
    """The processing index, the ledger and the settle, awaited on the loop."""

    async def crash() -> None:
        def died() -> None:
            raise ClaimantDied

        with pytest.raises(ClaimantDied):
            await AsyncToolLedger(world.storage, "s-1", owner="worker-7").execute(
                "c-1", "send", {"to": "a"}, died
            )

    async def entry() -> Any:
        return await AsyncToolLedger(world.storage, "s-1").get("c-1")

    app = world.app(can_settle=lambda principal, unknown: principal == "ana")
    with TestClient(app, base_url=ORIGIN, client=("127.0.0.1", 5), headers={"x-user": "ana"}) as c:
        c.portal.call(crash)
        page = c.get("/operator")
        assert page.status_code == 200 and 'data-tool-call="c-1"' in page.text
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert match
        form = {"csrf": match.group(1), "session": "s-1", "tool_call": "c-1"}
        done = c.post("/operator/settle", data={**form, "verdict": "did-not-run"}, headers=SAME)
        assert done.status_code == 200 and 'data-kind="settled"' in done.text
        settled = c.portal.call(entry)
        assert settled.state.value == "released" and settled.owner == "ana"
        late = c.post("/operator/settle", data={**form, "verdict": "ran"}, headers=SAME)
        assert late.status_code == 409 and "settled as not run by ana" in late.text
        assert c.portal.call(entry) == settled


def test_a_settle_continues_the_run_through_an_async_bridge() -> None:
    storage = AsyncMemoryStorage()
    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"email sent to {to}"

    async def bridge_for(session_id: str) -> AsyncPydanticAIBridge:
        session = await resume_chat_session_async(DEFINITION, session_id=session_id,
                                                  storage=storage)  # fmt: skip
        return AsyncPydanticAIBridge(agent, session, storage)

    app = create_inbox(storage, definition=DEFINITION, authorize=by_header,
                       can_settle=lambda principal, _: principal == "ana",
                       bridge_for=bridge_for)  # fmt: skip
    with TestClient(app, base_url=ORIGIN, headers={"x-user": "ana"}) as c:

        async def paused_with_an_unknown_execution() -> str:
            paused = await (await bridge_for("s-1")).run("Email Ana", run_id="run-1")
            call = paused.pending[0]
            await (await bridge_for("s-1")).approve(call.token, continue_run=False)

            def died() -> None:
                raise ClaimantDied

            with pytest.raises(ClaimantDied):  # the claimant died inside the body
                await AsyncToolLedger(storage, "s-1").execute(
                    call.tool_call_id, "send_email", dict(call.input), died
                )
            return str(call.tool_call_id)

        async def output() -> Any:
            return (await (await bridge_for("s-1")).continue_run("run-1")).output

        tool_call_id = c.portal.call(paused_with_an_unknown_execution)
        page = c.get("/operator").text
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert match and f'data-tool-call="{tool_call_id}"' in page
        form = {"csrf": match.group(1), "session": "s-1", "tool_call": tool_call_id}
        response = c.post("/operator/settle", headers=SAME,
                          data={**form, "verdict": "ran", "result": '"sent by hand"'})  # fmt: skip
        assert response.status_code == 200 and "run-1: completed" in response.text
        assert c.portal.call(output) == "Done: sent by hand" and sent == []
