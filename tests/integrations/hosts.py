"""Host processes for the cross-process proofs, forked from a parent that imported them once.

Every killed or racing host of :mod:`test_bridge_processes`, :mod:`test_openai_agents_processes`
and :mod:`test_langgraph_processes` is a real process of its own: it opens its store, runs one
command and may be SIGKILLed anywhere in it. Starting each one as a fresh interpreter spent
nearly all of those tests' time importing the agent runtimes (about a second a host, dozens of
hosts a test). So the hosts are forked instead, by the standard library's ``forkserver``: one
single-threaded parent per test process imports the worker modules (and nothing else: no store
is open, no event loop runs, no thread is started), and each host is a fresh fork of it. A host
still shares nothing with the test or with another host but the files and servers the proof is
about; its nonces come from ``os.urandom``, which a fork does not replay.

``start(entry, *args)`` runs ``worker_module.entry(*args)`` in a new host; ``Host.finish()``
waits and returns ``(exit code, the JSON-able value the entry returned)``: ``-9`` and ``None``
when the host was SIGKILLed. A host that raises fails the test with its traceback.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import signal
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import akchat_fsm

#: The worker modules the parent imports before the first fork.
PRELOAD = ["bridge_worker", "oai_worker", "lg_worker"]
HERE = Path(__file__).resolve().parent
#: The akchat_fsm this test imported: the hosts run the same code.
SRC = Path(akchat_fsm.__file__).resolve().parents[1]
#: The variables through which coverage.py follows a new Python process (``patch = subprocess``).
_COVERAGE = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOAD)


def _ensure_parent() -> None:
    """Start the forking parent once, with the workers importable by it.

    The forkserver is told the test's ``sys.path`` but does not apply it before importing
    the preloaded modules (CPython 3.11-3.13), and a module it cannot import is skipped
    without a word; so it is given the path in its environment instead, for its start only.
    """
    saved = {name: os.environ.get(name) for name in ("PYTHONPATH", *_COVERAGE)}
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(HERE), str(SRC), saved["PYTHONPATH"]])
    )
    # A host ends in os._exit (or a SIGKILL), so coverage could never save what it traced in
    # one: the parent is started untraced rather than tracing every host for nothing.
    for name in _COVERAGE:
        os.environ.pop(name, None)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _enter(module: str, entry: str, args: tuple[Any, ...], out: str) -> None:
    try:
        # A host that had to import its worker would pay the cost this module exists to avoid.
        preloaded = module in sys.modules
        value = getattr(importlib.import_module(module), entry)(*args)
        text = json.dumps({"value": value, "preloaded": preloaded})
    except BaseException:  # reported to the test, which fails with it
        text = json.dumps({"crash": traceback.format_exc()})
    Path(out).write_text(text, encoding="utf-8")


class Host:
    """One started host process."""

    def __init__(self, process: Any, out: Path) -> None:
        self.process = process
        self.out = out

    def finish(self, timeout: float = 240) -> tuple[int, Any]:
        try:
            return self._finish(timeout)
        finally:
            shutil.rmtree(self.out.parent, ignore_errors=True)

    def _finish(self, timeout: float) -> tuple[int, Any]:
        self.process.join(timeout)
        if self.process.exitcode is None:  # a hung host is a failure, never a pass
            self.process.kill()
            self.process.join()
            raise AssertionError(f"host {self.process.pid} did not finish in {timeout} s")
        code = int(self.process.exitcode)
        if code == -signal.SIGKILL:
            return code, None
        reply = json.loads(self.out.read_text(encoding="utf-8")) if self.out.exists() else {}
        if code != 0 or "crash" in reply:
            raise AssertionError(f"host failed (exit {code}): {reply.get('crash', '')[-3000:]}")
        if not reply["preloaded"]:
            raise AssertionError("the forking parent did not import the worker modules first")
        return code, reply["value"]


def start(entry: str, *args: Any) -> Host:
    """Run ``entry`` (``"module.function"``) with ``args`` in a new host process."""
    module, _, function = entry.rpartition(".")
    if module not in PRELOAD:
        raise ValueError(f"{module} is not a preloaded worker module: {PRELOAD}")
    _ensure_parent()
    out = Path(tempfile.mkdtemp(prefix="akchat-host-")) / "reply.json"
    process = _CONTEXT.Process(target=_enter, args=(module, function, args, str(out)))
    process.start()
    return Host(process, out)
