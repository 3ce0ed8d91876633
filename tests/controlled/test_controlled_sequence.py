"""SnapshotSequence: stale and duplicate host snapshots are refused (docs/reference.md §7.17
closed)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from controlled_helpers import RecordingActions, snapshot

from akchat_fsm.controlled import SnapshotSequence, StaleControlledSnapshot
from akchat_fsm.errors import InvalidControlledSnapshot


def other_session() -> dict[str, Any]:
    return {**snapshot(), "sessionId": "other-session"}


def test_increasing_sequences_are_accepted() -> None:
    gate = SnapshotSequence()
    assert gate.create_chat(1, snapshot(), RecordingActions()).session_id == "synthetic-session"
    gate.create_chat(5, snapshot(), RecordingActions())
    assert gate.last("synthetic-session") == 5


@pytest.mark.parametrize("stale", [5, 4, 0])
def test_duplicate_or_older_sequence_is_refused(stale: int) -> None:
    gate = SnapshotSequence()
    gate.create_chat(5, snapshot(), RecordingActions())
    with pytest.raises(StaleControlledSnapshot) as caught:
        gate.create_chat(stale, snapshot(), RecordingActions())
    error = caught.value
    assert isinstance(error, InvalidControlledSnapshot)
    assert error.layer == "shell"
    assert (error.session_id, error.sequence, error.last) == ("synthetic-session", stale, 5)
    assert gate.last("synthetic-session") == 5


def test_sessions_are_independent_and_forgettable() -> None:
    gate = SnapshotSequence()
    gate.create_chat(9, snapshot(), RecordingActions())
    gate.create_chat(1, other_session(), RecordingActions())
    assert gate.last("other-session") == 1
    gate.forget("synthetic-session")
    assert gate.last("synthetic-session") is None
    gate.create_chat(1, snapshot(), RecordingActions())


def test_invalid_snapshot_does_not_consume_its_sequence() -> None:
    gate = SnapshotSequence()
    broken = {**snapshot(), "status": "private-state"}
    with pytest.raises(InvalidControlledSnapshot) as caught:
        gate.create_chat(3, broken, RecordingActions())
    assert not isinstance(caught.value, StaleControlledSnapshot)
    assert gate.last("synthetic-session") is None
    gate.create_chat(3, snapshot(), RecordingActions())
    assert gate.last("synthetic-session") == 3


@pytest.mark.parametrize("bad", [-1, 1.5, True, 2**53, "1", None])
def test_sequence_must_be_a_safe_non_negative_integer(bad: Any) -> None:
    with pytest.raises(InvalidControlledSnapshot) as caught:
        SnapshotSequence().create_chat(bad, snapshot(), RecordingActions())
    assert caught.value.layer == "shell"


def test_concurrent_renders_of_one_sequence_accept_exactly_one() -> None:
    gate = SnapshotSequence()
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def render() -> None:
        barrier.wait()
        try:
            gate.create_chat(7, snapshot(), RecordingActions())
            result = "accepted"
        except StaleControlledSnapshot:
            result = "stale"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=render) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["accepted"] + ["stale"] * 7
