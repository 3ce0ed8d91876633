"""Reviewer edits in the inbox (ADR-0135): "Edit and approve" through the host's bridge.

Real SQLite storage, the real pydantic-ai bridge and pydantic-ai's offline ``FunctionModel``:
the model asks for one approval-gated tool; the tool body records the arguments it ran with.
"Changes nothing" is the SQLite database's full dump, identical before and after.
"""

from __future__ import annotations

import html
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel
from starlette.testclient import TestClient

from akchat_fsm import resume_chat_session, resume_chat_session_async
from akchat_fsm.inbox import create_inbox
from akchat_fsm.integrations.pydantic_ai import AsyncPydanticAIBridge, PydanticAIBridge
from akchat_fsm.session import audit_trail
from akchat_fsm.storage import AsyncSQLiteStorage, SQLiteStorage

from ._world import DEFINITION, World, by_header, only_ana

ORIGIN = {"origin": "http://127.0.0.1", "sec-fetch-site": "same-origin"}
CSRF = re.compile(r'name="csrf" value="([0-9a-f]+)"')
DIGEST = re.compile(r'name="args_digest" value="(sha256:[0-9a-f]{64})"')
EDIT_FORM = re.compile(r'<form method="post" action="[^"]*/edit"')


def scripted(messages: Any, info: Any) -> ModelResponse:
    results = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not results:
        return ModelResponse(parts=[ToolCallPart("send_email", {"to": "ana@example.com"})])
    return ModelResponse(parts=[TextPart(f"Done: {results[0].content}")])


class Setup:
    def __init__(self, tmp_path: Path, editable: tuple[str, ...]) -> None:
        self.path = tmp_path / "sessions.db"
        self.world = World(storage=SQLiteStorage(self.path))  # type: ignore[arg-type]
        self.agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
        self.editable = editable
        self.sent: list[str] = []
        self.deciders = {"ana"}
        self.editors = {"ana"}

        @self.agent.tool_plain(requires_approval=True)
        def send_email(to: str) -> str:
            self.sent.append(to)
            return f"email sent to {to}"

    def bridge(self, session_id: str = "chat-1") -> PydanticAIBridge:
        session = resume_chat_session(
            DEFINITION, session_id=session_id, storage=self.world.storage, clock=self.world.clock
        )
        return PydanticAIBridge(
            self.agent, session, self.world.storage, editable_tools=self.editable
        )

    def client(self, user: str = "ana") -> TestClient:
        app = self.world.app(
            authorize=by_header,
            can_decide=lambda principal, pending: principal in self.deciders,
            can_edit=lambda principal, pending: principal in self.editors,
            bridge_for=lambda sid: self.bridge(sid),
            upstream_for=None,
        )
        return TestClient(app, base_url="http://127.0.0.1", headers={"x-user": user})

    def dump(self) -> list[str]:
        """The whole store, row by row: what "changes nothing" compares."""
        with sqlite3.connect(self.path) as db:
            return list(db.iterdump())


def paused(setup: Setup) -> str:
    outcome = setup.bridge().run("Email Ana", run_id="run-1")
    assert outcome.status == "paused"
    token: str = outcome.pending[0].token
    return token


def opened(c: TestClient, token: str) -> tuple[str, str, str]:
    """The detail page, its CSRF token and the digest its forms carry."""
    page = c.get(f"/call/{token}", params={"session": "chat-1"}).text
    csrf, digest = CSRF.search(page), DIGEST.search(page)
    assert csrf and digest
    return page, csrf.group(1), digest.group(1)


def post_edit(c: TestClient, token: str, args: str, csrf: str, digest: str, **extra: str) -> Any:
    data = {"csrf": csrf, "session": "chat-1", "args_digest": digest, "args": args, **extra}
    return c.post(f"/call/{token}/edit", data=data, headers=ORIGIN)


@pytest.fixture
def editable(tmp_path: Path) -> Setup:
    return Setup(tmp_path, ("send_email",))


def test_edit_and_approve_runs_the_body_once_with_the_edited_arguments(editable: Setup) -> None:
    token = paused(editable)
    c = editable.client()
    page, csrf, digest = opened(c, token)
    assert EDIT_FORM.search(page) and "Edit and approve" in page
    textarea = re.search(r'<textarea id="edited-args"[^>]*>([^<]*)</textarea>', page, re.S)
    assert textarea and json.loads(html.unescape(textarea.group(1))) == {"to": "ana@example.com"}
    response = post_edit(c, token, '{"to": "bob@example.com"}', csrf, digest, reason="Bob")
    assert response.status_code == 200 and 'data-kind="won"' in response.text
    assert "Approved with your edit" in response.text
    assert editable.sent == ["bob@example.com"]  # the body ran once, with the edit
    again = post_edit(c, token, '{"to": "eve@example.com"}', csrf, digest)
    assert again.status_code == 409 and 'data-kind="decided"' in again.text
    done = editable.bridge().continue_run("run-1")
    assert done.replayed and done.output == "Done: email sent to bob@example.com"
    assert editable.sent == ["bob@example.com"]
    (entry,) = [e for e in audit_trail(editable.world.storage, "chat-1") if e.decided]
    assert entry.is_edit and entry.principal == "ana" and entry.via == "inbox"
    assert entry.edited_args == {"to": "bob@example.com"} and entry.args_digest == digest
    audit = c.get("/session/chat-1/audit").text
    row = re.search(r'<tr class="audit-entry".*?</tr>', audit, re.S)
    assert row and "ana" in row.group(0) and ">edit<" in row.group(0)
    assert entry.effective_digest and entry.effective_digest in row.group(0)
    assert "bob@example.com" in row.group(0)


def test_a_tool_not_editable_shows_no_form_and_a_forced_edit_changes_nothing(
    tmp_path: Path,
) -> None:
    setup = Setup(tmp_path, ())
    token = paused(setup)
    c = setup.client()
    page, csrf, digest = opened(c, token)
    assert not EDIT_FORM.search(page) and 'id="approve"' in page
    before = setup.dump()
    response = post_edit(c, token, '{"to": "bob@example.com"}', csrf, digest)
    assert response.status_code == 409 and 'data-kind="uneditable"' in response.text
    assert "editable_tools" in response.text
    assert setup.dump() == before and setup.sent == []


def test_without_a_bridge_a_plain_confirmation_has_no_edit_form(tmp_path: Path) -> None:
    world = World(storage=SQLiteStorage(tmp_path / "plain.db"))  # type: ignore[arg-type]
    binding = world.propose("chat-1", "send", {"to": "a"})
    c = TestClient(
        world.app(authorize=by_header, can_decide=only_ana, can_edit=only_ana),
        base_url="http://127.0.0.1",
        headers={"x-user": "ana"},
    )
    page, csrf, digest = opened(c, binding.token)
    assert not EDIT_FORM.search(page) and 'id="approve"' in page
    before = world.stored("chat-1")
    response = post_edit(c, binding.token, '{"to": "b"}', csrf, digest)
    assert response.status_code == 409 and 'data-kind="uneditable"' in response.text
    assert world.stored("chat-1") == before and world.upstream.calls == []


def test_a_forged_edit_without_the_csrf_token_changes_nothing(editable: Setup) -> None:
    token = paused(editable)
    c = editable.client()
    _page, _csrf, digest = opened(c, token)
    before = editable.dump()
    for csrf in ("", "0" * 64):
        response = post_edit(c, token, '{"to": "eve@example.com"}', csrf, digest)
        assert response.status_code == 403
    cross = c.post(
        f"/call/{token}/edit",
        data={"session": "chat-1", "args_digest": digest, "args": '{"to": "eve"}'},
        headers={"origin": "https://evil.example", "sec-fetch-site": "cross-site"},
    )
    assert cross.status_code == 403
    assert editable.dump() == before and editable.sent == []


def test_an_unauthorized_principal_cannot_edit(editable: Setup) -> None:
    token = paused(editable)
    bo = editable.client("bo")
    page = bo.get(f"/call/{token}", params={"session": "chat-1"}).text
    assert not EDIT_FORM.search(page) and "You may not decide" in page  # no form for bo
    editable.deciders.add("bo")  # bo's own valid form, from when he could decide ...
    _page, csrf, digest = opened(bo, token)
    editable.deciders.discard("bo")  # ... then revoked: the per-decision check refuses
    before = editable.dump()
    response = post_edit(bo, token, '{"to": "eve@example.com"}', csrf, digest)
    assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
    assert editable.dump() == before and editable.sent == []


def test_a_decider_who_may_not_edit_sees_no_form_and_a_forced_edit_changes_nothing(
    editable: Setup,
) -> None:
    """``can_edit`` is asked apart from ``can_decide`` and denies by default: ana may approve
    the call as shown, and only that."""
    editable.editors.clear()
    token = paused(editable)
    c = editable.client()
    page, csrf, digest = opened(c, token)
    assert not EDIT_FORM.search(page) and "Approve" in page
    before = editable.dump()
    response = post_edit(c, token, '{"to": "eve@example.com"}', csrf, digest)
    assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
    assert editable.dump() == before and editable.sent == []
    approved = c.post(
        f"/call/{token}/approve",
        data={"csrf": csrf, "session": "chat-1", "args_digest": digest},
        headers=ORIGIN,
    )
    assert approved.status_code == 200 and editable.sent == ["ana@example.com"]


def test_may_edit_without_may_decide_is_not_enough(editable: Setup) -> None:
    editable.editors.add("bo")  # bo may edit, but not decide: an edit is a decision
    token = paused(editable)
    editable.deciders.add("bo")
    _page, csrf, digest = opened(editable.client("bo"), token)
    editable.deciders.discard("bo")
    before = editable.dump()
    response = post_edit(editable.client("bo"), token, '{"to": "eve@example.com"}', csrf, digest)
    assert response.status_code == 403 and editable.dump() == before and editable.sent == []


def test_without_can_edit_an_authorized_inbox_offers_no_edit(tmp_path: Path) -> None:
    """The default, with no ``can_edit`` at all: nobody edits (local-only mode aside)."""
    setup = Setup(tmp_path, ("send_email",))
    token = paused(setup)
    app = setup.world.app(
        authorize=by_header,
        can_decide=only_ana,
        bridge_for=lambda sid: setup.bridge(sid),
        upstream_for=None,
    )
    c = TestClient(app, base_url="http://127.0.0.1", headers={"x-user": "ana"})
    page, csrf, digest = opened(c, token)
    assert not EDIT_FORM.search(page)
    before = setup.dump()
    response = post_edit(c, token, '{"to": "eve@example.com"}', csrf, digest)
    assert response.status_code == 403 and setup.dump() == before and setup.sent == []


@pytest.mark.parametrize(
    ("args", "status"),
    [
        ("[" * 2_000 + "]" * 2_000, 400),  # nesting past the library's bounds
        ('{"a": ' * 30 + "1" + "}" * 30, 400),  # a JSON object deeper than an input may be
        ('{"to": "' + "x" * 1_000_000 + '"}', 413),  # a megabyte string: past the form's bound
        ('{"to": "' + "x" * 12_000 + '"}', 200),  # within every bound: accepted
        ("not json", 400),
        ('["a list"]', 400),
        ('{"to": NaN}', 400),
        ("", 400),
    ],
)
def test_hostile_edited_arguments_are_refused_before_the_store(
    editable: Setup, args: str, status: int
) -> None:
    token = paused(editable)
    c = editable.client()
    _page, csrf, digest = opened(c, token)
    before = editable.dump()
    response = post_edit(c, token, args, csrf, digest)
    assert response.status_code == status
    if status != 200:
        assert editable.dump() == before and editable.sent == []
    else:
        assert editable.sent == ["x" * 12_000]


def test_markup_in_the_arguments_is_inert_in_the_form_and_in_the_audit_table(
    editable: Setup,
) -> None:
    token = paused(editable)
    c = editable.client()
    _page, csrf, digest = opened(c, token)
    hostile = "</textarea><script>alert(1)</script>\u202eevil"
    response = post_edit(c, token, json.dumps({"to": hostile}), csrf, digest)
    assert response.status_code == 200 and editable.sent == [hostile]
    audit = c.get("/session/chat-1/audit").text
    assert "<script>alert(1)" not in audit and "</textarea><script>" not in audit
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in audit
    assert "\u202e" not in audit and "\\u202e" in audit


def test_the_edit_form_holds_hostile_arguments_inert_and_parses_back_to_them(
    tmp_path: Path,
) -> None:
    hostile = {"to": "</textarea><b>x</b>\u202e\u2028", "n": [1, {"k": "\\"}]}

    def asks(messages: Any, info: Any) -> ModelResponse:
        results = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not results:
            return ModelResponse(parts=[ToolCallPart("send_email", {"to": json.dumps(hostile)})])
        return ModelResponse(parts=[TextPart("done")])

    setup = Setup(tmp_path, ("send_email",))
    setup.agent = Agent(FunctionModel(asks), output_type=[str, DeferredToolRequests])

    @setup.agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        setup.sent.append(to)
        return "sent"

    token = paused(setup)
    c = setup.client()
    page, csrf, digest = opened(c, token)
    textarea = re.search(r'<textarea id="edited-args"[^>]*>([^<]*)</textarea>', page, re.S)
    assert textarea and "\u202e" not in textarea.group(1) and "\u2028" not in textarea.group(1)
    text = html.unescape(textarea.group(1))  # what the browser sends back
    assert json.loads(text) == {"to": json.dumps(hostile)}  # sent back unchanged, it parses
    response = post_edit(c, token, text, csrf, digest)
    assert response.status_code == 200 and setup.sent == [json.dumps(hostile)]


def test_edit_over_asyncio_sqlite_and_the_async_bridge(tmp_path: Path) -> None:
    """The asyncio twin: ``AsyncPydanticAIBridge.can_edit`` shows the form, ``edit`` runs it."""
    storage = AsyncSQLiteStorage(tmp_path / "async.db")
    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"email sent to {to}"

    async def bridge_for(session_id: str) -> AsyncPydanticAIBridge:
        session = await resume_chat_session_async(
            DEFINITION, session_id=session_id, storage=storage
        )
        return AsyncPydanticAIBridge(agent, session, storage, editable_tools=("send_email",))

    app = create_inbox(
        storage,
        definition=DEFINITION,
        authorize=by_header,
        can_decide=only_ana,
        can_edit=only_ana,
        bridge_for=bridge_for,
    )
    with TestClient(app, base_url="http://127.0.0.1", headers={"x-user": "ana"}) as c:

        async def start() -> Any:
            return await (await bridge_for("chat-1")).run("Email Ana", run_id="run-1")

        token = c.portal.call(start).pending[0].token
        page, csrf, digest = opened(c, token)
        assert EDIT_FORM.search(page)
        response = post_edit(c, token, '{"to": "bob@example.com"}', csrf, digest)
        assert response.status_code == 200 and 'data-kind="won"' in response.text
        assert sent == ["bob@example.com"]
