"""Checks of the optional capabilities: ``RecordStorage`` and ``ProcessingIndex``.

Records are small JSON texts beside a session's envelope, keyed ``(session_id, key)``, each
under its own compare-and-set with a version in place of the cursor (see
:class:`akchat_fsm.storage.port.RecordStorage`). The processing index lists the sessions
holding unsettled work (a processing confirmation, or a record saved with
``processing=True``), oldest last write first. An adapter without a capability skips its
checks; one that has it must honour all of it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..storage.capabilities import RECORD_METHODS
from ._concurrent import run_threads
from ._envelopes import fresh_session_id, make_snapshot
from ._kit import CheckSkipped, KitContext, expect_save, has_delete, raise_if_workers_raised

__all__ = ["processing_index", "record_cas_race", "records_cas", "records_isolation"]

TEXT = '{"note":"é 👩\u200d💻 \\u0000 \\"q\\"","n":1}'


def _require_records(storage: Any) -> None:
    missing = [m for m in RECORD_METHODS if not callable(getattr(storage, m, None))]
    if len(missing) == len(RECORD_METHODS):
        raise CheckSkipped("the adapter has no records (optional RecordStorage capability)")
    if missing:
        raise AssertionError(
            f"the adapter has part of the records capability but not {missing}: "
            "RecordStorage is all four methods or none"
        )


def _put(
    storage: Any,
    sid: str,
    key: str,
    text: str,
    expected: int | None,
    want: bool,
    what: str,
    processing: bool = False,
) -> None:
    got = storage.save_record(sid, key, text, expected, processing=processing)
    if not isinstance(got, bool):
        raise AssertionError(f"{what}: save_record returned {got!r}, not a bool")
    if got is not want:
        raise AssertionError(
            f"{what}: save_record({sid!r}, {key!r}, expected_version={expected}) returned "
            f"{got}, expected {want}"
        )


def _expect_record(
    storage: Any, sid: str, key: str, want: tuple[int, str] | None, what: str
) -> None:
    got = storage.load_record(sid, key)
    if got is not None:
        got = (got[0], got[1])  # a list or another sequence compares like the tuple
    if got != want:
        shown = "nothing" if want is None else f"version {want[0]} with its text"
        raise AssertionError(
            f"{what}: load_record({sid!r}, {key!r}) returned {got!r}, expected {shown}"
        )


def _session(storage: Any, processing: bool = False) -> str:
    sid = fresh_session_id()
    expect_save(
        storage,
        make_snapshot(sid, 1, "records", processing=processing),
        None,
        True,
        "create the session",
    )
    return sid


def records_cas(ctx: KitContext) -> str:
    """save_record follows the envelope's CAS rule with a version: create-only, +1 per
    update, stale/future/missing refused, text stored exactly, seen by every instance."""
    a, b = ctx.instances(2)
    _require_records(a)
    sid = _session(a)
    _expect_record(a, sid, "k", None, "a fresh key")
    _put(a, sid, "k", TEXT, None, True, "create")
    _expect_record(b, sid, "k", (1, TEXT), "after the create (another instance)")
    _put(b, sid, "k", "{}", None, False, "a second create (another instance)")
    _put(a, sid, "k", "{}", None, False, "a second create")
    _expect_record(a, sid, "k", (1, TEXT), "after refused creates")
    _put(b, sid, "k", '{"v":2}', 1, True, "update 1 -> 2")
    _expect_record(a, sid, "k", (2, '{"v":2}'), "after the update (another instance)")
    _put(a, sid, "k", '{"v":"stale"}', 1, False, "a stale update")
    _put(a, sid, "k", '{"v":"future"}', 5, False, "an update from the future")
    _put(a, sid, "missing", '{"v":1}', 1, False, "an update of a missing record")
    _put(a, sid, "missing", '{"v":0}', 0, False, "expected 0 is not create")
    _expect_record(b, sid, "k", (2, '{"v":2}'), "after refused updates")
    _expect_record(b, sid, "missing", None, "a record only ever refused")
    for version in range(2, 6):
        _put(a if version % 2 else b, sid, "k", f'{{"v":{version + 1}}}', version, True, "update")
        _expect_record(
            b if version % 2 else a,
            sid,
            "k",
            (version + 1, f'{{"v":{version + 1}}}'),
            f"after update {version} -> {version + 1}",
        )
    return "create-only, +1 per update, stale/future/missing refused, across instances"


def records_isolation(ctx: KitContext) -> str:
    """Records of different sessions and keys never touch each other; list_records filters
    and sorts; deleting a session removes its records."""
    a, b = ctx.instances(2)
    _require_records(a)
    first = _session(a)
    second = _session(a)
    keys = ["k", "k2", "K", "k.a", "k:a", "k-a", "l"]
    for n, key in enumerate(keys):
        _put(a, first, key, f'{{"n":{n}}}', None, True, f"create {key!r}")
    _put(a, second, "k", '{"other":true}', None, True, "create 'k' in another session")
    for n, key in enumerate(keys):
        _expect_record(b, first, key, (1, f'{{"n":{n}}}'), f"key {key!r}")
    _expect_record(b, second, "k", (1, '{"other":true}'), "the same key in another session")
    listed = list(b.list_records(first))
    if listed != sorted(keys):
        raise AssertionError(
            f"list_records returned {listed}, expected the keys sorted: {sorted(keys)}"
        )
    for prefix, want in (
        ("k.", ["k.a"]),
        ("k", sorted(k for k in keys if k.startswith("k"))),
        ("zz", []),
    ):
        got = list(b.list_records(first, prefix))
        if got != want:
            raise AssertionError(f"list_records(prefix={prefix!r}) returned {got}, expected {want}")
    if list(b.list_records(second)) != ["k"]:
        raise AssertionError(f"another session lists {b.list_records(second)}, expected ['k']")
    b.delete_record(first, "k")
    b.delete_record(first, "never-saved")  # a missing record is not an error
    _expect_record(a, first, "k", None, "after delete_record")
    _expect_record(a, first, "K", (1, '{"n":2}'), "'K' after deleting 'k'")
    _expect_record(
        a, second, "k", (1, '{"other":true}'), "another session's 'k' after deleting 'k'"
    )
    _put(a, first, "k", '{"again":1}', None, True, "re-create after delete_record")
    if not has_delete(a):
        return "keys and sessions independent; list_records sorted and filtered"
    b.delete(first)
    _expect_record(a, first, "k2", None, "a record of a deleted session")
    if list(a.list_records(first)):
        raise AssertionError(
            f"a deleted session still lists records {a.list_records(first)}: "
            "delete(session_id) must remove its records too"
        )
    _expect_record(a, second, "k", (1, '{"other":true}'), "another session's record after delete")
    expect_save(a, make_snapshot(first, 1, "again"), None, True, "re-create the session")
    _expect_record(b, first, "k2", None, "a record after the session was deleted and re-created")
    return "keys and sessions independent; list_records sorted and filtered; delete removes records"


def record_cas_race(ctx: KitContext) -> str:
    """K racers (over several instances) create, then update, the same record: one wins each."""
    clients = ctx.instances()
    _require_records(clients[0])
    k = ctx.profile.racers
    sid = _session(clients[0])
    for round_, expected in enumerate((None, 1)):

        def race(i: int, barrier: threading.Barrier, expected: int | None = expected) -> Any:
            storage = clients[i % len(clients)]
            barrier.wait(30)
            return storage.save_record(sid, "race", f'{{"w":{i}}}', expected)

        results = run_threads(k, race)
        raise_if_workers_raised(results, "record racers")
        winners = [i for i, r in enumerate(results) if r is True]
        what = "create" if expected is None else "update"
        if len(winners) != 1:
            raise AssertionError(f"{len(winners)} of {k} racers' record {what}s won, expected 1")
        _expect_record(
            clients[-1],
            sid,
            "race",
            (round_ + 1, f'{{"w":{winners[0]}}}'),
            f"the record after the {what} race",
        )
    return f"{k} racers: one record create and one record update won"


# --------------------------------------------------------------------------- processing index


def _listed(storage: Any, ours: set[str], **options: Any) -> list[str]:
    rows = storage.list_processing(limit=1_000_000, **options)
    return [row.session_id for row in rows if row.session_id in ours]


def processing_index(ctx: KitContext) -> str:
    """list_processing lists exactly the sessions with a processing confirmation or a record
    saved processing=True, oldest last write first; written_before_ms filters."""
    a, b = ctx.instances(2)
    if not callable(getattr(a, "list_processing", None)):
        raise CheckSkipped("the adapter has no list_processing() (optional ProcessingIndex)")
    records = all(callable(getattr(a, m, None)) for m in RECORD_METHODS)
    claimed = _session(a, processing=True)  # an approving confirmation in the envelope
    ours = {claimed}
    _pause()
    cut = _now_ms()
    _pause()
    settled = _session(a)  # a pending confirmation only: nothing processing
    ours.add(settled)
    by_record = cleared = None
    if records:
        by_record = _session(a)
        _put(a, by_record, "ledger", '{"s":"running"}', None, True, "a processing record", True)
        cleared = _session(a)
        _put(a, cleared, "ledger", '{"s":"running"}', None, True, "a processing record", True)
        _put(a, cleared, "ledger", '{"s":"done"}', 1, True, "the record settled", False)
        _put(a, settled, "note", '{"n":1}', None, True, "a record that is not processing")
        ours |= {by_record, cleared}
    want = [claimed] if by_record is None else [claimed, by_record]
    got = _listed(b, ours)
    if got != want:
        raise AssertionError(
            f"list_processing lists {got} of this check's sessions, expected {want} (oldest "
            "first): a session is listed while it holds a processing confirmation or a record "
            "saved with processing=True, and only then"
        )
    before = _listed(b, ours, written_before_ms=cut)
    if before != [claimed]:
        raise AssertionError(
            f"list_processing(written_before_ms=...) lists {before}, expected only the session "
            "last written before that instant"
        )
    settle = make_snapshot(claimed, 2, "settled")
    expect_save(a, settle, 1, True, "settle the processing confirmation")
    remaining = [sid for sid in want if sid != claimed]
    got = _listed(b, ours)
    if got != remaining:
        raise AssertionError(
            f"after its confirmation settled, list_processing lists {got}, expected {remaining}"
        )
    if by_record is not None and has_delete(a):
        a.delete(by_record)
        if _listed(b, ours):
            raise AssertionError("a deleted session is still listed by list_processing")
    return "processing sessions listed oldest first, settled ones not; written_before_ms filters"


def _pause() -> None:
    # The index orders by the adapter's millisecond clock: keep writes apart by more than 1 ms.
    time.sleep(0.005)


def _now_ms() -> int:
    from ..storage.checks import now_ms

    return now_ms()
