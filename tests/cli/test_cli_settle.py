"""``settle URL SESSION_ID TOOL_CALL_ID --ran [--result JSON] | --did-not-run``: an operator's
verdict on an execution whose outcome is unknown, on SQLite and PostgreSQL (ADR-0104).

One compare-and-set over the entry the command read: a settle that races another (or the
claimant finishing late) loses, writes nothing and says what the entry is now."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import bridged_session, postgres_url, run, sqlite_url

import akchat_fsm
from akchat_fsm.integrations.ledger import ExecutionState, LedgerEntry, ToolLedger
from akchat_fsm.integrations.records import SETTLE_HINT
from akchat_fsm.storage import open_storage


@pytest.fixture(params=[sqlite_url, postgres_url], ids=["sqlite", "postgres"])
def url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    made: str = request.param(tmp_path, request)
    bridged_session(made, "s1")  # c9: claimed by host-b:2, which died inside the body
    return made


def entry(url: str, tool_call_id: str = "c9") -> LedgerEntry:
    storage = open_storage(url)
    try:
        found = ToolLedger(storage, "s1").get(tool_call_id)
    finally:
        storage.close()
    assert found is not None
    return found


def test_ran_records_the_result_and_later_claimants_replay_it(url: str) -> None:
    result = run("settle", url, "s1", "c9", "--ran", "--result", '{"wiped": 3}', "--operator", "al")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "settled c9 (wipe) by al: ran; its result is recorded and replayed to later claimants\n"
    )
    settled = entry(url)
    assert (settled.state, settled.outcome, settled.result) == (
        ExecutionState.EXECUTED,
        "settled",
        {"wiped": 3},
    )
    assert settled.owner == "al"
    ledger = json.loads(run("inspect", url, "s1", "--ledger", "--json").stdout)
    assert ledger["executionUnknown"] == [] and ledger["settle"] is None
    storage = open_storage(url)
    try:
        again = ToolLedger(storage, "s1").execute("c9", "wipe", {}, lambda: pytest.fail("re-run"))
    finally:
        storage.close()
    assert not again.ran and again.value == {"wiped": 3}


def test_did_not_run_releases_the_call_for_one_more_run(url: str) -> None:
    result = run("settle", url, "s1", "c9", "--did-not-run", "--json")
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["sessionId"] == "s1" and document["toolCallId"] == "c9"
    assert document["settled"] is True
    assert document["entry"]["state"] == "released" and document["entry"]["unknown"] is False
    assert document["entry"]["owner"].startswith("cli:")
    runs: list[int] = []
    storage = open_storage(url)
    try:
        done = ToolLedger(storage, "s1").execute("c9", "wipe", {}, lambda: runs.append(1) or "ok")
    finally:
        storage.close()
    assert done.ran and runs == [1]


def test_the_inspect_hint_names_the_command() -> None:
    assert "akchat-fsm settle URL SESSION_ID TOOL_CALL_ID --ran" in SETTLE_HINT
    assert "--did-not-run" in SETTLE_HINT


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give the verdict: --ran [--result JSON] or --did-not-run"),
        (("--did-not-run", "--result", "1"), "--result goes with --ran"),
        (("--ran", "--result", "{nope"), "A --result value is not JSON"),
        (("--ran", "--result", "[" * 600 + "]" * 600), "nested deeper than 512"),
    ],
    ids=["no-verdict", "result-without-ran", "bad-json", "too-deep"],
)
def test_usage_errors_are_one_line_exit_2_and_write_nothing(
    url: str, args: tuple[str, ...], says: str
) -> None:
    before = entry(url)
    result = run("settle", url, "s1", "c9", *args)
    assert result.exit_code == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and says in result.stderr
    assert entry(url) == before


@pytest.mark.parametrize(
    ("tool_call_id", "session_id", "says"),
    [
        ("c1", "s1", "it is executed (outcome returned, by host-a:1); nothing written"),
        ("nope", "s1", "no execution is recorded for tool call 'nope' in session 's1'"),
        ("c9", "other", "no execution is recorded for tool call 'c9' in session 'other'"),
    ],
    ids=["already-executed", "no-entry", "other-session"],
)
def test_only_an_unknown_outcome_is_settled(
    url: str, tool_call_id: str, session_id: str, says: str
) -> None:
    result = run("settle", url, session_id, tool_call_id, "--ran")
    assert result.exit_code == 1 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and says in result.stderr


def test_a_second_settle_is_refused_with_what_the_first_recorded(url: str) -> None:
    assert run("settle", url, "s1", "c9", "--did-not-run", "--operator", "bob").exit_code == 0
    result = run("settle", url, "s1", "c9", "--ran", "--operator", "al")
    assert result.exit_code == 1
    assert result.stderr == (
        "error: tool call 'c9' has no unknown outcome to settle: it is released (settled as "
        "not run by bob); nothing written\n"
    )
    assert entry(url).state is ExecutionState.RELEASED


def test_a_missing_store_is_reported_and_not_created(tmp_path: Path) -> None:
    result = run("settle", f"sqlite:///{tmp_path / 'typo.db'}", "s1", "c9", "--ran")
    assert result.exit_code == 2 and "does not exist" in result.stderr
    assert not (tmp_path / "typo.db").exists()


# --------------------------------------------------------------------------- races
def _settle_in_between(
    monkeypatch: pytest.MonkeyPatch, url: str, competitor: tuple[str, ...]
) -> list[Any]:
    """Make the store's adapter class run another operator's whole ``settle`` right after the
    command first reads the entry (the interleaving a real race may or may not produce); the
    competitor's own reads pass straight through. Returns the competitor's result, once run."""
    probe = open_storage(url)
    adapter = type(probe)
    probe.close()
    real_load = adapter.load_record
    competitor_result: list[Any] = []

    def load_record(self: Any, session_id: str, key: str) -> Any:
        stored = real_load(self, session_id, key)
        if not competitor_result and key == "call:c9":
            competitor_result.append("running")
            competitor_result[0] = run("settle", url, "s1", "c9", *competitor)
        return stored

    monkeypatch.setattr(adapter, "load_record", load_record)
    return competitor_result


@pytest.mark.parametrize(
    ("ours", "theirs", "now"),
    [
        (("--ran", "--operator", "al"), ("--did-not-run", "--operator", "bob"), "released"),
        (("--did-not-run", "--operator", "al"), ("--ran", "--operator", "bob"), "executed"),
        (("--ran", "--operator", "al"), ("--ran", "--result", "2", "--operator", "bob"), "exec"),
    ],
    ids=["ran-vs-not", "not-vs-ran", "ran-vs-ran"],
)
def test_a_settle_that_loses_the_race_writes_nothing_and_says_so(
    url: str,
    monkeypatch: pytest.MonkeyPatch,
    ours: tuple[str, ...],
    theirs: tuple[str, ...],
    now: str,
) -> None:
    competitor = _settle_in_between(monkeypatch, url, theirs)
    lost = run("settle", url, "s1", "c9", *ours)
    won = competitor[0]
    assert won.exit_code == 0, won.stderr
    assert lost.exit_code == 1 and lost.stdout == ""
    assert lost.stderr.startswith(f"error: tool call 'c9' changed while settling: it is now {now}")
    assert "by bob" in lost.stderr and lost.stderr.endswith("; nothing written\n")
    assert entry(url).owner == "bob"  # the winner's verdict stands, untouched


def _settle_process(url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(akchat_fsm.__file__).resolve().parents[1])}
    return subprocess.Popen(
        [sys.executable, "-m", "akchat_fsm.cli", "settle", url, "s1", "c9", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.slow
def test_two_settle_processes_at_once_exactly_one_wins(url: str) -> None:
    first = _settle_process(url, "--ran", "--result", '"one"', "--operator", "one")
    second = _settle_process(url, "--did-not-run", "--operator", "two")
    outcomes = {}
    for name, process in (("one", first), ("two", second)):
        stdout, stderr = process.communicate(timeout=120)
        outcomes[name] = (process.returncode, stdout, stderr)
    winners = [name for name, (code, _, _) in outcomes.items() if code == 0]
    assert len(winners) == 1, outcomes
    (loser,) = set(outcomes) - set(winners)
    code, stdout, stderr = outcomes[loser]
    assert code == 1 and stdout == "" and len(stderr.splitlines()) == 1
    assert "nothing written" in stderr and f"by {winners[0]}" in stderr
    assert entry(url).owner == winners[0]


def settles(url: str) -> list[dict[str, Any]]:
    """The settle lines of ``audit --json`` (the session's decisions are exported too)."""
    lines = [json.loads(line) for line in run("audit", url, "s1", "--json").stdout.splitlines()]
    return [line for line in lines if line.get("kind") == "settle"]


def test_a_settle_is_audited_and_audit_and_inspect_show_it(url: str) -> None:
    settled = run(
        "settle", url, "s1", "c9", "--did-not-run", "--operator", "al",
        "--reason", "no row in the \x1b[31mwarehouse",
    )  # fmt: skip
    assert settled.exit_code == 0, settled.stderr
    (entry_,) = settles(url)
    assert (entry_["principal"], entry_["via"], entry_["verdict"], entry_["decided"]) == (
        "al",
        "cli",
        "did-not-run",
        True,
    )
    assert entry_["reason"] == "no row in the \x1b[31mwarehouse" and entry_["toolCallId"] == "c9"
    assert entry_["settled"]["owner"] == "host-b:2"
    table = run("audit", url, "s1", "--width", "250")
    assert table.exit_code == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if line.lstrip().startswith("c9 ")]
    assert "did not run" in row and " al " in row and "cli" in row and " applied" in row
    assert "\x1b" not in table.stdout
    shown = run("inspect", url, "s1", "--width", "250").stdout
    assert "operators' settles of unknown executions" in shown and "did not run" in shown


def test_a_settle_without_an_operator_is_audited_as_not_named(url: str) -> None:
    assert run("settle", url, "s1", "c9", "--ran").exit_code == 0
    (audited,) = settles(url)
    assert audited["principal"] is None and audited["via"] == "cli"
    assert entry(url).owner.startswith("cli:")  # the ledger's owner stays cli:HOST:PID


def test_an_unrecordable_operator_is_refused_before_any_write(url: str) -> None:
    before = entry(url)
    refused = run("settle", url, "s1", "c9", "--ran", "--operator", "x" * 300)
    assert refused.exit_code == 2 and "operator must be None or a printable str" in refused.stderr
    assert entry(url) == before
    assert settles(url) == []
