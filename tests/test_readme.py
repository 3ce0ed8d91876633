"""The README's two commands are the ones CI and users run; keep them from drifting."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|bash|console)\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_ci_runs_the_readme_test_command() -> None:
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    test_commands = [c for c in _readme_commands() if c.endswith("&& tox")]
    assert len(test_commands) == 1, test_commands
    assert test_commands[0] in ci_lines


def test_ci_requires_servers_and_fails_on_skips() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "AKCHAT_REQUIRE_SERVERS=1" in ci
    assert "set -euo pipefail" in ci
