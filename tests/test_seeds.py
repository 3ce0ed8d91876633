"""Each interpreter's seed chooses its examples, and a run replays from what it printed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

PROBE = """\
from hypothesis import given, settings, strategies as st

SEEN = []


@given(st.integers())
def test_draws(x):
    SEEN.append(x)


def test_zz_show():
    print("DRAWN", settings.default.derandomize, SEEN[:8])


def test_zz_fails():
    assert False
"""


def _run(tmp_path: Path, *args: str) -> str:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AKCHAT_", "HYPOTHESIS_"))}
    env["CI"] = "true"
    command = [sys.executable, "-m", "pytest", "-s", "-p", "no:cacheprovider", *args, "."]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    return done.stdout


def _drawn(out: str) -> str:
    line = next(line for line in out.splitlines() if "DRAWN" in line)
    return line[line.index("DRAWN") :]


def test_a_seed_chooses_the_examples_and_a_failure_prints_its_replay(tmp_path: Path) -> None:
    first = _run(tmp_path, "--hypothesis-seed=312")
    assert "akchat-fsm: Hypothesis 'ci-seeded', seed 312" in first
    assert _drawn(first).startswith("DRAWN False")
    assert _drawn(first) == _drawn(_run(tmp_path, "--hypothesis-seed=312"))
    assert _drawn(first) != _drawn(_run(tmp_path, "--hypothesis-seed=313"))
    # The failing test's report names the command that replays it, and only it.
    replay = "HYPOTHESIS_PROFILE=ci python -m pytest -p no:cacheprovider --hypothesis-seed=312"
    replays = [line for line in first.splitlines() if line.startswith("HYPOTHESIS_PROFILE=")]
    assert replays == [f"{replay} test_probe.py::test_zz_fails"]


def test_without_a_seed_ci_stays_derandomized(tmp_path: Path) -> None:
    out = _run(tmp_path)
    assert "akchat-fsm: Hypothesis 'ci', derandomized" in out
    assert _drawn(out).startswith("DRAWN True")
    assert _drawn(out) == _drawn(_run(tmp_path))
