"""Decisions every adapter shares, made once and without I/O.

An adapter only moves bytes: it asks :func:`prepare_save` what to write and under which
condition, runs one backend-specific atomic statement, and reports ``True``/``False``.
Validation happens here, before any I/O, so a bad argument never reaches a backend and is
reported the same way by every adapter (:class:`~akchat_fsm.errors.ConfigError`).
"""

from __future__ import annotations

import json
import operator
import re
import time
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, StoredCursorMismatch
from ..wire.enums import ConfirmationStatus
from ..wire.js import MAX_SAFE_INTEGER, as_safe_int, is_identifier
from ..wire.jsontext import InvalidJsonText, parse_json_text
from ..wire.session import SessionSnapshot

__all__ = [
    "DEFAULT_TABLE",
    "MAX_RECORD_CHARS",
    "RECORD_HINT",
    "STORAGE_HINT",
    "PendingRow",
    "PreparedRecordSave",
    "PreparedSave",
    "cas_allows",
    "check_record_key",
    "check_session_id",
    "check_sql_identifier",
    "check_stored_cursor",
    "holds_processing",
    "loaded_text",
    "now_ms",
    "pending_rows",
    "prepare_record_save",
    "prepare_save",
    "prepare_save_with_records",
    "snapshot_text",
]

#: The table (or table-name prefix) every SQL adapter uses unless told otherwise.
DEFAULT_TABLE = "akchat_sessions"
STORAGE_HINT = "Pass a valid session id, a v1 SessionSnapshot, and expected_cursor None or int."

# Table names are spliced into SQL text, so they must be plain identifiers (never quoted input).
_SQL_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}", re.ASCII)


def check_session_id(session_id: object) -> str:
    """Return ``session_id`` if it is a SafeIdentifier, else raise ``ConfigError``.

    One validator for every adapter: it also keeps NUL bytes (which PostgreSQL ``text``
    refuses), spaces and non-ASCII out of every backend alike.
    """
    if not is_identifier(session_id):
        raise ConfigError(f"Invalid session id {session_id!r}.", hint=STORAGE_HINT)
    return str(session_id)


def check_sql_identifier(name: object) -> str:
    """Return ``name`` if it is a safe unquoted SQL identifier (table name), else raise."""
    if not isinstance(name, str) or _SQL_IDENTIFIER.fullmatch(name) is None:
        raise ConfigError(
            f"Invalid table name {name!r}.",
            hint="Use letters, digits and underscores, starting with a letter (max 63).",
        )
    return name


def _cursor(value: object, what: str) -> int:
    # bool is an int in Python but never a cursor (docs/reference.md §8).
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ConfigError(f"{what} must be a non-negative safe integer, got {value!r}.")
    return value


def snapshot_text(snapshot: Any) -> str:
    """The canonical JSON text of a snapshot: ``to_json()`` if it has one, else its wire dict."""
    to_json = getattr(snapshot, "to_json", None)
    if callable(to_json):
        text = to_json()
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if isinstance(text, str):
            return text
    to_wire = getattr(snapshot, "to_wire", None)
    if not callable(to_wire):
        raise ConfigError("save() needs a SessionSnapshot.", hint=STORAGE_HINT)
    try:
        return json.dumps(to_wire(), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError("The snapshot is not JSON-serializable.", hint=STORAGE_HINT) from exc


# --------------------------------------------------------------------------- load

STORED_HINT = "The stored bytes are not UTF-8 JSON text: repair or delete the row."

# The canonical writers (this library's ``to_json`` and ``JSON.stringify`` of the reference's
# object) put only scalar members before ``cursor``; this reads it without parsing the body.
_SCALAR = r'(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.eE+-]*|true|false|null)'
_HEAD_CURSOR = re.compile(r'\{(?:"(?:[^"\\]|\\.)*":' + _SCALAR + r',)*?"cursor":(-?[0-9]+)[,}]')


def loaded_text(session_id: str, body: object, column: object) -> str | None:
    """What every adapter's ``load`` returns for a stored ``(body, cursor column)``.

    ``None`` stays ``None``. Bytes must be UTF-8 (the stored form of JSON text; lone
    surrogates are stored as ``\\uXXXX`` escapes, which are ASCII): anything else is a
    :class:`ConfigError`, never retryable, since the same bytes fail again. Then the cursor
    column must agree with the body (:func:`check_stored_cursor`).
    """
    if body is None:
        return None
    if isinstance(body, bytes | bytearray | memoryview):
        try:
            text = bytes(body).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"Stored session {session_id!r} is not UTF-8 text (byte {exc.start}).",
                hint=STORED_HINT,
            ) from exc
    elif isinstance(body, str):
        text = str.__str__(body)
    else:
        raise ConfigError(
            f"Stored session {session_id!r} is a {type(body).__name__}, not text.",
            hint=STORED_HINT,
        )
    check_stored_cursor(session_id, column, text)
    return text


def check_stored_cursor(session_id: str, column: object, text: str) -> None:
    """Raise :class:`StoredCursorMismatch` when the body's ``cursor`` is not the column's.

    Every CAS compares against the column, so a disagreeing row could never be saved again.
    Cheap for canonical text (a match on the head, and one count proving the key is unique,
    since ``JSON.parse`` keeps the last duplicate); anything else is parsed. A body that is not
    a JSON object with a safe-integer ``cursor`` is left to the decoder, which refuses it.
    """
    match = _HEAD_CURSOR.match(text)
    if match is not None and text.count('"cursor"') == 1:
        body: object = int(match.group(1))
    else:
        try:
            parsed = parse_json_text(text)
        except InvalidJsonText:
            return
        if not isinstance(parsed, dict) or "cursor" not in parsed:
            return
        body = parsed["cursor"]
    number = as_safe_int(body)
    if isinstance(column, bytes | str) and column.isdigit() and column.isascii():
        column = int(column)  # Redis stores the cursor as decimal text
    stored = as_safe_int(column)
    if number is not None and number != stored:
        raise StoredCursorMismatch(session_id, column, number)


@dataclass(frozen=True, slots=True)
class PendingRow:
    """What a saved snapshot says about one pending binding (the index row without its clock)."""

    token: str
    tool_call_id: str
    action: str
    expires_at_ms: int


def pending_rows(snapshot: Any) -> tuple[PendingRow, ...]:
    """The rows of ``snapshot``'s bindings whose status is ``pending``, in snapshot order."""
    bindings = getattr(snapshot, "confirmations", ())
    if type(snapshot) is SessionSnapshot and _PENDING_STATUS not in map(_STATUS, bindings):
        return ()  # the common save: one C-level pass, nothing built
    return tuple(
        PendingRow(b.token, b.tool_call_id, b.action, int(b.expires_at))
        for b in bindings
        if getattr(b, "status", None) == _PENDING_STATUS
    )


_PENDING_STATUS = ConfirmationStatus.PENDING


@dataclass(frozen=True, slots=True)
class PreparedSave:
    """What one compare-and-set writes, and the condition under which it may."""

    session_id: str
    #: The cursor stored after the write (the snapshot's own cursor).
    cursor: int
    #: ``None``: only if nothing is stored; an int: only if the stored cursor equals it.
    expected: int | None
    #: The canonical JSON text stored verbatim and returned by ``load``.
    text: str
    #: Whether the envelope holds a processing confirmation record (the processing index).
    processing: bool = False
    #: When the adapter makes this write, epoch ms (the processing index's "last write").
    written_ms: int = 0
    #: The snapshot's pending bindings (the pending index, ADR-0029).
    pending: tuple[PendingRow, ...] = ()


def prepare_save(snapshot: Any, expected_cursor: object) -> PreparedSave:
    """Validate a ``save`` call and decide what to write.

    The cursor rule: a successful save advances the stored cursor by exactly one, so an
    update must carry ``snapshot.cursor == expected_cursor + 1``. A create-only save
    (``expected_cursor is None``) may carry any cursor (imports and re-creates keep theirs).
    Anything else is a caller bug, refused with ``ConfigError`` before any I/O.
    """
    session_id = check_session_id(getattr(snapshot, "session_id", None))
    cursor = _cursor(getattr(snapshot, "cursor", None), "snapshot.cursor")
    expected = None if expected_cursor is None else _cursor(expected_cursor, "expected_cursor")
    if expected is not None and cursor != expected + 1:
        raise ConfigError(
            f"snapshot.cursor must be expected_cursor + 1 ({expected + 1}), got {cursor}.",
            hint=STORAGE_HINT,
        )
    return PreparedSave(
        session_id,
        cursor,
        expected,
        snapshot_text(snapshot),
        holds_processing(snapshot),
        now_ms(),
        pending_rows(snapshot),
    )


def holds_processing(snapshot: Any) -> bool:
    """Whether any confirmation record of ``snapshot`` is processing (claimed, unsettled)."""
    bindings = getattr(snapshot, "confirmations", ())
    if type(snapshot) is SessionSnapshot:
        # Every save asks this of every record: one C-level pass (statuses compare as str, an
        # identity hit first) instead of two attribute lookups and a property per record.
        return any(map(_PROCESSING.__contains__, map(_STATUS, bindings)))
    for binding in bindings:
        status = getattr(binding, "status", None)
        if getattr(status, "is_processing", False):
            return True
    return False


_PROCESSING = tuple(status for status in ConfirmationStatus if status.is_processing)
_STATUS = operator.attrgetter("status")


def now_ms() -> int:
    """The adapter's wall clock in epoch ms, stamped on every write for the processing index."""
    return time.time_ns() // 1_000_000


def cas_allows(stored_cursor: int | None, expected: int | None) -> bool:
    """The reference's whole CAS rule: write iff the stored cursor equals the expected one.

    Nothing stored is ``None``, so ``expected=None`` means create-only. Backends that
    compare inside the database (SQL ``WHERE``, Lua) implement exactly this predicate.
    """
    return stored_cursor == expected


# --------------------------------------------------------------------------- records

RECORD_HINT = (
    "Pass a valid session id, a record key of letters, digits and '._:-' (max 200), "
    "JSON text, and expected_version None or int."
)

#: The largest record text an adapter accepts (characters), checked before any I/O.
MAX_RECORD_CHARS = 4 * 1024 * 1024

_RECORD_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}", re.ASCII)


def check_record_key(key: object) -> str:
    """Return ``key`` if it is a valid record key, else raise ``ConfigError``."""
    if not isinstance(key, str) or _RECORD_KEY.fullmatch(key) is None:
        raise ConfigError(f"Invalid record key {key!r}.", hint=RECORD_HINT)
    return key


@dataclass(frozen=True, slots=True)
class PreparedRecordSave:
    """What one compare-and-set of a record writes, and the condition under which it may."""

    session_id: str
    key: str
    #: The version stored after the write: 1 for a create, ``expected + 1`` for an update.
    version: int
    #: ``None``: only if nothing is stored under the key; an int: only if the stored version is it.
    expected: int | None
    text: str
    #: Whether the record holds work a crash may have left unsettled (the processing index).
    processing: bool
    written_ms: int


def prepare_record_save(
    session_id: object, key: object, text: object, expected_version: object, processing: object
) -> PreparedRecordSave:
    """Validate a ``save_record`` call and decide what to write (same rule as the cursor)."""
    sid = check_session_id(session_id)
    k = check_record_key(key)
    if not isinstance(text, str):
        raise ConfigError("save_record() needs the record as JSON text (str).", hint=RECORD_HINT)
    if len(text) > MAX_RECORD_CHARS:
        raise ConfigError(
            f"A record holds at most {MAX_RECORD_CHARS} characters, got {len(text)}.",
            hint=RECORD_HINT,
        )
    expected = None if expected_version is None else _cursor(expected_version, "expected_version")
    if not isinstance(processing, bool):
        raise ConfigError("processing must be a bool.", hint=RECORD_HINT)
    version = 1 if expected is None else expected + 1
    return PreparedRecordSave(sid, k, version, expected, text, processing, now_ms())


# --------------------------------------------------------------------------- index helpers
#
# Shared by the SQL and Redis adapters' records tables and processing index (ADR-0085).


def processing_statuses() -> tuple[str, ...]:
    """The wire statuses :func:`holds_processing` counts, for backfills written in SQL."""
    return tuple(sorted(s.value for s in _PROCESSING))


def derived_identifier(table: str, suffix: str) -> str:
    """``table + suffix`` as an SQL identifier of at most 63 characters.

    The records table and the indexes are named after the sessions table; a name that
    PostgreSQL would truncate (and so could collide) is shortened with a hash of the whole.
    """
    import hashlib

    name = check_sql_identifier(table) + suffix
    if len(name) <= 63:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[: 63 - 11]}_{digest}"


def record_prefix_matches_nothing(prefix: object) -> bool:
    """Validate ``list_records``'s prefix: a str (else ``ConfigError``).

    ``True`` when no valid record key can start with it, so adapters answer ``[]`` without
    sending a prefix that a backend might refuse (a NUL byte in PostgreSQL ``text``).
    """
    if not isinstance(prefix, str):
        raise ConfigError("list_records() needs the prefix as a str.", hint=RECORD_HINT)
    return prefix != "" and re.fullmatch(r"[A-Za-z0-9._:-]{1,200}", prefix, re.ASCII) is None


def check_limit(limit: object, written_before_ms: object) -> tuple[int, int | None]:
    """Validate ``list_processing``'s arguments: an int limit (below 0: none), an int bound.

    Both are clamped to the safe-integer range, which holds every stored ``written_ms``, so
    no backend sees a number its integer type cannot hold and the answer is unchanged.
    """
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ConfigError(f"limit must be an int, got {limit!r}.")
    count = min(max(0, limit), MAX_SAFE_INTEGER)
    if written_before_ms is None:
        return count, None
    if isinstance(written_before_ms, bool) or not isinstance(written_before_ms, int):
        raise ConfigError(f"written_before_ms must be an int or None, got {written_before_ms!r}.")
    return count, min(max(-MAX_SAFE_INTEGER, written_before_ms), MAX_SAFE_INTEGER)


def prepare_stored_record(
    session_id: object, key: object, text: object, expected_version: object, processing: object
) -> PreparedRecordSave:
    """:func:`prepare_record_save`, plus what every backend can store: UTF-8 text without NUL.

    JSON text never holds a raw U+0000 (PostgreSQL ``text`` refuses it) nor a lone surrogate
    (no backend can encode it); refusing both here keeps a driver's encoding error, raised
    before anything is sent, from being reported as a write of unknown outcome.
    """
    prepared = prepare_record_save(session_id, key, text, expected_version, processing)
    try:
        prepared.text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError("The record text is not valid UTF-8 text.", hint=RECORD_HINT) from exc
    if "\x00" in prepared.text:
        raise ConfigError("The record text holds a NUL character.", hint=RECORD_HINT)
    return prepared


#: The most records one :meth:`~akchat_fsm.storage.port.SaveWithRecords.save_with_records`
#: creates (a claim creates one audit entry; the bound keeps one write's work small).
MAX_CREATED_RECORDS = 16


def prepare_save_with_records(
    snapshot: Any, expected_cursor: object, records: object
) -> tuple[PreparedSave, tuple[PreparedRecordSave, ...]]:
    """Validate a ``save_with_records`` call (ADR-0141): the envelope's save as
    :func:`prepare_save` checks it, and each ``(key, text)`` as a create-only record of the same
    session (version 1, not processing, stamped with the save's instant). Keys are distinct;
    1 to :data:`MAX_CREATED_RECORDS` of them. Refused with ``ConfigError`` before any I/O."""
    save = prepare_save(snapshot, expected_cursor)
    if isinstance(records, str | bytes) or not isinstance(records, list | tuple):
        raise ConfigError("records must be a list or tuple of (key, text) pairs.", hint=RECORD_HINT)
    if not 1 <= len(records) <= MAX_CREATED_RECORDS:
        raise ConfigError(
            f"save_with_records() creates 1 to {MAX_CREATED_RECORDS} records, got {len(records)}.",
            hint=RECORD_HINT,
        )
    prepared: list[PreparedRecordSave] = []
    for pair in records:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ConfigError("Each record is a (key, text) tuple.", hint=RECORD_HINT)
        record = prepare_stored_record(save.session_id, pair[0], pair[1], None, False)
        prepared.append(
            PreparedRecordSave(
                record.session_id, record.key, 1, None, record.text, False, save.written_ms
            )
        )
    if len({r.key for r in prepared}) != len(prepared):
        raise ConfigError("save_with_records() got the same record key twice.", hint=RECORD_HINT)
    return save, tuple(prepared)
