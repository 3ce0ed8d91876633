"""Check of the optional ``SaveWithRecords`` capability (ADR-0141).

``save_with_records(snapshot, expected_cursor, records)`` is one atomic write: the envelope's
compare-and-set and the create-only record of every ``(key, text)``. It applies only if the
cursor matches and no key exists, else nothing at all is written. The check drives each
refusal on its own (a stale cursor must create no record; an existing key must leave the
envelope, and the other records, as they were), then races the write against plain record
creates of the same key and against itself: after every round the envelope moved if and
only if the records are the combined write's. A store that writes one half and then the
other fails it. A few dozen writes: it runs on every adapter in CI.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from ..storage.capabilities import RECORD_METHODS, SAVE_WITH_RECORDS_METHODS
from ._concurrent import run_threads
from ._envelopes import fresh_session_id, make_snapshot
from ._kit import CheckSkipped, KitContext, expect_stored, raise_if_workers_raised

__all__ = ["save_with_records"]

_TEXT = '{"v":1,"by":"combined"}'
_OTHER = '{"v":1,"by":"plain"}'
#: Rounds of each race (each a fresh cursor of one session).
_ROUNDS = 6


def _swr(storage: Any, snapshot: Any, expected: int | None, records: Any, what: str) -> bool:
    got = storage.save_with_records(snapshot, expected, records)
    if not isinstance(got, bool):
        raise AssertionError(f"{what}: save_with_records returned {got!r}, not a bool")
    return got


def _expect(
    storage: Any, snapshot: Any, expected: int | None, records: Any, want: bool, what: str
) -> None:
    got = _swr(storage, snapshot, expected, records, what)
    if got is not want:
        raise AssertionError(
            f"{what}: save_with_records(cursor={snapshot.cursor}, expected={expected}, "
            f"keys={[k for k, _ in records]}) returned {got}, expected {want}"
        )


def _record(storage: Any, sid: str, key: str) -> tuple[int, str] | None:
    got = storage.load_record(sid, key)
    return None if got is None else (got[0], got[1])


def _expect_record(storage: Any, sid: str, key: str, want: Any, what: str) -> None:
    got = _record(storage, sid, key)
    if got != want:
        shown = "nothing" if want is None else f"version {want[0]} with its text"
        raise AssertionError(f"{what}: load_record({key!r}) returned {got!r}, expected {shown}")


def save_with_records(ctx: KitContext) -> str:
    """All or nothing: both halves apply together; a stale cursor creates no record; an
    existing key leaves the envelope and the other records unchanged; under races the
    envelope moved iff the records are the combined write's."""
    a, b = ctx.instances(2)
    if not all(callable(getattr(a, m, None)) for m in SAVE_WITH_RECORDS_METHODS):
        raise CheckSkipped(
            "the adapter has no save_with_records (optional SaveWithRecords capability)"
        )
    if not all(callable(getattr(a, m, None)) for m in RECORD_METHODS):
        raise AssertionError("save_with_records creates records: it needs RecordStorage")
    sid = fresh_session_id("ck-swr")
    one = make_snapshot(sid, 1, "one")
    _expect(a, one, None, [("k:1", _TEXT)], True, "create the session with a record")
    expect_stored(b, sid, (1, "one"), "after a create with a record")
    _expect_record(b, sid, "k:1", (1, _TEXT), "the record a create made")

    two = make_snapshot(sid, 2, "two")
    ahead = make_snapshot(sid, 6, "ahead")
    _expect(a, ahead, 5, [("k:2", _TEXT)], False, "a save from a cursor that is not stored")
    expect_stored(b, sid, (1, "one"), "after a refused (stale cursor) save_with_records")
    _expect_record(
        b, sid, "k:2", None, "a refused envelope save must create no record (all or nothing)"
    )
    _expect(a, make_snapshot(sid, 1, "again"), None, [("k:2", _TEXT)], False, "a second create")
    _expect_record(b, sid, "k:2", None, "a refused create must create no record")

    if b.save_record(sid, "k:3", _OTHER, None) is not True:
        raise AssertionError("save_record could not create a fresh key")
    _expect(a, two, 1, [("k:4", _TEXT), ("k:3", _TEXT)], False, "a save whose key exists")
    expect_stored(b, sid, (1, "one"), "a refused record create must leave the envelope unchanged")
    _expect_record(b, sid, "k:3", (1, _OTHER), "the record that was there must be untouched")
    _expect_record(b, sid, "k:4", None, "the other record of a refused write must not exist")

    _expect(a, two, 1, [("k:4", _TEXT), ("k:5", _TEXT)], True, "a save with two records")
    expect_stored(b, sid, (2, "two"), "after a save with two records")
    for key in ("k:4", "k:5"):
        _expect_record(b, sid, key, (1, _TEXT), "a record the applied write created")
    stored = 2
    if callable(getattr(a, "list_audit", None)):  # the audit index is a capability of its own
        _audit_listed(a, b, sid)
        stored = 3
    _race_plain_creates(ctx, sid, stored)
    return (
        "all or nothing: a stale cursor created no record, an existing key left the envelope "
        f"and the other records unchanged; {_ROUNDS} rounds of races against plain creates "
        "and against itself kept envelope and records together"
    )


def _audit_listed(a: Any, b: Any, sid: str) -> None:
    from ..storage.checks import now_ms

    since = now_ms() - 60_000
    cursor = 3
    snapshot = make_snapshot(sid, cursor, "audited")
    key = "audit:ck-token:0000000000000002"
    _expect(a, snapshot, cursor - 1, [(key, _TEXT)], True, "a save with an audit record")
    listed: list[tuple[str, str]] = []
    after = None
    for _ in range(100):
        page = b.list_audit(since_ms=since, after=after, limit=1000)
        listed += [(item.session_id, item.key) for item in page.items]
        after = page.next_after
        if after is None:
            break
    if (sid, key) not in listed:
        raise AssertionError(
            "an audit: record created by save_with_records is not listed by list_audit: the "
            "audit index is part of the same atomic write"
        )


def _race_plain_creates(ctx: KitContext, sid: str, cursor: int) -> None:
    """Each round: one combined write at the stored cursor against a plain create of its key
    and another combined write of a fresh key from the same cursor."""
    clients = ctx.instances(3)
    for n in range(_ROUNDS):
        expected = cursor + n
        key, own = f"race:{n}", f"own:{n}"
        results: dict[str, Any] = {}
        moves: list[tuple[str, list[tuple[str, str]]]] = [
            ("c1", [(key, _TEXT)]),
            ("c2", [(own, _TEXT)]),
            ("plain", []),
        ]

        racer = functools.partial(_racer, clients, sid, key, expected, moves, results)
        outcomes = run_threads(3, racer)
        raise_if_workers_raised(outcomes, "a save_with_records race")
        # c2's key is fresh, so only c1's applied write can refuse it: exactly one applies.
        won = [tag for tag in ("c1", "c2") if results.get(tag) is True]
        if len(won) != 1:
            raise AssertionError(
                f"race round {n}: combined writes {won or 'none'} applied from one cursor: "
                "exactly one must (a refusal means the cursor moved or a key exists)"
            )
        winner, plain_won = won[0], results.get("plain") is True
        stored = _observed(clients[0], sid)
        if stored != (expected + 1, winner):
            raise AssertionError(f"race round {n}: {winner} returned True but load shows {stored}")
        want = {
            # c1 applied: its record is K, so the plain create of K lost
            "c1": ((1, _TEXT), None, False),
            # c2 applied, so c1 lost, which only K's plain create can cause at that cursor
            "c2": ((1, _OTHER), (1, _TEXT), True),
        }[winner]
        got = (_record(clients[0], sid, key), _record(clients[0], sid, own), plain_won)
        if got != want:
            raise AssertionError(
                f"race round {n}: {winner} applied; records ({key!r}, {own!r}) and the plain "
                f"create's answer are {got}, expected {want}: a record exists iff its write "
                "applied, and a refused combined write created nothing"
            )


def _racer(
    clients: list[Any],
    sid: str,
    key: str,
    expected: int,
    moves: list[tuple[str, list[tuple[str, str]]]],
    results: dict[str, Any],
    i: int,
    barrier: threading.Barrier,
) -> Any:
    """One racer of a round: a plain create of ``key``, or a combined write from ``expected``."""
    tag, records = moves[i]
    barrier.wait()
    if tag == "plain":
        results[tag] = clients[i].save_record(sid, key, _OTHER, None)
    else:
        snapshot = make_snapshot(sid, expected + 1, tag)
        results[tag] = _swr(clients[i], snapshot, expected, records, "a race")
    return results[tag]


def _observed(storage: Any, sid: str) -> Any:
    from ._envelopes import observe

    return observe(storage.load(sid), sid)
