"""The audit index (ADR-0139) on every shipped adapter, sync and async.

Each test body runs once per backend and flavour through the :class:`Client` facade. A record
created under ``audit:`` is listed, at its last write, by the write itself: a losing create
changes nothing, ``delete_record`` / ``delete`` unlist, no other record is ever listed; pages
are keyset pages in ``(written_ms, session_id, key)`` order.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from storage_harness import Client, Harness

from akchat_fsm import ConfigError
from akchat_fsm.integrations.ledger import (
    ClaimRequest,
    SettleAuditEntry,
    SettleRefused,
    args_digest,
    plan_execute,
    plan_settle_unknown,
)
from akchat_fsm.session.audit import AuditPage, audit_log, audit_log_async
from akchat_fsm.session.effects import LoadRecord, RunBody, SaveRecord
from akchat_fsm.session.settle_audit import Decider
from akchat_fsm.storage import AsyncAuditIndex, AuditIndex, AuditRef, AuditRefPage

AUDIT_BACKENDS = [
    pytest.param("memory"),
    pytest.param("sqlite"),
    pytest.param("postgres", marks=pytest.mark.postgres),
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
]

pytestmark = pytest.mark.parametrize("backend", AUDIT_BACKENDS, indirect=True)

TEXT = '{"v":1}'


def page(c: Client, **kwargs: Any) -> AuditRefPage:
    got = c._call("list_audit", **kwargs)
    assert isinstance(got, AuditRefPage)
    return got


def walk(c: Client, limit: int = 1000, after: str | None = None, **kwargs: Any) -> list[AuditRef]:
    rows: list[AuditRef] = []
    for _ in range(100):
        got = page(c, after=after, limit=limit, **kwargs)
        assert len(got.items) <= limit
        rows += got.items
        after = got.next_after
        if after is None:
            return rows
    raise AssertionError("the walk did not end")


def keys(rows: list[AuditRef]) -> list[tuple[str, str]]:
    return [(r.session_id, r.key) for r in rows]


def test_the_adapter_has_the_capability(harness: Harness) -> None:
    c = harness.client()
    assert isinstance(c.adapter, AsyncAuditIndex if harness.is_async else AuditIndex)


def test_an_audit_record_is_listed_by_its_create_and_no_other_record_is(harness: Harness) -> None:
    a, b = harness.client(), harness.client()
    assert page(b) == AuditRefPage((), None)
    before = int(time.time() * 1000)
    assert a.save_record("s-a", "audit:t1:0000000000000003", TEXT, None)
    assert a.save_record("s-a", "ledger:t1", TEXT, None)
    assert a.save_record("s-a", "auditx:t1", TEXT, None)  # not the prefix
    assert a.save_record("s-b", "audit:t2:0000000000000001", TEXT, None, processing=True)
    after = int(time.time() * 1000)
    rows = walk(b)
    assert sorted(keys(rows)) == [
        ("s-a", "audit:t1:0000000000000003"),
        ("s-b", "audit:t2:0000000000000001"),
    ]
    assert all(before - 5 <= r.written_ms <= after + 5 for r in rows)  # the adapter's clock
    assert rows == sorted(rows, key=lambda r: (r.written_ms, r.session_id, r.key))
    # A losing create changes nothing; the record keeps its text and its entry.
    assert not b.save_record("s-a", "audit:t1:0000000000000003", '{"v":2}', None)
    assert walk(a) == rows


def test_a_settle_entry_is_listed_as_a_decision_is(harness: Harness) -> None:
    # ADR-0139 amended: an operator's settle (ADR-0136) is in the cross-session audit too.
    a, b = harness.client(), harness.client()
    settle = "audit-settle:c1:0000000000000002:n1"
    assert a.save_record("s-a", settle, TEXT, None)
    assert a.save_record("s-a", "auditor:c1", TEXT, None)  # neither prefix
    assert a.save_record("s-b", "audit", TEXT, None)
    assert a.save_record("s-b", "audit:t2:0000000000000001", TEXT, None)
    assert sorted(keys(walk(b))) == [("s-a", settle), ("s-b", "audit:t2:0000000000000001")]
    assert not b.save_record("s-a", settle, '{"v":2}', None)  # create-only: listed once
    a.delete_record("s-a", settle)
    assert keys(walk(b)) == [("s-b", "audit:t2:0000000000000001")]


def _effect(c: Client, effect: Any) -> Any:
    if isinstance(effect, LoadRecord):
        return c.load_record(effect.session_id, effect.key)
    assert isinstance(effect, SaveRecord), effect
    return c.save_record(
        effect.session_id,
        effect.key,
        effect.text,
        effect.expected_version,
        processing=effect.processing,
    )


def _audit_log(harness: Harness, c: Client, **kwargs: Any) -> AuditPage:
    if not harness.is_async:
        return audit_log(c.adapter, **kwargs)
    assert c._runner is not None
    return c._runner.run(audit_log_async(c.adapter, **kwargs))


def test_audit_log_lists_the_settles_and_a_lost_one_is_not_applied(harness: Harness) -> None:
    # ADR-0136's entries through ADR-0139's index: ana's settle applied, bo's lost its race.
    c = harness.client()
    request = ClaimRequest("c1", "send", args_digest({}), "dead", "nonce", 5)
    claim = plan_execute("s-l", request)  # a claimant that died inside the body
    effect = next(claim)
    while not isinstance(effect, RunBody):
        effect = claim.send(_effect(c, effect))
    claim.close()

    def settle(operator: str) -> Any:
        return plan_settle_unknown(
            "s-l",
            "c1",
            ran=False,
            result=None,
            operator=operator,
            now_ms=1,
            settler=Decider(operator),
        )

    bo = settle("bo")
    load = next(bo)
    create = bo.send(_effect(c, load))
    cas = bo.send(_effect(c, create))  # bo's entry is written; its compare-and-set is next
    ana = settle("ana")
    effect = next(ana)
    with pytest.raises(StopIteration):
        while True:
            effect = ana.send(_effect(c, effect))
    reread = bo.send(_effect(c, cas))  # lost: ana's write came first
    with pytest.raises(SettleRefused):
        bo.send(_effect(c, reread))
    walked: list[Any] = []
    after = None
    for _ in range(5):  # pages of one: the marks do not depend on the page
        got = _audit_log(harness, c, after=after, limit=1)
        walked += got.entries
        if (after := got.next_after) is None:
            break
    assert all(isinstance(e, SettleAuditEntry) for e in walked)
    assert sorted((e.principal, e.decided) for e in walked) == [("ana", True), ("bo", False)]
    assert [e.to_json()["kind"] for e in walked] == ["settle", "settle"]
    assert walked == list(_audit_log(harness, c, limit=10).entries)


def test_delete_record_and_delete_unlist(harness: Harness) -> None:
    c = harness.client()
    for sid in ("s-a", "s-b"):
        for n in range(3):
            assert c.save_record(sid, f"audit:t{n}:{n:016d}", TEXT, None)
    c.delete_record("s-a", "audit:t1:0000000000000001")
    c.delete_record("s-a", "audit:never")  # a missing record: nothing happens
    c.delete("s-b")
    assert sorted(keys(walk(c))) == [
        ("s-a", "audit:t0:0000000000000000"),
        ("s-a", "audit:t2:0000000000000002"),
    ]
    # Re-created, it is listed again (once).
    assert c.save_record("s-b", "audit:t0:0000000000000000", TEXT, None)
    assert len(walk(c)) == 3


def test_pages_walk_every_row_once_in_order_and_since_bounds_them(harness: Harness) -> None:
    c = harness.client()
    written = []
    for n in range(7):
        sid = f"s-{n % 3}"
        assert c.save_record(sid, f"audit:t{n}:{n:016d}", TEXT, None)
        written.append((sid, f"audit:t{n}:{n:016d}"))
    whole = walk(c)
    assert sorted(keys(whole)) == sorted(written)
    assert whole == sorted(whole, key=lambda r: (r.written_ms, r.session_id, r.key))
    assert walk(c, limit=2) == whole and walk(c, limit=1) == whole
    cut = whole[-1].written_ms
    assert walk(c, since_ms=cut) == [r for r in whole if r.written_ms >= cut]
    assert walk(c, since_ms=cut + 1) == []
    assert walk(c, since_ms=-5) == whole  # clamped: no write is older than 0


def test_pages_continue_after_their_cursor_while_others_write(harness: Harness) -> None:
    a, b = harness.client(), harness.client()
    for n in range(4):
        assert a.save_record(f"s-{n}", f"audit:t{n}:00", TEXT, None)
    first = page(b, limit=2)
    assert len(first.items) == 2 and first.next_after is not None
    seen = list(first.items)
    a.delete_record(seen[0].session_id, seen[0].key)  # already seen: no effect on the rest
    # Written after the cursor's row: a later instant, or the same one and a larger id.
    assert a.save_record("s-late", "audit:late:00", TEXT, None)
    rest = walk(b, limit=2, after=first.next_after)
    assert len(rest) == 3 and rest[-1].key == "audit:late:00"
    assert not {(r.session_id, r.key) for r in rest} & {(r.session_id, r.key) for r in seen}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"limit": 0},
        {"limit": True},
        {"since_ms": "1"},
        {"after": "p1.abc"},
        {"after": 7},
    ],
)
def test_bad_arguments_are_config_errors(harness: Harness, kwargs: dict[str, Any]) -> None:
    c = harness.client()
    with pytest.raises(ConfigError):
        page(c, **kwargs)


def test_a_pending_index_cursor_is_not_an_audit_cursor(harness: Harness) -> None:
    from akchat_fsm import ConfirmationBinding, SessionSnapshot

    c = harness.client()
    binding = ConfirmationBinding(
        token="tok-1", action="pay", input={}, tool_call_id="c1", expires_at=9, status="pending"
    )
    for sid in ("s-a", "s-b"):
        snap = SessionSnapshot(
            session_id=sid,
            definition_id="d",
            definition_revision=1,
            updated_at="2026-11-29T00:00:00.000Z",
            cursor=0,
            confirmations=(binding,),
        )
        assert c.save(snap, None)
    cursor = c._call("list_pending", limit=1).next_after
    assert cursor is not None
    with pytest.raises(ConfigError):
        page(c, after=cursor)


def test_racing_creates_of_one_entry_list_it_once(harness: Harness) -> None:
    won = harness.race(4, lambda c: c.save_record("s-r", "audit:t:0000000000000001", TEXT, None))
    assert won.count(True) == 1
    assert keys(walk(harness.client())) == [("s-r", "audit:t:0000000000000001")]
