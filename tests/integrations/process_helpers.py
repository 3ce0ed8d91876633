"""Runtime-neutral helpers of the cross-process bridge proofs (no agent runtime imported).

* :func:`open_store` opens a worker's store from its spec (``sqlite:<path>``,
  ``postgres:<url>|<table>`` or ``redis:<url>|<prefix>``), :func:`new_store_spec` makes a
  fresh spec;
* :func:`sweep_leaves_only_people` runs the sweep with the bridge hook and proves that nothing
  it could finish is left (every run not completed waits for a person);
* :class:`KillingStorage` SIGKILLs its own process around its n-th storage write;
* :func:`append_line` is the durable execution log's one write (``O_APPEND`` + ``fsync``, so a
  line survives the SIGKILL of its writer).
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: ``make(where=None) -> spec``: a fresh, empty store (a file under ``where``, or a table pair).
StoreFactory = Callable[..., str]


def new_store_spec(kind: str, where: Path, pg_url: str | None) -> tuple[str, str | None]:
    """A fresh store spec of ``kind`` and the PostgreSQL table it names (to drop afterwards)."""
    name = f"b_{uuid.uuid4().hex[:12]}"
    if kind == "sqlite":
        return f"sqlite:{where / (name + '.db')}", None
    if kind == "redis":
        return f"redis:{pg_url}|{name}:", name
    return f"postgres:{pg_url}|{name}", name


def open_store(spec: str) -> Any:
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        from akchat_fsm.storage.sqlite import SQLiteStorage

        return SQLiteStorage(rest)
    if kind == "redis":
        from akchat_fsm.storage.redis import RedisStorage

        url, _, prefix = rest.partition("|")
        return RedisStorage(url, prefix=prefix)
    from akchat_fsm.storage.postgres import PostgresStorage

    url, _, table = rest.partition("|")
    return PostgresStorage(url, table=table)


def append_line(log: Path, line: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


class KillingStorage:
    """A real storage that SIGKILLs its own process around its n-th write (nothing else).

    ``kill``: ``write:<n>:before|after`` (counted from 1, envelope and record writes alike);
    anything else never kills.
    """

    def __init__(self, inner: Any, kill: str) -> None:
        self.inner = inner
        parts = kill.split(":")
        self.target = int(parts[1]) if parts[0] == "write" else 0
        self.when = parts[2] if parts[0] == "write" else ""
        self.writes = 0
        self.lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, call: Any) -> Any:
        # Each write keeps its own ordinal: a runtime may write from two threads at once.
        with self.lock:
            self.writes += 1
            n = self.writes
        if n == self.target and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = call()
        if n == self.target and self.when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def save(self, snapshot: Any, expected: int | None) -> bool:
        return bool(self._write(lambda: self.inner.save(snapshot, expected)))

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._write(lambda: self.inner.save_record(*args, **kwargs)))

    def save_with_records(self, *args: Any) -> bool:
        # A claim and its audit entry, one write (ADR-0141).
        return bool(self._write(lambda: self.inner.save_with_records(*args)))


#: The next steps that are a person's (a reviewer's decision, an operator's verdict on an
#: unknown execution): a run waiting on one of these is not the sweep's to finish.
PEOPLES_STEPS = ("a person approves or rejects", "an operator settles")


def sweep_leaves_only_people(
    storage: Any, ports_for: Callable[[str], Any], sessions: tuple[str, ...]
) -> dict[str, str]:
    """``reconcile_all`` with the bridge hook (``ports_for``), at a clock past every claim;
    then every run record left in ``sessions`` (the test's) or in a session the index listed
    that is not completed must be reported waiting for a person, with its next step, and no
    confirmation due at the sweep's clock is left pending: 0 runs or expiries left that the
    sweep could finish (nor any it missed). Returns {run id: next step}."""
    import time

    from akchat_fsm import reconcile_all
    from akchat_fsm.integrations.records import read_bridge_records
    from akchat_fsm.integrations.runs import RunState

    # A minute on: every write of the killed process is past the age threshold (0), and no
    # confirmation (5 minutes to live) is due, so the decisions the test repeats still apply.
    at = time.time_ns() // 1_000_000 + 60_000
    listed = {p.session_id for p in storage.list_processing()}
    report = reconcile_all(storage, ports_for, older_than_ms=0, clock=lambda: at)
    assert all(s.error is None for s in report.sessions), report.sessions
    due = storage.list_pending(expiring_before_ms=at).items
    assert due == (), due  # a due confirmation is the sweep's to expire
    waiting = {run_id: step for s in report.sessions for run_id, step in s.waiting}
    left: set[str] = set()
    for session_id in listed | set(sessions):
        records = read_bridge_records(storage, session_id)
        assert records is not None
        left |= {r.run_id for r in records.runs if r.state is not RunState.COMPLETED}
    assert left == set(waiting), (left, waiting)
    for run_id, step in waiting.items():
        assert step.startswith(PEOPLES_STEPS), (run_id, step)
    return waiting
