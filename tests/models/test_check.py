"""The SPIN runner: its verdict logic (no SPIN needed) and a real quick run (needs spin + gcc)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ._loader import MODELS, load

check = load("check")

_CLEAN = """
Full statespace search for:
	never claim         	+ (no_replay)
State-vector 100 byte, depth reached 274, errors: 0
   195244 states, stored
"""
_FOUND = """
pan:1: assertion violated  !( !(bad_replay)) (at depth 80)
pan: wrote resolution.pml.trail
Warning: Search not completed
State-vector 76 byte, depth reached 122, errors: 1
      234 states, stored
"""
_CYCLE = """
pan: ltl formula run_settles
pan:1: acceptance cycle (at depth 185)
pan: wrote resolution.pml.trail
Warning: Search not completed
State-vector 128 byte, depth reached 242, errors: 1
      796 states, stored (1522 visited)
"""


def _check(bug: str | None = None) -> object:
    return check.Check(check.QUICK, "no_replay", bug)


def test_a_clean_complete_search_passes() -> None:
    result = check._parse(_check(), _CLEAN, 0, has_trail=False)
    assert result.ok, result.why
    assert (result.states, result.depth, result.errors) == ("195244", "274", "0")


@pytest.mark.parametrize(
    "marker",
    [
        "Warning: Search not completed",
        "error: max search depth too small",
        "pan: reached -DMEMLIM bound",
    ],
)
def test_a_truncated_search_fails_even_with_zero_errors(marker: str) -> None:
    result = check._parse(_check(), _CLEAN + marker + "\n", 0, has_trail=False)
    assert not result.ok
    assert "truncated" in result.why


def test_pan_exiting_zero_on_a_violation_still_fails() -> None:
    result = check._parse(_check(), _FOUND, 0, has_trail=True)
    assert not result.ok
    assert "violated" in result.why


def test_a_timeout_or_missing_verdict_fails() -> None:
    assert not check._parse(_check(), "", 124, has_trail=False).ok
    assert not check._parse(_check(), "pan: some crash\n", 0, has_trail=False).ok


def test_a_seeded_bug_needs_an_error_and_a_trail() -> None:
    bug = _check("BUG_UPSTREAM_FIRST")
    assert check._parse(bug, _FOUND, 0, has_trail=True).ok
    missed = check._parse(bug, _CLEAN, 0, has_trail=False)
    assert not missed.ok and "NOT caught" in missed.why
    no_trail = check._parse(bug, _FOUND, 0, has_trail=False)
    assert not no_trail.ok and "trail" in no_trail.why


def test_a_seeded_liveness_bug_needs_an_acceptance_cycle() -> None:
    # BUG_RUN_UNINDEXED strands a run: its counterexample must be a run that never ends
    # well (an acceptance cycle under weak fairness), not an assertion violated on the way.
    bug = check.Check(check.QUICK_LEDGER_BUGS, "run_settles", "BUG_RUN_UNINDEXED")
    assert bug.expects_cycle and bug.fair
    assert check._parse(bug, _CYCLE, 0, has_trail=True).ok
    settings = "\tacceptance   cycles \t+ (fairness enabled)\n"  # pan's header, not a verdict
    safety = check._parse(bug, _FOUND + settings, 0, has_trail=True)
    assert not safety.ok and "acceptance cycle" in safety.why
    assert not check._parse(bug, _CLEAN, 0, has_trail=False).ok
    # a safety bug's counterexample is not asked to be a cycle
    assert check._parse(_check("BUG_UPSTREAM_FIRST"), _FOUND, 0, has_trail=True).ok


def test_every_profile_proves_with_three_clients_and_catches_every_seeded_bug() -> None:
    every_bug = (
        set(check.SEEDED_BUGS)
        | set(check.INFLIGHT_BUGS)
        | set(check.LEDGER_BUGS)
        | set(check.LIVENESS_BUGS)
        | set(check.AUDIT_BUGS)
        | set(check.EDIT_BUGS)
        | set(check.SETTLE_BUGS)
    )
    for name, checks in check.PROFILES.items():
        # a settle build has no deciding clients: its actors are two operators, the slow
        # claimant and a re-claiming continuation
        assert all(dict(c.config.defines)["NCLIENTS"] >= 2 or _settle(c.config) for c in checks), (
            name
        )
        caught = {c.bug for c in checks if c.bug}
        assert caught == every_bug, name
        proven = {
            c.prop
            for c in checks
            if not c.expects_counterexample and dict(c.config.defines)["NCLIENTS"] >= 3
        }
        wanted = {check.ASSERTIONS, check.SINGLE_CALL, "processing_resolves", "expiry_honoured"}
        assert wanted <= proven, name


def test_every_profile_checks_the_audit_trail_and_catches_its_bugs() -> None:
    for name, checks in check.PROFILES.items():
        audited = [c for c in checks if "AUDIT" in dict(c.config.defines)]
        proven = {c.prop for c in audited if not c.expects_counterexample}
        assert {check.ASSERTIONS, *check.AUDIT_SAFETY_CLAIMS} <= proven, name
        assert {c.bug for c in audited if c.bug} == set(check.AUDIT_BUGS), name


def _ledger(config: object) -> bool:
    return "LEDGER" in dict(config.defines)  # type: ignore[attr-defined]


def _edit(config: object) -> bool:
    return _ledger(config) and "EDIT" in dict(config.defines)  # type: ignore[attr-defined]


def _settle(config: object) -> bool:
    return "SETTLE" in dict(config.defines)  # type: ignore[attr-defined]


def test_every_profile_proves_reviewer_edits_and_catches_their_bugs() -> None:
    # ADR-0135: the assertion run of an -DEDIT build asserts, at every body, that it runs at
    # most once and with the deciding entry's arguments; with 3 clients in default and deep.
    for name, checks in check.PROFILES.items():
        edits = [c for c in checks if _edit(c.config)]
        proofs = [c for c in edits if not c.expects_counterexample]
        assert any(c.prop == check.ASSERTIONS for c in proofs), name
        if name != "quick":
            assert any(dict(c.config.defines)["NCLIENTS"] >= 3 for c in proofs), name
        assert {c.bug: c.prop for c in edits if c.bug} == check.EDIT_BUGS, name
    for checks in check.PROFILES.values():
        for c in checks:
            if c.prop in check.EDIT_SAFETY_CLAIMS:
                assert _edit(c.config), c


def test_every_profile_proves_the_settle_entries_and_catches_their_bugs() -> None:
    # ADR-0136: an entry marked applied iff its verdict's write applied, racing the slow
    # claimant, a second operator and a re-claim; and the operator is told whether its verdict
    # applied, a lost answer whose verdict a later settle replaced included (settle_told).
    for name, checks in check.PROFILES.items():
        settles = [c for c in checks if _settle(c.config)]
        proven = {c.prop for c in settles if not c.expects_counterexample}
        assert {check.ASSERTIONS, *check.SETTLE_SAFETY_CLAIMS} <= proven, name
        assert {c.bug: c.prop for c in settles if c.bug} == check.SETTLE_BUGS, name
        assert all(dict(c.config.defines)["MAXCRASH"] >= 2 for c in settles), name
    for checks in check.PROFILES.values():
        for c in checks:
            if c.prop in check.SETTLE_SAFETY_CLAIMS:
                assert _settle(c.config), c


def test_every_profile_proves_the_ledger_with_three_clients_and_catches_its_bugs() -> None:
    # The assertion run of a -DLEDGER build checks body-at-most-once, body-only-when-approved
    # and the quiescent state; the ledger's seeded bugs need the ledger in their build.
    for name, checks in check.PROFILES.items():
        ledger_proofs = {
            c.prop
            for c in checks
            if _ledger(c.config)
            and not c.expects_counterexample
            and dict(c.config.defines)["NCLIENTS"] >= 3
            and dict(c.config.defines)["MAXCRASH"] >= 1
        }
        assert check.ASSERTIONS in ledger_proofs, name
        for c in checks:
            if c.bug in check.LEDGER_BUGS:
                assert _ledger(c.config), name
                assert c.prop in {*check.LEDGER_SAFETY_CLAIMS, check.ASSERTIONS}, name
            elif c.bug in check.LIVENESS_BUGS:
                assert _ledger(c.config), name
                assert c.prop in check.LEDGER_LIVENESS_CLAIMS and c.fair, name
            elif c.bug in check.EDIT_BUGS:
                assert _edit(c.config), name
            elif c.bug:
                assert not _ledger(c.config), name
    default = {c.prop for c in check.PROFILES["default"] if _ledger(c.config)}
    assert {*check.LEDGER_SAFETY_CLAIMS, *check.LEDGER_LIVENESS_CLAIMS} <= default


def test_ledger_claims_are_only_asked_of_ledger_builds() -> None:
    for checks in check.PROFILES.values():
        for c in checks:
            if c.prop in (*check.LEDGER_SAFETY_CLAIMS, *check.LEDGER_LIVENESS_CLAIMS):
                assert _ledger(c.config), c
    settles = [c for c in check.PROFILES["default"] if c.prop == "run_settles"]
    assert len(settles) == 2  # the proof and the seeded BUG_RUN_UNINDEXED
    assert all(c.fair for c in settles), "a liveness claim is checked under weak fairness (pan -f)"


def test_every_profile_proves_that_a_fair_sweep_finishes_every_decided_run() -> None:
    # Issue 22: with 3 clients and a crash to spend (the continuer may die before its run
    # claim), run_settles holds in every profile, quick included.
    for name, checks in check.PROFILES.items():
        assert any(
            c.prop == "run_settles"
            and not c.expects_counterexample
            and _ledger(c.config)
            and dict(c.config.defines)["NCLIENTS"] >= 3
            and dict(c.config.defines)["MAXCRASH"] >= 1
            for c in checks
        ), name


def test_a_counterexample_build_is_compiled_without_optimisation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []
    monkeypatch.setattr(check, "_run", lambda cmd, cwd, timeout_s: commands.append(cmd))
    runner = check.Runner(tmp_path, memlim_mb=64, timeout_s=5, depth=10, cc_opt="-O2")
    runner._build(check.Check(check.QUICK, "no_replay"))
    runner._build(check.Check(check.QUICK, "no_replay", "BUG_LWW"))
    gccs = [cmd for cmd in commands if cmd[0] == "gcc"]
    assert [cmd[1] for cmd in gccs] == ["-O2", "-O0"]
    spins = [cmd for cmd in commands if cmd[0] == "spin"]
    assert "-DBUG_LWW" in spins[1] and "-DBUG_LWW" not in spins[0]


def _both_strategies_in_flight(config: object) -> bool:
    defines = dict(config.defines)  # type: ignore[attr-defined]
    return "INFLIGHT" in defines and not {"NO_RESUME", "NO_RELEASE"} & set(defines)


def test_late_release_after_resume_is_a_proof_and_the_unfenced_resume_is_caught() -> None:
    # ADR-0054: with the resume fence, no_replay holds with in-flight writes and both
    # reconciliation strategies; the unfenced resume (BUG_NO_FENCE) must still fail there.
    for name, checks in check.PROFILES.items():
        mixed = [c for c in checks if _both_strategies_in_flight(c.config)]
        assert any(c.prop == "no_replay" and not c.expects_counterexample for c in mixed), name
        assert not any(c.documented for c in mixed), name
        (fence,) = [c for c in checks if c.bug == "BUG_NO_FENCE"]
        assert _both_strategies_in_flight(fence.config) and fence.prop == "no_replay", name


def test_a_documented_counterexample_must_still_be_found() -> None:
    finding = check.Check(check.QUICK, check.SINGLE_CALL, documented="resume re-calls")
    assert check._parse(finding, _FOUND, 0, has_trail=True).ok
    gone = check._parse(finding, _CLEAN, 0, has_trail=False)
    assert not gone.ok and "gone" in gone.why


def _require_spin() -> None:
    missing = [tool for tool in ("spin", "gcc", "timeout") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"SPIN model checks need {', '.join(missing)} (apt-get install spin gcc)")


@pytest.mark.slow
def test_quick_profile_proves_the_protocol_and_catches_the_seeded_bugs() -> None:
    _require_spin()
    before = set(MODELS.iterdir())
    proc = subprocess.run(
        [sys.executable, str(MODELS / "check.py"), "--profile", "quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    total = len(check.PROFILES["quick"])
    assert f"profile quick: {total}/{total} checks ok" in proc.stdout
    bugs = (
        *check.SEEDED_BUGS,
        *check.INFLIGHT_BUGS,
        *check.LEDGER_BUGS,
        *check.LIVENESS_BUGS,
        *check.EDIT_BUGS,
        *check.SETTLE_BUGS,
    )
    for bug in bugs:
        (line,) = [row for row in proc.stdout.splitlines() if f"[{bug}]" in row]
        assert "counterexample  ok" in line
    assert set(MODELS.iterdir()) == before, "check.py must not leave files in models/"


@pytest.mark.slow
def test_the_unindexed_run_is_an_acceptance_cycle_and_the_indexed_one_settles(
    tmp_path: Path,
) -> None:
    # The seeded bug and the correct model on the same small bounds (2 clients, 1 crash):
    # pan calls the bug's counterexample an acceptance cycle, and its trail, replayed, loops
    # with the run `paused` and out of the index while the sweep keeps coming back.
    _require_spin()
    runner = check.Runner(tmp_path, memlim_mb=1024, timeout_s=120, depth=100_000, cc_opt="-O0")
    bug = check.Check(check.QUICK_LEDGER_BUGS, "run_settles", "BUG_RUN_UNINDEXED")
    found = runner.run(bug)
    assert found.ok, found.why + found.output
    assert check.ACCEPTANCE_CYCLE.search(found.output)
    build = runner._built[check.Runner.key(bug)]
    replay = subprocess.run(
        ["spin", "-t", "-g", *check.Runner.key(bug), "resolution.pml"],
        cwd=build,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "START OF CYCLE" in replay.stdout, replay.stdout + replay.stderr
    final = replay.stdout[replay.stdout.index("START OF CYCLE") :]
    assert "run_idx = 0" in final and "run_st = 1" in final  # paused, not indexed
    held = runner.run(check.Check(check.QUICK_LEDGER_BUGS, "run_settles"))
    assert held.ok and held.errors == "0", held.why + held.output
