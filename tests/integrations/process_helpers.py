"""Runtime-neutral helpers of the cross-process bridge proofs (no agent runtime imported).

* :func:`open_store` opens a worker's store from its spec (``sqlite:<path>`` or
  ``postgres:<url>|<table>``), :func:`new_store_spec` makes a fresh spec;
* :class:`KillingStorage` SIGKILLs its own process around its n-th storage write;
* :func:`append_line` is the durable execution log's one write (``O_APPEND`` + ``fsync``, so a
  line survives the SIGKILL of its writer).
"""

from __future__ import annotations

import os
import signal
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
    return f"postgres:{pg_url}|{name}", name


def open_store(spec: str) -> Any:
    kind, _, rest = spec.partition(":")
    if kind == "sqlite":
        from akchat_fsm.storage.sqlite import SQLiteStorage

        return SQLiteStorage(rest)
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _write(self, call: Any) -> Any:
        self.writes += 1
        if self.writes == self.target and self.when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        result = call()
        if self.writes == self.target and self.when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    def save(self, snapshot: Any, expected: int | None) -> bool:
        return bool(self._write(lambda: self.inner.save(snapshot, expected)))

    def save_record(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._write(lambda: self.inner.save_record(*args, **kwargs)))
