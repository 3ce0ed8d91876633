"""The SPIN runner: its verdict logic (no SPIN needed) and a real quick run (needs spin + gcc)."""

from __future__ import annotations

import shutil
import subprocess
import sys

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


def test_every_profile_proves_with_three_clients_and_catches_every_seeded_bug() -> None:
    every_bug = set(check.SEEDED_BUGS) | set(check.INFLIGHT_BUGS)
    for name, checks in check.PROFILES.items():
        assert all(dict(c.config.defines)["NCLIENTS"] >= 2 for c in checks), name
        caught = {c.bug for c in checks if c.bug}
        assert caught == every_bug, name
        proven = {
            c.prop
            for c in checks
            if not c.expects_counterexample and dict(c.config.defines)["NCLIENTS"] >= 3
        }
        wanted = {check.ASSERTIONS, check.SINGLE_CALL, "processing_resolves"}
        assert wanted <= proven, name


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
    for bug in (*check.SEEDED_BUGS, *check.INFLIGHT_BUGS):
        (line,) = [row for row in proc.stdout.splitlines() if f"[{bug}]" in row]
        assert "counterexample  ok" in line
    assert set(MODELS.iterdir()) == before, "check.py must not leave files in models/"
