"""Checks of the optional ``PendingIndex`` capability (ADR-0029).

A binding is listed iff it is ``pending`` in the session's saved snapshot; the rows are written
by the envelope's own compare-and-set (a losing save changes none) and removed by ``delete``.
The reference every listing is compared with is computed from the envelopes the kit loads back,
except ``pending_since_ms`` (the adapter's clock), taken from the adapter's own rows and then
held to its rules: kept by later writes, and the sort key of the "newest" order.

The store may hold other data: every listing is filtered by an action (or a session) no one
else uses, except one walk of the "newest" order, bounded by time, that finds the kit's rows
among the others in the right order.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from ..wire.session import ConfirmationBinding, SessionSnapshot
from ._concurrent import run_threads
from ._envelopes import UPDATED_AT, decode_loaded, fresh_session_id
from ._kit import CheckSkipped, KitContext, expect_save, has_delete, raise_if_workers_raised

__all__ = ["pending_index", "pending_index_filters", "pending_index_pages"]

_METHODS = ("list_pending", "find_token")
_ORDERS = ("expiry", "newest")
#: (token suffix, status, expiry ms, action index): one binding of a kit envelope.
Binding = tuple[int, str, int, int]
#: A row as compared: (session id, token, tool call id, action, expiry, since).
Row = tuple[str, str, str, str, int, int]


def _require_pending(storage: Any) -> None:
    missing = [m for m in _METHODS if not callable(getattr(storage, m, None))]
    if len(missing) == len(_METHODS):
        raise CheckSkipped("the adapter has no pending index (optional PendingIndex capability)")
    if missing:
        raise AssertionError(
            f"the adapter has part of the pending index but not {missing}: "
            "PendingIndex is list_pending and find_token, or neither"
        )


class _Run:
    """One check's names: a tag no other run shares, its actions, tokens and sessions."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.actions = (f"ck.{self.tag}.a", f"ck.{self.tag}.b")

    def token(self, sid: str, n: int) -> str:
        return f"tok-{sid[-8:]}-{n}"

    def snapshot(
        self, sid: str, cursor: int, bindings: Iterable[Binding], tokens_of: str | None = None
    ) -> SessionSnapshot:
        """``tokens_of``: name the tokens after that session instead (a token two share)."""
        return SessionSnapshot(
            session_id=sid,
            definition_id="conformance",
            definition_revision=1,
            updated_at=UPDATED_AT,
            cursor=cursor,
            confirmations=tuple(
                ConfirmationBinding(
                    token=self.token(tokens_of or sid, n),
                    action=self.actions[act],
                    input={"n": n},
                    tool_call_id=f"call-{n}",
                    expires_at=expires,
                    status=status,
                )
                for n, status, expires, act in bindings
            ),
        )


def _row(item: Any) -> Row:
    return (
        item.session_id,
        item.token,
        item.tool_call_id,
        item.action,
        item.expires_at_ms,
        item.pending_since_ms,
    )


def _key(row: Row, order: str) -> tuple[int, str, str]:
    return (row[4] if order == "expiry" else row[5], row[0], row[2])


def _walk(storage: Any, limit: int = 1000, pages: int = 200, **query: Any) -> list[Row]:
    """Every row of a query, page after page (``pages`` at most), as :data:`Row` tuples."""
    rows: list[Row] = []
    after = None
    for _ in range(pages):
        page = storage.list_pending(limit=limit, after=after, **query)
        rows += [_row(item) for item in page.items]
        if len(page.items) > limit:
            raise AssertionError(f"list_pending(limit={limit}) returned {len(page.items)} rows")
        after = page.next_after
        if after is None:
            return rows
    raise AssertionError(f"list_pending{query} did not end within {pages} pages of {limit}")


def _from_envelopes(storage: Any, sessions: Iterable[str]) -> set[Row]:
    """The rows the loaded envelopes say must be listed (``since`` left 0: not in them)."""
    rows: set[Row] = set()
    for sid in sessions:
        snapshot = decode_loaded(storage.load(sid))
        for b in () if snapshot is None else snapshot.confirmations:
            if b.status == "pending":
                rows.add((sid, b.token, b.tool_call_id, b.action, int(b.expires_at), 0))
    return rows


def _without_since(rows: Iterable[Row]) -> set[Row]:
    return {(*row[:5], 0) for row in rows}


def _tokens(storage: Any, run: _Run, action: int = 0) -> set[str]:
    return {row[1] for row in _walk(storage, action=run.actions[action])}


def _expect_tokens(storage: Any, run: _Run, want: set[str], what: str) -> None:
    got = _tokens(storage, run)
    if got != want:
        raise AssertionError(
            f"{what}: list_pending lists tokens {sorted(got)}, expected {sorted(want)} (a "
            "binding is listed iff it is pending in the session's saved snapshot)"
        )


def _expect_found(storage: Any, token: str, want: str | None, what: str) -> None:
    got = storage.find_token(token)
    if got != want:
        raise AssertionError(f"{what}: find_token({token!r}) returned {got!r}, expected {want!r}")


def pending_index(ctx: KitContext) -> str:
    """A binding is listed after the save that makes it pending, unlisted after the save that
    decides it and after delete; a losing save changes no row; find_token agrees."""
    a, b = ctx.instances(2)
    _require_pending(a)
    run = _Run()
    sid = fresh_session_id("ck-pend")

    def tok(n: int) -> str:
        return run.token(sid, n)

    first = [(1, "pending", 5_000, 0), (2, "approving", 5_000, 0), (3, "expired", 5_000, 0)]
    expect_save(a, run.snapshot(sid, 1, first), None, True, "create with one pending binding")
    _expect_tokens(b, run, {tok(1)}, "after the create (another instance)")
    _expect_found(b, tok(1), sid, "a pending token")
    _expect_found(b, tok(2), None, "a processing (approving) token")
    _expect_found(b, tok(3), None, "a decided (expired) token")
    _expect_found(b, f"tok-{run.tag}-never", None, "a token never saved")
    since = {row[1]: row[5] for row in _walk(b, session_id=sid)}
    losing = [
        (run.snapshot(sid, 1, [(4, "pending", 6_000, 0)]), None, "a create of an existing session"),
        (run.snapshot(sid, 6, [(5, "pending", 6_000, 0)]), 5, "a save from a future cursor"),
        (run.snapshot(sid, 1, [(1, "approving", 5_000, 0)]), 0, "a save from a stale cursor"),
    ]
    for snapshot, expected, what in losing:
        expect_save(b, snapshot, expected, False, what)
        got = {row[1]: row[5] for row in _walk(a, session_id=sid)}
        if got != since:
            raise AssertionError(
                f"after {what} that returned False, the session's rows are {got}, expected "
                f"{since}: a save that loses its compare-and-set must change no row (the index "
                "is written by the same atomic write as the envelope)"
            )
    for n in (4, 5):
        _expect_found(a, tok(n), None, "a token only a losing save carried")
    later = [(1, "pending", 5_000, 0), (6, "pending", 7_000, 0)]
    expect_save(b, run.snapshot(sid, 2, later), 1, True, "add a second pending binding")
    _expect_tokens(a, run, {tok(1), tok(6)}, "after a second binding became pending")
    kept = {row[1]: row[5] for row in _walk(a, session_id=sid)}
    if kept.get(tok(1)) != since[tok(1)]:
        raise AssertionError(
            f"pending_since_ms of a binding still pending changed from {since[tok(1)]} to "
            f"{kept.get(tok(1))} on a later save: it is the instant it first became pending"
        )
    decided = [(1, "approving", 5_000, 0), (6, "pending", 7_000, 0)]
    expect_save(a, run.snapshot(sid, 3, decided), 2, True, "claim the first binding")
    _expect_tokens(b, run, {tok(6)}, "after the save that claimed a binding")
    _expect_found(b, tok(1), None, "a token claimed by the last save")
    _expect_found(b, tok(6), sid, "a token still pending")
    # Another session holding the same token pending: find_token names the smallest id.
    other = fresh_session_id("ck-pend")
    shared = run.snapshot(other, 1, [(6, "pending", 7_000, 0)], tokens_of=sid)
    expect_save(a, shared, None, True, "another session with the same pending token")
    _expect_found(b, tok(6), min(sid, other), "a token pending in two sessions (the smallest id)")
    if has_delete(a):
        a.delete(other)
        _expect_found(b, tok(6), sid, "after delete(session_id) of the other session sharing it")
    if not has_delete(a):
        return "listed iff pending in the saved snapshot; losing saves change no row"
    a.delete(sid)
    _expect_tokens(b, run, set(), "after delete(session_id)")
    _expect_found(b, tok(6), None, "a token of a deleted session")
    expect_save(b, run.snapshot(sid, 1, later), None, True, "re-create after delete")
    _expect_tokens(a, run, {tok(1), tok(6)}, "after the re-create")
    return "listed iff pending in the saved snapshot; losing saves change no row; delete unlists"


def _fill(storage: Any, run: _Run, sessions: int, per: int) -> list[str]:
    """Sessions of ``per`` bindings: expiries collide across sessions, actions alternate, and
    every third binding is decided (not listed). Saved a few ms apart: their since differ."""
    sids = [fresh_session_id("ck-pend") for _ in range(sessions)]
    for s, sid in enumerate(sids):
        bindings = [
            (k, "rejected" if k % 3 == 2 else "pending", 1_000 + (k + s) % per, k % 2)
            for k in range(per)
        ]
        expect_save(storage, run.snapshot(sid, 1, bindings), None, True, "create a session")
        time.sleep(0.002)  # the index's clock is in ms: keep some since values apart
    return sids


def pending_index_filters(ctx: KitContext) -> str:
    """Every filter, alone and combined, in both orders, lists exactly the rows the envelopes
    say, sorted by the order's key; the unfiltered "newest" order holds them in order too."""
    a, b = ctx.instances(2)
    _require_pending(a)
    run = _Run()
    started = _now_ms()
    sids = _fill(a, run, sessions=4, per=6)
    # The adapter's own rows, by session: they must be the envelopes' (their since is theirs).
    rows: list[Row] = []
    for sid in sids:
        listed = _walk(b, session_id=sid)
        if _without_since(listed) != _from_envelopes(b, [sid]):
            raise AssertionError(
                f"list_pending(session_id=...) lists {sorted(_without_since(listed))}, the "
                f"session's envelope says {sorted(_from_envelopes(b, [sid]))}"
            )
        rows += listed
    since = sorted({row[5] for row in rows})
    cut_since = since[len(since) // 2] if len(since) > 1 else since[0] + 1
    filters: list[dict[str, Any]] = [
        {},
        {"expiring_before_ms": 1_003},
        {"pending_before_ms": cut_since},
        {"session_id": sids[1]},
        {"expiring_before_ms": 1_004, "pending_before_ms": cut_since},
        {"session_id": sids[2], "expiring_before_ms": 1_002},
    ]
    for act, action in enumerate(run.actions):
        for order in _ORDERS:
            for extra in filters:
                want = sorted(
                    (r for r in rows if r[3] == action and _admits(r, extra)),
                    key=lambda r: _key(r, order),
                    reverse=order == "newest",
                )
                for limit in (1000, 2):
                    got = _walk(a, limit=limit, action=action, order=order, **extra)
                    if got != want:
                        raise AssertionError(
                            f"list_pending(action=<{'ab'[act]}>, order={order!r}, limit={limit}"
                            f", {_show(extra)}) returned {_brief(got)}, expected {_brief(want)}"
                            f" ({_sort_rule(order)})"
                        )
    ours = {r[1] for r in rows}
    seen = _recent_newest(a, started)
    unfiltered = "not reached: over 10,000 rows written in the last minute"
    if seen is not None:
        unfiltered = "holds them in order"
        mine = [r for r in seen if r[1] in ours]
        want = sorted(rows, key=lambda r: _key(r, "newest"), reverse=True)
        if mine != want:
            raise AssertionError(
                f"list_pending(order='newest') without filters holds this check's rows as "
                f"{_brief(mine)}, expected {_brief(want)} ({_sort_rule('newest')})"
            )
    return (
        f"{len(rows)} rows: action, session, expiry and age filters, alone and combined, in "
        f"both orders and in pages of 2, agree with the envelopes; the unfiltered walk "
        f"{unfiltered}"
    )


def _admits(row: Row, extra: dict[str, Any]) -> bool:
    if "session_id" in extra and row[0] != extra["session_id"]:
        return False
    if "expiring_before_ms" in extra and not row[4] < extra["expiring_before_ms"]:
        return False
    return not ("pending_before_ms" in extra and not row[5] < extra["pending_before_ms"])


def _recent_newest(storage: Any, started: int) -> list[Row] | None:
    """The unfiltered "newest" walk down to a minute before ``started`` (``None``: the store
    holds too many recent rows to reach it within 20 pages of 500)."""
    seen: list[Row] = []
    after = None
    for _ in range(20):
        page = storage.list_pending(order="newest", limit=500, after=after)
        seen += [_row(item) for item in page.items]
        after = page.next_after
        if after is None or (seen and seen[-1][5] < started - 60_000):
            return seen
    return None


def pending_index_pages(ctx: KitContext) -> str:
    """Keyset pages stay stable while other writes happen: disjoint, in order, every row that
    stays pending seen exactly once, a row decided before its page never seen."""
    a, b = ctx.instances(2)
    _require_pending(a)
    for order in _ORDERS:
        _pages_under_interleaved_writes(a, b, order)
    _pages_under_a_concurrent_writer(a, b)
    return "pages of 3 in both orders: disjoint, ordered, complete while others write"


def _pages_under_interleaved_writes(a: Any, b: Any, order: str) -> None:
    run = _Run()
    sids = [fresh_session_id("ck-pend") for _ in range(4)]
    plan = {sid: [(k, "pending", 2_000 + k, 0) for k in range(3)] for sid in sids}
    for sid in sids:
        expect_save(a, run.snapshot(sid, 1, plan[sid]), None, True, "create a session")
    action = run.actions[0]
    whole = _walk(b, action=action, order=order)
    if len(whole) != 12:
        raise AssertionError(f"12 pending bindings saved, list_pending lists {len(whole)}")
    first = b.list_pending(action=action, order=order, limit=3)
    seen = [_row(item) for item in first.items]
    # Between the pages, another instance decides a row already seen and the last row not yet
    # seen, and adds a row to a fifth session (in "expiry" order after the cursor: it must be
    # seen; in "newest" order before it: it must not).
    gone_seen, gone_ahead = seen[0], whole[-1]
    for sid in {gone_seen[0], gone_ahead[0]}:
        bindings = [
            (k, "approving" if run.token(sid, k) in {gone_seen[1], gone_ahead[1]} else s, e, x)
            for k, s, e, x in plan[sid]
        ]
        expect_save(a, run.snapshot(sid, 2, bindings), 1, True, "decide a row between pages")
        plan[sid] = bindings
    time.sleep(0.005)  # the index's clock is in ms: the new row is strictly the newest
    late = fresh_session_id("ck-pend")
    expect_save(a, run.snapshot(late, 1, [(9, "pending", 9_000, 0)]), None, True, "add a row")
    after = first.next_after
    for _ in range(50):
        if after is None:
            break
        page = b.list_pending(action=action, order=order, limit=3, after=after)
        seen += [_row(item) for item in page.items]
        after = page.next_after
    tokens = [row[1] for row in seen]
    twice = sorted({t for t in tokens if tokens.count(t) > 1})
    if twice:
        raise AssertionError(f"pages in {order!r} order repeat {twice}: pages must be disjoint")
    keys = [_key(row, order) for row in seen]
    if keys != sorted(keys, reverse=order == "newest"):
        raise AssertionError(f"pages in {order!r} order are not in order: {_brief(seen)}")
    stayed = [row for row in whole if row[1] not in {gone_seen[1], gone_ahead[1]}]
    missed = [row[1] for row in stayed if row[1] not in tokens]
    if missed:
        raise AssertionError(
            f"a walk in {order!r} order skipped {missed}, pending throughout, after another "
            "instance's writes between pages: a keyset page resumes after the cursor's key"
        )
    if gone_ahead[1] in tokens:
        raise AssertionError(
            f"a walk listed {gone_ahead[1]}, decided before its page was read: a page lists "
            "the rows pending when it is read"
        )
    new = run.token(late, 9) in tokens
    if new != (order == "expiry"):
        where = "after" if order == "expiry" else "before"
        raise AssertionError(
            f"a row added {where} the cursor was {'not ' if not new else ''}listed by the rest "
            f"of a walk in {order!r} order: pages continue from the cursor's key"
        )


def _pages_under_a_concurrent_writer(a: Any, b: Any) -> None:
    """A writer flips the rows of one session between pending and approving while another
    instance walks pages of 3: the other sessions' rows are each seen exactly once."""
    run = _Run()
    action = run.actions[0]
    steady = [fresh_session_id("ck-pend") for _ in range(4)]
    for sid in steady:
        rows = [(k, "pending", 3_000 + k, 0) for k in range(3)]
        expect_save(a, run.snapshot(sid, 1, rows), None, True, "create a session")
    busy = fresh_session_id("ck-pend")
    expect_save(a, run.snapshot(busy, 1, [(0, "pending", 3_001, 0)]), None, True, "create")
    stop = threading.Event()

    def work(i: int, barrier: threading.Barrier) -> Any:
        barrier.wait(30)
        if i == 0:
            cursor = 1
            while not stop.is_set() and cursor < 200:
                status = "approving" if cursor % 2 else "pending"
                bindings = [(0, status, 3_001, 0), (cursor, "pending", 3_000 + cursor % 4, 0)]
                if not a.save(run.snapshot(busy, cursor + 1, bindings), cursor):
                    raise AssertionError("the only writer of a session lost a save")
                cursor += 1
            return None
        try:
            return [_walk(b, limit=3, action=action) for _ in range(3)]
        finally:
            stop.set()

    results = run_threads(2, work)
    raise_if_workers_raised(results, "the writer and the reader")
    want = sorted(run.token(sid, k) for sid in steady for k in range(3))
    for walk in results[1]:
        tokens = [row[1] for row in walk]
        twice = sorted({t for t in tokens if tokens.count(t) > 1})
        if twice:
            raise AssertionError(f"pages read during concurrent writes repeat {twice}")
        keys = [_key(row, "expiry") for row in walk]
        if keys != sorted(keys):
            raise AssertionError(
                f"pages read during concurrent writes are not in order: {_brief(walk)}"
            )
        steady_seen = sorted(t for t in tokens if t not in _busy(run, busy))
        if steady_seen != want:
            raise AssertionError(
                f"pages read during concurrent writes to another session list {steady_seen} "
                f"of the untouched sessions' rows, expected each of {want} once"
            )


def _busy(run: _Run, sid: str) -> set[str]:
    return {run.token(sid, n) for n in range(201)}


def _show(extra: dict[str, Any]) -> str:
    return ", ".join(f"{k}=..." if k == "session_id" else f"{k}={v}" for k, v in extra.items())


def _brief(rows: list[Row]) -> str:
    shown = [f"{r[1]}(exp {r[4]}, since {r[5]})" for r in rows[:6]]
    return f"[{', '.join(shown)}{', ...' if len(rows) > 6 else ''}] ({len(rows)} rows)"


def _sort_rule(order: str) -> str:
    if order == "expiry":
        return "'expiry' sorts by ascending (expires_at_ms, session_id, tool_call_id)"
    return "'newest' sorts by descending (pending_since_ms, session_id, tool_call_id)"


def _now_ms() -> int:
    from ..storage.checks import now_ms

    return now_ms()
