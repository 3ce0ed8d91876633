"""A worker process for the proposal race: propose and resolve on one shared SQLite session.

Each worker records every tool call its upstream created (a :class:`RecordingUpstream` per
process) and writes them, one id a line, to its own file when done, so the parent can count
the upstream calls that ended with no binding.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

from akchat_fsm.errors import AkchatError
from akchat_fsm.session import ChatDefinition, resume_chat_session
from akchat_fsm.storage.sqlite import SQLiteStorage
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.session import SessionSnapshot

DEFINITION = ChatDefinition("proposal-race")
#: Terminal records are never pruned in this run, so every created call stays countable.
KEEP_ALL = 1_000


class ConflictCounting:
    """The real SQLite adapter, counting the saves that lost a compare-and-set race."""

    def __init__(self, inner: SQLiteStorage) -> None:
        self.inner = inner
        self.conflicts = 0

    def load(self, session_id: str) -> str | None:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        saved = self.inner.save(snapshot, expected_cursor)
        self.conflicts += not saved
        return saved


#: The first proposes of every worker start from one shared read (see ``worker``).
LOCKSTEP = 4


def worker(
    db: str, session_id: str, out: str, proposals: int, seed: int, start: Any = None
) -> None:
    """``proposals`` proposes, each followed by an approve or reject of a random pending one.

    With ``start`` (a barrier of every worker), the first ``LOCKSTEP`` proposes are in
    lockstep: every worker reads the session, waits until all have read, then proposes, so
    all but one of them lose the compare-and-set race by construction (whatever the timing:
    nobody writes between the reads and the barrier). The rest run free.
    """
    rng = random.Random(seed)
    storage = ConflictCounting(SQLiteStorage(db))
    upstream = RecordingUpstream()
    errors: Counter[str] = Counter()
    for n in range(proposals):
        if n == 0 or (start is not None and n < LOCKSTEP):
            if start is not None:
                start.wait()  # nobody writes between this barrier and the next one
            session = resume_chat_session(DEFINITION, session_id=session_id, storage=storage)
            coordinator = session.confirmations_for(upstream, keep_terminal=KEEP_ALL)
            if start is not None:
                start.wait()  # everyone has read the same cursor: the proposes race
        try:
            coordinator.propose("email.send", {"n": rng.randrange(1000)})
        except AkchatError as exc:
            errors[f"propose:{type(exc).__name__}"] += 1
        pending = [b.token for b in session.confirmations if b.status == "pending"]
        if not pending:
            continue
        try:
            if rng.random() < 0.7:
                coordinator.approve(rng.choice(pending))
            else:
                coordinator.reject(rng.choice(pending), reason="no")
        except AkchatError as exc:  # a lost race on one record: typed, and the run goes on
            errors[f"resolve:{type(exc).__name__}"] += 1
    storage.inner.close()
    lines = [f"created {i}" for i in upstream.proposed]
    lines += [f"denied {call[1]}" for call in upstream.calls if call[0] == "deny"]
    lines += [f"error {kind} {n}" for kind, n in errors.items()]
    lines.append(f"conflicts {storage.conflicts}")
    Path(out).write_text("\n".join(lines) + "\n")
