"""The inbox over HTTP (Starlette's TestClient): security, refusals that change nothing, decisions.

Real memory storage and the recording upstream; the clock is injected, so expiry is a step.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from akchat_fsm import ConfigError, arguments_digest, resume_chat_session
from akchat_fsm.inbox import create_inbox
from akchat_fsm.session import audit_trail
from akchat_fsm.storage import AsyncMemoryStorage
from akchat_fsm.testing.doubles import RecordingChatMemory

from ._world import DEFINITION, World, by_header, only_ana

ORIGIN = "http://127.0.0.1"


@pytest.fixture
def world() -> World:
    return World()


def client(app: Any, user: str | None = "ana", host: str = "127.0.0.1") -> TestClient:
    headers = {"x-user": user} if user else {}
    return TestClient(app, base_url=ORIGIN, client=(host, 50000), headers=headers)


#: token -> the arguments digest its decision form carried, from every page read here: a post
#: sends what the page the user saw holds, as the browser does (``post`` adds it).
SHOWN: dict[str, str] = {}
FORM_DIGESTS = re.compile(
    r'action="[^"]*/call/([^/"]+)/approve".*?name="args_digest" value="([^"]+)"', re.S
)


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "the page has no CSRF field"
    SHOWN.update(FORM_DIGESTS.findall(page))
    return match.group(1)


def open_call(c: TestClient, token: str, session_id: str) -> str:
    response = c.get(f"/call/{token}", params={"session": session_id})
    assert response.status_code == 200, response.text
    return csrf_of(response.text)


def post(c: TestClient, path: str, fields: dict[str, str], **headers: str) -> Any:
    same = {"origin": ORIGIN, "sec-fetch-site": "same-origin"}
    sent = {k: v for k, v in {**same, **headers}.items() if v}  # "" drops a header
    decision = re.fullmatch(r"/call/([^/]+)/(?:approve|reject)", path)
    if decision and decision.group(1) in SHOWN and "args_digest" not in fields:
        fields = {**fields, "args_digest": SHOWN[decision.group(1)]}
    return c.post(path, data=fields, headers=sent)


# ------------------------------------------------------------------ configuration
def test_refuses_to_start_without_authorize(world: World) -> None:
    with pytest.raises(ConfigError, match="authorize"):
        create_inbox(world.storage, definition=DEFINITION, upstream_for=lambda s: world.upstream)


class HalfAsync(AsyncMemoryStorage):
    """An index whose two methods are of two flavours: neither path could call it."""

    def find_token(self, token: str) -> str | None:  # type: ignore[override]
        return None


def test_refuses_a_storage_without_the_index_and_no_way_to_decide(world: World) -> None:
    for storage in (object(), HalfAsync()):  # asyncio storage is accepted (test_async.py)
        with pytest.raises(ConfigError, match="pending index"):
            create_inbox(storage, definition=DEFINITION, local_only=True,  # type: ignore[arg-type]
                         upstream_for=lambda s: world.upstream)  # fmt: skip
    with pytest.raises(ConfigError, match="way to decide"):
        create_inbox(world.storage, definition=DEFINITION, local_only=True)


def test_local_only_refuses_a_remote_client_and_a_rebound_host(world: World) -> None:
    app = world.app(local_only=True)
    assert client(app, host="127.0.0.1").get("/").status_code == 200
    assert client(app, host="10.1.2.3").get("/").status_code == 403
    rebound = TestClient(app, base_url="http://evil.example", client=("127.0.0.1", 5))
    assert rebound.get("/").status_code == 403  # DNS rebinding: loopback peer, foreign Host


# ------------------------------------------------------------------ headers
def test_every_response_carries_the_security_headers(world: World) -> None:
    c = client(world.app(authorize=by_header))
    for response in (c.get("/"), c.get("/static/inbox.js"), c.get("/nope"), client(
            world.app(authorize=by_header), user=None).get("/")):  # fmt: skip
        csp = response.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp and "default-src 'none'" in csp
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"


def test_even_a_crash_page_carries_the_headers(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})

    def broken(session_id: str) -> None:
        raise RuntimeError("the host's hook is broken")

    app = world.app(authorize=by_header, can_decide=only_ana, bridge_for=broken)
    c = TestClient(app, base_url=ORIGIN, headers={"x-user": "ana"}, raise_server_exceptions=False)
    csrf = open_call(c, record.token, "s-1")
    response = post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 500
    assert response.headers["x-frame-options"] == "DENY"
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert world.upstream.calls == []


def test_the_csrf_cookie_is_strict_and_http_only(world: World) -> None:
    response = client(world.app(authorize=by_header)).get("/")
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert "<script>" not in response.text.replace('<script src="', "")  # no inline script


# ------------------------------------------------------------------ the list
def test_list_filters_orders_and_counts_down(world: World) -> None:
    a = world.propose("s-a", "email.send", {"to": "x"}, ttl_ms=250_000)
    world.clock.now_ms += 1000
    b = world.propose("s-b", "payment.send", {"amount": 3}, ttl_ms=600_000)
    c = client(world.app(authorize=by_header))
    page = c.get("/").text
    assert page.index(a.token) < page.index(b.token)  # soonest to expire first
    assert "expires in 4m 9s" in page  # 250 s, one second later
    newest = c.get("/", params={"order": "newest"}).text
    assert newest.index(b.token) < newest.index(a.token)
    only = c.get("/", params={"action": "payment.send"}).text
    assert b.token in only and a.token not in only
    assert c.get("/", params={"after": "garbage"}).status_code == 400


def test_list_paginates_with_after(world: World) -> None:
    tokens = [world.propose(f"s-{i}", "email.send", {"i": i}).token for i in range(3)]
    c = client(world.app(authorize=by_header, page_size=2))
    first = c.get("/").text
    match = re.search(r'rel="next" href="[^"]*after=([^"&]+)"', first)
    assert match
    second = c.get("/", params={"after": match.group(1).replace("%3D", "=")}).text
    assert sum(t in first for t in tokens) == 2 and sum(t in second for t in tokens) == 1


# ------------------------------------------------------------------ decisions
def test_approve_runs_upstream_once_and_a_second_approve_shows_it_was_decided(
    world: World,
) -> None:
    record = world.propose("s-1", "email.send", {"to": "a@example.com"})
    tab1 = client(world.app(authorize=by_header, can_decide=only_ana))
    tab2 = client(tab1.app)
    csrf1, csrf2 = open_call(tab1, record.token, "s-1"), open_call(tab2, record.token, "s-1")
    path = f"/call/{record.token}/approve"
    won = post(tab1, path, {"csrf": csrf1, "session": "s-1"})
    assert won.status_code == 200 and 'data-kind="won"' in won.text
    lost = post(tab2, path, {"csrf": csrf2, "session": "s-1"})
    assert lost.status_code == 409 and 'data-kind="decided"' in lost.text
    assert "approved" in lost.text
    assert re.search(r'decided by <strong class="decider" dir="auto">ana</strong>', lost.text)
    assert world.upstream.calls_for(record.tool_call_id) == [("approve", record.tool_call_id)]
    (entry,) = audit_trail(world.storage, "s-1")
    assert (entry.principal, entry.via, entry.decided) == ("ana", "inbox", True)
    assert entry.args_digest == arguments_digest({"to": "a@example.com"})


@pytest.mark.parametrize(
    ("digest", "status", "says"),
    [
        (None, 400, "which arguments you saw"),
        ("sha256:xyz", 400, "which arguments you saw"),
        ("sha256:" + "0" * 64, 409, 'data-kind="changed"'),
    ],
    ids=["no digest", "malformed", "other arguments"],
)
@pytest.mark.parametrize("verb", ["approve", "reject"])
def test_a_decision_not_bound_to_the_arguments_shown_changes_nothing(
    world: World, digest: str | None, status: int, says: str, verb: str
) -> None:
    record = world.propose("s-1", "payment.send", {"amount": 10})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    before = world.stored("s-1")
    fields = {"csrf": csrf, "session": "s-1", "reason": "no"}
    fields["args_digest"] = digest or ""
    response = post(c, f"/call/{record.token}/{verb}", fields)
    assert response.status_code == status and says in response.text
    assert world.stored("s-1") == before
    assert world.storage.list_records("s-1") == []  # no audit entry, no reason record
    assert world.upstream.calls_for(record.tool_call_id) == []


def test_a_same_origin_post_with_a_null_origin_is_the_page_itself(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    response = post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"},
                    origin="null")  # fmt: skip
    assert response.status_code == 200  # what Chromium sends under Referrer-Policy: no-referrer


def test_reject_sends_the_reason_upstream(world: World) -> None:
    record = world.propose("s-1", "payment.send", {"amount": 10})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    reason = "wrong <b>amount</b>"
    response = post(c, f"/call/{record.token}/reject", {"csrf": csrf, "session": "s-1",
                                                        "reason": reason})  # fmt: skip
    assert response.status_code == 200
    assert world.upstream.denied == [(record.tool_call_id, reason)]
    assert world.status("s-1", record.token) == "rejected"


def test_an_upstream_failure_is_reported_and_leaves_the_call_processing(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    world.upstream.fail_next = 1
    response = post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 502 and 'data-kind="failed"' in response.text
    assert "UpstreamDown" in response.text
    assert world.status("s-1", record.token) == "approving"  # never a false completion


def test_the_event_stream_needs_a_principal(world: World) -> None:
    assert client(world.app(authorize=by_header), user=None).get("/events").status_code == 401


def test_an_expired_call_cannot_be_approved(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"}, ttl_ms=1_000)
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    world.clock.now_ms += 1_000
    detail = c.get(f"/call/{record.token}", params={"session": "s-1"}).text
    assert 'id="approve"' not in detail and "expired" in detail
    response = post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 409 and 'data-kind="expired"' in response.text
    assert world.upstream.executed[record.tool_call_id] == 0
    assert world.status("s-1", record.token) == "expired"


# ------------------------------------------------------------------ refusals change nothing
EXPIRED = "The form expired"
FOREIGN = "did not come from the inbox page"


def refused_cases() -> list[tuple[str, dict[str, Any]]]:
    """Each case is refused by one check, named by ``why`` (a text of its refusal page)."""
    return [
        ("no csrf", {"fields": {}, "why": EXPIRED}),
        ("forged csrf", {"fields": {"csrf": "0" * 64}, "why": EXPIRED}),
        # bob is authorized, holds ana's cookie and her page's token: the token is hers
        ("another user's csrf", {"user": "bob", "why": EXPIRED}),
        ("cross-site origin", {"headers": {"origin": "https://evil.example"}, "why": FOREIGN}),
        ("cross-site fetch", {"headers": {"sec-fetch-site": "cross-site"}, "why": FOREIGN}),
        (
            "null origin alone",
            {"headers": {"origin": "null", "sec-fetch-site": ""}, "why": FOREIGN},
        ),
        ("unknown user", {"user": None, "why": "not authorized"}),
        # bob's own valid token, from his page while he could decide: only can_decide refuses
        ("not permitted", {"user": "bob", "own token": True, "why": 'data-kind="forbidden"'}),
        ("huge body", {"fields": {"reason": "x" * 20_000}, "why": "too large"}),
        ("long reason", {"fields": {"reason": "x" * 1_001}, "why": "longer than 1000"}),
        ("json body", {"json": True, "why": "own form"}),
    ]


@pytest.mark.parametrize(("case", "spec"), refused_cases(), ids=[c for c, _ in refused_cases()])
def test_a_refused_post_changes_nothing(world: World, case: str, spec: dict[str, Any]) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    permitted = {"ana"}
    app = world.app(authorize=by_header, can_decide=lambda principal, _: principal in permitted)
    ana = client(app)
    csrf = open_call(ana, record.token, "s-1")
    c = ana
    if "user" in spec:  # the same browser (cookie, token), another or no principal
        c = client(app, user=spec["user"])
        c.cookies = ana.cookies
    if spec.get("own token"):
        permitted.add(spec["user"])
        csrf = open_call(c, record.token, "s-1")  # a form rendered for this user
        permitted.discard(spec["user"])  # then the host withdrew the permission
    before = world.stored("s-1")
    fields = {"csrf": csrf, "session": "s-1", **spec.get("fields", {})}
    if case in ("no csrf",):
        del fields["csrf"]
    path = f"/call/{record.token}/approve"
    if spec.get("json"):
        response = c.post(path, json=fields, headers={"origin": ORIGIN})
    else:
        response = post(c, path, fields, **spec.get("headers", {}))
    assert response.status_code in (400, 401, 403, 413, 415), (case, response.status_code)
    assert spec["why"] in response.text, (case, response.text)
    assert world.stored("s-1") == before
    assert world.upstream.calls == []
    assert world.status("s-1", record.token) == "pending"


def test_a_principal_without_permission_sees_no_buttons(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    page = client(world.app(authorize=by_header), user="ana").get(
        f"/call/{record.token}", params={"session": "s-1"}
    )
    assert 'id="approve"' not in page.text and "You may not decide" in page.text


def test_a_token_hinted_into_another_session_is_inert(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    world.propose("s-2", "email.send", {"to": "b"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    assert c.get(f"/call/{record.token}x", params={"session": "s-2"}).status_code == 404


# ------------------------------------------------------------------ hostile arguments
HOSTILE = {
    "html": "<img src=x onerror=alert(1)><script>window.pwned=1</script>",
    "bidi": "pay\u202eevil\u2066",
    "controls": "a\x00b\x1bc\u2028d",
    "big": "y" * 16_384,  # the stored bound; the renderer's own is tested in test_render
    "deep": [[[[[[[[[[[["bottom"]]]]]]]]]]]],
}


def test_hostile_arguments_are_escaped_and_bounded(world: World) -> None:
    record = world.propose("s-1", "email.send", HOSTILE)
    page = client(world.app(authorize=by_header)).get(
        f"/call/{record.token}", params={"session": "s-1"}
    )
    text = page.text
    assert "<img src=x" not in text and "<script>window" not in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\u202e" not in text and "\\u202e" in text and "\\u2066" in text
    assert "\x00" not in text and "\x1b" not in text and "\\u2028" in text
    assert "[14,384 more characters]" in text
    assert "nested deeper than 8 levels" in text and "bottom" not in text
    assert len(text) < 50_000


# ------------------------------------------------------------------ races and the rest
def racing(world: World, token: str, verb: str) -> Any:
    """A ``can_decide`` that lets another client decide first, between the inbox's read and
    its decision: the deterministic form of two approvers clicking at once."""

    def hook(principal: Any, pending: Any) -> bool:
        session = resume_chat_session(DEFINITION, session_id=pending.session_id,
                                      storage=world.storage, clock=world.clock)  # fmt: skip
        getattr(session.confirmations_for(world.upstream), verb)(token)
        return True

    return hook


@pytest.mark.parametrize("ours", ["approve", "reject"])
def test_the_loser_of_a_race_is_told_and_calls_nothing(world: World, ours: str) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    reader = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(reader, record.token, "s-1")
    c = client(world.app(authorize=by_header, can_decide=racing(world, record.token, "approve")))
    c.cookies = reader.cookies
    c.app.state.inbox.csrf = reader.app.state.inbox.csrf  # one deployment, one secret
    response = post(c, f"/call/{record.token}/{ours}", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 409 and 'data-kind="decided"' in response.text
    assert "approved" in response.text
    assert world.upstream.calls_for(record.tool_call_id) == [("approve", record.tool_call_id)]


def test_local_only_without_authorize_lets_the_local_user_decide(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    c = client(world.app(local_only=True), user=None)
    csrf = open_call(c, record.token, "s-1")
    response = post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"})
    assert response.status_code == 200 and world.status("s-1", record.token) == "approved"


def test_an_async_authorize_hook_is_awaited(world: World) -> None:
    async def authorize(request: Any) -> str | None:
        return by_header(request)

    app = world.app(authorize=authorize)
    assert client(app).get("/").status_code == 200
    assert client(app, user=None).get("/").status_code == 401


def test_a_decided_token_hinted_into_another_session_is_not_found(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    world.propose("s-2", "email.send", {"to": "b"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    assert post(c, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"}).is_success
    before = world.stored("s-2")
    response = post(c, f"/call/{record.token}/reject", {"csrf": csrf, "session": "s-2"})
    assert response.status_code == 404 and world.stored("s-2") == before
    assert c.get(f"/call/{record.token}", params={"session": "s-2"}).status_code == 404


def test_a_body_that_is_not_utf8_is_refused(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    open_call(c, record.token, "s-1")
    before = world.stored("s-1")
    response = c.post(
        f"/call/{record.token}/approve",
        content=b"csrf=\xff\xfe",
        headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 400 and world.stored("s-1") == before


def test_bad_bounds_are_a_config_error(world: World) -> None:
    with pytest.raises(ConfigError, match="bounds"):
        world.app(local_only=True, page_size=0)


def message(i: int, content: str, role: str = "user") -> dict[str, Any]:
    return {"id": f"m{i}", "role": role, "content": content, "status": "complete",
            "createdAt": "2026-07-14T00:00:00.000Z"}  # fmt: skip


def test_the_recent_conversation_is_shown_escaped_and_bounded(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    chat = [message(i, f"old {i}") for i in range(20)]
    chat += [message(20, "<script>window.x=1</script>\u202eevil", role="assistant")]
    memory = RecordingChatMemory({}, messages=chat)  # no tool calls: the chat alone
    app = world.app(authorize=by_header, memory_for=lambda sid: memory, recent_messages=3)
    page = client(app).get(f"/call/{record.token}", params={"session": "s-1"}).text
    assert "Recent conversation" in page
    assert "old 17" not in page and "old 18" in page and "old 19" in page
    assert "&lt;script&gt;window.x=1&lt;/script&gt;\\u202eevil" in page
    assert "<script>window" not in page and "\u202e" not in page


def test_a_memory_that_is_not_a_valid_record_shows_no_messages(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})

    class Broken:
        def load(self) -> object:
            return {"version": 99}

    app = world.app(authorize=by_header, memory_for=lambda sid: Broken())
    page = client(app).get(f"/call/{record.token}", params={"session": "s-1"}).text
    assert "No messages." in page


def test_a_trusted_origin_may_post_across_sites_and_no_other_may(world: World) -> None:
    """``trusted_origins`` (a proxy's public origin, say) is honoured beside Fetch Metadata:
    a browser marks that POST ``cross-site``, and only a named origin passes."""
    proxy = "https://approvals.example"
    record = world.propose("s-1", "email.send", {"to": "a"})
    app = world.app(authorize=by_header, can_decide=only_ana, trusted_origins=(proxy,))
    ana = client(app)
    csrf = open_call(ana, record.token, "s-1")
    before = world.stored("s-1")
    path = f"/call/{record.token}/approve"
    fields = {"csrf": csrf, "session": "s-1"}
    refused = post(
        ana, path, fields, origin="https://evil.example", **{"sec-fetch-site": "cross-site"}
    )
    assert refused.status_code == 403 and world.stored("s-1") == before
    taken = post(ana, path, fields, origin=proxy, **{"sec-fetch-site": "cross-site"})
    assert taken.status_code == 200 and world.status("s-1", record.token) == "approved"
