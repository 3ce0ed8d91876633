"""The process check when the program running the kit cannot be re-run by a spawned process.

A spawned process starts by re-running the parent's ``__main__``. A script piped to
``python -`` has no file to re-run, and a factory defined in the ``__main__`` of ``python -c``
(or a notebook) cannot be imported there: the kit must then skip the process check and say
why and how to enable it, never fail a correct adapter, never count the check as a pass. A
script in a file still races the processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import akchat_fsm

SCRIPT = """
import sys
from akchat_fsm.testing import check_session_storage

if __name__ == "__main__":
    print(check_session_storage(sys.argv[1], only=["processes"], seed=1))
"""

#: The notebook's way: the factory is a function of ``__main__``.
FACTORY_IN_MAIN = """
import sys
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing import check_session_storage

path = sys.argv[1]

def make():
    return SQLiteStorage(path)

print(check_session_storage(make, only=["processes"], seed=1))
"""


def _python(args: list[str], stdin: str | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(Path(akchat_fsm.__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("how", ["stdin", "factory-in-main"])
def test_a_program_a_spawned_process_cannot_start_from_skips_with_its_reason(
    tmp_path: Path, how: str
) -> None:
    if how == "stdin":
        out = _python(["-", f"sqlite:///{tmp_path / 'kit.db'}"], stdin=SCRIPT)
        reason = "this program's __main__ ('<stdin>') is not a file a spawned process can re-run"
    else:
        out = _python(["-c", FACTORY_IN_MAIN, str(tmp_path / "kit.db")])
        reason = "the storage factory is defined in __main__, which a spawned process cannot"
    assert "conformance: OK — 1 checks, 0 failed, 1 skipped" in out, out
    (line,) = [line for line in out.splitlines() if "processes" in line]
    assert line.strip().startswith("SKIP processes"), out
    assert reason in line, line
    assert "to race processes, run the check from a script file or an importable module" in line


def test_the_same_program_from_a_file_races_the_processes(tmp_path: Path) -> None:
    script = tmp_path / "kit_main.py"
    script.write_text(SCRIPT)
    out = _python([str(script), f"sqlite:///{tmp_path / 'kit.db'}"])
    assert "conformance: OK — 1 checks, 0 failed, 0 skipped" in out, out
    (line,) = [line for line in out.splitlines() if "processes" in line]
    assert line.strip().startswith("PASS processes"), out
    assert "processes: one create winner, one CAS winner" in line, line
