"""``akchat-fsm pending URL``: the pending index across sessions, one page at a time.

The store is filled through the public storage API (snapshots with pending and decided
bindings), then read by the command in-process, on SQLite and PostgreSQL. Every page's next
command is run as printed, so the pages a person walks are the pages the index gives.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from cli_helpers import postgres_url, run, sqlite_url

from akchat_fsm import ConfirmationBinding, ConfirmationStatus, SessionSnapshot
from akchat_fsm.storage import open_storage

NOW = 1_800_000_000_000  # the reference time every test passes as --now
MINUTE = 60_000


def binding(
    n: int, *, status: str = "pending", expires_in: int, action: str = "pay"
) -> ConfirmationBinding:
    return ConfirmationBinding(
        token=f"tok-{n}",
        action=action,
        input={"n": n},
        tool_call_id=f"call-{n}",
        expires_at=NOW + expires_in,
        status=ConfirmationStatus(status),
    )


def snapshot(session_id: str, *bindings: ConfirmationBinding) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=session_id,
        definition_id="cli-test",
        definition_revision=1,
        updated_at="2027-01-15T08:00:00.000Z",
        cursor=1,
        confirmations=bindings,
    )


def fill(url: str) -> str:
    storage = open_storage(url)
    try:
        assert storage.save(
            snapshot(
                "s-a",
                binding(1, expires_in=5 * MINUTE),
                binding(2, expires_in=-MINUTE),  # expired, not yet expired by anyone
                binding(3, status="approved", expires_in=MINUTE),
            ),
            None,
        )
        assert storage.save(snapshot("s-b", binding(4, expires_in=2 * MINUTE, action="mail")), None)
        assert storage.save(snapshot("s-c", binding(5, status="rejected", expires_in=MINUTE)), None)
    finally:
        storage.close()
    return url


@pytest.fixture(params=[sqlite_url, postgres_url], ids=["sqlite", "postgres"])
def url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return fill(request.param(tmp_path, request))


def listed(url: str, *args: str) -> dict[str, object]:
    result = run("pending", url, "--now", str(NOW), "--json", *args)
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert isinstance(document, dict)
    return document


def tokens(document: dict[str, object]) -> list[str]:
    items = document["items"]
    assert isinstance(items, list)
    return [item["token"] for item in items]


def test_lists_only_pending_bindings_soonest_expiry_first(url: str) -> None:
    document = listed(url)
    assert tokens(document) == ["tok-2", "tok-4", "tok-1"]
    first = document["items"][0]  # type: ignore[index]
    assert first == {
        "sessionId": "s-a",
        "token": "tok-2",
        "toolCallId": "call-2",
        "action": "pay",
        "expiresAtMs": NOW - MINUTE,
        "pendingSinceMs": first["pendingSinceMs"],
        "expired": True,
    }
    assert document["nextAfter"] is None and document["next"] is None


def test_filters_by_action_session_and_expiry(url: str) -> None:
    assert tokens(listed(url, "--action", "mail")) == ["tok-4"]
    assert tokens(listed(url, "--session", "s-a")) == ["tok-2", "tok-1"]
    assert tokens(listed(url, "--expiring-within", "3m")) == ["tok-2", "tok-4"]
    assert tokens(listed(url, "--action", "nothing")) == []
    # pendingSince is the adapter's wall clock at the save, far before NOW (2027): all older
    assert tokens(listed(url, "--older-than", "1d")) == ["tok-2", "tok-4", "tok-1"]
    since = [item["pendingSinceMs"] for item in listed(url)["items"]]  # type: ignore[index]
    just_after = str(max(since) + 1_000)  # a second after the last save
    assert tokens(listed(url, "--now", just_after, "--older-than", "1m")) == []  # none that old
    assert len(tokens(listed(url, "--now", just_after, "--older-than", "500ms"))) == 3


def test_newest_order_lists_the_most_recently_pending_first(url: str) -> None:
    newest = tokens(listed(url, "--order", "newest"))
    assert sorted(newest) == ["tok-1", "tok-2", "tok-4"]
    document = listed(url, "--order", "newest")
    since = [item["pendingSinceMs"] for item in document["items"]]  # type: ignore[index]
    assert since == sorted(since, reverse=True)


def test_pages_follow_the_printed_next_command_to_the_end(url: str) -> None:
    seen: list[str] = []
    args = ["pending", url, "--now", str(NOW), "--limit", "1", "--json"]
    for _ in range(5):
        result = run(*args)
        assert result.exit_code == 0, result.stderr
        document = json.loads(result.stdout)
        seen += tokens(document)
        if document["next"] is None:
            break
        argv = shlex.split(document["next"])
        assert argv[:3] == ["akchat-fsm", "pending", url]
        args = [*argv[1:], "--json"]
    assert seen == ["tok-2", "tok-4", "tok-1"]


def test_table_names_every_row_unwrapped_with_the_next_page(url: str) -> None:
    result = run("pending", url, "--now", str(NOW), "--limit", "2", "--width", "40")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    row = next(line for line in lines if "tok-2" in line)
    assert row.split()[:4] == ["s-a", "tok-2", "call-2", "pay"]
    assert "expired 1m ago" in row
    assert any("in 2m" in line and "tok-4" in line for line in lines)
    command = lines[lines.index("next page:") + 1].strip()
    assert shlex.split(command)[:3] == ["akchat-fsm", "pending", url]
    follow = run(*shlex.split(command)[1:])
    assert follow.exit_code == 0, follow.stderr
    assert "tok-1" in follow.stdout and "tok-2" not in follow.stdout


def test_a_bad_cursor_is_one_usage_line_and_changes_nothing(url: str) -> None:
    result = run("pending", url, "--after", "not-a-cursor")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: cannot list pending approvals in")
    assert len(result.stderr.splitlines()) == 1
    assert tokens(listed(url)) == ["tok-2", "tok-4", "tok-1"]


def test_a_missing_store_is_reported_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    result = run("pending", f"sqlite:///{path}")
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no store at")
    assert not path.exists()


def _sqlite_bytes(path: Path) -> tuple[bytes, bool]:
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes(), wal.exists() and wal.stat().st_size > 0


def test_listing_leaves_the_store_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = fill(f"sqlite:///{path}")
    before = _sqlite_bytes(path)
    for args in ([], ["--json"], ["--order", "newest", "--limit", "1"]):
        assert run("pending", url, "--now", str(NOW), *args).exit_code == 0
        assert _sqlite_bytes(path) == before, args


def test_a_store_older_than_the_pending_index_is_reported_not_upgraded(tmp_path: Path) -> None:
    import contextlib
    import sqlite3

    url = f"sqlite:///{tmp_path / 'old.db'}"
    storage = open_storage(url)
    try:
        assert storage.save(snapshot("s-a", binding(1, expires_in=MINUTE)), None)
    finally:
        storage.close()
    with contextlib.closing(sqlite3.connect(tmp_path / "old.db")) as conn:
        conn.execute("DROP TABLE akchat_sessions__pending")  # as a store written before it
        conn.commit()
    before = _sqlite_bytes(tmp_path / "old.db")
    result = run("pending", url)
    assert result.exit_code == 2, result.stdout
    assert len(result.stderr.splitlines()) == 1 and "pending" in result.stderr
    assert _sqlite_bytes(tmp_path / "old.db") == before
    with open_storage(url) as writer:  # a writer upgrades it once; then the verb lists it
        assert writer.load("s-a") is not None
    assert tokens(listed(url)) == ["tok-1"]
