"""mypy flags a port of the wrong flavour at every public entry point (typing_flavours.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.mark.slow
def test_mypy_flags_each_wrong_flavour_and_accepts_the_right_ones(tmp_path: Path) -> None:
    """Each misuse carries a ``type: ignore``; an ignore mypy no longer needs is an error."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--warn-unused-ignores",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            str(HERE / "typing_flavours.py"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
