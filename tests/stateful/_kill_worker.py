"""Worker processes for the SIGKILL test, and the file-backed upstream they share.

The upstream appends one line per ``approve``/``deny`` *call* to an append-only log
(``O_APPEND``, one ``write`` per line, fsynced), so after any number of kills the log says
exactly which calls happened. Memory is derived from the same log, the way a real upstream's
tool-call status is derived from what it executed.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from akchat_fsm.errors import AkchatError
from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session

DEFINITION = ChatDefinition("kill-test")


class LogUpstream:
    """Upstream whose every call is one fsynced line in ``log``."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def _append(self, line: str) -> None:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return ToolCallProposal(id, name, dict(args), "requires_confirmation")

    def approve(self, tool_call_id: str) -> None:
        self._append(f"approve {tool_call_id} {os.getpid()}\n")

    def deny(self, tool_call_id: str, reason: str) -> None:
        self._append(f"deny {tool_call_id} {os.getpid()}\n")


def read_log(log: Path) -> list[tuple[str, str]]:
    if not log.exists():
        return []
    lines = log.read_text().splitlines()
    return [(kind, call) for kind, call, _pid in (line.split(" ") for line in lines)]


class LogMemory:
    """The canonical memory implied by the log: a call that was executed left
    ``requires_confirmation`` (``complete`` after approve, ``error`` after deny)."""

    def __init__(self, log: Path, tool_calls: list[str]) -> None:
        self.log = log
        self.tool_calls = tool_calls

    def load(self) -> dict[str, Any]:
        acted = dict((call, kind) for kind, call in reversed(read_log(self.log)))
        statuses = {
            call: {"approve": "complete", "deny": "error"}.get(
                acted.get(call, ""), "requires_confirmation"
            )
            for call in self.tool_calls
        }
        return {
            "version": 1,
            "messages": [
                {
                    "id": f"msg-{i}",
                    "role": "assistant",
                    "content": "",
                    "status": "complete",
                    "createdAt": "2026-07-14T00:00:00.000Z",
                    "toolCalls": [{"id": call, "name": "email.send", "args": {}, "status": status}],
                }
                for i, (call, status) in enumerate(sorted(statuses.items()))
            ],
        }


class DiesAfterClaim:
    """A real storage whose process SIGKILLs itself right after any save that applied with a
    record ``approving`` / ``rejecting`` (its own claim, or a proposal written while another
    worker's claim is open). So no claim is ever completed: each one is left between the claim
    and the upstream call by construction, not by when a parent's kill happens to fall."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        if callable(getattr(inner, "save_with_records", None)):
            self.save_with_records = self._save_with_records

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def save(self, snapshot: Any, expected_cursor: int | None) -> bool:
        applied = bool(self.inner.save(snapshot, expected_cursor))
        if applied and any(b.status.is_processing for b in snapshot.confirmations):
            os.kill(os.getpid(), signal.SIGKILL)
        return applied

    def _save_with_records(self, snapshot: Any, expected_cursor: int | None, records: Any) -> bool:
        # The claim with its audit entry in one write (ADR-0141): the same kill after it.
        applied = bool(self.inner.save_with_records(snapshot, expected_cursor, records))
        if applied and any(b.status.is_processing for b in snapshot.confirmations):
            os.kill(os.getpid(), signal.SIGKILL)
        return applied


class _AlreadyCalled:
    """The seeded bug's upstream: the call was made before the claim, so this one does nothing."""

    def __init__(self, real: LogUpstream) -> None:
        self.real = real

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return self.real.propose_tool_call(id, name, args)

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


def worker(
    make_storage: Callable[[], Any],
    session_id: str,
    log: str,
    seed: int,
    broken: bool = False,
    app_name: str = "",
    die_after_claim: bool = False,
) -> None:
    """Forever: resume, then propose or resolve a random live confirmation (until killed).

    ``broken`` seeds the bug the test must catch: upstream is called *before* the claim (from
    a possibly stale read), then the library's resolution runs with a no-op upstream.
    ``app_name`` names this process's PostgreSQL connections (libpq reads ``PGAPPNAME``), so
    the parent can wait until the server has finished every statement a killed worker sent.
    ``die_after_claim``: the worker kills itself right after its first save that leaves a
    claim open (see :class:`DiesAfterClaim`).
    """
    if app_name:
        os.environ["PGAPPNAME"] = app_name
    rng = random.Random(seed)
    storage = make_storage()
    if die_after_claim:
        storage = DiesAfterClaim(storage)
    real = LogUpstream(Path(log))
    upstream: Any = _AlreadyCalled(real) if broken else real
    while True:
        try:
            session = resume_chat_session(DEFINITION, session_id=session_id, storage=storage)
            coordinator = session.confirmations_for(upstream)
            live = [b.token for b in session.confirmations if b.status == "pending"]
            if not live or rng.random() < 0.2:
                coordinator.propose("email.send", {"n": rng.randrange(1000)})
            elif rng.random() < 0.7:
                token = rng.choice(live)
                if broken:
                    binding = next(b for b in session.confirmations if b.token == token)
                    real.approve(binding.tool_call_id)
                coordinator.approve(token)
            else:
                coordinator.reject(rng.choice(live), reason="no")
        except AkchatError:
            continue  # a lost race or a busy database: typed, and the loop goes on
