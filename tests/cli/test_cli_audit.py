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


def _second_session(url: str) -> str:
    """Another session, where bo rejected one call."""
    now = iter(range(1_783_729_000_000, 1_783_729_000_000 + 10**6, 1_000))
    storage = open_storage(url)
    try:
        session = resume_chat_session(
            ChatDefinition("cli-test"),
            session_id="chat-8",
            storage=storage,
            clock=lambda: next(now),
        )
        coordinator = session.confirmations_for(RecordingUpstream())
        token = coordinator.propose("email.send", {"to": "c@example.com"}).token
        coordinator.reject(token, reason="wrong person", decided_by="bo")
    finally:
        storage.close()
    return token


def test_without_a_session_every_session_is_exported_oldest_write_first(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, expired = _decided(url)
    rejected = _second_session(url)
    result = run("audit", url, "--json")
    assert result.exit_code == 0, result.stderr
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    got = [(e["sessionId"], e["token"], e["principal"]) for e in entries]
    # chat-7's two decisions may share a millisecond (a tie is ordered by key): as a pair
    chat_7 = [("chat-7", approved, "ana@example.com"), ("chat-7", expired, None)]
    assert sorted(got[:2], key=repr) == sorted(chat_7, key=repr)
    assert got[2:] == [("chat-8", rejected, "bo")]
    assert all(e["decided"] for e in entries)
    table = run("audit", url, "--width", "220")
    assert table.exit_code == 0, table.stderr
    (bo,) = [line for line in table.stdout.splitlines() if rejected in line]
    assert "chat-8" in bo and "bo" in bo and "wrong person" in bo
    # --since is the store's clock at the write: every entry was written just now.
    assert len(run("audit", url, "--json", "--since", "1h").stdout.splitlines()) == 3
    future = str(10**15)
    assert run("audit", url, "--json", "--since", "1s", "--now", future).stdout == ""


def test_without_a_session_a_token_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, _ = _decided(url)
    result = run("audit", url, "--token", approved)
    assert result.exit_code == 2 and "--token needs a SESSION" in result.stderr


def test_without_a_session_a_store_without_the_audit_index_says_so(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    _decided(url)
    with sqlite3.connect(path) as raw:  # as the builds before the index left it
        raw.execute("DROP INDEX akchat_sessions__records_audit2")
    result = run("audit", url)  # read-only: it does not upgrade the store
    assert result.exit_code == 2
    assert "predates the audit index" in result.stderr
    assert run("audit", url, "chat-7").exit_code == 0  # one session's trail needs no index


def test_without_a_session_the_settles_are_listed_in_index_order(tmp_path: Path) -> None:
    from akchat_fsm.integrations.ledger import ClaimRequest, ToolLedger, args_digest, plan_execute
    from akchat_fsm.session.effects import LoadRecord, RunBody

    url = f"sqlite:///{tmp_path / 's.db'}"
    approved, _ = _decided(url)
    storage = open_storage(url)
    try:  # a claimant dies inside c1's body in chat-8, and cy settles it
        plan = plan_execute("chat-8", ClaimRequest("c1", "send", args_digest({}), "dead", "n", 5))
        effect = next(plan)
        while not isinstance(effect, RunBody):
            if isinstance(effect, LoadRecord):
                effect = plan.send(storage.load_record(effect.session_id, effect.key))
            else:
                effect = plan.send(
                    storage.save_record(
                        effect.session_id, effect.key, effect.text, None, processing=True
                    )
                )
        plan.close()
        ToolLedger(storage, "chat-8").settle("c1", ran=True, result=1, operator="cy", via="cli")
    finally:
        storage.close()
    rejected = _second_session(url)
    result = run("audit", url, "--json")
    assert result.exit_code == 0, result.stderr
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    got = [(e.get("kind"), e["sessionId"], e["principal"]) for e in entries]
    # chat-7's two decisions may share a millisecond: the index orders a tie by key, not by
    # who decided first, so those two are compared as a pair; everything else in order.
    chat_7 = [(None, "chat-7", "ana@example.com"), (None, "chat-7", None)]
    assert sorted(got[:2], key=repr) == sorted(chat_7, key=repr)
    assert got[2:] == [("settle", "chat-8", "cy"), (None, "chat-8", "bo")]
    assert entries[2]["toolCallId"] == "c1" and entries[2]["decided"] is True
    assert entries[3]["token"] == rejected
    table = run("audit", url, "--width", "220")
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    (cy,) = [line for line in lines if " cy " in line]
    assert "chat-8" in cy and "c1" in cy and "applied" in cy and "not applied" not in cy
    assert [n for n, line in enumerate(lines) if approved in line or rejected in line]
