"""The world the stateful suites run in: the shipped recording upstream (every call counted) and
its memory, a recording storage, and a stepper that runs one plan effect at a time.

Nothing here decides anything about confirmations: the clients run the library's real plans
(``akchat_fsm.session._confirm`` / ``_ops``) and the stepper only performs their effects,
possibly with a fault, so a rule can stop a client between any two steps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from akchat_fsm.errors import AkchatError
from akchat_fsm.session.drivers import Ports, execute_sync
from akchat_fsm.session.effects import Plan, SaveSnapshot, SaveSnapshotCreatingRecords
from akchat_fsm.testing.doubles import RecordingUpstream
from akchat_fsm.wire.session import SessionSnapshot


class UpstreamBoom(RuntimeError):
    """What a failing upstream raises."""


def counting_upstream() -> RecordingUpstream:
    """The shipped recording upstream; every third proposal comes back already handled
    (``complete``), so its binding is born rejected. ``created`` says which ones."""
    upstream = RecordingUpstream()

    def born(_id: str) -> str:
        return "complete" if len(upstream.created) % 3 == 2 else "requires_confirmation"

    upstream.born = born
    return upstream


def born_handled(upstream: RecordingUpstream, tool_call_id: str) -> bool:
    """Whether upstream created this call already handled (no approve/deny will follow)."""
    return upstream.created.get(tool_call_id, "requires_confirmation") != "requires_confirmation"


@dataclass
class RecordingStorage:
    """Wraps the real adapter; records every save that *applied*, whatever the caller heard.

    ``observer``, if set, hears every save that reached the store, applied or refused (the
    history checker, ``_history.py``)."""

    inner: Any
    applied: dict[int, dict[str, Any]] = field(default_factory=dict)
    observer: Callable[[SessionSnapshot, int | None, bool], None] | None = None
    #: If set, counts the combined writes refused because a record key existed (ADR-0141).
    counts: Counter[str] | None = None

    def load(self, session_id: str) -> object:
        return self.inner.load(session_id)

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        ok = bool(self.inner.save(snapshot, expected_cursor))
        if ok:
            assert snapshot.cursor not in self.applied, "two saves applied at one cursor"
            self.applied[snapshot.cursor] = snapshot.to_wire()
        if self.observer is not None:
            self.observer(snapshot, expected_cursor, ok)
        return ok

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: Any
    ) -> bool:
        """An envelope save that also creates records (ADR-0141): recorded like ``save``. A
        refusal because a record key exists (the steps here are sequential, so a read before
        tells) is not an envelope CAS the store refused: the write's record guard failed
        first, as the claim's own entry create does in ADR-0132's protocol; the observer is
        told only of the CAS."""
        sid = snapshot.session_id
        taken = any(self.inner.load_record(sid, key) is not None for key, _ in records)
        ok = bool(self.inner.save_with_records(snapshot, expected_cursor, records))
        if ok:
            assert not taken, "a combined write applied over an existing record"
            assert snapshot.cursor not in self.applied, "two saves applied at one cursor"
            self.applied[snapshot.cursor] = snapshot.to_wire()
        if taken and self.counts is not None:
            self.counts["combined:refused-by-an-existing-entry"] += 1
        if self.observer is not None and not taken:
            self.observer(snapshot, expected_cursor, ok)
        return ok

    # The records capability (intents), spelled out: from Python 3.12 a runtime-checkable
    # protocol does not see ``__getattr__`` forwarding.
    def load_record(self, session_id: str, key: str) -> Any:
        return self.inner.load_record(session_id, key)

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        return bool(
            self.inner.save_record(session_id, key, text, expected_version, processing=processing)
        )

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        return list(self.inner.list_records(session_id, prefix))

    def delete_record(self, session_id: str, key: str) -> None:
        self.inner.delete_record(session_id, key)


# --------------------------------------------------------------------------- stepping plans


@dataclass
class Stepper:
    """Runs a plan one effect at a time. ``next`` is the effect waiting to be performed."""

    plan: Plan[Any]
    next: Any = None
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    acked_saves: list[SessionSnapshot] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._resume(lambda: self.plan.send(None))

    def _resume(self, move: Callable[[], Any]) -> None:
        try:
            self.next = move()
        except StopIteration as stop:
            self.done, self.result, self.next = True, stop.value, None
        except AkchatError as exc:
            self.done, self.error, self.next = True, exc, None

    def feed(self, value: Any) -> None:
        if isinstance(self.next, SaveSnapshot) and value is True:
            self.acked_saves.append(self.next.snapshot)
        if isinstance(self.next, SaveSnapshotCreatingRecords) and value is True:
            self.acked_saves.append(self.next.save.snapshot)
        self._resume(lambda: self.plan.send(value))

    def throw(self, exc: BaseException) -> None:
        self._resume(lambda: self.plan.throw(exc))

    def crash(self) -> None:
        """The client process died here: the plan never runs again."""
        self.plan.close()
        self.done, self.next = True, None


def perform(effect: Any, storage: Any, upstream: Any, memory: Any) -> Any:
    """Perform one effect for real (no fault), exactly as the sync driver does."""
    return execute_sync(effect, Ports(storage, upstream, memory))
