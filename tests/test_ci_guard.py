"""Under AKCHAT_REQUIRE_SERVERS=1 (set by .ci/run) a skipped test fails the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _run(tmp_path: Path, body: str, require: bool) -> int:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_probe.py").write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "AKCHAT_REQUIRE_SERVERS"}
    if require:
        env["AKCHAT_REQUIRE_SERVERS"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True).returncode


SKIPS = "import pytest\ndef test_probe():\n    pytest.skip('no server')\n"
PASSES = "def test_probe():\n    assert True\n"


def test_a_skip_fails_the_run_when_servers_are_required(tmp_path: Path) -> None:
    assert _run(tmp_path, SKIPS, require=True) == 1


def test_a_skip_is_only_a_skip_on_a_users_machine(tmp_path: Path) -> None:
    assert _run(tmp_path, SKIPS, require=False) == 0


def test_passing_runs_still_pass_when_servers_are_required(tmp_path: Path) -> None:
    assert _run(tmp_path, PASSES, require=True) == 0
