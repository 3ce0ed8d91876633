"""``akchat-fsm inbox URL``: its refusals in-process, and the real server in a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from cli_helpers import bridged_session, run
from starlette.testclient import TestClient

import akchat_fsm
from akchat_fsm.integrations.ledger import SETTLE_AUDIT_PREFIX, ledger_key
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage import open_storage
from akchat_fsm.testing.doubles import RecordingUpstream

HERE = Path(__file__).resolve().parent
BRIDGE = "cli_bridges:bridge_for"


def _store_with_a_pending_call(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    storage = open_storage(url)
    try:
        session = resume_chat_session(ChatDefinition("support"), session_id="s-1", storage=storage)
        binding = session.confirmations_for(RecordingUpstream()).propose(
            "send_email", {"to": "ana@example.org"}
        )
    finally:
        storage.close()
    return url, binding.token


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "example.org", "::"])
def test_a_non_loopback_host_without_authorize_is_refused(tmp_path: Path, host: str) -> None:
    url = f"sqlite:///{tmp_path / 'nothing.db'}"
    result = run("inbox", url, "--host", host, "--bridge", BRIDGE)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: --host {host} is not a loopback address")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "nothing.db").exists()  # refused before anything was opened


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bridge", "no colon"], "error: --bridge 'no colon' is not module:callable"),
        (["--bridge", "no_such_module_x:f"], "error: --bridge 'no_such_module_x:f': cannot import"),
        (["--bridge", "cli_bridges:NOT_CALLABLE"], "error: --bridge 'cli_bridges:NOT_CALLABLE' is"),
        (["--bridge", BRIDGE, "--authorize", "cli_bridges:nope"], "error: --authorize "),
        (["--bridge", BRIDGE, "--can-decide", "x"], "error: --can-decide 'x' is not"),
        (["--bridge", BRIDGE, "--can-edit", "x"], "error: --can-edit 'x' is not"),
        (["--upstream", "cli_bridges:broken"], "error: --upstream needs --definition"),
        ([], "error: the inbox needs --bridge module:callable"),
    ],
)
def test_a_bad_spec_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    url, _ = _store_with_a_pending_call(tmp_path)
    result = run("inbox", url, *args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(message) and len(result.stderr.splitlines()) == 1


def test_a_missing_store_is_refused_not_created(tmp_path: Path) -> None:
    result = run("inbox", f"sqlite:///{tmp_path / 'absent.db'}", "--bridge", BRIDGE)
    assert result.exit_code == 2 and result.stderr.startswith("error: no store at")
    assert not (tmp_path / "absent.db").exists()


def _serve(monkeypatch: pytest.MonkeyPatch, check: Any, *args: str) -> dict[str, Any]:
    """Run the verb with ``check(app)`` where uvicorn would serve the app (in-process, while
    the store is open); uvicorn's other arguments are returned."""
    served: dict[str, Any] = {}

    def instead_of_uvicorn(app: Any, **options: Any) -> None:
        served.update(options)
        check(app)

    monkeypatch.setattr(uvicorn, "run", instead_of_uvicorn)
    result = run("inbox", *args)
    assert result.exit_code == 0, result.stderr
    return served


def test_with_authorize_any_host_is_served_and_the_hook_decides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = _store_with_a_pending_call(tmp_path)

    def check(app: Any) -> None:
        client = TestClient(app, base_url="http://inbox.example")  # not loopback: the hook rules
        assert client.get("/").status_code == 401
        listed = client.get("/", headers={"x-user": "ana"})
        assert listed.status_code == 200 and token in listed.text

    options = _serve(
        monkeypatch, check, url, "--host", "0.0.0.0", "--port", "8123", "--bridge", BRIDGE,
        "--authorize", "cli_inbox_hooks:by_header",
    )  # fmt: skip
    assert (options["host"], options["port"]) == ("0.0.0.0", 8123)


def test_without_authorize_the_inbox_is_local_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = _store_with_a_pending_call(tmp_path)

    def check(app: Any) -> None:
        assert TestClient(app, base_url="http://inbox.example").get("/").status_code == 403
        local = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
        assert token in local.get("/").text

    assert _serve(monkeypatch, check, url, "--bridge", BRIDGE)["host"] == "127.0.0.1"


HOOKS = ("--upstream", "cli_inbox_hooks:upstream", "--definition", "cli_inbox_hooks:definition")
INBOX_ORIGIN = "http://inbox.example"


def _settled_state(url: str) -> tuple[object, ...]:
    """What a settle could change: the ledger entry's bytes and the settle audit entries."""
    storage = open_storage(url)
    try:
        return (
            storage.load_record("b-s1", ledger_key("c9")),
            storage.list_records("b-s1", SETTLE_AUDIT_PREFIX),
        )
    finally:
        storage.close()


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, page
    return match.group(1)


def _settle(c: TestClient, csrf: str, **fields: str) -> httpx.Response:
    form = {"csrf": csrf, "session": "b-s1", "tool_call": "c9", "verdict": "did-not-run", **fields}
    return c.post("/operator/settle", data=form, headers={"origin": str(c.base_url)})


def test_can_settle_names_who_may_settle_and_a_refused_settle_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, token = _store_with_a_pending_call(tmp_path)
    bridged_session(url, "b-s1")  # c9: an execution whose outcome is unknown

    def check(app: Any) -> None:
        ana, bob = (
            TestClient(app, base_url=INBOX_ORIGIN, headers={"x-user": user})
            for user in ("ana", "bob")
        )
        page = bob.get("/operator").text
        assert "c9" in page and "You may not settle" in page and '/operator/settle"' not in page
        bobs = _csrf(bob.get(f"/call/{token}", params={"session": "s-1"}).text)  # his own
        before = _settled_state(url)
        refused = _settle(bob, bobs)
        assert refused.status_code == 403 and 'data-kind="forbidden"' in refused.text
        assert _settled_state(url) == before
        forged = _settle(ana, "0" * 64)  # CSRF is still checked for a principal who may
        assert forged.status_code == 403 and "The form expired" in forged.text
        anas = _csrf(ana.get("/operator").text)
        assert _settle(ana, "").status_code == 403  # no token at all
        cross = ana.post("/operator/settle", data={"csrf": anas, "session": "b-s1",
                         "tool_call": "c9", "verdict": "did-not-run"},
                         headers={"origin": "https://evil.example"})  # fmt: skip
        assert cross.status_code == 403
        assert _settled_state(url) == before
        settled = _settle(ana, anas, reason="checked the warehouse")
        assert settled.status_code == 200 and 'data-kind="settled"' in settled.text
        assert _settled_state(url) != before

    _serve(monkeypatch, check, url, "--host", "0.0.0.0", *HOOKS,
           "--authorize", "cli_inbox_hooks:by_header", "--can-decide", "cli_inbox_hooks:everyone",
           "--can-settle", "ana")  # fmt: skip
    audited = json.loads(run("audit", url, "b-s1", "--json").stdout.splitlines()[-1])
    assert (audited["kind"], audited["principal"], audited["via"]) == ("settle", "ana", "inbox")
    assert audited["reason"] == "checked the warehouse" and audited["decided"] is True


@pytest.mark.parametrize("names", [(), ("ana",), ("local",)])
def test_the_local_only_inbox_settles_only_with_can_settle_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]
) -> None:
    url, token = _store_with_a_pending_call(tmp_path)
    bridged_session(url, "b-s1")
    allowed = "local" in names

    def check(app: Any) -> None:
        local = TestClient(app, base_url="http://127.0.0.1:8000", client=("127.0.0.1", 50000))
        page = local.get("/operator").text
        assert ('/operator/settle"' in page) is allowed
        before = _settled_state(url)
        if allowed:
            response = _settle(local, _csrf(page))
            assert response.status_code == 200 and _settled_state(url) != before
            return
        assert "You may not settle" in page
        csrf = _csrf(local.get(f"/call/{token}", params={"session": "s-1"}).text)  # may decide
        response = _settle(local, csrf)
        assert response.status_code == 403 and 'data-kind="forbidden"' in response.text
        assert _settled_state(url) == before

    flags = [arg for name in names for arg in ("--can-settle", name)]
    _serve(monkeypatch, check, url, *HOOKS, *flags)


def test_an_empty_can_settle_name_is_refused(tmp_path: Path) -> None:
    url, _ = _store_with_a_pending_call(tmp_path)
    result = run("inbox", url, *HOOKS, "--can-settle", " ")
    assert result.exit_code == 2 and result.stderr.startswith("error: --can-settle names")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _ready(base: str, process: subprocess.Popen[str], deadline_s: float = 60.0) -> httpx.Response:
    """The first answer to ``GET /``, polling until the server listens (bounded)."""
    give_up = time.monotonic() + deadline_s
    while True:
        try:
            return httpx.get(f"{base}/", timeout=5)
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > give_up:
                _, stderr = process.communicate(timeout=5)
                raise AssertionError(f"the inbox did not start: {stderr}") from None
            with contextlib.suppress(subprocess.TimeoutExpired):  # poll again soon
                process.wait(timeout=0.05)


@pytest.mark.slow
def test_the_verb_serves_the_inbox_in_a_real_process(tmp_path: Path) -> None:
    url, token = _store_with_a_pending_call(tmp_path)
    port = _free_port()
    source = str(Path(akchat_fsm.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, str(HERE)])}
    process = subprocess.Popen(
        [sys.executable, "-m", "akchat_fsm.cli", "inbox", url, "--port", str(port),
         "--bridge", BRIDGE],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    try:
        page = _ready(f"http://127.0.0.1:{port}", process)
        assert page.status_code == 200
        assert token in page.text and "send_email" in page.text
        assert page.headers["cache-control"] == "no-store"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=30)
    # uvicorn shuts down gracefully, then ends by the signal it got (the POSIX convention)
    assert process.returncode == -signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert f"inbox: serving {url} on http://127.0.0.1:{port}/" in stderr
