"""Checks that need no concurrency: round trips, cursor rules, delete, isolation, interleavings.

The interleavings follow PostgreSQL's isolation tester: two logical clients ``s1``/``s2``
run named steps in one explicit order, with one expected outcome per step.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import AkchatError, StorageError
from ._envelopes import Observed, decode_loaded, fresh_session_id, make_snapshot, observe
from ._kit import (
    CheckSkipped,
    KitContext,
    close_storage,
    expect_save,
    expect_stored,
    require_delete,
    saved,
)

# Text that breaks naive storage: astral emoji, combining marks, RTL, quotes, NUL, newlines.
UNICODE_TEXT = 'héllo 👩‍💻 ﷺ e\u0301 עברית "q" \\ \u0000 \n\t ' * 8


def _round_trip(ctx: KitContext, snapshot: Any) -> str:
    storage = ctx.storage()
    sid = snapshot.session_id
    if storage.load(sid) is not None:
        raise AssertionError(f"load of a fresh session id {sid!r} returned a value")
    expect_save(storage, snapshot, None, True, "create")
    loaded = decode_loaded(storage.load(sid))
    if loaded is None or loaded.to_wire() != snapshot.to_wire():
        raise AssertionError("the loaded envelope differs from the saved one")
    return f"{len(snapshot.to_wire().__repr__())} characters round-tripped"


def round_trip(ctx: KitContext) -> str:
    """create then load returns an equal envelope."""
    return _round_trip(ctx, make_snapshot(fresh_session_id(), 1, "plain"))


def round_trip_unicode(ctx: KitContext) -> str:
    """Non-ASCII, astral, combining, NUL and quote characters survive a round trip."""
    sid = fresh_session_id()
    return _round_trip(
        ctx, make_snapshot(sid, 1, "ünïcødé 👩‍💻", decisions=2, confirmations=2, text=UNICODE_TEXT)
    )


def round_trip_large(ctx: KitContext) -> str:
    """A large envelope (long decisions, the maximum of 1,000 confirmations) round-trips."""
    p = ctx.profile
    text = ("x" * 1023 + "é") * 64  # 65,536 characters, the content limit
    snapshot = make_snapshot(
        fresh_session_id(),
        1,
        "large",
        decisions=p.large_decisions,
        confirmations=p.large_confirmations,
        text=text,
    )
    return _round_trip(ctx, snapshot)


def load_returns_a_copy(ctx: KitContext) -> str:
    """Mutating what load returned does not change what is stored."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "original"), None, True, "create")
    raw = storage.load(sid)
    if isinstance(raw, dict):
        raw["cursor"] = 99
        if isinstance(raw.get("conversation"), dict):
            raw["conversation"]["state"] = "mutated"
        expect_stored(storage, sid, (1, "original"), "after mutating the loaded dict")
        return "a mutated dict left the store unchanged"
    return f"load returns an immutable {type(raw).__name__}"


def create_only(ctx: KitContext) -> str:
    """expected_cursor=None succeeds only when nothing is stored."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "first"), None, True, "first create")
    expect_save(storage, make_snapshot(sid, 1, "second"), None, False, "second create")
    expect_stored(storage, sid, (1, "first"), "after a refused create")
    return "a second create was refused"


def stale_cursor_refused(ctx: KitContext) -> str:
    """An expected cursor older than the stored one is a conflict."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    expect_save(storage, make_snapshot(sid, 2, "v2"), 1, True, "update 1 -> 2")
    expect_save(storage, make_snapshot(sid, 2, "stale"), 1, False, "stale update")
    expect_stored(storage, sid, (2, "v2"), "after a stale update")
    return "stale expected cursor refused"


def future_cursor_refused(ctx: KitContext) -> str:
    """An expected cursor ahead of the stored one is a conflict."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    expect_save(storage, make_snapshot(sid, 4, "future"), 3, False, "update from the future")
    expect_stored(storage, sid, (1, "v1"), "after a future update")
    return "future expected cursor refused"


def missing_session_refused(ctx: KitContext) -> str:
    """An update of a session that does not exist is a conflict and creates nothing."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 2, "ghost"), 1, False, "update of a missing session")
    expect_save(storage, make_snapshot(sid, 1, "zero"), 0, False, "expected 0 is not create")
    expect_stored(storage, sid, None, "after refused updates")
    return "updates of a missing session refused"


def cursor_advances_by_one(ctx: KitContext) -> str:
    """Each save moves the stored cursor by exactly one; a jump is refused if enforced."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "c1"), None, True, "create")
    for cursor in range(2, 7):
        expect_save(storage, make_snapshot(sid, cursor, f"c{cursor}"), cursor - 1, True, "update")
        expect_stored(storage, sid, (cursor, f"c{cursor}"), f"after update to {cursor}")
    try:
        jumped = saved(storage, make_snapshot(sid, 8, "jump"), 6, "a +2 snapshot")
    except StorageError:
        raise
    except AkchatError as exc:  # refused as a caller bug (ConfigError): fine, if nothing moved
        expect_stored(storage, sid, (6, "c6"), "after a refused +2 snapshot")
        return f"6 saves, +1 each; a +2 snapshot is refused ({type(exc).__name__})"
    if jumped:
        return "6 saves, +1 each; a +2 snapshot is accepted (the adapter does not enforce +1)"
    expect_stored(storage, sid, (6, "c6"), "after a refused +2 snapshot")
    return "6 saves, +1 each; a +2 snapshot is refused (False)"


def delete(ctx: KitContext) -> str:
    """delete forgets a session, tolerates a missing one, and allows a re-create."""
    storage = ctx.storage()
    require_delete(storage)
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    storage.delete(sid)
    expect_stored(storage, sid, None, "after delete")
    storage.delete(sid)  # a missing session is not an error
    storage.delete(fresh_session_id())
    expect_save(storage, make_snapshot(sid, 2, "old"), 1, False, "update after delete")
    expect_save(storage, make_snapshot(sid, 1, "again"), None, True, "re-create after delete")
    expect_stored(storage, sid, (1, "again"), "after re-create")
    return "delete, delete of a missing id, re-create"


def session_isolation(ctx: KitContext) -> str:
    """Writes and deletes on one session id never touch another, even a look-alike one."""
    storage = ctx.storage()
    base = fresh_session_id()
    sids = [base, f"{base}-1", f"{base}:x", f"{base}.x", base.upper()]
    for i, sid in enumerate(sids):
        expect_save(storage, make_snapshot(sid, 1, f"s{i}"), None, True, f"create {sid}")
    expect_save(storage, make_snapshot(base, 2, "moved"), 1, True, "update the first")
    expect_save(storage, make_snapshot(sids[1], 3, "stale"), 2, False, "stale on the second")
    expected: dict[str, Observed] = {sid: (1, f"s{i}") for i, sid in enumerate(sids)}
    expected[base] = (2, "moved")
    if callable(getattr(storage, "delete", None)):
        storage.delete(sids[2])
        expected[sids[2]] = None
    for sid, want in expected.items():
        expect_stored(storage, sid, want, f"session {sid!r}")
    return f"{len(sids)} look-alike session ids stayed independent"


# --------------------------------------------------------------------------- interleavings


def interleaving_read_read_save_save(ctx: KitContext) -> str:
    """s1.load s2.load s1.save s2.save -> s2 conflicts; s1's write stays."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    c1 = observe(storage.load(sid))
    c2 = observe(storage.load(sid))
    assert c1 == c2 == (1, "v1"), f"both clients should read cursor 1, got {c1} and {c2}"
    expect_save(storage, make_snapshot(sid, 2, "s1"), 1, True, "s1.save")
    expect_save(storage, make_snapshot(sid, 2, "s2"), 1, False, "s2.save")
    expect_stored(storage, sid, (2, "s1"), "final")
    return "second writer conflicted"


def interleaving_create_create(ctx: KitContext) -> str:
    """s1.create s2.create -> s2 conflicts; s1's envelope stays."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "s1"), None, True, "s1.create")
    expect_save(storage, make_snapshot(sid, 1, "s2"), None, False, "s2.create")
    expect_stored(storage, sid, (1, "s1"), "final")
    return "second create conflicted"


def interleaving_stale_after_two_saves(ctx: KitContext) -> str:
    """s1.load s2.save s2.save s1.save -> s1 conflicts (its cursor is two behind)."""
    storage = ctx.storage()
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    seen = observe(storage.load(sid))
    expect_save(storage, make_snapshot(sid, 2, "s2a"), 1, True, "s2.save")
    expect_save(storage, make_snapshot(sid, 3, "s2b"), 2, True, "s2.save")
    assert seen is not None
    expect_save(storage, make_snapshot(sid, seen[0] + 1, "s1"), seen[0], False, "s1.save")
    expect_stored(storage, sid, (3, "s2b"), "final")
    return "stale writer conflicted"


def interleaving_save_after_delete(ctx: KitContext) -> str:
    """s1.load s2.delete s1.save -> s1 conflicts; nothing is resurrected."""
    storage = ctx.storage()
    require_delete(storage)
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    storage.load(sid)
    storage.delete(sid)
    expect_save(storage, make_snapshot(sid, 2, "s1"), 1, False, "s1.save after s2.delete")
    expect_stored(storage, sid, None, "final")
    return "write after delete conflicted"


def interleaving_create_after_delete_race(ctx: KitContext) -> str:
    """s2.delete s1.create s2.create -> exactly s1 creates the new session."""
    storage = ctx.storage()
    require_delete(storage)
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    storage.delete(sid)
    expect_save(storage, make_snapshot(sid, 1, "s1"), None, True, "s1.create")
    expect_save(storage, make_snapshot(sid, 1, "s2"), None, False, "s2.create")
    expect_stored(storage, sid, (1, "s1"), "final")
    return "one re-create won"


# --------------------------------------------------------------------------- leaks


def no_open_connections(ctx: KitContext) -> str:
    """After close(), the adapter reports no open connection (optional open_connections())."""
    storage = ctx.storage()
    count = getattr(storage, "open_connections", None)
    if not callable(count):
        raise CheckSkipped("the adapter has no open_connections() (optional capability)")
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    for cursor in range(2, 5):
        storage.load(sid)
        saved(storage, make_snapshot(sid, cursor, f"v{cursor}"), cursor - 1, "update")
    with contextlib.suppress(StorageError):
        saved(storage, make_snapshot(sid, 2, "stale"), 1, "stale update")
    ctx.opened.remove(storage)
    close_storage(storage)
    left = count()
    if left != 0:
        raise AssertionError(f"{left} connection(s) still open after close()")
    return "0 connections open after close()"
