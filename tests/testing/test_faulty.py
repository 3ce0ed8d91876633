"""FaultyStorage: faults before the call apply nothing, faults after it apply the write."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from doubles import AsyncDictStorage, DictStorage

from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageUnavailable
from akchat_fsm.testing.faulty import AsyncFaultyStorage, FaultyStorage, roll_fault
from akchat_fsm.wire.decode import decode_session_snapshot
from akchat_fsm.wire.session import Conversation, SessionSnapshot


def make_snapshot(session_id: str, cursor: int, marker: str) -> SessionSnapshot:
    """A valid v1 envelope whose conversation state is ``marker`` (to tell writes apart)."""
    return SessionSnapshot(
        session_id=session_id,
        definition_id="faulty",
        definition_revision=1,
        updated_at="2026-07-11T00:00:00.000Z",
        cursor=cursor,
        conversation=Conversation(state=marker, decisions=()),
        confirmations=(),
    )


def observe(raw: object) -> tuple[int, str] | None:
    """``(cursor, marker)`` of what ``load`` returned, or ``None`` when nothing is stored."""
    if raw is None:
        return None
    snapshot = decode_session_snapshot(raw).snapshot
    assert snapshot is not None and snapshot.conversation is not None
    return (snapshot.cursor, snapshot.conversation.state)


def test_unavailable_applies_nothing() -> None:
    inner = DictStorage()
    storage = FaultyStorage(inner, seed=1)
    storage.fail_next_save("unavailable")
    with pytest.raises(StorageUnavailable):
        storage.save(make_snapshot("s", 1, "a"), None)
    assert inner.load("s") is None
    assert storage.save(make_snapshot("s", 1, "a"), None) is True
    assert [(f.index, f.method, f.kind, f.inner_result) for f in storage.injected] == [
        (0, "save", "unavailable", None)
    ]


def test_unknown_after_apply_applies_the_write() -> None:
    inner = DictStorage()
    storage = FaultyStorage(inner, seed=1)
    storage.fail_next_save("unknown_after_apply")
    with pytest.raises(OutcomeUnknown):
        storage.save(make_snapshot("s", 1, "a"), None)
    assert observe(inner.load("s")) == (1, "a")
    assert storage.injected[0].inner_result is True


def test_unknown_after_a_refused_save_records_the_refusal() -> None:
    inner = DictStorage()
    inner.save(make_snapshot("s", 1, "a"), None)
    storage = FaultyStorage(inner)
    storage.fail_next_save("unknown_after_apply")
    with pytest.raises(OutcomeUnknown):
        storage.save(make_snapshot("s", 2, "b"), 7)
    assert storage.injected[0].inner_result is False
    assert observe(inner.load("s")) == (1, "a")


def test_explicit_schedule_by_call_index() -> None:
    storage = FaultyStorage(DictStorage(), schedule={1: "unavailable", 2: "unknown_after_apply"})
    assert storage.load("s") is None  # call 0
    with pytest.raises(StorageUnavailable):
        storage.load("s")  # call 1
    with pytest.raises(OutcomeUnknown):
        storage.save(make_snapshot("s", 1, "a"), None)  # call 2
    assert storage.calls == 3
    assert [f.index for f in storage.injected] == [1, 2]


def test_seeded_schedule_replays_and_respects_probabilities() -> None:
    def run(seed: int) -> list[tuple[int, str]]:
        storage = FaultyStorage(
            DictStorage(), seed=seed, p_unavailable=0.2, p_unknown_after_apply=0.2
        )
        for i in range(200):
            with contextlib.suppress(StorageUnavailable, OutcomeUnknown):
                storage.save(make_snapshot(f"s{i}", 1, "a"), None)
        return [(f.index, f.kind) for f in storage.injected]

    first = run(7)
    assert first == run(7)
    assert first != run(8)
    kinds = {kind for _, kind in first}
    assert kinds == {"unavailable", "unknown_after_apply"}
    assert 40 < len(first) < 120  # about 80 of 200 expected


def test_random_faults_on_load_are_never_unknown() -> None:
    kinds = {roll_fault(3, i, "load", 0.0, 1.0) for i in range(100)}
    assert kinds == {None}
    assert {roll_fault(3, i, "save", 0.0, 1.0) for i in range(100)} == {"unknown_after_apply"}


def test_delete_and_passthrough_attributes() -> None:
    inner = DictStorage()
    storage = FaultyStorage(inner)
    storage.save(make_snapshot("s", 1, "a"), None)
    storage.fail_next_delete("unknown_after_apply")
    with pytest.raises(OutcomeUnknown):
        storage.delete("s")
    assert inner.load("s") is None
    storage.close()
    assert inner.closed is True


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"p_unavailable": 1.5}, "p_unavailable"),
        ({"p_unavailable": 0.6, "p_unknown_after_apply": 0.6}, "exceed"),
        ({"schedule": {0: "boom"}}, "fault kind"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FaultyStorage(DictStorage(), **kwargs)  # type: ignore[arg-type]


def test_async_twin_injects_the_same_way() -> None:
    inner = AsyncDictStorage()
    storage = AsyncFaultyStorage(inner, schedule={0: "unavailable", 1: "unknown_after_apply"})

    async def scenario() -> tuple[object, object]:
        with pytest.raises(StorageUnavailable):
            await storage.save(make_snapshot("s", 1, "a"), None)
        before = observe(await inner.load("s"))
        with pytest.raises(OutcomeUnknown):
            await storage.save(make_snapshot("s", 1, "a"), None)
        return before, observe(await inner.load("s"))

    assert asyncio.run(scenario()) == (None, (1, "a"))
