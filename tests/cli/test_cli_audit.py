"""``akchat-fsm audit URL SESSION``: the audit trail, as a table and as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import run

from akchat_fsm import ChatDefinition, open_storage, resume_chat_session
from akchat_fsm.testing.doubles import RecordingUpstream


def _decided(url: str) -> tuple[str, str]:
    """A session where ana approved one call from the inbox and the sweep expired another."""
    now = iter(range(1_783_728_000_000, 1_783_728_000_000 + 10**6, 1_000))
    storage = open_storage(url)
    try:
        session = resume_chat_session(
            ChatDefinition("cli-test"),
            session_id="chat-7",
            storage=storage,
            clock=lambda: next(now),
        )
        coordinator = session.confirmations_for(RecordingUpstream(), ttl_ms=1)
        approved = coordinator.propose("email.send", {"to": "a@example.com"}).token
        expired = coordinator.propose("email.send", {"to": "\x1b[31mb"}).token
        coordinator.approve(approved, decided_by="ana@example.com", via="inbox")
        coordinator.expire_due()
    finally:
        storage.close()
    return approved, expired


def test_the_table_names_who_decided_each_call(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, expired = _decided(url)
    result = run("audit", url, "chat-7", "--width", "200")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    (ana,) = [line for line in lines if approved in line]
    assert "ana@example.com" in ana and "inbox" in ana and " applied" in ana
    (sweep,) = [line for line in lines if expired in line]
    assert "(not named)" in sweep and "sweep" in sweep and "expire" in sweep
    assert "\x1b" not in result.stdout


def test_json_lines_export_one_entry_a_line_and_filters(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, _ = _decided(url)
    result = run("audit", url, "chat-7", "--token", approved, "--json")
    assert result.exit_code == 0, result.stderr
    (entry,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert (entry["principal"], entry["via"], entry["intent"], entry["decided"]) == (
        "ana@example.com",
        "inbox",
        "approve",
        True,
    )
    assert entry["argsDigest"].startswith("sha256:")
    later = "1783738000000"  # ten thousand seconds after the decisions
    recent = run("audit", url, "chat-7", "--json", "--since", "1s", "--now", later)
    assert recent.exit_code == 0 and recent.stdout == ""  # nothing within the last second
    today = run("audit", url, "chat-7", "--json", "--since", "1d", "--now", later)
    assert len(today.stdout.splitlines()) == 2


def test_a_bad_session_id_exits_2_and_an_unknown_session_has_no_entries(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _decided(url)
    bad = run("audit", url, "not an id!")
    assert bad.exit_code == 2 and bad.stderr.startswith("error:")
    assert run("audit", url, "chat-none").stdout.strip() == "No audit entries match."


def test_inspect_shows_the_trail_after_the_envelope(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, _ = _decided(url)
    result = run("inspect", url, "chat-7", "--width", "200")
    assert result.exit_code == 0, result.stderr
    head, _, trail = result.stdout.partition("audit trail")
    assert approved in head  # the envelope first
    (ana,) = [line for line in trail.splitlines() if approved in line]
    assert "ana@example.com" in ana and " applied" in ana
