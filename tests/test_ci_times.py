"""The budget figures every CI log ends with: each env's wall time, the slowest tests."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOX_LOG = """\
py311: commands[0]> pytest -q
3150 passed in 600.10s (0:10:00)
  py311: OK (612.30=setup[40.10]+cmd[572.20] seconds)
  lint: OK (1.20=setup[0.50]+cmd[0.70] seconds)
  model: FAIL code 1 (300.00=setup[1.00]+cmd[299.00] seconds)
  evaluation failed :( (913.50 seconds)
"""


def test_env_times_reads_toxs_closing_summary_passed_and_failed() -> None:
    ci_times = _load(ROOT / "scripts" / "ci_times.py", "ci_times")
    times = ci_times.env_times(TOX_LOG)
    assert times == [("py311", "OK", 612.3), ("lint", "OK", 1.2), ("model", "FAIL", 300.0)]
    text = ci_times.report(times)
    assert "py311      OK     10.2 min" in text
    assert "total" in text and "15.2 min (budget 30 min)" in text


def test_a_log_without_a_summary_says_so_and_never_fails_the_run(tmp_path: Path) -> None:
    log = tmp_path / "ci.log"
    log.write_text("== servers\nPostgreSQL: reachable\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ci_times.py"), str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0
    assert "no env summary" in done.stdout


def test_ci_run_prints_the_times_at_its_end_whatever_tox_did() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "trap 'scripts/ci_times.py \"$log\" || true' EXIT" in ci
    assert ci.index('exec > >(tee "$log")') < ci.index("&& tox")


def test_the_slowest_tests_report_ranks_by_time_with_each_share() -> None:
    conftest = _load(ROOT / "tests" / "conftest.py", "akchat_tests_conftest")
    spent = {"t::a": 1.0, "t::b": 3.0, "t::c": 0.0}
    lines = conftest.budget_lines(spent, 2)
    assert lines[0] == "the 2 slowest of 3 tests (4.0 s in all):"
    assert lines[1].split() == ["3.00", "s", "75.0%", "t::b"]
    assert lines[2].split() == ["1.00", "s", "25.0%", "t::a"]
    assert conftest.budget_lines(spent, 0) == []
    assert conftest.budget_lines({}, 30) == []
