"""The pending index (ADR-0029) on every adapter that has it, sync and async.

Each test body runs once per backend and flavour through the :class:`Client` facade. A row
exists iff its binding is ``pending`` in the saved snapshot; it is written by the envelope's
own compare-and-set, so a losing save changes nothing and ``delete`` removes the rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from storage_harness import Client, Harness

from akchat_fsm import ConfigError, ConfirmationBinding, ConfirmationStatus, SessionSnapshot
from akchat_fsm.storage import AsyncPendingIndex, PendingApproval, PendingIndex, PendingPage

PENDING_BACKENDS = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("postgres-serializable", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
]

pytestmark = pytest.mark.parametrize("backend", PENDING_BACKENDS, indirect=True)


def binding(
    n: int, status: str = "pending", *, expires: int | None = None, action: str = "pay"
) -> ConfirmationBinding:
    return ConfirmationBinding(
        token=f"tok-{n}",
        action=action,
        input={"n": n},
        tool_call_id=f"call-{n}",
        expires_at=expires if expires is not None else 10_000 + n,
        status=ConfirmationStatus(status),
    )


def snap(sid: str, cursor: int, *bindings: ConfirmationBinding) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=sid,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=cursor,
        confirmations=bindings,
    )


def pending(c: Client, **kwargs: Any) -> PendingPage:
    page = c._call("list_pending", **kwargs)
    assert isinstance(page, PendingPage)
    return page


def find(c: Client, token: str) -> str | None:
    found = c._call("find_token", token)
    assert found is None or isinstance(found, str)
    return found


def tokens(page: PendingPage) -> list[str]:
    return [item.token for item in page.items]


def test_the_adapter_has_the_capability(harness: Harness) -> None:
    c = harness.client()
    kind = AsyncPendingIndex if harness.is_async else PendingIndex
    assert isinstance(c.adapter, kind)


def test_a_binding_is_listed_iff_it_is_pending_in_the_saved_snapshot(harness: Harness) -> None:
    c = harness.client()
    assert pending(c) == PendingPage((), None)
    assert c.save(snap("s-a", 0, binding(1), binding(2, "approving"), binding(3, "expired")), None)
    page = pending(c)
    assert tokens(page) == ["tok-1"] and page.next_after is None
    item = page.items[0]
    assert isinstance(item, PendingApproval)
    assert (item.session_id, item.tool_call_id, item.action, item.expires_at_ms) == (
        "s-a",
        "call-1",
        "pay",
        10_001,
    )
    assert find(c, "tok-1") == "s-a"
    assert find(c, "tok-2") is None  # processing: not pending
    assert find(c, "tok-9") is None
    # The claim (pending -> approving) removes the row in the same write.
    assert c.save(snap("s-a", 1, binding(1, "approving"), binding(2, "approving")), 0)
    assert pending(c).items == ()
    assert find(c, "tok-1") is None


def test_a_losing_save_changes_nothing(harness: Harness) -> None:
    c = harness.client()
    assert c.save(snap("s-l", 0, binding(1)), None)
    assert not c.save(snap("s-l", 6, binding(1, "approving")), 5)
    assert not c.save(snap("s-l", 0, binding(2)), None)
    assert tokens(pending(c)) == ["tok-1"]


def test_pending_since_is_kept_by_later_writes_and_reset_by_a_new_pending(harness: Harness) -> None:
    c = harness.client()
    assert c.save(snap("s-t", 0, binding(1)), None)
    first = pending(c).items[0].pending_since_ms
    assert first > 1_700_000_000_000  # the adapter's wall clock, epoch ms
    # Another binding added later: the first keeps its instant.
    assert c.save(snap("s-t", 1, binding(1), binding(2)), 0)
    by_token = {i.token: i.pending_since_ms for i in pending(c).items}
    assert by_token["tok-1"] == first and by_token["tok-2"] >= first
    # Claimed then released back to pending: a new pending spell, a new instant.
    assert c.save(snap("s-t", 2, binding(1, "approving"), binding(2)), 1)
    assert tokens(pending(c)) == ["tok-2"]
    assert c.save(snap("s-t", 3, binding(1), binding(2)), 2)
    again = {i.token: i.pending_since_ms for i in pending(c).items}
    assert again["tok-2"] == by_token["tok-2"] and again["tok-1"] >= by_token["tok-2"]


def test_delete_removes_the_rows(harness: Harness) -> None:
    c = harness.client()
    assert c.save(snap("s-d", 0, binding(1)), None)
    assert c.save(snap("s-e", 0, binding(2)), None)
    c.delete("s-d")
    assert tokens(pending(c)) == ["tok-2"]
    assert find(c, "tok-1") is None
    # Re-created after the delete: pending again, and listed.
    assert c.save(snap("s-d", 0, binding(1)), None)
    assert sorted(tokens(pending(c))) == ["tok-1", "tok-2"]


def _fill(c: Client) -> None:
    # 12 bindings in 4 sessions; expiries collide across sessions to exercise the tie-breaks.
    for s in range(4):
        bs = [
            binding(10 * s + k, expires=1_000 + k, action="pay" if k % 2 else "ship")
            for k in range(3)
        ]
        assert c.save(snap(f"s-{s}", 0, *bs), None)


def test_expiry_order_and_filters(harness: Harness) -> None:
    c = harness.client()
    _fill(c)
    page = pending(c, limit=1000)
    keys = [(i.expires_at_ms, i.session_id, i.tool_call_id) for i in page.items]
    assert keys == sorted(keys) and len(keys) == 12
    assert {i.action for i in pending(c, action="pay").items} == {"pay"}
    assert len(pending(c, action="pay").items) == 4
    assert {i.session_id for i in pending(c, session_id="s-2").items} == {"s-2"}
    assert [i.expires_at_ms for i in pending(c, expiring_before_ms=1_001).items] == [1_000] * 4
    assert pending(c, action="nothing").items == ()
    now_ish = max(i.pending_since_ms for i in page.items) + 1
    assert len(pending(c, pending_before_ms=now_ish).items) == 12
    assert pending(c, pending_before_ms=0).items == ()
    both = pending(c, action="ship", session_id="s-1", expiring_before_ms=1_002)
    assert tokens(both) == ["tok-10"]


def test_newest_order_is_descending_since_then_ids(harness: Harness) -> None:
    c = harness.client()
    _fill(c)
    page = pending(c, order="newest", limit=1000)
    keys = [(i.pending_since_ms, i.session_id, i.tool_call_id) for i in page.items]
    assert keys == sorted(keys, reverse=True) and len(keys) == 12


@pytest.mark.parametrize("order", ["expiry", "newest"])
def test_pages_walk_every_row_once_in_order(harness: Harness, order: str) -> None:
    c = harness.client()
    _fill(c)
    whole = pending(c, order=order, limit=1000).items
    seen: list[PendingApproval] = []
    after = None
    for _ in range(20):
        page = pending(c, order=order, limit=5, after=after)
        seen += page.items
        after = page.next_after
        if after is None:
            break
    assert tuple(seen) == whole
    # An exact multiple: the last full page says there is no next one.
    assert pending(c, order=order, limit=12).next_after is None
    assert pending(c, order=order, limit=11).next_after is not None


def test_pages_are_stable_under_concurrent_writes(harness: Harness) -> None:
    c = harness.client()
    _fill(c)
    first = pending(c, limit=4)
    # A row before the cursor leaves, a row after it arrives: the walk neither repeats nor skips.
    assert c.save(
        snap(
            "s-0", 1, binding(0, "approving"), binding(1, expires=1_001), binding(2, expires=1_002)
        ),
        0,
    )
    assert c.save(snap("s-9", 0, binding(90, expires=5_000)), None)
    rest = pending(c, limit=1000, after=first.next_after)
    assert not set(tokens(first)) & set(tokens(rest))
    assert tokens(rest)[-1] == "tok-90"
    assert len(tokens(first)) + len(tokens(rest)) == 13  # 12, one gone (seen), one new


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": 1001},
        {"limit": True},
        {"limit": "5"},
        {"order": "oldest"},
        {"action": "not an id"},
        {"action": 5},
        {"session_id": ""},
        {"expiring_before_ms": 1.5},
        {"pending_before_ms": True},
        {"after": "garbage"},
        {"after": 7},
        {"after": "p1.!!!"},
        {"after": "p1." + "A" * 600},
    ],
)
def test_bad_arguments_are_config_errors(harness: Harness, kwargs: dict[str, Any]) -> None:
    c = harness.client()
    with pytest.raises(ConfigError):
        pending(c, **kwargs)


def test_a_cursor_of_the_other_order_is_refused(harness: Harness) -> None:
    c = harness.client()
    _fill(c)
    after = pending(c, limit=2).next_after
    assert after is not None
    with pytest.raises(ConfigError):
        pending(c, order="newest", after=after)


def test_find_token_refuses_a_non_identifier(harness: Harness) -> None:
    c = harness.client()
    for bad in ("", "a b", None, 3):
        with pytest.raises(ConfigError):
            find(c, bad)  # type: ignore[arg-type]


def test_find_token_picks_the_smallest_session_when_shared(harness: Harness) -> None:
    c = harness.client()
    assert c.save(snap("s-z", 0, binding(1)), None)
    assert c.save(snap("s-b", 0, binding(1)), None)
    assert find(c, "tok-1") == "s-b"


def test_racing_saves_leave_exactly_the_winners_rows(harness: Harness) -> None:
    c = harness.client()
    assert c.save(snap("s-r", 0, binding(0)), None)
    numbers = iter(range(1, 100))  # next() is atomic: each racer proposes its own binding

    def propose(racer: Client) -> tuple[bool, int]:
        n = next(numbers)
        return racer.save(snap("s-r", 1, binding(0, "approving"), binding(n)), 0), n

    results = harness.race(4, propose)
    winners = [n for won, n in results if won]
    assert len(winners) == 1, results
    assert tokens(pending(c)) == [f"tok-{winners[0]}"]
    assert find(c, "tok-0") is None
