"""The CAS contract, run against every adapter, sync and async, through one body each."""

from __future__ import annotations

import json

import pytest
from storage_harness import Client, Harness, snap

from akchat_fsm.errors import ConfigError, StorageUnavailable
from akchat_fsm.wire.session import SessionSnapshot


def test_missing_session_loads_none(store: Client, unique_id: str) -> None:
    assert store.load(unique_id) is None


def test_round_trip_returns_the_canonical_json_text(store: Client, unique_id: str) -> None:
    s = SessionSnapshot.from_wire(
        {
            "protocol": "agentskit.chat.session",
            "version": 1,
            "sessionId": unique_id,
            "definitionId": "def-rich",
            "definitionRevision": 3,
            "updatedAt": "2026-11-29T00:00:00.000Z",
            "cursor": 1,
            "activeTurn": {"turnId": "turn-1", "expiresAt": 1_800_000_000_000},
            "confirmations": [
                {
                    "token": "tok-1",
                    "action": "refund",
                    "input": {"note": 'café ☕ 𝄞 \u0000 "q"', "amount": 12.5, "n": [1, None]},
                    "toolCallId": "call-1",
                    "expiresAt": 1_800_000_000_000,
                    "status": "pending",
                }
            ],
        }
    )
    assert store.save(s, None) is True
    text = store.load(unique_id)
    assert isinstance(text, str)
    assert text == s.to_json()
    assert SessionSnapshot.from_wire(json.loads(text)) == s


def test_create_only_refuses_an_existing_session(store: Client, unique_id: str) -> None:
    assert store.save(snap(unique_id, 1, note="first"), None) is True
    assert store.save(snap(unique_id, 1, note="second"), None) is False
    assert json.loads(store.load(unique_id))["definitionId"] == "def-first"


def test_update_with_the_stored_cursor_advances_by_one(store: Client, unique_id: str) -> None:
    assert store.save(snap(unique_id, 1), None)
    for cursor in range(1, 6):
        assert store.save(snap(unique_id, cursor + 1, note=f"n{cursor}"), cursor) is True
    assert json.loads(store.load(unique_id))["cursor"] == 6


@pytest.mark.parametrize("expected", [0, 1, 2, 4, 99])
def test_stale_future_or_wrong_cursor_is_a_conflict(
    store: Client, unique_id: str, expected: int
) -> None:
    assert store.save(snap(unique_id, 1), None)
    assert store.save(snap(unique_id, 2), 1)
    assert store.save(snap(unique_id, 3), 2)
    if expected == 3:
        pytest.fail("3 is the stored cursor; the parameters must all be wrong")
    assert store.save(snap(unique_id, expected + 1, note="late"), expected) is False
    assert json.loads(store.load(unique_id))["cursor"] == 3


def test_update_of_a_missing_session_is_a_conflict(store: Client, unique_id: str) -> None:
    assert store.save(snap(unique_id, 1), 0) is False
    assert store.save(snap(unique_id, 6), 5) is False
    assert store.load(unique_id) is None


@pytest.mark.parametrize("cursor", [0, 1, 2, 4, 7])
def test_update_must_carry_expected_plus_one(store: Client, unique_id: str, cursor: int) -> None:
    assert store.save(snap(unique_id, 1), None)
    assert store.save(snap(unique_id, 2), 1)
    with pytest.raises(ConfigError):
        store.save(snap(unique_id, cursor), 2)  # only 3 is legal
    assert json.loads(store.load(unique_id))["cursor"] == 2


@pytest.mark.parametrize("expected", [True, -1, 1.0, "1", 2**53])
def test_bad_expected_cursor_is_a_config_error(
    store: Client, unique_id: str, expected: object
) -> None:
    assert store.save(snap(unique_id, 1), None)
    with pytest.raises(ConfigError):
        store.save(snap(unique_id, 2), expected)  # type: ignore[arg-type]
    assert json.loads(store.load(unique_id))["cursor"] == 1


@pytest.mark.parametrize("bad", ["", " a", "a b", "a\x00b", "é", "a" * 129, "-a", None, 7])
def test_invalid_session_id_is_refused_before_io(store: Client, bad: object) -> None:
    with pytest.raises(ConfigError):
        store.load(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        store.delete(bad)  # type: ignore[arg-type]


def test_save_needs_a_snapshot(store: Client) -> None:
    with pytest.raises(ConfigError):
        store.save({"sessionId": "a", "cursor": 1}, None)  # type: ignore[arg-type]


def test_delete_forgets_and_allows_recreate(store: Client, unique_id: str) -> None:
    assert store.save(snap(unique_id, 1), None)
    assert store.save(snap(unique_id, 2), 1)
    store.delete(unique_id)
    assert store.load(unique_id) is None
    assert store.save(snap(unique_id, 3), 2) is False  # nothing stored any more
    store.delete(unique_id)  # deleting nothing is fine
    assert store.save(snap(unique_id, 1, note="again"), None) is True
    assert json.loads(store.load(unique_id))["definitionId"] == "def-again"


def test_sessions_are_isolated(store: Client, unique_id: str) -> None:
    other = f"{unique_id}:other"
    assert store.save(snap(unique_id, 1, note="a"), None)
    assert store.save(snap(other, 1, note="b"), None)
    assert store.save(snap(unique_id, 2, note="a2"), 1)
    store.delete(other)
    assert json.loads(store.load(unique_id))["definitionId"] == "def-a2"
    assert store.load(other) is None


def test_a_second_client_sees_the_first_clients_writes(harness: Harness, unique_id: str) -> None:
    a, b = harness.client(), harness.client()
    assert a.save(snap(unique_id, 1, note="from-a"), None)
    assert json.loads(b.load(unique_id))["definitionId"] == "def-from-a"
    assert b.save(snap(unique_id, 2, note="from-b"), 1)
    assert a.save(snap(unique_id, 2, note="late-a"), 1) is False
    assert json.loads(a.load(unique_id))["definitionId"] == "def-from-b"


def test_exactly_one_creator_among_eight(harness: Harness, unique_id: str) -> None:
    results = harness.race(8, lambda c: c.save(snap(unique_id, 1), None))
    assert sorted(results) == [False] * 7 + [True]


def test_exactly_one_updater_among_eight(harness: Harness, unique_id: str) -> None:
    assert harness.client().save(snap(unique_id, 1), None)
    results = harness.race(8, lambda c: c.save(snap(unique_id, 2, note=f"{id(c)}"), 1))
    assert sorted(results) == [False] * 7 + [True]
    assert json.loads(harness.client().load(unique_id))["cursor"] == 2


def test_counter_workload_loses_no_update(harness: Harness, unique_id: str) -> None:
    """4 clients x 15 increments through CAS retry loops: final cursor == acknowledged saves."""
    assert harness.client().save(snap(unique_id, 1), None)

    def worker(c: Client) -> int:
        acked = 0
        while acked < 15:
            current = json.loads(c.load(unique_id))["cursor"]
            if c.save(snap(unique_id, current + 1), current):
                acked += 1
        return acked

    acked = harness.race(4, worker)
    assert json.loads(harness.client().load(unique_id))["cursor"] == 1 + sum(acked)
    assert sum(acked) == 60


def test_close_leaves_no_open_connection(harness: Harness, unique_id: str) -> None:
    c = harness.client()
    assert c.save(snap(unique_id, 1), None)
    assert c.save(snap(unique_id, 2), 1)
    assert c.load(unique_id) is not None
    expected_open = 0 if harness.name == "memory" else 1
    assert c.adapter.open_connections() == expected_open
    c.close()
    assert c.adapter.open_connections() == 0
    if harness.name != "memory":
        reopened = Client(c.adapter, c.is_async)  # a live loop for the closed async adapter
        with pytest.raises(StorageUnavailable):
            reopened.load(unique_id)
        with pytest.raises(StorageUnavailable):
            reopened.save(snap(unique_id, 3), 2)
        assert c.adapter.open_connections() == 0
        reopened.close()  # closing twice is fine
