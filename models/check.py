"""Run the SPIN checks of the resolution protocol and fail loudly on anything short of a proof.

For every check: ``spin -a`` on ``resolution.pml`` with the check's ``-D`` bounds, ``gcc`` with
``-DMEMLIM`` and ``-DCOLLAPSE``, then ``./pan`` under ``timeout``.  ``pan`` exits 0 even when it
finds a violation, so the verdict comes from its output:

* a protocol check passes only with ``errors: 0``, no trail, and a complete search (no
  "Search not completed", no "max search depth too small", no memory bound hit, no timeout);
* a seeded-bug check passes only when ``pan`` reports ``errors: >= 1`` for the named property
  AND writes a trail: a seeded bug that goes unnoticed fails the run; a seeded liveness bug
  (``LIVENESS_BUGS``) passes only when the error is an acceptance cycle, so a run that never
  ends well is what was found, not a safety violation on the way.

Everything is built in a temporary directory; nothing is written into the repository.

    python models/check.py                    # default profile
    python models/check.py --profile quick    # seconds; what tests/models runs
    python models/check.py --profile deep     # bigger bounds (see models/README.md)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

MODELS = Path(__file__).resolve().parent
SOURCES = ("resolution.pml", "confirmation_table.pml", "lifecycle_tables.pml")
SAFETY_CLAIMS = (
    "no_replay",
    "no_false_completion",
    "terminal_immutable",
    "cursor_exact",
    "expiry_honoured",
)
LIVENESS_CLAIMS = ("claim_settles", "processing_resolves")
#: The tool-execution ledger's claims (only in -DLEDGER builds; ADR-0100, ADR-0109).
LEDGER_SAFETY_CLAIMS = ("body_once", "body_approved", "flag_only_dead")
LEDGER_LIVENESS_CLAIMS = ("run_settles",)
#: DESIGN's strict wording ("no call at all once upstream acted"): holds only when the
#: reconciler never resumes (-DNO_RESUME); ADR-0012's resume re-issues a no-op call by design.
SINGLE_CALL = "single_call"
#: The audit trail's claim (only in -DAUDIT builds; ADR-0132).
AUDIT_SAFETY_CLAIMS = ("audit_names_winner",)
#: Reviewer edits' claim (only in -DLEDGER -DEDIT builds; ADR-0135).
EDIT_SAFETY_CLAIMS = ("body_edited",)
#: Operators' settle audit entries (only in -DSETTLE builds; ADR-0136), and "the operator is
#: told whether its verdict applied", even when a later settle replaced it (settle_told).
SETTLE_TOLD = "settle_told"
SETTLE_SAFETY_CLAIMS = ("settle_audit_exact", SETTLE_TOLD)
ASSERTIONS = "assertions"  # the run without a never claim: every assert + invalid end states

#: Each seeded protocol bug and the property that must catch it.
SEEDED_BUGS = {
    "BUG_UPSTREAM_FIRST": "no_replay",
    "BUG_TERMINAL_FIRST": "no_false_completion",
    "BUG_LWW": "cursor_exact",
    "BUG_RELEASE_LIVE": "no_replay",
    "BUG_NO_NONCE": "no_replay",
    # a generated mutant table (models/gen_promela.py SEEDED_MACHINES): reject ignores expiry
    "BUG_REJECT_IGNORES_EXPIRY": "expiry_honoured",
}
#: Seeded bugs that only show when an unknown write can land late (-DINFLIGHT, both strategies).
INFLIGHT_BUGS = {
    "BUG_NO_FENCE": "no_replay",  # resume without re-saving the claim first: ADR-0054
}
#: Seeded bugs of the run continuation and its ledger (-DLEDGER).
LEDGER_BUGS = {
    "BUG_NO_LEDGER_CLAIM": "body_once",  # a tool body run without its ledger claim
    "BUG_RERUN_UNKNOWN": "body_once",  # an execution whose claimant is gone is run again
    "BUG_RUN_APPROVING": "body_approved",  # a body run on the approve claim, before `approved`
    # reconcile does not re-claim a crashed continuation: the run is left processing, which
    # the assertion run's check of the state after reconcile reports
    "BUG_NO_RECLAIM": ASSERTIONS,
    # the sweep takes over a continuation whose lease has not passed: it then reports the live
    # owner's execution as unknown (ADR-0106 item 5)
    "BUG_SWEEP_TAKES_LIVE": "flag_only_dead",
}
#: Seeded bugs of the audit trail (-DAUDIT).
AUDIT_BUGS = {
    "BUG_AUDIT_AFTER": "audit_names_winner",  # the entry written after the claim applied
    "BUG_AUDIT_SHARED": "audit_names_winner",  # the loser of the entry's create claims anyway
}
#: Seeded bugs of reviewer edits (-DLEDGER -DEDIT).
EDIT_BUGS = {
    "BUG_GUARD_IGNORES_EDIT": "body_edited",  # the guard lets an edited call run with other args
    "BUG_SWEEP_PLAIN": "body_edited",  # the sweep continues an edited call as a plain approve
}
#: Seeded bugs of the settle audit entries (-DSETTLE).
SETTLE_BUGS = {
    "BUG_CLAIM_DROPS_VERDICT": "settle_audit_exact",  # a re-claim does not keep the verdict
    "BUG_SETTLE_ENTRY_AFTER": "settle_audit_exact",  # the entry written after the verdict
    # after a lost answer, re-read only the record's verdict (which a later settle replaced)
    "BUG_SETTLE_REREAD_ONLY": SETTLE_TOLD,
}
#: Seeded bugs of the sweep (-DLEDGER) whose counterexample must be an ACCEPTANCE CYCLE of a
#: liveness claim under weak fairness: a run that is never finished, not a bad step.
LIVENESS_BUGS = {
    # the paused run record saved without the processing flag (before ADR-0106): a continuer
    # that dies before its run claim leaves a decided run the sweep never visits
    "BUG_RUN_UNINDEXED": "run_settles",
}
#: pan's error line for a liveness counterexample (not the "acceptance cycles" setting line)
ACCEPTANCE_CYCLE = re.compile(r"^pan:\d+: acceptance cycle", re.MULTILINE)

_TRUNCATED = (
    "search not completed",
    "max search depth too small",
    "reached -dmemlim bound",
    "out of memory",
    "hash table is full",
)


@dataclass(frozen=True)
class Config:
    """Bounds passed to ``spin -D``; see the #ifndef block at the top of resolution.pml."""

    name: str
    defines: tuple[tuple[str, int | None], ...]

    def flags(self) -> list[str]:
        return [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in self.defines]


@dataclass(frozen=True)
class Check:
    config: Config
    prop: str  # a claim name, or ASSERTIONS
    bug: str | None = None  # seeded bug define: the check must find a counterexample
    #: a known, documented counterexample of the unseeded model (not a bug: see README)
    documented: str | None = None

    @property
    def expects_counterexample(self) -> bool:
        return self.bug is not None or self.documented is not None

    @property
    def label(self) -> str:
        note = self.bug or self.documented
        return f"{self.prop} [{note}]" if note else self.prop

    @property
    def expects_cycle(self) -> bool:
        return self.bug in LIVENESS_BUGS

    @property
    def fair(self) -> bool:
        return self.prop in LIVENESS_CLAIMS or self.prop in LEDGER_LIVENESS_CLAIMS


@dataclass
class Result:
    check: Check
    ok: bool
    states: str = "-"
    depth: str = "-"
    errors: str = "-"
    seconds: float = 0.0
    why: str = ""
    output: str = field(default="", repr=False)


def _config(name: str, **bounds: int | None) -> Config:
    return Config(name, tuple(sorted(bounds.items())))


_FAULTS = {"MAXUNKNOWN": 1, "MAXUPFAULT": 1}
#: resume reconciler (the core's default); small enough for the seeded bugs and the finding
QUICK = _config("quick", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=1, **_FAULTS)
#: release-only reconciler: every property in about a second each, even at -O0
QUICK_RELEASE = _config(
    "quick-release", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=1, NO_RESUME=None, **_FAULTS
)
RESUME = _config("3c-1r", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=2, **_FAULTS)
RESUME_RETRY = _config("3c-1r-retry", NCLIENTS=3, NCONF=1, MAXOPS=2, MAXCRASH=1, **_FAULTS)
RELEASE = _config(
    "3c-1r-release", NCLIENTS=3, NCONF=1, MAXOPS=2, MAXCRASH=2, NO_RESUME=None, **_FAULTS
)
TWO_RELEASE = _config(
    "3c-2r-release", NCLIENTS=3, NCONF=2, MAXOPS=1, MAXCRASH=1, NO_RESUME=None, **_FAULTS
)
#: unknown saves may still land later (ADR-0066): safe with either pure reconciler ...
INFLIGHT_RESUME = _config(
    "3c-1r-inflight-resume",
    NCLIENTS=3,
    NCONF=1,
    MAXOPS=1,
    MAXCRASH=2,
    INFLIGHT=None,
    NO_RELEASE=None,
    **_FAULTS,
)
INFLIGHT_RELEASE = _config(
    "3c-1r-inflight-release",
    NCLIENTS=3,
    NCONF=1,
    MAXOPS=1,
    MAXCRASH=2,
    INFLIGHT=None,
    NO_RESUME=None,
    **_FAULTS,
)
#: ... and with both, since a resume fences older writes before calling upstream (ADR-0054:
#: without the fence a late release landed after the resume made upstream act)
INFLIGHT_MIXED = _config(
    "3c-1r-inflight", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=2, INFLIGHT=None, **_FAULTS
)
#: 2 clients (one rejects, one approves), 1 crash: enough for the unfenced resume to fail
QUICK_INFLIGHT = _config(
    "quick-inflight", NCLIENTS=2, NCONF=1, MAXOPS=1, MAXCRASH=1, INFLIGHT=None, **_FAULTS
)
DEEP_RESUME = _config("3c-1r-deep", NCLIENTS=3, NCONF=1, MAXOPS=2, MAXCRASH=2, **_FAULTS)
DEEP_ANY = _config(
    "3c-1r-any-release",
    NCLIENTS=3,
    NCONF=1,
    MAXOPS=1,  # MAXOPS=2 with these faults passed 1.4e8 states and 8 GB unfinished
    MAXCRASH=2,
    MAXUNKNOWN=2,
    MAXUPFAULT=2,
    ANY_INTENT=None,
    NO_RESUME=None,
)
DEEP_FOUR = _config("4c-1r", NCLIENTS=4, NCONF=1, MAXOPS=1, MAXCRASH=2, **_FAULTS)
#: the run continuation and the tool-execution ledger (ADR-0100): a continuer and the run
#: reconciler race for the run; crashes after the run claim, the execution claim, the body and
#: the recorded result.  Release-only confirmation reconciler: with both strategies the same
#: bounds are 17.3 M states (deep).
QUICK_LEDGER = _config(
    "quick-ledger",
    NCLIENTS=3,
    NCONF=1,
    MAXOPS=1,
    MAXCRASH=1,
    NO_RESUME=None,
    LEDGER=None,
    **_FAULTS,
)
#: 2 clients (approve, reject), 1 crash: enough for every seeded ledger bug, found in ~17 k states
QUICK_LEDGER_BUGS = _config(
    "quick-ledger-2c",
    NCLIENTS=2,
    NCONF=1,
    MAXOPS=1,
    MAXCRASH=1,
    NO_RESUME=None,
    LEDGER=None,
    **_FAULTS,
)
LEDGER_RELEASE = _config(
    "3c-1r-ledger-release",
    NCLIENTS=3,
    NCONF=1,
    MAXOPS=1,
    MAXCRASH=2,
    NO_RESUME=None,
    LEDGER=None,
    **_FAULTS,
)
LEDGER_MIXED = _config(
    "3c-1r-ledger", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=1, LEDGER=None, **_FAULTS
)
#: two tool calls in one run: it continues once, when both are settled
LEDGER_TWO = _config(
    "3c-2r-ledger-release",
    NCLIENTS=3,
    NCONF=2,
    MAXOPS=1,
    MAXCRASH=1,
    NO_RESUME=None,
    LEDGER=None,
    **_FAULTS,
)


#: decisions announced by their audit entries (ADR-0132): two deciders with a retry each, so a
#: decider that loses the entry's create fences the cursor and decides again
QUICK_AUDIT = _config("quick-audit", NCLIENTS=2, NCONF=1, MAXOPS=2, MAXCRASH=1, AUDIT=None,
                      NO_RESUME=None, **_FAULTS)  # fmt: skip
#: three deciders and the resume reconciler (3 clients with a retry each: 64 M states unfinished)
AUDIT_RESUME = _config("3c-1r-audit", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=2, AUDIT=None,
                       **_FAULTS)  # fmt: skip


#: reviewer edits (ADR-0135): client 1's approve is an edit; the runtime may hand a body the
#: model's arguments once; 2 clients for the seeded bugs, 3 for the proofs
QUICK_EDIT = _config("quick-edit", NCLIENTS=2, NCONF=1, MAXOPS=1, MAXCRASH=1, NO_RESUME=None,
                     LEDGER=None, EDIT=None, **_FAULTS)  # fmt: skip
LEDGER_EDIT = _config("3c-1r-ledger-edit", NCLIENTS=3, NCONF=1, MAXOPS=1, MAXCRASH=2,
                      NO_RESUME=None, LEDGER=None, EDIT=None, **_FAULTS)  # fmt: skip
LEDGER_EDIT_MIXED = _config("3c-1r-ledger-edit-resume", NCLIENTS=3, NCONF=1, MAXOPS=1,
                            MAXCRASH=1, LEDGER=None, EDIT=None, **_FAULTS)  # fmt: skip
#: operators' settles (ADR-0136): one unknown execution, its slow claimant, two operators with
#: three settle attempts between them, a re-claim of a released call; no deciding clients
SETTLE_CONFIG = _config("settle", NCLIENTS=0, MAXCRASH=2, SETTLE=None, **_FAULTS)
SETTLE_DEEP = _config("settle-deep", NCLIENTS=0, MAXCRASH=3, MAXRECLAIM=2, MAXUNKNOWN=2,
                      MAXUPFAULT=1, SETTLE=None)  # fmt: skip


def _props(config: Config, *props: str) -> list[Check]:
    every = (ASSERTIONS, *SAFETY_CLAIMS, *LIVENESS_CLAIMS)
    if "LEDGER" in dict(config.defines):
        every += (*LEDGER_SAFETY_CLAIMS, *LEDGER_LIVENESS_CLAIMS)
    if "EDIT" in dict(config.defines):
        every += EDIT_SAFETY_CLAIMS
    if "AUDIT" in dict(config.defines):
        every += AUDIT_SAFETY_CLAIMS
    if "SETTLE" in dict(config.defines):  # no deciding clients: only the settle's claims
        every = (ASSERTIONS, *SETTLE_SAFETY_CLAIMS)
    return [Check(config, prop) for prop in props or every]


def _resume_finding(config: Config) -> Check:
    return Check(config, SINGLE_CALL, documented="resume re-calls, no-op")


def _late_release_fixed(config: Config = INFLIGHT_MIXED) -> Check:
    """ADR-0054's finding, now a proof: the resume fence keeps a late release from landing."""
    return Check(config, "no_replay")


def _seeded(
    config: Config, inflight: Config = QUICK_INFLIGHT, ledger: Config = QUICK_LEDGER_BUGS
) -> list[Check]:
    checks = [Check(config, prop, bug) for bug, prop in SEEDED_BUGS.items()]
    checks += [Check(inflight, prop, bug) for bug, prop in INFLIGHT_BUGS.items()]
    ledger_bugs = {**LEDGER_BUGS, **LIVENESS_BUGS}
    checks += [Check(QUICK_AUDIT, prop, bug) for bug, prop in AUDIT_BUGS.items()]
    checks += [Check(QUICK_EDIT, prop, bug) for bug, prop in EDIT_BUGS.items()]
    checks += [Check(SETTLE_CONFIG, prop, bug) for bug, prop in SETTLE_BUGS.items()]
    return [*checks, *(Check(ledger, prop, bug) for bug, prop in ledger_bugs.items())]


PROFILES: dict[str, list[Check]] = {
    "quick": [
        *_props(QUICK_RELEASE),
        *_props(QUICK_RELEASE, SINGLE_CALL),
        _resume_finding(QUICK),
        _late_release_fixed(QUICK_INFLIGHT),
        # run_settles: the continuer may die before its claim; the fair sweep must finish it
        *_props(QUICK_LEDGER, ASSERTIONS, "run_settles"),
        *_props(QUICK_AUDIT, ASSERTIONS, *AUDIT_SAFETY_CLAIMS),
        *_props(QUICK_EDIT, ASSERTIONS, *EDIT_SAFETY_CLAIMS),
        *_props(SETTLE_CONFIG),
        *_seeded(QUICK),
    ],
    "default": [
        *_props(RESUME),
        _resume_finding(RESUME),
        *_props(RESUME_RETRY, ASSERTIONS),
        *_props(RELEASE, ASSERTIONS, SINGLE_CALL),
        *_props(TWO_RELEASE, ASSERTIONS),
        # both strategies: every run of a resume-only or release-only reconciler is one of its
        # runs, so 3c-1r-inflight-resume / -release are left to the deep profile
        *_props(INFLIGHT_MIXED, ASSERTIONS),
        _late_release_fixed(),
        *_props(LEDGER_RELEASE, ASSERTIONS, *LEDGER_SAFETY_CLAIMS, *LEDGER_LIVENESS_CLAIMS),
        *_props(AUDIT_RESUME, ASSERTIONS, *AUDIT_SAFETY_CLAIMS, "no_replay"),
        # the assertion run asserts body_edited and body_once at every body
        *_props(LEDGER_EDIT, ASSERTIONS),
        *_props(SETTLE_CONFIG),
        *_seeded(QUICK),
    ],
    "deep": [
        # with the resume fence, liveness on 3c-1r-deep passes the 8 GB bound (103 M states
        # stored, unfinished): its safety here, liveness on the 1-crash retry bounds
        *_props(DEEP_RESUME, ASSERTIONS, *SAFETY_CLAIMS),
        *_props(RESUME_RETRY, *LIVENESS_CLAIMS),
        *_props(RELEASE),
        *_props(RELEASE, SINGLE_CALL),
        *_props(TWO_RELEASE),
        *_props(DEEP_ANY, ASSERTIONS, SINGLE_CALL, "processing_resolves"),
        *_props(DEEP_FOUR, ASSERTIONS),  # its liveness: 62.6 M states before the fence
        *_props(INFLIGHT_RESUME),
        *_props(INFLIGHT_RELEASE),
        *_props(INFLIGHT_MIXED),
        *_props(LEDGER_RELEASE),
        *_props(LEDGER_MIXED, ASSERTIONS, *LEDGER_SAFETY_CLAIMS),
        *_props(LEDGER_TWO, ASSERTIONS, *LEDGER_SAFETY_CLAIMS, *LEDGER_LIVENESS_CLAIMS),
        *_props(AUDIT_RESUME),
        *_props(LEDGER_EDIT),
        *_props(LEDGER_EDIT_MIXED, ASSERTIONS, *EDIT_SAFETY_CLAIMS),
        *_props(SETTLE_DEEP),
        *_seeded(RESUME, INFLIGHT_MIXED, LEDGER_RELEASE),
    ],
}


class Runner:
    """Builds one ``pan`` per (bounds, seeded bug, claims-or-asserts) and runs checks on it."""

    def __init__(
        self, workdir: Path, *, memlim_mb: int, timeout_s: int, depth: int, cc_opt: str
    ) -> None:
        self.workdir = workdir
        self.cc_opt = cc_opt
        self.memlim_mb = memlim_mb
        self.timeout_s = timeout_s
        self.depth = depth
        self._built: dict[tuple[str, ...], Path] = {}
        self._naming = threading.Lock()

    @staticmethod
    def key(check: Check) -> tuple[str, ...]:
        """The ``spin -D`` flags of the ``pan`` a check runs on: checks with one key share
        one build (and its trail file), so they run one after another."""
        spin_flags = check.config.flags()
        if check.bug:
            spin_flags.append(f"-D{check.bug}")
        if check.prop == ASSERTIONS:
            spin_flags.append("-DASSERTS")
        return tuple(spin_flags)

    def _build(self, check: Check) -> Path:
        key = self.key(check)
        spin_flags = list(key)
        asserts = check.prop == ASSERTIONS
        with self._naming:
            if key in self._built:
                return self._built[key]
            build = self.workdir / f"build{len(self._built)}"
            build.mkdir()
            self._built[key] = build
        for name in SOURCES:
            shutil.copy(MODELS / name, build / name)
        _run(["spin", *spin_flags, "-a", "resolution.pml"], build, self.timeout_s)
        # A counterexample search stops at the first error, so compiling dominates: -O0.
        cc_opt = "-O0" if check.expects_counterexample else self.cc_opt
        gcc = ["gcc", cc_opt, "-w", f"-DMEMLIM={self.memlim_mb}", "-DCOLLAPSE"]
        if asserts:
            gcc += ["-DNOCLAIM", "-DSAFETY"]
        else:
            gcc.append("-DNFAIR=4")  # weak fairness over more than 6 processes (-DINFLIGHT)
        _run([*gcc, "-o", "pan", "pan.c"], build, self.timeout_s)
        return build

    def run(self, check: Check) -> Result:
        started = time.monotonic()
        build = self._build(check)
        trail = build / "resolution.pml.trail"
        trail.unlink(missing_ok=True)
        pan = ["timeout", str(self.timeout_s), "./pan", f"-m{self.depth}"]
        if check.prop != ASSERTIONS:
            pan += ["-a", *(["-f"] if check.fair else []), "-N", check.prop]
        proc = subprocess.run(pan, cwd=build, capture_output=True, text=True, check=False)
        result = _parse(check, proc.stdout + proc.stderr, proc.returncode, trail.exists())
        result.seconds = time.monotonic() - started
        return result


def _run(cmd: list[str], cwd: Path, timeout_s: int) -> None:
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")


def _parse(check: Check, out: str, returncode: int, has_trail: bool) -> Result:
    errors = re.search(r"errors: (\d+)", out)
    states = re.search(r"([\d.e+]+) states, stored", out)
    depth = re.search(r"depth reached (\d+)", out)
    result = Result(
        check,
        ok=False,
        states=states.group(1) if states else "-",
        depth=depth.group(1) if depth else "-",
        errors=errors.group(1) if errors else "-",
        output=out,
    )
    lowered = out.lower()
    if returncode == 124:
        result.why = "timed out"
    elif errors is None:
        result.why = f"no verdict from pan (exit {returncode})"
    elif check.expects_counterexample:
        if int(errors.group(1)) == 0:
            result.why = "seeded bug NOT caught" if check.bug else "expected counterexample gone"
        elif not has_trail:
            result.why = "error reported but no trail written"
        elif check.expects_cycle and not ACCEPTANCE_CYCLE.search(out):
            result.why = "counterexample is not an acceptance cycle"
        else:
            result.ok = True
    elif int(errors.group(1)) != 0 or has_trail:
        result.why = "property violated (see trail)"
    elif truncated := [m for m in _TRUNCATED if m in lowered]:
        result.why = f"search truncated: {truncated[0]}"
    elif returncode != 0:
        result.why = f"pan exited {returncode}"
    else:
        result.ok = True
    return result


def _print_table(results: list[Result]) -> None:
    header = ("config", "property", "expect", "verdict", "errors", "states", "depth", "seconds")
    rows = [
        (
            r.check.config.name,
            r.check.label,
            "counterexample" if r.check.expects_counterexample else "holds",
            "ok" if r.ok else f"FAIL: {r.why}",
            r.errors,
            r.states,
            r.depth,
            f"{r.seconds:.1f}",
        )
        for r in results
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())


def _report(result: Result) -> Result:
    verdict = "ok" if result.ok else f"FAIL ({result.why})"
    print(f"  {result.check.config.name} {result.check.label}: {verdict}", file=sys.stderr)
    if not result.ok:
        print(result.output, file=sys.stderr)
    return result


def run_all(runner: Runner, checks: list[Check], jobs: int) -> list[Result]:
    """Run ``checks`` on ``jobs`` threads (each drives its own ``pan`` processes), in the
    checks' order: the checks of one build run one after another on one thread, builds in
    parallel. Results come back in the order of ``checks``."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, check in enumerate(checks):
        groups.setdefault(Runner.key(check), []).append(index)

    def run_group(indices: list[int]) -> list[tuple[int, Result]]:
        return [(i, _report(runner.run(checks[i]))) for i in indices]

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = [pair for part in pool.map(run_group, groups.values()) for pair in part]
    return [result for _, result in sorted(done, key=lambda pair: pair[0])]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SPIN checks of the resolution protocol")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="default")
    parser.add_argument("--quick", action="store_true", help="same as --profile quick")
    parser.add_argument("--memlim", type=int, default=8192, help="pan memory bound, MB")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per pan run")
    parser.add_argument("--depth", type=int, default=1_000_000, help="pan -m search depth")
    parser.add_argument(
        "--cc-opt", help="gcc optimisation flag for pan (default: -O0 for quick, else -O2)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the build dir (trails)")
    parser.add_argument(
        "--jobs", type=int, default=min(2, os.cpu_count() or 1), help="checks run at once"
    )
    args = parser.parse_args(argv)
    profile = "quick" if args.quick else args.profile
    for tool in ("spin", "gcc", "timeout"):
        if shutil.which(tool) is None:
            print(f"error: `{tool}` is not installed (apt-get install spin gcc)", file=sys.stderr)
            return 2
    workdir = Path(tempfile.mkdtemp(prefix="akchat-spin-"))
    started = time.monotonic()
    try:
        runner = Runner(
            workdir,
            memlim_mb=args.memlim,
            timeout_s=args.timeout,
            depth=args.depth,
            # quick: compiling pan dominates (-O0 ~1 s, -O2 ~5 s) and the searches are tiny.
            cc_opt=args.cc_opt or ("-O0" if profile == "quick" else "-O2"),
        )
        results = run_all(runner, PROFILES[profile], args.jobs)
        _print_table(results)
    finally:
        if args.keep:
            print(f"build dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = [r for r in results if not r.ok]
    print(
        f"profile {profile}: {len(results) - len(failed)}/{len(results)} checks ok "
        f"in {time.monotonic() - started:.0f} s"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
