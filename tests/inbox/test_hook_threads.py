"""The host's permission hooks never run a sync body on the event loop (docs/inbox.md).

``authorize`` and ``can_decide`` are the host's code, often a database lookup: a sync one runs
in a worker thread, whatever the storage's flavour, so a slow one stalls only its own request;
an ``async def`` one is awaited on the loop. Proved by the thread each hook ran on, never by
timing: the loop's own thread is read through the TestClient's portal.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from starlette.testclient import TestClient

from akchat_fsm.inbox import create_inbox
from akchat_fsm.storage import AsyncMemoryStorage
from akchat_fsm.testing.doubles import AsyncRecordingUpstream

from ._world import DEFINITION, World, by_header
from .test_http import ORIGIN, csrf_of, post


async def _this_thread() -> int:
    return threading.get_ident()


def _inbox(world: World, flavour: str, **hooks: Any) -> Any:
    """The inbox over the world's rows, through sync storage or its asyncio twin."""
    if flavour == "sync":
        return world.app(**hooks)
    upstream = AsyncRecordingUpstream(sync=world.upstream)
    storage = AsyncMemoryStorage(world.storage)
    return create_inbox(storage, definition=DEFINITION, clock=world.clock,
                        upstream_for=lambda _sid: upstream, **hooks)  # fmt: skip


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_sync_authorize_and_can_decide_run_off_the_event_loop(flavour: str) -> None:
    world = World()
    record = world.propose("s-1", "email.send", {"to": "a"})
    ran: dict[str, set[int]] = {"authorize": set(), "can_decide": set()}

    def authorize(request: Any) -> str | None:
        ran["authorize"].add(threading.get_ident())
        return by_header(request)

    def can_decide(principal: Any, pending: Any) -> bool:
        ran["can_decide"].add(threading.get_ident())
        return principal == "ana"

    app = _inbox(world, flavour, authorize=authorize, can_decide=can_decide)
    assert app.state.inbox.asyncio is (flavour == "asyncio")
    headers = {"x-user": "ana"}
    with TestClient(app, base_url=ORIGIN, client=("127.0.0.1", 5), headers=headers) as c:
        loop = c.portal.call(_this_thread)
        page = c.get(f"/call/{record.token}", params={"session": "s-1"})
        assert page.status_code == 200 and 'id="approve"' in page.text
        fields = {"csrf": csrf_of(page.text), "session": "s-1"}
        won = post(c, f"/call/{record.token}/approve", fields)
    assert won.status_code == 200 and 'data-kind="won"' in won.text
    assert ran["authorize"] and ran["can_decide"]  # both asked, on every request
    assert loop not in ran["authorize"] | ran["can_decide"]


def test_an_async_authorize_is_awaited_on_the_event_loop() -> None:
    world = World()
    ran: list[int] = []

    async def authorize(request: Any) -> str | None:
        ran.append(threading.get_ident())
        return by_header(request)

    app = world.app(authorize=authorize)
    with TestClient(app, base_url=ORIGIN, headers={"x-user": "ana"}) as c:
        loop = c.portal.call(_this_thread)
        assert c.get("/").status_code == 200
    assert ran == [loop]
