"""The operator's path from the command line, end to end (issue 22): a run killed inside a tool
body is found by ``reconcile --all``, its unknown execution settled with the exact command the
CLI printed (copied, not retyped), and the run finished through the host's bridge factory named
as ``module:callable``. Real SQLite files and the real pydantic-ai package on its offline model
(``cli_bridges``); every body that runs is counted in a file outside the process.

Exit status: 0 when everything is settled, 3 while work is left for a person or one more
command, 2 for a bad ``--bridge``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import cli_bridges
import pytest
from cli_helpers import crash_inside_a_tool, run, stuck_session
from click.testing import CliRunner

from akchat_fsm.cli import main
from akchat_fsm.session import resume_chat_session
from akchat_fsm.storage import open_storage

NEEDS_PERSON = 3
SPEC = "cli_bridges:bridge_for"


@pytest.fixture
def bodies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "bodies.log"
    monkeypatch.setenv(cli_bridges.BODIES, str(log))
    monkeypatch.delenv(cli_bridges.KILL, raising=False)
    return log


def _url(tmp_path: Path, name: str = "store.db") -> str:
    # A relative-looking, space-holding path: the URL must come back exactly as typed, quoted.
    folder = tmp_path / "on call"
    folder.mkdir(exist_ok=True)
    return f"sqlite:///{folder / name}"


def killed_run(url: str, monkeypatch: pytest.MonkeyPatch, session_id: str = "b-1") -> None:
    """A run paused on ``c1``; its approval's continuation dies inside the body (SIGKILL-like)."""
    storage = open_storage(url)
    try:
        session = resume_chat_session(
            cli_bridges.DEFINITION, session_id=session_id, storage=storage
        )
        bridge = cli_bridges.bridge(session, storage, "worker-a:1")
        paused = bridge.run("go", run_id="run-1")
        monkeypatch.setenv(cli_bridges.KILL, "1")
        with pytest.raises(cli_bridges.Killed):
            bridge.approve(paused.pending[0].token)
        monkeypatch.delenv(cli_bridges.KILL)
    finally:
        storage.close()


def _sweep(url: str, *extra: str, env: dict[str, str] | None = None) -> Any:
    argv = ["reconcile", url, "--all", "--older-than", "0", *extra]
    return CliRunner(env=env).invoke(main, argv, catch_exceptions=False)


def _json(url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    result = _sweep(url, *extra, "--json")
    return result.exit_code, json.loads(result.stdout)


def _whole_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines()]


def test_the_operator_finishes_a_killed_run_from_the_cli(
    tmp_path: Path, bodies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    killed_run(url, monkeypatch)
    ran = shlex.join(["akchat-fsm", "settle", url, "b-1", "c1", "--ran"])
    did_not = shlex.join(["akchat-fsm", "settle", url, "b-1", "c1", "--did-not-run"])
    assert shlex.quote(url) in ran and url != shlex.quote(url)  # the URL needs quoting

    # 1. The sweep's dry run names the call and the run, with the real commands; exit 3.
    code, listed = _json(url)
    assert code == NEEDS_PERSON
    [session] = listed["sessions"]
    assert session["status"] == "execution outcome unknown" and listed["needsPerson"] == 1
    assert [r.get("toolCallId") or r.get("runId") for r in session["records"]] == ["c1", "run-1"]
    assert [step.split("  #")[0] for step in session["next"][:2]] == [ran, did_not]
    assert not any("SESSION_ID" in s or "TOOL_CALL_ID" in s for s in session["next"])

    # 2. On a 40-column terminal every command and id is one whole line, never wrapped.
    for shown in (
        _sweep(url, "--width", "40"),
        _sweep(url, env={"COLUMNS": "40"}),
        run("inspect", url, "b-1", "--ledger", "--width", "40"),
    ):
        assert shown.exit_code in (0, NEEDS_PERSON), shown.stderr
        lines = _whole_lines(shown.stdout)
        assert any(line.startswith(ran) for line in lines), shown.stdout
        assert any(line.startswith(did_not) for line in lines), shown.stdout
        assert not any(line.endswith("OUTCOME") for line in lines)
    inspected = _whole_lines(run("inspect", url, "b-1", "--ledger", "--width", "40").stdout)
    assert any("c1" in line and "OUTCOME UNKNOWN" in line for line in inspected)

    # 3. The operator checked: nothing was sent. They copy the printed --did-not-run line.
    line = next(x for x in _whole_lines(_sweep(url).stdout) if x.startswith(did_not))
    settled = run(*shlex.split(line, comments=True)[1:])
    assert settled.exit_code == 0, settled.stderr
    assert not bodies.exists()  # nothing has run the body yet

    # 4. After the verdict the sweep says exactly what is next, never a bare "stuck".
    code, listed = _json(url)
    [session] = listed["sessions"]
    assert code == NEEDS_PERSON and session["status"] == "agent run not finished"
    assert session["next"][0].startswith(
        shlex.join(["akchat-fsm", "reconcile", url, "--all", "--older-than", "0", "--bridge"])
    )
    code, planned = _json(url, "--bridge", SPEC, "--dry-run")  # what --apply would do
    [session] = planned["sessions"]
    assert session["status"] == "bridge would reconcile" and planned["applied"] is False
    assert f"--bridge {SPEC} --apply" in session["next"][0]
    assert not bodies.exists()  # a dry run runs nothing

    # 5. The host's bridge factory, named module:callable, finishes the run: exit 0.
    code, applied = _json(url, "--bridge", SPEC, "--apply")
    assert code == 0, applied
    [session] = applied["sessions"]
    assert session["status"] == "settled" and session["next"] == []
    assert bodies.read_text("utf-8") == "send_email a@x\n"  # released, so run once more: once
    ledger = json.loads(run("inspect", url, "b-1", "--ledger", "--json").stdout)
    assert [r["state"] for r in ledger["runs"]] == ["completed"]
    assert ledger["executionUnknown"] == [] and ledger["nextSteps"] == []
    left = _sweep(url)
    assert left.exit_code == 0 and "0 session(s)" in left.stdout


def test_a_settled_ran_verdict_is_replayed_not_rerun(
    tmp_path: Path, bodies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    killed_run(url, monkeypatch)
    code, listed = _json(url)
    line = listed["sessions"][0]["next"][0]
    argv = shlex.split(line, comments=True)[1:]
    assert run(*argv, "--result", '"sent to a@x"').exit_code == 0
    code, applied = _json(url, "--bridge", SPEC, "--apply")
    assert code == 0 and applied["counts"] == {"settled": 1}
    assert not bodies.exists()  # it happened once, outside; the verdict is replayed


def test_the_dry_run_reports_an_unknown_execution_beside_a_mid_decision_claim(
    tmp_path: Path,
) -> None:
    url = _url(tmp_path)
    stuck_session(url, "s1")  # an approving and a rejecting claim
    crash_inside_a_tool(url, "s1", "c9", "wipe")
    code, listed = _json(url)
    assert code == NEEDS_PERSON
    [session] = listed["sessions"]
    assert session["status"] == "execution outcome unknown"
    statuses = [r["status"] for r in session["records"]]
    assert statuses == ["approving", "rejecting", "execution outcome unknown"]
    settle = shlex.join(["akchat-fsm", "settle", url, "s1", "c9", "--ran"])
    assert session["next"][0].startswith(settle)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("cli_bridges.bridge_for", "is not module:callable"),
        ("no_such_module_for_akchat:bridge_for", "cannot import 'no_such_module_for_akchat'"),
        ("cli_bridges:no_such_factory", "has no attribute 'no_such_factory'"),
        ("cli_bridges:NOT_CALLABLE", "is not callable (it is a str)"),
    ],
)
def test_a_bad_bridge_spec_is_one_usage_line(tmp_path: Path, spec: str, says: str) -> None:
    url = _url(tmp_path)
    stuck_session(url, "s1")
    for mode in ("--apply", "--dry-run"):
        result = _sweep(url, "--bridge", spec, mode)
        assert result.exit_code == 2, (result.stdout, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: --bridge ") and says in line and "Traceback" not in line
        assert result.stdout == ""


def test_apply_and_dry_run_together_is_a_usage_error(tmp_path: Path) -> None:
    url = _url(tmp_path)
    stuck_session(url, "s1")
    result = _sweep(url, "--apply", "--dry-run")
    assert result.exit_code == 2 and "contradict" in result.stderr


def test_a_factory_that_raises_fails_its_session_only(
    tmp_path: Path, bodies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    killed_run(url, monkeypatch)
    code, applied = _json(url, "--bridge", "cli_bridges:broken", "--apply")
    assert code == 1
    [session] = applied["sessions"]
    assert session["status"] == "failed" and "the host's factory failed" in session["error"]


def test_an_empty_memory_dir_is_not_a_silent_success(tmp_path: Path) -> None:
    url = _url(tmp_path)
    stuck_session(url, "alpha")
    empty = tmp_path / "memories"
    empty.mkdir()
    code, applied = _json(url, "--memory-dir", str(empty), "--apply")
    assert code == NEEDS_PERSON  # was 0 with nothing written
    [session] = applied["sessions"]
    assert session["status"] == "no memory file"
    assert [r["status"] for r in session["records"]] == ["approving", "rejecting"]
    where = empty / "alpha.json"
    assert session["next"][0] == f"# save the host's chat memory of alpha as {where}, then:"
    sweep = ["akchat-fsm", "reconcile", url, "--all", "--older-than", "0"]
    assert session["next"][1] == shlex.join([*sweep, "--memory-dir", str(empty), "--apply"])
    shown = _sweep(url, "--memory-dir", str(empty), "--apply")
    assert shown.exit_code == NEEDS_PERSON and "needs a person or one more command" in shown.stdout


def test_apply_with_a_bridge_needs_no_memory_dir_and_names_what_is_left(
    tmp_path: Path, bodies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _url(tmp_path)
    killed_run(url, monkeypatch)
    stuck_session(url, "plain")  # not the bridge's: needs its chat memory
    line = _json(url)[1]["sessions"][0]["next"][1]  # b-1's --did-not-run
    assert run(*shlex.split(line, comments=True)[1:]).exit_code == 0
    code, applied = _json(url, "--bridge", SPEC, "--apply")
    by_id = {s["sessionId"]: s for s in applied["sessions"]}
    assert by_id["b-1"]["status"] == "settled"
    assert by_id["plain"]["status"] == "not the bridge's" and by_id["plain"]["next"]
    assert code == NEEDS_PERSON
    bare = _json(url, "--apply")  # no bridge, no memory dir: explained, not refused
    assert bare[0] == NEEDS_PERSON
    [plain] = bare[1]["sessions"]
    assert plain["status"] == "no bridge" and "--memory-dir" in plain["next"][1]
