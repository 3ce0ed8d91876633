"""The inbox in a real browser: headless chromium (Selenium) against uvicorn on loopback.

Real memory storage and the recording upstream live in this process, beside the server
thread, so each test counts what ran upstream and compares the stored envelope. Readiness
is polled; every wait in the browser is a WebDriverWait on a condition.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.models.function import FunctionModel
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from akchat_fsm import resume_chat_session
from akchat_fsm.integrations.ledger import ExecutionState, ToolLedger
from akchat_fsm.integrations.pydantic_ai import PydanticAIBridge

from ._world import DEFINITION, World, crash_inside
from .test_bridge import scripted

WAIT_S = 20


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """A uvicorn server on 127.0.0.1 in a thread, up until ``stop``."""

    #: The users the served app's ``can_decide`` lets decide (the ``inbox`` fixture's).
    permitted: set[str]

    def __init__(self, app: Any) -> None:
        self.port = _free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning",
            timeout_graceful_shutdown=1, lifespan="off",
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:  # poll readiness (bounded), never a fixed sleep
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            self.thread.join(0.02)  # returns at once if the server thread died
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def by_cookie(request: Any) -> str | None:
    """The test host's login: a ``user`` cookie, as a host's session cookie would be."""
    user: str | None = request.cookies.get("user")
    return user if user in ("ana", "bob") else None


@pytest.fixture
def world() -> World:
    return World()


@pytest.fixture
def inbox(world: World, browser: Any) -> Iterator[Served]:
    permitted = {"ana"}  # who may decide; a test may change it (the host's permissions)
    app = world.app(
        authorize=by_cookie, can_decide=lambda user, _: user in permitted, poll_interval_s=0.1
    )
    served = Served(app)
    served.permitted = permitted
    browser.get(served.url + "/static/inbox.css")  # a page of the origin, to set the cookie on
    browser.delete_all_cookies()
    browser.add_cookie({"name": "user", "value": "ana", "sameSite": "Lax"})
    try:
        yield served
    finally:
        served.stop()


def wait(browser: Any) -> WebDriverWait:
    return WebDriverWait(browser, WAIT_S)


def outcome(browser: Any) -> str:
    element = wait(browser).until(ec.presence_of_element_located((By.ID, "outcome")))
    return str(element.get_attribute("data-kind"))


def open_detail(browser: Any, inbox: Served, token: str) -> None:
    browser.get(inbox.url + "/")
    link = wait(browser).until(
        ec.element_to_be_clickable((By.CSS_SELECTOR, f'tr[data-token="{token}"] a'))
    )
    link.send_keys(Keys.ENTER)  # by keyboard
    wait(browser).until(ec.presence_of_element_located((By.ID, "arguments")))


def test_approve_runs_the_body_once(browser: Any, inbox: Served, world: World) -> None:
    record = world.propose("chat-1", "email.send", {"to": "ana@example.com"})
    open_detail(browser, inbox, record.token)
    browser.find_element(By.ID, "approve").send_keys(Keys.ENTER)
    assert outcome(browser) == "won"
    assert world.upstream.calls_for(record.tool_call_id) == [("approve", record.tool_call_id)]
    assert world.status("chat-1", record.token) == "approved"


def test_two_tabs_approve_one_wins_the_other_sees_it_decided(
    browser: Any, inbox: Served, world: World
) -> None:
    record = world.propose("chat-1", "payment.send", {"amount": 10})
    open_detail(browser, inbox, record.token)
    first = browser.current_window_handle
    browser.switch_to.new_window("tab")
    open_detail(browser, inbox, record.token)
    second = browser.current_window_handle
    browser.switch_to.window(first)
    browser.find_element(By.ID, "approve").click()
    assert outcome(browser) == "won"
    browser.switch_to.window(second)
    browser.find_element(By.ID, "approve").click()
    assert outcome(browser) == "decided"
    assert browser.find_element(By.CSS_SELECTOR, "#outcome .status").text == "approved"
    browser.close()
    browser.switch_to.window(first)
    assert world.upstream.executed[record.tool_call_id] == 1


def test_reject_with_a_reason_reaches_upstream(browser: Any, inbox: Served, world: World) -> None:
    record = world.propose("chat-1", "payment.send", {"amount": 99})
    open_detail(browser, inbox, record.token)
    browser.find_element(By.ID, "reason").send_keys("the amount is wrong")
    browser.find_element(By.ID, "reject").click()
    assert outcome(browser) == "won"
    assert world.upstream.denied == [(record.tool_call_id, "the amount is wrong")]


def test_an_expired_call_cannot_be_approved(browser: Any, inbox: Served, world: World) -> None:
    record = world.propose("chat-1", "email.send", {"to": "x"}, ttl_ms=60_000)
    open_detail(browser, inbox, record.token)
    world.clock.now_ms += 60_000  # the page still shows the button; the server decides
    browser.find_element(By.ID, "approve").click()
    assert outcome(browser) == "expired"
    assert world.upstream.executed[record.tool_call_id] == 0
    assert world.status("chat-1", record.token) == "expired"


def test_a_user_the_host_does_not_permit_changes_nothing(
    browser: Any, inbox: Served, world: World
) -> None:
    """bob is signed in and his own page showed him the buttons (a valid CSRF token, his);
    then the host withdrew his permission: the post is refused by ``can_decide`` alone."""
    record = world.propose("chat-1", "email.send", {"to": "x"})
    browser.add_cookie({"name": "user", "value": "bob", "sameSite": "Lax"})  # signed in as bob
    inbox.permitted.add("bob")
    open_detail(browser, inbox, record.token)
    inbox.permitted.discard("bob")
    before = world.stored("chat-1")
    browser.find_element(By.ID, "approve").click()
    assert outcome(browser) == "forbidden"
    open_detail(browser, inbox, record.token)  # his page now: no buttons
    assert browser.find_elements(By.ID, "approve") == []
    assert "You may not decide this call." in browser.find_element(By.TAG_NAME, "main").text
    assert world.stored("chat-1") == before and world.upstream.calls == []
    assert world.status("chat-1", record.token) == "pending"


def test_another_user_s_form_or_no_user_changes_nothing(
    browser: Any, inbox: Served, world: World
) -> None:
    """ana's form posted by bob is refused by its CSRF token (bound to ana, whatever bob may
    do); a user the host does not know is refused by ``authorize``."""
    record = world.propose("chat-1", "email.send", {"to": "x"})
    open_detail(browser, inbox, record.token)
    before = world.stored("chat-1")
    browser.add_cookie({"name": "user", "value": "bob", "sameSite": "Lax"})  # signed in as bob
    browser.find_element(By.ID, "approve").click()  # ana's form: its CSRF token is hers
    refused = wait(browser).until(ec.presence_of_element_located((By.CLASS_NAME, "refused")))
    assert "The form expired" in refused.text
    browser.add_cookie({"name": "user", "value": "mallory", "sameSite": "Lax"})
    browser.back()
    browser.refresh()
    wait(browser).until(ec.presence_of_element_located((By.CLASS_NAME, "refused")))
    assert world.stored("chat-1") == before and world.upstream.calls == []


def test_a_forged_cross_site_post_changes_nothing(
    browser: Any, inbox: Served, world: World
) -> None:
    record = world.propose("chat-1", "email.send", {"to": "x"})
    open_detail(browser, inbox, record.token)
    leaked = browser.find_element(By.NAME, "csrf").get_attribute("value")  # worst case: known
    before = world.stored("chat-1")
    form = (
        f'<form method="post" action="{inbox.url}/call/{record.token}/approve">'
        f'<input type="hidden" name="csrf" value="{leaked}">'
        '<input type="hidden" name="session" value="chat-1">'
        '<button id="bait">Win a prize</button></form>'
    )
    evil = Served(Starlette(routes=[Route("/", lambda r: HTMLResponse(form))]))
    try:
        browser.get(f"http://localhost:{evil.port}/")  # another site: localhost, not 127.0.0.1
        browser.find_element(By.ID, "bait").click()
        wait(browser).until(ec.url_contains(f"/call/{record.token}/approve"))
        wait(browser).until(ec.presence_of_element_located((By.CLASS_NAME, "refused")))
    finally:
        evil.stop()
    assert world.stored("chat-1") == before and world.upstream.calls == []


HOSTILE = {
    "html": '<img src=x onerror="window.__pwned=1;alert(1)">',
    "script": "</pre><script>window.__pwned=2;alert(2)</script>",
    "attr": '"><svg onload="window.__pwned=3">',
    "bidi": "invoice\u202etxt.exe\u2066",
    "controls": "bell\x07nul\x00",
    "big": "w" * 16_384,
}


def test_hostile_arguments_run_nothing(browser: Any, inbox: Served, world: World) -> None:
    record = world.propose("chat-1", "email.send", HOSTILE)
    open_detail(browser, inbox, record.token)
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    assert browser.execute_script("return window.__pwned") is None
    assert browser.find_elements(By.CSS_SELECTOR, "main img, main svg, main script") == []
    shown = browser.find_element(By.ID, "arguments").text
    assert '<img src=x onerror="window.__pwned=1;alert(1)">' in shown.replace('\\"', '"')
    assert "\u202e" not in shown and "\\u202e" in shown and "\\u0007" in shown
    assert "[14,384 more characters]" in shown  # the megabyte case is tests/inbox/test_render
    shot = Path(os.environ.get("AKCHAT_INBOX_SCREENSHOT", "") or "/nonexistent")
    target = shot if shot.parent.is_dir() else None
    png = browser.get_screenshot_as_png()
    assert png.startswith(b"\x89PNG")
    if target is not None:  # AKCHAT_INBOX_SCREENSHOT=docs/inbox.png refreshes the docs' picture
        target.write_bytes(png)


def test_the_list_updates_without_a_reload(browser: Any, inbox: Served, world: World) -> None:
    world.propose("chat-1", "email.send", {"to": "first"})
    browser.get(inbox.url + "/")
    wait(browser).until(lambda d: d.execute_script("return document.documentElement.dataset.live"))
    marker = browser.find_element(By.TAG_NAME, "h1")  # survives: only the list is replaced
    later = world.propose("chat-2", "payment.send", {"amount": 1})  # another process's write
    row = f'tr[data-token="{later.token}"]'
    wait(browser).until(ec.presence_of_element_located((By.CSS_SELECTOR, row)))
    assert marker.is_displayed()  # not a reload: the old heading element is still attached
    session = resume_chat_session(DEFINITION, session_id="chat-2", storage=world.storage,
                                  clock=world.clock)  # fmt: skip
    session.confirmations_for(world.upstream).approve(later.token)  # decided elsewhere
    wait(browser).until(ec.invisibility_of_element_located((By.CSS_SELECTOR, row)))
    assert marker.is_displayed()


def tab_to(browser: Any, matches: str) -> None:
    """Press Tab until the focused element matches the CSS selector (at most 40 presses)."""
    for _ in range(40):
        ActionChains(browser).send_keys(Keys.TAB).perform()
        if browser.execute_script("return document.activeElement.matches(arguments[0])", matches):
            return
    raise AssertionError(f"Tab never reached {matches}")


def test_the_whole_decision_by_keyboard(browser: Any, inbox: Served, world: World) -> None:
    record = world.propose("chat-1", "email.send", {"to": "kb@example.com"})
    browser.get(inbox.url + "/")
    tab_to(browser, f'tr[data-token="{record.token}"] a')
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    wait(browser).until(ec.presence_of_element_located((By.ID, "arguments")))
    tab_to(browser, "#reason")
    ActionChains(browser).send_keys("not this one").perform()
    tab_to(browser, "#reject")
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    assert outcome(browser) == "won"
    assert world.upstream.denied == [(record.tool_call_id, "not this one")]


def test_an_operator_settles_an_unknown_execution(browser: Any, world: World) -> None:
    """The operator's page, reached from the header: "it ran" with a JSON result settles the
    execution as ana's, and the page no longer lists it."""
    crash_inside(world.storage, "chat-1", "call-7", "payment.send", {"amount": 10})
    app = world.app(authorize=by_cookie, can_settle=lambda user, _: user == "ana")
    served = Served(app)
    try:
        browser.get(served.url + "/static/inbox.css")
        browser.delete_all_cookies()
        browser.add_cookie({"name": "user", "value": "ana", "sameSite": "Lax"})
        browser.get(served.url + "/")
        browser.find_element(By.LINK_TEXT, "Operator").send_keys(Keys.ENTER)
        unknown = wait(browser).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, '[data-tool-call="call-7"]'))
        )
        assert "payment.send" in unknown.text and "worker-7:4242" in unknown.text
        unknown.find_element(By.NAME, "result").send_keys('{"receipt": "r-1"}')
        unknown.find_element(By.CSS_SELECTOR, ".settle-ran button").click()
        assert outcome(browser) == "settled"
        assert browser.find_element(By.CSS_SELECTOR, "#outcome .settler").text == "ana"
        entry = ToolLedger(world.storage, "chat-1").get("call-7")
        assert entry is not None and entry.state is ExecutionState.EXECUTED
        assert (entry.result, entry.owner) == ({"receipt": "r-1"}, "ana")
        browser.get(served.url + "/operator")
        assert "No session holds processing work." in browser.find_element(By.ID, "main").text
    finally:
        served.stop()


def test_edit_and_approve_runs_the_edited_arguments_once(browser: Any, world: World) -> None:
    """The reviewer changes the JSON in the edit form (by keyboard) and approves it: the real
    pydantic-ai bridge runs the body once with those arguments; the audit table shows it."""
    agent = Agent(FunctionModel(scripted), output_type=[str, DeferredToolRequests])
    sent: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str) -> str:
        sent.append(to)
        return f"email sent to {to}"

    def bridge(session_id: str) -> PydanticAIBridge:
        session = resume_chat_session(
            DEFINITION, session_id=session_id, storage=world.storage, clock=world.clock
        )
        return PydanticAIBridge(agent, session, world.storage, editable_tools=("send_email",))

    token = bridge("chat-1").run("Email Ana", run_id="run-1").pending[0].token
    app = world.app(authorize=by_cookie, can_decide=lambda user, _: user == "ana",
                    can_edit=lambda user, _: user == "ana",
                    bridge_for=bridge, upstream_for=None)  # fmt: skip
    served = Served(app)
    try:
        browser.get(served.url + "/static/inbox.css")
        browser.delete_all_cookies()
        browser.add_cookie({"name": "user", "value": "ana", "sameSite": "Lax"})
        open_detail(browser, served, token)
        area = browser.find_element(By.ID, "edited-args")
        assert '"ana@example.com"' in area.get_attribute("value")
        area.send_keys(Keys.CONTROL, "a")
        area.send_keys('{"to": "bob@example.com"}')
        browser.find_element(By.ID, "edit-reason").send_keys("Bob handles it")
        browser.find_element(By.ID, "edit").send_keys(Keys.ENTER)
        assert outcome(browser) == "won"
        assert sent == ["bob@example.com"]
        browser.get(served.url + "/session/chat-1/audit")
        row = browser.find_element(By.CSS_SELECTOR, "tr.audit-entry")
        assert "edit" in row.text and "ana" in row.text and "bob@example.com" in row.text
    finally:
        served.stop()
