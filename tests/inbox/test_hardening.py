"""The inbox's hardening: a CSRF token bound to its principal, bounded pages and cursors, and
``Cache-Control: no-store`` on every response (ADR-0130, amended)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from akchat_fsm import ConfigError, StorageUnavailable
from akchat_fsm.inbox import MAX_CURSOR
from akchat_fsm.storage import MemoryStorage

from ._world import World, by_header
from .test_http import client, csrf_of, open_call, post


@pytest.fixture
def world() -> World:
    return World()


def everyone(principal: Any, pending: Any) -> bool:
    return True


def test_a_token_minted_for_one_user_is_refused_for_another(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    app = world.app(authorize=by_header, can_decide=everyone)
    ana, bob = client(app, "ana"), client(app, "bob")
    anas = open_call(ana, record.token, "s-1")
    bob.cookies = ana.cookies  # the worst case: bob holds ana's cookie and her page's token
    before = world.stored("s-1")
    refused = post(bob, f"/call/{record.token}/approve", {"csrf": anas, "session": "s-1"})
    assert refused.status_code == 403 and "The form expired" in refused.text
    assert world.stored("s-1") == before
    assert world.upstream.calls_for(record.tool_call_id) == []
    # bob's own page (same cookie) gives him a token that is his: the refusal was the binding
    bobs = open_call(bob, record.token, "s-1")
    assert bobs != anas
    won = post(bob, f"/call/{record.token}/approve", {"csrf": bobs, "session": "s-1"})
    assert won.status_code == 200
    assert world.upstream.calls_for(record.tool_call_id) == [("approve", record.tool_call_id)]


@dataclass(frozen=True)
class User:
    """A host's principal: ``id`` is its identity; the other fields change per request."""

    id: str
    request_no: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return "a user"  # the same for everyone: only the id may tell users apart


def test_a_principal_s_id_attribute_is_its_identity(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    seen: list[int] = []

    def authorize(request: Any) -> User | None:
        seen.append(1)
        name = request.headers.get("x-user")
        return User(name, len(seen)) if name else None

    app = world.app(authorize=authorize, can_decide=everyone)
    ana, bob = client(app, "ana"), client(app, "bob")
    anas = open_call(ana, record.token, "s-1")
    bob.cookies = ana.cookies
    refused = post(bob, f"/call/{record.token}/reject", {"csrf": anas, "session": "s-1"})
    assert refused.status_code == 403  # str() is the same for both; the ids differ
    won = post(ana, f"/call/{record.token}/reject", {"csrf": anas, "session": "s-1"})
    assert won.status_code == 200  # a new principal object each request, the same id


class GreedyStorage(MemoryStorage):
    """A third-party adapter that ignores ``limit`` (returns every row)."""

    def list_pending(self, **query: Any) -> Any:
        return super().list_pending(**{**query, "limit": 1000})


def test_no_more_rows_than_a_page_are_rendered() -> None:
    world = World(storage=GreedyStorage())
    for n in range(7):
        world.propose(f"s-{n}", "email.send", {"n": n})
    page = client(world.app(authorize=by_header, page_size=3)).get("/")
    assert page.status_code == 200
    assert page.text.count('class="call"') == 3
    assert "4 more rows than a page holds" in page.text


class CountingStorage(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.listed = 0

    def list_pending(self, **query: Any) -> Any:
        self.listed += 1
        return super().list_pending(**query)


def test_the_longest_real_cursor_is_served_and_a_longer_one_never_reaches_storage() -> None:
    storage = CountingStorage()
    world = World(storage=storage)
    long_id = "s" * 128  # identifiers are at most 128 characters: the longest cursor
    for n in range(2):
        session = f"{long_id[:-1]}{n}"
        world.propose(session, "email.send", {"n": n})
    cursor = storage.list_pending(order="newest", limit=1).next_after
    assert cursor is not None and len(cursor) <= MAX_CURSOR
    c = client(world.app(authorize=by_header))
    served = c.get("/", params={"order": "newest", "after": cursor})
    assert served.status_code == 200 and served.text.count('class="call"') == 1
    listed = storage.listed
    refused = c.get("/", params={"after": "p1." + "A" * (MAX_CURSOR - 2)})
    assert refused.status_code == 400 and "cursor is too long" in refused.text
    assert storage.listed == listed


def test_cache_control_no_store_on_every_response(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    app = world.app(authorize=by_header, can_decide=everyone)
    ana = client(app)
    detail = ana.get(f"/call/{record.token}", params={"session": "s-1"})
    responses = {
        "list": ana.get("/"),
        "detail": detail,
        "decision": post(
            ana, f"/call/{record.token}/approve", {"csrf": csrf_of(detail.text), "session": "s-1"}
        ),
        "unauthenticated": client(app, None).get("/"),
        "missing call": ana.get("/call/nope"),
        "refused post": post(ana, f"/call/{record.token}/approve", {}),
        "not found": ana.get("/no/such/page"),
        "static": ana.get("/static/inbox.css"),
    }
    assert {name: r.headers.get("cache-control") for name, r in responses.items()} == {
        name: "no-store" for name in responses
    }
    assert responses["decision"].status_code == 200


@pytest.mark.parametrize("max_cursor", [0, 15, 4097])
def test_the_cursor_bound_is_checked(world: World, max_cursor: int) -> None:
    with pytest.raises(ConfigError, match="bounds"):
        world.app(authorize=by_header, max_cursor=max_cursor)


def test_a_permission_revoked_after_the_page_is_rechecked_on_the_post(world: World) -> None:
    """The browser test's stale form is now refused by its CSRF binding; ``can_decide`` is
    still asked on every decision, with the user's own valid token."""
    record = world.propose("s-1", "email.send", {"to": "a"})
    allowed = {"bob"}
    app = world.app(authorize=by_header, can_decide=lambda principal, _: principal in allowed)
    bob = client(app, "bob")
    csrf = open_call(bob, record.token, "s-1")
    allowed.clear()
    before = world.stored("s-1")
    response = post(bob, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
    assert world.stored("s-1") == before and world.upstream.calls == []


def test_a_session_the_host_gives_no_way_to_decide_is_a_page_not_a_500(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    app = world.app(authorize=by_header, can_decide=everyone, bridge_for=lambda _sid: None,
                    upstream_for=None)  # fmt: skip
    ana = client(app)
    before = world.stored("s-1")
    form = open_call(ana, record.token, "s-1")
    response = post(ana, f"/call/{record.token}/approve", {"csrf": form, "session": "s-1"})
    assert response.status_code == 501 and 'data-kind="undecidable"' in response.text
    assert "no upstream for this session" in response.text
    assert world.stored("s-1") == before and world.upstream.calls == []


def test_an_async_can_decide_over_sync_storage_is_awaited_and_denies(world: World) -> None:
    """Over sync storage the hooks run in a worker thread; an ``async def`` hook's coroutine
    is awaited, never taken for a yes (a coroutine object is truthy)."""
    record = world.propose("s-1", "email.send", {"to": "a"})
    allowed = {"mallory"}  # allowed while the page is opened (so it has a form), then not

    async def only_allowed(principal: Any, pending: Any) -> bool:
        return principal in allowed

    app = world.app(authorize=by_header, can_decide=only_allowed)
    mallory = client(app, "mallory")
    csrf = open_call(mallory, record.token, "s-1")
    allowed.clear()
    before = world.stored("s-1")
    response = post(mallory, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
    assert world.stored("s-1") == before and world.upstream.calls == []


def test_a_can_decide_answer_other_than_true_denies(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    answer: dict[str, object] = {"ana": True}  # True while the page is opened, then truthy
    app = world.app(authorize=by_header, can_decide=lambda principal, _: answer[principal])
    ana = client(app)
    csrf = open_call(ana, record.token, "s-1")
    answer["ana"] = "yes"
    before = world.stored("s-1")
    response = post(ana, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 403
    assert world.stored("s-1") == before and world.upstream.calls == []


class FailingReads(MemoryStorage):
    """A store whose pending index stops answering (the server went away after start)."""

    def list_pending(self, **kwargs: Any) -> Any:
        raise StorageUnavailable("the pending index did not answer")


def test_a_store_that_stops_answering_is_a_503_page_not_a_500() -> None:
    world = World(storage=FailingReads())
    response = client(world.app(authorize=by_header)).get("/")
    assert response.status_code == 503
    assert "The store did not answer" in response.text
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
