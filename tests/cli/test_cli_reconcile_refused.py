"""``reconcile`` shows an orphan intent the session cannot admit as what it is.

A proposal that died between upstream and its binding leaves an intent (ADR-0093); if the
session meanwhile reached its limit of live confirmations, binding it is refused
(``LimitExceeded``) and the intent is kept. The CLI used to print that outcome as
``pending -> pending``, as if a record had been bound and nothing were wrong, with no next step
(the one-session dry run did not even list it, and said there was nothing to reconcile). Now
every form, dry run and ``--apply``, text and ``--json``, one session and ``--all``, says it
was refused and why, that the intent is kept, and the exact next steps: decide one of the
session's records, then run the reconcile that binds the waiting call (exit 3 until then).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run

from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage import open_storage
from akchat_fsm.testing.doubles import RecordingChatMemory, RecordingUpstream
from akchat_fsm.wire.session import SessionSnapshot

DEFINITION = ChatDefinition("orphans")
SID = "full"
LIVE_LIMIT = 1_000
INTENTS = "propose-intent:"
REFUSED = "refused: A session holds at most 1000 unresolved confirmations; intent kept"


HOUR = 3_600_000


def _now() -> int:
    return time.time_ns() // 1_000_000


class Killed(BaseException):
    """The proposing process died here."""


class DiesAfterCreating(RecordingUpstream):
    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> Any:
        super().propose_tool_call(id, name, args)
        raise Killed(id)


def _full_session_with_an_orphan(url: str, tmp_path: Path) -> tuple[str, str]:
    """A session at its live limit and an intent whose call waits upstream; the memory file
    and the waiting call's id."""
    upstream = RecordingUpstream()
    storage = open_storage(url)
    try:
        seeded = SessionSnapshot.model_validate(
            {
                "sessionId": SID,
                "definitionId": DEFINITION.id,
                "definitionRevision": DEFINITION.revision,
                "updatedAt": "2026-07-11T00:00:00.000Z",
                "cursor": 1,
                "confirmations": [
                    {
                        "token": f"confirm-seed{i}",
                        "action": "email.send",
                        "input": {},
                        "toolCallId": f"seed{i}",
                        "expiresAt": 10**14,
                        "status": "pending",
                    }
                    for i in range(LIVE_LIMIT - 2)
                ],
            }
        )
        assert storage.save(seeded, None)
        dying = DiesAfterCreating()
        for suffix, client in (("a", dying), ("c", upstream), ("d", upstream)):
            # Proposed an hour ago: the dead proposer's intent lease (ADR-0133, a minute) has
            # ended when the CLI runs, and the day-long expiry has not (nothing is due).
            session = resume_chat_session(
                DEFINITION, session_id=SID, storage=storage, clock=lambda: _now() - HOUR
            )
            coordinator = session.confirmations_for(
                client, create_id=lambda s=suffix: s, ttl_ms=24 * HOUR
            )
            if client is dying:
                with pytest.raises(Killed):
                    coordinator.propose("email.send", {"to": suffix})
            else:
                coordinator.propose("email.send", {"to": suffix})
        (key,) = storage.list_records(SID, INTENTS)
        waiting = key.removeprefix(INTENTS)
        upstream.propose_tool_call(waiting, "email.send", {"to": "a"})  # what a left upstream
    finally:
        storage.close()
    memory = tmp_path / "memory.json"
    memory.write_text(json.dumps(RecordingChatMemory(upstream).load()), encoding="utf-8")
    return str(memory), waiting


def _intents(url: str) -> list[str]:
    storage = open_storage(url)
    try:
        return storage.list_records(SID, INTENTS)
    finally:
        storage.close()


def _steps(url: str, memory: str, waiting: str) -> list[str]:
    return [
        f"# {waiting}: waiting upstream, refused: the session is at its limit of live "
        "confirmations, and the intent is kept; approve or reject one of its pending records "
        f"(from the host or the inbox; akchat-fsm pending {url} --session {SID} lists them), "
        "then bind the waiting call:",
        f"akchat-fsm reconcile {url} {SID} --memory {memory} --apply",
    ]


@pytest.mark.parametrize("apply", [False, True], ids=["dry-run", "apply"])
def test_one_session_reports_the_refused_intent_and_its_next_steps(
    tmp_path: Path, apply: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory, waiting = _full_session_with_an_orphan(url, tmp_path)
    extra = ["--apply"] if apply else []

    result = run("reconcile", url, SID, "--memory", memory, "--json", *extra)
    assert result.exit_code == 3, result.stderr  # a person decides, then one more command
    document = json.loads(result.stdout)
    (row,) = [r for r in document["records"] if r["toolCallId"] == waiting]
    assert row["status"] == "intent" and row["action"].startswith(REFUSED)
    assert row["action"].endswith("decide a record so it can be bound")
    assert row["after"] == "not bound (intent kept)"
    assert document["next"] == _steps(url, memory, waiting)
    assert _intents(url) == [f"{INTENTS}{waiting}"]  # kept: the waiting call stays covered

    text = run("reconcile", url, SID, "--memory", memory, *extra)
    assert text.exit_code == 3, text.stderr
    (line,) = [line for line in text.stdout.splitlines() if "confirm-" in line]
    assert REFUSED in line and "not bound (intent kept)" in line
    assert "pending    pending" not in line.replace("  ", "    ")
    for step in _steps(url, memory, waiting):
        assert step in text.stdout.splitlines()
    assert "No processing records" not in text.stdout


def test_once_a_record_is_decided_the_apply_binds_the_waiting_call(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory, waiting = _full_session_with_an_orphan(url, tmp_path)
    storage = open_storage(url)
    try:
        session = resume_chat_session(DEFINITION, session_id=SID, storage=storage)
        session.confirmations_for(RecordingUpstream()).reject("confirm-seed0")
    finally:
        storage.close()
    dry = json.loads(run("reconcile", url, SID, "--memory", memory, "--json").stdout)
    assert [(r["toolCallId"], r["status"], r["action"], r["after"]) for r in dry["records"]] == [
        (waiting, "intent", "bind", "pending")
    ]
    result = run("reconcile", url, SID, "--memory", memory, "--json", "--apply")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert [(r["toolCallId"], r["action"], r["after"]) for r in document["records"]] == [
        (waiting, "bound", "pending")
    ]
    assert document["next"] == [] and _intents(url) == []


@pytest.mark.parametrize("apply", [False, True], ids=["dry-run", "apply"])
def test_the_sweep_reports_the_refused_intent_with_its_next_steps(
    tmp_path: Path, apply: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    memory_file, waiting = _full_session_with_an_orphan(url, tmp_path)
    memories = tmp_path / "memories"
    memories.mkdir()
    (memories / f"{SID}.json").write_text(Path(memory_file).read_text(), encoding="utf-8")
    argv = ["reconcile", url, "--all", "--older-than", "0", "--memory-dir", str(memories)]
    argv += ["--apply"] if apply else []

    result = run(*argv, "--json")
    assert result.exit_code == 3, result.stderr
    (session,) = json.loads(result.stdout)["sessions"]
    (row,) = session["records"]
    assert (row["toolCallId"], row["status"], row["after"]) == (
        waiting,
        "intent",
        "not bound (intent kept)",
    )
    assert row["action"].startswith(REFUSED)
    sweep = f"akchat-fsm reconcile {url} --all --older-than 0 --memory-dir {memories} --apply"
    assert session["next"] == [*_steps(url, memory_file, waiting)[:1], sweep]
    assert _intents(url) == [f"{INTENTS}{waiting}"]

    text = run(*argv)
    assert text.exit_code == 3, text.stderr
    assert f"  {sweep}" in text.stdout.splitlines()
    assert "save the host's chat memory" not in text.stdout
