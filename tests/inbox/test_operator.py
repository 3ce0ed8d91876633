"""The operator's view over HTTP: processing claims, unknown executions and their settle forms,
and the audit trail on a call's page and a session's page.

Real memory storage and the real ledger: an unknown execution is a claim whose body's process
died (``crash_inside``). Every refused settle is compared byte for byte with what is stored.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from akchat_fsm import ConfigError, resume_chat_session
from akchat_fsm.inbox import Bounds, UnknownExecution, create_inbox
from akchat_fsm.integrations.ledger import (
    SETTLE_AUDIT_PREFIX,
    ExecutionState,
    ToolLedger,
    settle_trail,
)
from akchat_fsm.storage import MemoryStorage

from ._world import DEFINITION, World, by_header, crash_inside, everyone, ledger_bytes, only_ana
from .test_http import ORIGIN, client, csrf_of, open_call, post


@pytest.fixture
def world() -> World:
    return World()


def only_ana_settles(principal: Any, unknown: UnknownExecution) -> bool:
    return bool(principal == "ana")


def operator_csrf(c: TestClient) -> str:
    page = c.get("/operator")
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


def decider_csrf(world: World, c: TestClient) -> str:
    """The principal's CSRF token from a call page it may decide on (in session ``s-0``): a
    principal who may not settle gets no form on the operator's page, but one token is all
    of its forms' (it is bound to the principal, not to a form)."""
    record = world.propose("s-0", "email.send", {"to": "z"})
    return open_call(c, record.token, "s-0")


def settle(c: TestClient, csrf: str, verdict: str, **fields: str) -> Any:
    form = {"csrf": csrf, "session": "s-1", "tool_call": "c-1", "verdict": verdict, **fields}
    return post(c, "/operator/settle", form)


def snapshot(world: World) -> tuple[object, ...]:
    """Everything a settle could change: the ledger entry, the envelope, the processing index,
    and the settle audit entries (ADR-0136)."""
    storage = world.storage
    return (
        ledger_bytes(storage, "s-1", "c-1"),
        storage.load("s-1"),
        storage.list_processing(),
        storage.list_records("s-1", SETTLE_AUDIT_PREFIX),
    )


# ------------------------------------------------------------------ the operator's page
def test_the_operator_page_lists_claims_and_unknown_executions(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    ana = client(world.app(authorize=by_header, can_decide=only_ana, can_settle=only_ana_settles))
    csrf = open_call(ana, record.token, "s-1")
    world.upstream.fail_next = 1  # the claim stays approving: a decision mid-way
    assert post(ana, f"/call/{record.token}/approve", {"csrf": csrf, "session": "s-1"}).is_error
    crash_inside(world.storage, "s-2", "c-9", tool="payment.send")
    page = ana.get("/operator")
    assert page.status_code == 200
    claim = re.search(r'<tr class="claim" data-token="([^"]+)">.*?</tr>', page.text, re.S)
    assert claim and claim.group(1) == record.token and "approving" in claim.group(0)
    unknown = re.search(r'<div class="unknown" data-tool-call="c-9">.*?</article>', page.text, re.S)
    assert unknown, page.text
    assert "payment.send" in unknown.group(0) and "worker-7:4242" in unknown.group(0)
    assert unknown.group(0).count('/operator/settle"') == 2  # it ran / it did not run
    assert 'name="session" value="s-2"' in unknown.group(0)


def test_without_can_settle_nobody_may_settle_and_no_form_is_shown(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_decide=everyone))  # may decide, not settle
    page = ana.get("/operator").text
    assert '/operator/settle"' not in page and "You may not settle" in page
    csrf = decider_csrf(world, ana)
    before = snapshot(world)
    response = settle(ana, csrf, "ran", result='"sent"')
    assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
    assert snapshot(world) == before


def test_an_unauthorized_user_sees_no_operator_page_and_no_audit(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    app = world.app(authorize=by_header, can_settle=everyone)
    for path in ("/operator", "/session/s-1/audit"):
        response = client(app, user=None).get(path)
        assert response.status_code == 401 and "c-1" not in response.text


class NoProcessingIndex:
    """Memory storage's sessions and pending index, without ``list_processing`` or records."""

    def __init__(self, inner: MemoryStorage) -> None:
        self.inner = inner

    def load(self, session_id: str) -> Any:
        return self.inner.load(session_id)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        return self.inner.save(snapshot, expected_cursor)

    def list_pending(self, **query: Any) -> Any:
        return self.inner.list_pending(**query)

    def find_token(self, token: str) -> str | None:
        return self.inner.find_token(token)


def test_a_store_without_the_indexes_says_so_and_settles_nothing(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    inbox = create_inbox(NoProcessingIndex(world.storage), definition=DEFINITION,
                         authorize=by_header, can_decide=everyone, can_settle=everyone,
                         upstream_for=lambda _sid: world.upstream)  # fmt: skip
    ana = client(inbox)
    page = ana.get("/operator")
    assert page.status_code == 200 and "no processing index" in page.text
    before = snapshot(world)
    response = settle(ana, decider_csrf(world, ana), "did-not-run")
    assert response.status_code == 501 and "keeps no tool-execution ledger" in response.text
    assert snapshot(world) == before
    assert ana.get("/session/s-1/audit").status_code == 501


# ------------------------------------------------------------------ settling
def test_it_ran_records_the_result_and_the_operator(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_settle=only_ana_settles))
    response = settle(ana, operator_csrf(ana), "ran", result='{"id": "r-1"}')
    assert response.status_code == 200 and 'data-kind="settled"' in response.text
    assert '<strong class="settler" dir="auto">ana</strong>' in response.text
    entry = ToolLedger(world.storage, "s-1").get("c-1")
    assert entry is not None and entry.state is ExecutionState.EXECUTED
    assert (entry.outcome, entry.result, entry.owner) == ("settled", {"id": "r-1"}, "ana")
    assert world.storage.list_processing() == []  # nothing needs an operator any more
    assert "c-1" not in ana.get("/operator").text


def test_it_did_not_run_releases_the_call(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_settle=only_ana_settles))
    response = settle(ana, operator_csrf(ana), "did-not-run")
    assert response.status_code == 200 and "released" in response.text
    entry = ToolLedger(world.storage, "s-1").get("c-1")
    assert entry is not None and entry.state is ExecutionState.RELEASED and entry.owner == "ana"


@pytest.mark.parametrize("verdict", ["ran", "did-not-run"])
def test_an_already_settled_execution_is_a_409_naming_who_settled(
    world: World, verdict: str
) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    app = world.app(authorize=by_header, can_settle=everyone)
    ana, bob = client(app, "ana"), client(app, "bob")
    anas, bobs = operator_csrf(ana), operator_csrf(bob)  # two operators, the same page
    assert settle(ana, anas, verdict).status_code == 200
    before = snapshot(world)
    late = settle(bob, bobs, "ran", result='"mine"')
    assert late.status_code == 409 and 'data-kind="already"' in late.text
    assert "by ana" in late.text and "Yours changed nothing" in late.text
    assert snapshot(world) == before


def test_a_settle_that_lands_between_the_read_and_the_write_wins_and_ours_writes_nothing(
    world: World,
) -> None:
    """bob's verdict lands while ana's request is being checked (inside ``can_settle``, after
    the inbox read the entry): her compare-and-set finds it changed and she is told who won."""
    crash_inside(world.storage, "s-1", "c-1")
    armed: list[bool] = []

    def bob_settles_first(principal: Any, unknown: UnknownExecution) -> bool:
        if armed:
            armed.clear()
            ToolLedger(world.storage, "s-1").settle_unknown("c-1", ran=False, operator="bob")
        return True

    ana = client(world.app(authorize=by_header, can_settle=bob_settles_first))
    csrf = operator_csrf(ana)
    armed.append(True)
    response = settle(ana, csrf, "ran", result='"mine"')
    assert response.status_code == 409 and 'data-kind="already"' in response.text
    assert "released (settled as not run by bob)" in response.text
    entry = ToolLedger(world.storage, "s-1").get("c-1")
    assert entry is not None and entry.state is ExecutionState.RELEASED and entry.owner == "bob"


HOSTILE_OWNER = '<img src=x onerror="alert(1)">\u202e' + "o" * 3_000


def test_hostile_ledger_fields_are_inert_and_bounded(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1", tool="<script>alert(2)</script>",
                 owner=HOSTILE_OWNER)  # fmt: skip
    page = client(world.app(authorize=by_header, can_settle=everyone)).get("/operator").text
    assert "<img" not in page and "<script>alert" not in page
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;\\u202e" in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
    assert "… [1,031 more characters]" in page  # cut at bounds.max_string (2,000)


def test_a_tool_call_with_no_execution_is_a_404(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_settle=everyone))
    before = snapshot(world)
    response = post(ana, "/operator/settle", {"csrf": operator_csrf(ana), "session": "s-1",
                                              "tool_call": "c-404", "verdict": "ran"})  # fmt: skip
    assert response.status_code == 404 and 'data-kind="missing"' in response.text
    assert snapshot(world) == before


EXPIRED = "The form expired"


def settle_refusals() -> list[tuple[str, dict[str, Any]]]:
    """Each case is refused by one check, named by ``why`` (a text of its refusal page)."""
    deep = "[" * 9 + "]" * 9
    return [
        ("unknown user", {"user": None, "status": 401, "why": "not authorized"}),
        ("no settle permission", {"user": "bob", "status": 403, "why": 'data-kind="forbidden"'}),
        ("missing csrf", {"drop": "csrf", "status": 403, "why": EXPIRED}),
        ("forged csrf", {"fields": {"csrf": "0" * 64}, "status": 403, "why": EXPIRED}),
        (
            "another user's csrf",
            {"user": "bob", "ana's token": True, "status": 403, "why": EXPIRED},
        ),
        (
            "cross-site",
            {
                "headers": {"origin": "https://evil.example"},
                "status": 403,
                "why": "did not come from the inbox page",
            },
        ),
        (
            "oversized result",
            {
                "fields": {"result": '"' + "x" * 8_000 + '"'},
                "status": 413,
                "why": "longer than 8,000",
            },
        ),
        ("huge body", {"fields": {"result": "1" * 20_000}, "status": 413, "why": "too large"}),
        ("result too deep", {"fields": {"result": deep}, "status": 400, "why": "deeper than 8"}),
        ("result not json", {"fields": {"result": "{nope"}, "status": 400, "why": "result"}),
        (
            "result without ran",
            {
                "fields": {"verdict": "did-not-run", "result": "1"},
                "status": 400,
                "why": "A result goes with",
            },
        ),
        ("no verdict", {"fields": {"verdict": "maybe"}, "status": 400, "why": "whether the call"}),
        ("no tool call", {"fields": {"tool_call": ""}, "status": 400, "why": "does not name"}),
        (
            "long session",
            {"fields": {"session": "s" * 257}, "status": 400, "why": "does not name"},
        ),
        ("json body", {"json": True, "status": 415, "why": "own form"}),
    ]


@pytest.mark.parametrize(("case", "spec"), settle_refusals(), ids=[c for c, _ in settle_refusals()])
def test_a_refused_settle_changes_nothing(world: World, case: str, spec: dict[str, Any]) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    app = world.app(authorize=by_header, can_decide=everyone, can_settle=only_ana_settles)
    ana = client(app)
    csrf = operator_csrf(ana)
    c = ana
    if "user" in spec:
        c = client(app, user=spec["user"])
        if spec["user"] is not None and not spec.get("ana's token"):
            csrf = decider_csrf(world, c)  # bob's own token: only can_settle refuses him
        c.cookies = ana.cookies if spec.get("ana's token") else c.cookies
    before = snapshot(world)
    fields = {"csrf": csrf, "session": "s-1", "tool_call": "c-1", "verdict": "ran"}
    fields.update(spec.get("fields", {}))
    fields.pop(spec.get("drop", ""), None)
    if spec.get("json"):
        response = c.post("/operator/settle", json=fields, headers={"origin": ORIGIN})
    else:
        response = post(c, "/operator/settle", fields, **spec.get("headers", {}))
    assert response.status_code == spec["status"], (case, response.text)
    assert spec["why"] in response.text, (case, response.text)
    assert snapshot(world) == before
    entry = ToolLedger(world.storage, "s-1").get("c-1")
    assert entry is not None and entry.unknown


def test_a_settle_bound_outside_the_body_bound_is_a_config_error(world: World) -> None:
    with pytest.raises(ConfigError, match="bounds"):
        world.app(authorize=by_header, max_result=20_000)


# ------------------------------------------------------------------ the audit trail
HOSTILE = "<script>alert(1)</script>\u202e"


def test_a_call_page_shows_its_audit_entries_escaped(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    other = world.propose("s-1", "email.send", {"to": "b"})
    c = client(world.app(authorize=by_header, can_decide=only_ana))
    csrf = open_call(c, record.token, "s-1")
    response = post(c, f"/call/{record.token}/reject",
                    {"csrf": csrf, "session": "s-1", "reason": HOSTILE})  # fmt: skip
    assert response.status_code == 200
    page = c.get(f"/call/{record.token}", params={"session": "s-1"}).text
    rows = re.findall(r'<tr class="audit-entry" data-token="([^"]+)">(.*?)</tr>', page, re.S)
    assert [token for token, _ in rows] == [record.token]  # this call's, not the other's
    row = rows[0][1]
    assert '<td class="principal" dir="auto">ana</td>' in row
    assert "<td>inbox</td>" in row and "<td>reject</td>" in row and "<td>rejecting</td>" in row
    assert "<td>yes</td>" in row  # the entry that won
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in row and "<script>" not in page
    digest = re.search(r"sha256:[0-9a-f]{64}", row)
    assert digest and digest.group(0) in page
    assert "UTC" in row
    assert other.token not in page.split("Audit trail")[1]


def test_the_session_audit_page_lists_its_entries_bounded(world: World) -> None:
    tokens = [world.propose("s-1", "email.send", {"n": n}).token for n in range(3)]
    c = client(world.app(authorize=by_header, can_decide=only_ana, page_size=2,
                         bounds=Bounds(max_string=20)))  # fmt: skip
    for token in tokens:
        csrf = open_call(c, token, "s-1")
        post(c, f"/call/{token}/reject", {"csrf": csrf, "session": "s-1", "reason": "r" * 30})
    page = c.get("/session/s-1/audit")
    assert page.status_code == 200
    shown = re.findall(r'<tr class="audit-entry" data-token="([^"]+)">', page.text)
    assert shown == tokens[1:]  # the newest page_size entries
    assert "1 earlier entries are not shown" in page.text
    assert "r" * 20 + " … [10 more characters]" in page.text


def test_an_audit_entry_without_a_principal_says_so(world: World) -> None:
    record = world.propose("s-1", "email.send", {"to": "a"})
    session = resume_chat_session(DEFINITION, session_id="s-1", storage=world.storage,
                                  clock=world.clock)  # fmt: skip
    session.confirmations_for(world.upstream).approve(record.token, session_id="s-1")
    page = client(world.app(authorize=by_header)).get("/session/s-1/audit").text
    assert '<td class="principal" dir="auto">(not named)</td>' in page
    assert "<td>api</td>" in page


def test_the_session_audit_page_refuses_a_long_session_id(world: World) -> None:
    response = client(world.app(authorize=by_header)).get("/session/" + "s" * 257 + "/audit")
    assert response.status_code == 404 and "No such session." in response.text


def test_a_settle_in_the_inbox_is_audited_and_shown_on_the_session_page(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_settle=only_ana_settles))
    response = settle(ana, operator_csrf(ana), "did-not-run", reason=HOSTILE)
    assert response.status_code == 200
    (entry,) = settle_trail(world.storage, "s-1")
    assert (entry.principal, entry.via, entry.reason, entry.ran) == ("ana", "inbox", HOSTILE, False)
    assert entry.decided and entry.settled_owner == "worker-7:4242"
    page = ana.get("/session/s-1/audit").text
    rows = re.findall(r'<tr class="settle-entry" data-tool-call="c-1">(.*?)</tr>', page, re.S)
    assert len(rows) == 1
    row = rows[0]
    assert '<td class="principal" dir="auto">ana</td>' in row and "<td>inbox</td>" in row
    assert "did not run" in row and "<td>yes</td>" in row
    assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202e" in row and "<script>" not in page
    assert entry.args_digest in row


def test_a_settle_reason_over_the_bound_is_refused_and_changes_nothing(world: World) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    ana = client(world.app(authorize=by_header, can_settle=only_ana_settles, max_reason=10))
    before = snapshot(world)
    response = settle(ana, operator_csrf(ana), "ran", reason="x" * 11)
    assert response.status_code == 400 and "reason is longer than 10" in response.text
    assert snapshot(world) == before


def test_a_principal_the_ledger_cannot_record_is_refused_and_changes_nothing(
    world: World,
) -> None:
    crash_inside(world.storage, "s-1", "c-1")
    named = "n" * 300  # longer than a principal may be (256)
    app = world.app(authorize=lambda request: named, can_settle=everyone)
    c = client(app)
    before = snapshot(world)
    response = settle(c, operator_csrf(c), "did-not-run")
    assert response.status_code == 400 and 'data-kind="invalid"' in response.text
    assert snapshot(world) == before
