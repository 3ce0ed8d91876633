"""Checks that need no concurrency: round trips, cursor rules, delete, isolation, interleavings.

The interleavings follow PostgreSQL's isolation tester: two logical clients ``s1``/``s2``
run named steps in one explicit order, with one expected outcome per step.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..errors import AkchatError, StorageError
from ..wire.session import MAX_CONFIRMATIONS, MAX_DECISIONS, MAX_TERMINAL_TURNS
from ._envelopes import decode_loaded, diff, fresh_session_id, make_snapshot, observe
from ._kit import (
    STALE_READS,
    CheckSkipped,
    KitContext,
    catches_up,
    close_storage,
    expect_save,
    expect_stored,
    has_delete,
    require_delete,
    saved,
)

# Text that breaks naive storage: astral emoji, combining marks, RTL, quotes, NUL, newlines.
UNICODE_TEXT = 'héllo 👩‍💻 ﷺ e\u0301 עברית "q" \\ \u0000 \n\t ' * 8


def _round_trip(ctx: KitContext, snapshot: Any) -> str:
    writer, reader = ctx.instances(2)
    sid = snapshot.session_id
    if writer.load(sid) is not None:
        raise AssertionError(f"load of a fresh session id {sid!r} returned a value")
    expect_save(writer, snapshot, None, True, "create")
    saved_wire = snapshot.to_wire()
    for who, storage in (("the instance that saved it", writer), ("another instance", reader)):
        raw = storage.load(sid)
        observe(raw, sid)  # the session id first: a wrong envelope is not a diff
        loaded = decode_loaded(raw)
        if loaded is None:
            stale = catches_up(storage, sid, lambda got: got is not None)
            raise AssertionError(
                f"load through {who} returned nothing after the create"
                + (f": {STALE_READS}" if stale else "")
            )
        differences = diff(saved_wire, loaded.to_wire())
        if differences:
            raise AssertionError(
                f"the envelope loaded through {who} differs from the one saved:\n  "
                + "\n  ".join(differences)
            )
        if writer is reader:
            break
    return f"{len(snapshot.to_json())} characters round-tripped"


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
    """An envelope at every limit round-trips: 1,000 decisions, 1,000 confirmations, 64
    terminal turns, decisions of 65,536 characters."""
    text = ("x" * 1023 + "é") * 64  # 65,536 characters, the content limit
    snapshot = make_snapshot(
        fresh_session_id(),
        1,
        "large",
        decisions=MAX_DECISIONS,
        confirmations=MAX_CONFIRMATIONS,
        terminal_turns=MAX_TERMINAL_TURNS,
        long_decisions=ctx.profile.long_decisions,
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


def instances_share_a_store(ctx: KitContext) -> str:
    """Two instances from the factory see one store: each sees the other's writes at once."""
    first, second = ctx.storage(), ctx.storage()
    sid = fresh_session_id()
    expect_save(first, make_snapshot(sid, 1, "v1"), None, True, "create through instance 1")
    seen = observe(second.load(sid), sid)
    later = observe(ctx.storage().load(sid), sid)
    if seen is None and later is None:
        if catches_up(second, sid, lambda got: got == (1, "v1")):
            raise AssertionError(
                "a session created through one instance is not visible through another at "
                f"once, but appears after later writes: {STALE_READS}"
            )
        raise AssertionError(
            "a session created through one instance is invisible through every other: each "
            "instance has a private store (pass a factory that returns instances over one "
            "shared store, e.g. `lambda: shared` for an in-memory store, or a database URL)"
        )
    if seen != (1, "v1") or later != (1, "v1"):
        raise AssertionError(
            f"after a create through instance 1, instance 2 loads {seen} and a new instance "
            f"loads {later}, expected cursor 1 for both"
        )
    expect_save(second, make_snapshot(sid, 2, "v2"), 1, True, "update through instance 2")
    got = observe(first.load(sid), sid)
    if got != (2, "v2"):
        raise AssertionError(
            f"instance 1 still loads {got} after instance 2 saved cursor 2: it serves a "
            "cached copy that another instance's write did not invalidate"
        )
    expect_save(first, make_snapshot(sid, 3, "v3"), 2, True, "update through instance 1")
    expect_stored(second, sid, (3, "v3"), "instance 2 after instance 1 saved cursor 3")
    if has_delete(second):
        second.delete(sid)
        expect_stored(first, sid, None, "instance 1 after instance 2 deleted the session")
    return "creates, updates and deletes through one instance are seen by the others"


def create_only(ctx: KitContext) -> str:
    """expected_cursor=None succeeds only when nothing is stored, whichever instance asks."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "first"), None, True, "first create")
    expect_save(s1, make_snapshot(sid, 1, "again"), None, False, "second create, same instance")
    expect_save(s2, make_snapshot(sid, 1, "second"), None, False, "create through another instance")
    expect_stored(s1, sid, (1, "first"), "after refused creates")
    expect_stored(s2, sid, (1, "first"), "through the other instance, after refused creates")
    return "a second create was refused, from the same and from another instance"


def stale_cursor_refused(ctx: KitContext) -> str:
    """An expected cursor older than the stored one is a conflict."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "v1"), None, True, "create")
    expect_save(s1, make_snapshot(sid, 2, "v2"), 1, True, "update 1 -> 2")
    expect_save(s2, make_snapshot(sid, 2, "stale"), 1, False, "stale update (another instance)")
    expect_save(s1, make_snapshot(sid, 2, "stale"), 1, False, "stale update")
    expect_stored(s2, sid, (2, "v2"), "after stale updates")
    return "stale expected cursor refused"


def future_cursor_refused(ctx: KitContext) -> str:
    """An expected cursor ahead of the stored one is a conflict."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "v1"), None, True, "create")
    expect_save(s2, make_snapshot(sid, 4, "future"), 3, False, "update from the future")
    expect_stored(s1, sid, (1, "v1"), "after a future update")
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
    clients = ctx.instances(2)
    storage = clients[0]
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "c1"), None, True, "create")
    for cursor in range(2, 7):
        writer, reader = clients[cursor % 2], clients[(cursor + 1) % 2]
        expect_save(writer, make_snapshot(sid, cursor, f"c{cursor}"), cursor - 1, True, "update")
        expect_stored(reader, sid, (cursor, f"c{cursor}"), f"after update to {cursor}")
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
    storage, other = ctx.instances(2)
    require_delete(storage)
    sid = fresh_session_id()
    expect_save(storage, make_snapshot(sid, 1, "v1"), None, True, "create")
    expect_stored(other, sid, (1, "v1"), "after create")
    storage.delete(sid)
    expect_stored(storage, sid, None, "after delete")
    expect_stored(other, sid, None, "after delete (another instance)")
    storage.delete(sid)  # a missing session is not an error
    storage.delete(fresh_session_id())
    expect_save(other, make_snapshot(sid, 2, "old"), 1, False, "update after delete")
    expect_save(other, make_snapshot(sid, 1, "again"), None, True, "re-create after delete")
    expect_stored(storage, sid, (1, "again"), "after re-create")
    return "delete, delete of a missing id, re-create"


# --------------------------------------------------------------------------- interleavings


def interleaving_read_read_save_save(ctx: KitContext) -> str:
    """s1.load s2.load s1.save s2.save -> s2 conflicts; s1's write stays."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "v1"), None, True, "create")
    c1 = observe(s1.load(sid), sid)
    c2 = observe(s2.load(sid), sid)
    assert c1 == c2 == (1, "v1"), f"both clients should read cursor 1, got {c1} and {c2}"
    expect_save(s1, make_snapshot(sid, 2, "s1"), 1, True, "s1.save")
    expect_save(s2, make_snapshot(sid, 2, "s2"), 1, False, "s2.save")
    expect_stored(s2, sid, (2, "s1"), "final (s2)")
    expect_stored(s1, sid, (2, "s1"), "final (s1)")
    return "second writer conflicted"


def interleaving_create_create(ctx: KitContext) -> str:
    """s1.create s2.create -> s2 conflicts; s1's envelope stays."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "s1"), None, True, "s1.create")
    expect_save(s2, make_snapshot(sid, 1, "s2"), None, False, "s2.create")
    expect_stored(s1, sid, (1, "s1"), "final (s1)")
    expect_stored(s2, sid, (1, "s1"), "final (s2)")
    return "second create conflicted"


def interleaving_stale_after_two_saves(ctx: KitContext) -> str:
    """s1.load s2.save s2.save s1.save -> s1 conflicts (its cursor is two behind)."""
    s1, s2 = ctx.instances(2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "v1"), None, True, "create")
    seen = observe(s1.load(sid), sid)
    expect_save(s2, make_snapshot(sid, 2, "s2a"), 1, True, "s2.save")
    expect_save(s2, make_snapshot(sid, 3, "s2b"), 2, True, "s2.save")
    assert seen is not None, "s1 loaded nothing after the create"
    expect_save(s1, make_snapshot(sid, seen[0] + 1, "s1"), seen[0], False, "s1.save")
    expect_stored(s1, sid, (3, "s2b"), "final")
    return "stale writer conflicted"


def interleaving_save_after_delete(ctx: KitContext) -> str:
    """s1.load s2.delete s1.save -> s1 conflicts; nothing is resurrected."""
    s1, s2 = ctx.instances(2)
    require_delete(s2)
    sid = fresh_session_id()
    expect_save(s1, make_snapshot(sid, 1, "v1"), None, True, "create")
    s1.load(sid)
    s2.delete(sid)
    expect_save(s1, make_snapshot(sid, 2, "s1"), 1, False, "s1.save after s2.delete")
    expect_stored(s1, sid, None, "final")
    return "write after delete conflicted"


def interleaving_create_after_delete_race(ctx: KitContext) -> str:
    """s2.delete s1.create s2.create -> exactly s1 creates the new session."""
    s1, s2 = ctx.instances(2)
    require_delete(s2)
    sid = fresh_session_id()
    expect_save(s2, make_snapshot(sid, 1, "v1"), None, True, "create")
    s2.delete(sid)
    expect_save(s1, make_snapshot(sid, 1, "s1"), None, True, "s1.create")
    expect_save(s2, make_snapshot(sid, 1, "s2"), None, False, "s2.create")
    expect_stored(s2, sid, (1, "s1"), "final")
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
