"""Without chromium the browser tests skip on a user's machine and fail under CI's guard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = "tests/inbox/test_browser.py::test_approve_runs_the_body_once"


def _run(require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AKCHAT_REQUIRE_SERVERS"}
    env["AKCHAT_CHROMIUM"] = str(ROOT / "no-such-chromium")
    if require:
        env["AKCHAT_REQUIRE_SERVERS"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", PROBE]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)


def test_a_missing_browser_is_a_skip_on_a_users_machine() -> None:
    run = _run(require=False)
    assert run.returncode == 0 and "1 skipped" in run.stdout


def test_a_missing_browser_fails_when_servers_are_required() -> None:
    run = _run(require=True)
    assert run.returncode == 1 and "no-such-chromium (AKCHAT_REQUIRE_SERVERS=1)" in run.stdout
