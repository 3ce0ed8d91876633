"""A ``COMMIT`` failing inside ``SQLiteStorage.save()`` is an unknown outcome, not "not applied".

Two real ways SQLite refuses a ``COMMIT`` after the conditional ``UPDATE`` succeeded:

- the file system refuses the write: in WAL mode the ``UPDATE`` only changes cached pages and
  the ``COMMIT`` writes them to the WAL, so a file-size limit (``RLIMIT_FSIZE``, the same error
  path as a full disk) makes exactly the ``COMMIT`` fail. Run in a forked child: the limit is
  per process and would also stop pytest writing its own files;
- a deferred foreign key: SQLite checks ``DEFERRABLE INITIALLY DEFERRED`` constraints at
  ``COMMIT``, so a trigger that writes a dangling reference makes the ``COMMIT`` fail (and leave
  the transaction open, which the adapter must roll back).

In both cases the adapter cannot know from the error alone whether the write reached the disk,
so it must say :class:`OutcomeUnknown` (the session layer then settles it by re-reading). A
mapping that reports these as :class:`StorageUnavailable` ("definitely not applied, retry is
safe") fails both tests.
"""

from __future__ import annotations

import multiprocessing
import resource
import signal
import sqlite3
from pathlib import Path
from typing import Any

from storage_harness import snap

from akchat_fsm.errors import OutcomeUnknown
from akchat_fsm.storage.sqlite import SQLiteStorage


def _save_under_a_file_size_limit(path: str, session_id: str, out: Any) -> None:
    """Child: save once under a 1-byte file-size limit, report the exception's class name."""
    storage = SQLiteStorage(path)
    storage.load(session_id)  # open the connection (and the WAL) before the limit
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a fatal signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.RLIM_INFINITY))
    try:
        result: object = storage.save(snap(session_id, 2, note="late"), 1)
        outcome = f"returned {result!r}"
    except Exception as exc:
        cause = exc.__cause__
        outcome = f"{type(exc).__name__} from {type(cause).__name__}: {cause}"
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    out.send(outcome)
    out.close()
    storage.close()


def test_a_commit_refused_by_the_file_system_is_outcome_unknown(
    tmp_path: Path, unique_id: str
) -> None:
    path = str(tmp_path / "full.db")
    with SQLiteStorage(path) as storage:
        assert storage.save(snap(unique_id, 1), None)
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_save_under_a_file_size_limit, args=(path, unique_id, send))
    child.start()
    send.close()
    assert receive.poll(60), "the child never reported"
    outcome = receive.recv()
    child.join(60)
    assert child.exitcode == 0, child.exitcode
    assert outcome.startswith("OutcomeUnknown from OperationalError"), outcome
    # The adapter still works once the disk accepts writes again (nothing left half-open).
    with SQLiteStorage(path) as storage:
        stored = storage.load(unique_id)
        assert stored is not None and '"cursor":1' in stored
        assert storage.save(snap(unique_id, 2), 1)


def test_a_commit_refused_by_a_deferred_foreign_key_is_outcome_unknown(
    tmp_path: Path, unique_id: str
) -> None:
    path = tmp_path / "fk.db"
    with SQLiteStorage(path) as storage:
        assert storage.save(snap(unique_id, 1), None)
        # A host's schema extension: every update logs a row whose reference is only checked
        # at COMMIT, and that reference dangles.
        side = sqlite3.connect(path, isolation_level=None)
        side.executescript(
            """
            CREATE TABLE audit_parent (id INTEGER PRIMARY KEY);
            CREATE TABLE audit_log (parent INTEGER
                REFERENCES audit_parent (id) DEFERRABLE INITIALLY DEFERRED);
            CREATE TRIGGER audit_every_update AFTER UPDATE ON akchat_sessions
                BEGIN INSERT INTO audit_log (parent) VALUES (-1); END;
            """
        )
        side.close()
        assert storage._conn is not None
        storage._conn.execute("PRAGMA foreign_keys = ON")  # enforced per connection

        try:
            storage.save(snap(unique_id, 2, note="late"), 1)
        except OutcomeUnknown as exc:
            assert isinstance(exc.__cause__, sqlite3.IntegrityError), exc.__cause__
            assert "FOREIGN KEY" in str(exc.__cause__)
        except Exception as exc:  # the bug this test exists for: "not applied, retry is safe"
            raise AssertionError(f"a failed COMMIT reported as {type(exc).__name__}") from exc
        else:
            raise AssertionError("the COMMIT was expected to fail on the deferred foreign key")

        # The failed COMMIT left the transaction open; the adapter rolled it back.
        assert storage._conn is not None and not storage._conn.in_transaction
        stored = storage.load(unique_id)
        assert stored is not None and '"cursor":1' in stored
        storage._conn.execute("PRAGMA foreign_keys = OFF")
        assert storage.save(snap(unique_id, 2), 1)
