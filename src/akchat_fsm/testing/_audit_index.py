"""Checks of the optional ``AuditIndex`` capability (ADR-0139).

A record created under ``audit:`` (a decision's) or ``audit-`` (another kind: an operator's
settle, ``audit-settle:``) is listed from its create (by the same atomic write) until
``delete_record`` or ``delete`` removes it, at the instant of its last write; no other record
is listed; a losing create changes nothing listed; pages are keyset pages in
``(written_ms, session_id, key)`` order. The store may hold other data: every walk starts at
``since_ms`` a little before the check began and keeps only this check's sessions. A handful
of writes: it runs on every adapter in CI.
"""

from __future__ import annotations

from typing import Any

from ._envelopes import fresh_session_id
from ._kit import CheckSkipped, KitContext, has_delete

__all__ = ["audit_index"]

_METHOD = "list_audit"
#: A listed row as compared: (written_ms, session id, key).
Row = tuple[int, str, str]
_TEXT = '{"v":1}'


def _walk(
    storage: Any, since_ms: int, limit: int, pages: int = 50, until_ms: int | None = None
) -> list[Row]:
    """Every row from ``since_ms`` on, page after page, as :data:`Row` tuples (``until_ms``:
    stop once a page reaches past that instant; the store may hold others' entries)."""
    rows: list[Row] = []
    after = None
    for _ in range(pages):
        page = storage.list_audit(since_ms=since_ms, after=after, limit=limit)
        if len(page.items) > limit:
            raise AssertionError(f"list_audit(limit={limit}) returned {len(page.items)} rows")
        rows += [(item.written_ms, item.session_id, item.key) for item in page.items]
        after = page.next_after
        if after is None or (until_ms is not None and rows and rows[-1][0] > until_ms):
            return rows
    raise AssertionError(f"list_audit(since_ms=...) did not end within {pages} pages of {limit}")


def _ours(rows: list[Row], sessions: set[str]) -> list[Row]:
    return [row for row in rows if row[1] in sessions]


def _put(storage: Any, sid: str, key: str, expected: int | None, want: bool, what: str) -> None:
    got = storage.save_record(sid, key, _TEXT, expected)
    if got is not want:
        raise AssertionError(f"{what}: save_record returned {got!r}, expected {want!r}")


def audit_index(ctx: KitContext) -> str:
    """Listed from the create, across instances and sessions, in order and in pages; never a
    record outside ``audit:`` and ``audit-``; a losing create changes nothing, an
    update lists it once at its last write; a deleted record and a deleted session's records
    are unlisted."""
    a, b = ctx.instances(2)
    if not callable(getattr(a, _METHOD, None)):
        raise CheckSkipped("the adapter has no audit index (optional AuditIndex capability)")
    if not callable(getattr(a, "save_record", None)):
        raise AssertionError("list_audit lists records: an AuditIndex needs RecordStorage")
    from ..storage.checks import now_ms

    # A minute of slack: another instance's clock may lag this host's a little.
    since = now_ms() - 60_000
    s1, s2 = fresh_session_id("ck-audit"), fresh_session_id("ck-audit")
    mine = {s1, s2}
    keys = (
        "audit:t1:0000000000000001",
        "audit:t1:0000000000000002",
        "audit-settle:t2:0000000000000001:ck",  # an operator's settle is indexed too
    )
    _put(a, s1, keys[0], None, True, "create an audit record")
    _put(b, s2, keys[2], None, True, "create an audit record in another session")
    _put(a, s1, "ledger:t1", None, True, "create a record outside audit:")
    _put(a, s2, "auditor:t2", None, True, "create a record outside audit: and audit-")
    _put(b, s1, keys[1], None, True, "create a second audit record")
    listed = _ours(_walk(b, since, 1000), mine)
    want = {(s1, keys[0]), (s1, keys[1]), (s2, keys[2])}
    if {(sid, key) for _, sid, key in listed} != want or len(listed) != 3:
        raise AssertionError(
            f"list_audit lists {[(s[-6:], k) for _, s, k in listed]} of this check's records, "
            "expected each audit: and audit- record once and no other record (an audit "
            "record is listed from the write that creates it)"
        )
    if listed != sorted(listed):
        raise AssertionError(
            f"list_audit's rows are not in ascending (written_ms, session_id, key) order: {listed}"
        )
    first, last = listed[0][0], listed[-1][0]
    if _ours(_walk(a, first, 1, pages=1000, until_ms=last), mine) != listed:
        raise AssertionError(
            "pages of 1 (following next_after) do not list the same rows in the same order as "
            "one page: a keyset page resumes right after its cursor's row"
        )
    later = _ours(_walk(a, listed[-1][0] + 1, 1000), mine)
    if later:
        raise AssertionError(f"list_audit(since_ms=...) lists rows written before it: {later}")
    _put(b, s1, keys[0], None, False, "a second create of an audit record")
    if _ours(_walk(b, since, 1000), mine) != listed:
        raise AssertionError(
            "a create that returned False (the key exists) changed the audit index: a losing "
            "write changes nothing"
        )
    _put(a, s1, keys[0], 1, True, "an update of an audit record")
    moved = _ours(_walk(b, since, 1000), mine)
    again = [row for row in moved if row[2] == keys[0]]
    if len(moved) != 3 or len(again) != 1 or again[0][0] < _row(listed, keys[0])[0]:
        raise AssertionError(
            f"after an update of an audit record list_audit lists {moved}: it is listed once, "
            "at its last write"
        )
    listed = moved
    a.delete_record(s1, keys[1])
    gone = {keys[1]}
    if has_delete(a):
        b.delete(s2)
        gone.add(keys[2])
    left = _ours(_walk(b, since, 1000), mine)
    if left != [row for row in listed if row[2] not in gone]:
        raise AssertionError(
            f"after delete_record of one record (and delete of a session), list_audit lists "
            f"{left}: both must unlist what they removed, and nothing else"
        )
    return (
        "listed from the create, across sessions, in order and in pages; a losing create "
        "changes nothing; an update is listed once; deletes unlist"
    )


def _row(rows: list[Row], key: str) -> Row:
    return next(row for row in rows if row[2] == key)
