"""``inspect`` and ``reconcile`` against real SQLite files and JSON documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cli_helpers import run, stuck_session

from akchat_fsm.storage import open_storage
from akchat_fsm.wire.decode import decode_session_snapshot

V1: dict[str, Any] = {
    "protocol": "agentskit.chat.session",
    "version": 1,
    "sessionId": "session",
    "definitionId": "support",
    "definitionRevision": 1,
    "updatedAt": "2026-07-11T00:00:00.000Z",
    "cursor": 2,
    "activeTurn": {"turnId": "turn-9", "expiresAt": 1783728000000},
    "terminalTurns": [{"turnId": "turn-8", "outcome": "indeterminate"}],
    "conversation": {
        "state": "collecting",
        "decisions": [
            {
                "messageId": "user-1",
                "input": "/start",
                "routeId": "start",
                "kind": "deterministic",
                "content": "Name?",
                "fromState": "idle",
                "toState": "collecting",
            }
        ],
    },
    "confirmations": [
        {
            "token": "confirm-1",
            "action": "email.send",
            "input": {"to": "a@example.com"},
            "toolCallId": "call-1",
            "expiresAt": 99,
            "status": "pending",
        },
        {
            "token": "confirm-2",
            "action": "refund.issue",
            "input": {},
            "toolCallId": "call-2",
            "expiresAt": 99,
            "status": "approved",
        },
    ],
}


def _write(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def test_inspect_shows_the_envelope_grouped_by_status(tmp_path: Path) -> None:
    result = run("inspect", _write(tmp_path / "s.json", V1))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "Session session  definition support rev 1" in out
    assert "cursor: 2  updatedAt: 2026-07-11T00:00:00.000Z" in out
    assert "Confirmations pending (1)" in out
    assert "Confirmations approved (1) — terminal" in out
    assert out.index("pending (1)") < out.index("confirm-1") < out.index("approved (1)")
    assert out.index("approved (1)") < out.index("confirm-2")
    assert "Turn lease: turn-9 until 2026-07-11T00:00:00.000Z (1783728000000)" in out
    assert "turn-8" in out and "indeterminate" in out
    assert "Conversation state: collecting  decisions: 1" in out
    assert "migrated" not in out


def test_inspect_reports_a_v0_migration_and_json_is_the_canonical_wire(tmp_path: Path) -> None:
    v0 = {k: v for k, v in V1.items() if k != "protocol"} | {"version": 0, "extra": True}
    source = _write(tmp_path / "v0.json", v0)
    shown = run("inspect", source)
    assert shown.exit_code == 0, shown.stderr
    assert "migrated from v0" in shown.stdout
    assert "valid: agentskit.chat.session v1" in shown.stdout
    wire = run("inspect", source, "--json")
    assert wire.exit_code == 0
    expected = decode_session_snapshot(json.dumps(v0)).snapshot
    assert expected is not None
    assert json.loads(wire.stdout) == expected.to_wire()
    assert json.loads(wire.stdout)["version"] == 1 and "extra" not in json.loads(wire.stdout)
    from_stdin = run("inspect", "-", "--json", input=json.dumps(v0))
    assert from_stdin.stdout == wire.stdout


def test_inspect_reads_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    stuck_session(url, "s1")
    result = run("inspect", url, "s1")
    assert result.exit_code == 0, result.stderr
    assert "Confirmations pending (1)" in result.stdout
    assert "Confirmations approving (1) — processing" in result.stdout
    assert "Confirmations rejecting (1) — processing" in result.stdout
    wire = json.loads(run("inspect", url, "s1", "--json").stdout)
    assert wire["sessionId"] == "s1" and wire["cursor"] == 5


def _stored(url: str, session_id: str) -> object:
    storage = open_storage(url)
    try:
        return storage.load(session_id)
    finally:
        storage.close()


def _statuses(url: str, session_id: str) -> list[str]:
    snapshot = decode_session_snapshot(_stored(url, session_id)).snapshot
    assert snapshot is not None
    return [b.status.value for b in snapshot.confirmations]


def test_reconcile_dry_run_writes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory = _write(tmp_path / "memory.json", stuck_session(url, "s1"))
    before = _stored(url, "s1")
    result = run("reconcile", url, "s1", "--memory", memory)
    assert result.exit_code == 0, result.stderr
    assert "Dry run at cursor 5 (nothing written)" in result.stdout
    rows = [line.split() for line in result.stdout.splitlines() if "confirm-" in line]
    plan = {row[2]: row[3:] for row in rows}
    assert plan["approving"][0] == "requires_confirmation"
    assert "needs upstream" in " ".join(plan["approving"])
    assert plan["rejecting"] == ["error", "complete", "rejected"]
    assert _stored(url, "s1") == before


def test_reconcile_apply_settles_from_memory(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory = _write(tmp_path / "memory.json", stuck_session(url, "s1"))
    assert _statuses(url, "s1") == ["approving", "rejecting", "pending"]
    result = run("reconcile", url, "s1", "--memory", memory, "--apply")
    assert result.exit_code == 0, result.stderr
    assert "cursor now 6" in result.stdout
    # upstream acted on the rejection: completed; the untouched approval needs upstream: kept
    assert _statuses(url, "s1") == ["approving", "rejected", "pending"]
    again = run("reconcile", url, "s1", "--memory", memory, "--apply", "--release-untouched")
    assert again.exit_code == 0, again.stderr
    assert "released" in again.stdout
    assert _statuses(url, "s1") == ["pending", "rejected", "pending"]
    nothing = run("reconcile", url, "s1", "--memory", memory)
    assert "No processing records" in nothing.stdout


def test_reconcile_apply_refuses_a_session_with_a_conversation(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    claimed = json.loads(json.dumps(V1))
    claimed["confirmations"][0]["status"] = "approving"
    snapshot = decode_session_snapshot(claimed).snapshot
    assert snapshot is not None
    storage = open_storage(url)
    assert storage.save(snapshot.model_copy(update={"cursor": 1}), None)
    storage.close()
    memory = _write(tmp_path / "m.json", {"version": 1, "messages": []})
    result = run("reconcile", url, "session", "--memory", memory, "--apply")
    assert result.exit_code == 1
    assert "conversation flow" in result.stderr and len(result.stderr.splitlines()) == 1
