"""The statement parameters the SQL adapters with one statement per call share.

PostgreSQL and MySQL/MariaDB spell their SQL differently but bind it alike: the same
columns, in the same order, checked by the same shared decisions (:mod:`._cas`). Each
adapter's plan sets the four statements; this base binds their parameters, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ._audit_index import AuditQuery, audit_sql_predicate, check_audit_query
from ._cas import (
    PreparedSave,
    check_record_key,
    check_session_id,
    prepare_save,
    prepare_stored_record,
)
from ._pending import PendingQuery, check_pending_query
from .port import AuditRef, PendingApproval

__all__ = [
    "PENDING_COLUMNS",
    "PENDING_INDEXES",
    "AuditStatements",
    "PendingStatements",
    "SqlStatements",
    "audit_refs",
    "found_session",
    "pending_items",
    "pending_params",
]


class SqlStatements:
    """``save_statement`` and ``save_record_statement`` over the plan's own SQL text.

    ``insert``/``update`` take (session, cursor, body, processing, written_ms) and the
    expected cursor last; ``insert_record``/``update_record`` take (session, key, version,
    body, processing, written_ms) and the expected version last.
    """

    insert: str
    update: str
    insert_record: str
    update_record: str

    def save_statement(self, snapshot: Any, expected_cursor: Any) -> tuple[str, tuple[Any, ...]]:
        return self.prepared_statement(prepare_save(snapshot, expected_cursor))

    def prepared_statement(self, p: PreparedSave) -> tuple[str, tuple[Any, ...]]:
        """The CAS statement of a checked save, and its parameters."""
        if p.expected is None:
            create = (p.session_id, p.cursor, p.text, p.processing, p.written_ms)
            return self.insert, create + self.pending_params(p)
        update = (p.cursor, p.text, p.processing, p.written_ms, p.session_id, p.expected)
        return self.update, update + self.pending_params(p)

    def pending_params(self, p: PreparedSave) -> tuple[Any, ...]:
        """What a plan whose save statement also writes the pending rows binds after the rest."""
        return ()

    def record_key(self, session_id: Any, key: Any) -> tuple[str, str]:
        return check_session_id(session_id), check_record_key(key)

    def save_record_statement(
        self, session_id: Any, key: Any, text: Any, expected: Any, processing: Any
    ) -> tuple[str, tuple[Any, ...]]:
        p = prepare_stored_record(session_id, key, text, expected, processing)
        if p.expected is None:
            create = (p.session_id, p.key, p.version, p.text, p.processing, p.written_ms)
            return self.insert_record, create
        update = (p.version, p.text, p.processing, p.written_ms, p.session_id, p.key, p.expected)
        return self.update_record, update


# --------------------------------------------------------------------------- the pending index
#
# One row per pending binding (ADR-0029): primary key (session_id, token), the token a save
# carries `pending_since_ms` by. Each page is one range read of one index, whichever filters:
# the order's own index, the same after an `action`, or the session's rows (at most the
# envelope's 1,000 bindings, sorted). The bounds of the other order are filtered in that read.

#: The columns of a pending row, in :class:`~akchat_fsm.storage.port.PendingApproval` order.
PENDING_COLUMNS = "session_id, token, tool_call_id, action, expires_at_ms, pending_since_ms"

#: Index suffix -> its columns: one per order, one per order after an action, the token's.
PENDING_INDEXES: dict[str, str] = {
    "_expiry": "expires_at_ms, session_id, tool_call_id",
    "_newest": "pending_since_ms, session_id, tool_call_id",
    "_action_expiry": "action, expires_at_ms, session_id, tool_call_id",
    "_action_newest": "action, pending_since_ms, session_id, tool_call_id",
    "_token": "token, session_id",
}


class PendingStatements:
    """The pending table's queries in one SQL dialect (``mark``: its parameter marker).

    ``row_values``: the database compares ``(a, b, c) > (x, y, z)`` as one index range
    (SQLite, PostgreSQL); otherwise the keyset condition is spelled out (MySQL/MariaDB).
    """

    def __init__(self, pending: str, mark: str, *, row_values: bool) -> None:
        self.table, self.mark, self.row_values = pending, mark, row_values
        self.find_token = (
            f"SELECT session_id FROM {pending} WHERE token = {mark} ORDER BY session_id LIMIT 1"
        )

    def list_statement(self, **arguments: Any) -> tuple[PendingQuery, str, tuple[Any, ...]]:
        """``list_pending(**arguments)`` checked (before any I/O), and its one indexed read of
        up to ``limit + 1`` rows in the page's order."""
        query = check_pending_query(**arguments)
        return (query, *self.select(query))

    def select(self, query: PendingQuery) -> tuple[str, tuple[Any, ...]]:
        """The read of a checked query: only the filters it has, so the planner picks the
        index of the order (after ``action =``, its own), or the session's rows."""
        m = self.mark
        first = "expires_at_ms" if query.order == "expiry" else "pending_since_ms"
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("action =", query.action),
            ("session_id =", query.session_id),
            ("expires_at_ms <", query.expiring_before_ms),
            ("pending_since_ms <", query.pending_before_ms),
        ):
            if value is not None:
                where.append(f"{column} {m}")
                params.append(value)
        if query.after is not None:
            cmp = ">" if query.order == "expiry" else "<"
            if self.row_values:
                where.append(f"({first}, session_id, tool_call_id) {cmp} ({m}, {m}, {m})")
                params.extend(query.after)
            else:
                # The leading bound alone is the index range; the rest trims its first value.
                where.append(
                    f"{first} {cmp}= {m} AND ({first} {cmp} {m} OR session_id {cmp} {m}"
                    f" OR (session_id = {m} AND tool_call_id {cmp} {m}))"
                )
                key, sid, tcid = query.after
                params.extend((key, key, sid, sid, tcid))
        direction = "" if query.order == "expiry" else " DESC"
        order = ", ".join(f"{c}{direction}" for c in (first, "session_id", "tool_call_id"))
        condition = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT {PENDING_COLUMNS} FROM {self.table}{condition} ORDER BY {order} LIMIT {m}"
        return sql, (*params, query.limit + 1)


def _text(value: object) -> str:
    # PostgreSQL under SQL_ASCII and some MySQL column types answer bytes.
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8")
    return str(value)


def pending_items(rows: Iterable[Sequence[Any]]) -> list[PendingApproval]:
    """Rows in :data:`PENDING_COLUMNS` order as :class:`PendingApproval` values."""
    return [
        PendingApproval(s, t, c, a, int(e), int(p))
        if type(s) is type(t) is type(c) is type(a) is str  # the drivers' usual answer
        else PendingApproval(_text(s), _text(t), _text(c), _text(a), int(e), int(p))
        for s, t, c, a, e, p in rows
    ]


def pending_params(items: Iterable[PendingApproval]) -> list[tuple[str, str, str, str, int, int]]:
    """Rows to insert, in :data:`PENDING_COLUMNS` order."""
    return [
        (i.session_id, i.token, i.tool_call_id, i.action, i.expires_at_ms, i.pending_since_ms)
        for i in items
    ]


def found_session(row: Sequence[Any] | None) -> str | None:
    """``find_token``'s answer from its one-row read."""
    return None if row is None else _text(row[0])


# --------------------------------------------------------------------------- the audit index
#
# No table of its own (ADR-0139): the audit records are rows of `<table>__records`, and the
# index is an index over them, restricted to the keys `audit_indexed` admits, `audit:` and
# `audit-` (a partial index on SQLite and
# PostgreSQL, an indexed generated column on MySQL/MariaDB). The database updates it in the very
# statement that creates the record, so an entry exists iff the record does, and building it on
# an existing table indexes the entries already stored (the backfill).

#: The audit index's predicate in each dialect (ADR-0139): ``audit_indexed`` in SQL, in the
#: index (or generated column) and verbatim in its query.
AUDIT_WHERE_POSTGRES = audit_sql_predicate("left(key, {n})")
AUDIT_WHERE_SQLITE = audit_sql_predicate("substr(key, 1, {n})")
AUDIT_WHERE_MYSQL = audit_sql_predicate("LEFT(`key`, {n})")
#: The name's mark of the index built on that predicate: ``audit2`` since settles are in it
#: (ADR-0139, amended), so a dev store indexed by the decisions-only ``audit`` build is not
#: taken for indexed and gets the upgrade, which indexes the rows already there.
AUDIT_INDEX_MARK = "audit2"


class AuditStatements:
    """The audit index's one query in one SQL dialect.

    ``when``: the column holding an indexed row's instant (``written_ms``, or a generated
    column that is NULL outside the prefix); ``where``: the index's own predicate, repeated
    verbatim so the planner matches the partial index ("" when ``when`` already excludes
    other keys); ``sid``/``key``: the id and key expressions in code-point order;
    ``row_values``: the keyset as one row comparison (else spelled out, MySQL).
    """

    def __init__(
        self,
        records: str,
        mark: str,
        *,
        when: str,
        where: str,
        sid: str = "session_id",
        key: str = "key",
        row_values: bool,
    ) -> None:
        self.table, self.mark, self.row_values = records, mark, row_values
        self.when, self.where, self.sid, self.key = when, where, sid, key

    def list_statement(self, **arguments: Any) -> tuple[AuditQuery, str, tuple[Any, ...]]:
        """``list_audit(**arguments)`` checked (before any I/O), and its one indexed range read
        of up to ``limit + 1`` rows in ``(when, session_id, key)`` order."""
        query = check_audit_query(**arguments)
        m, t, sid, key = self.mark, self.when, self.sid, self.key
        where = [self.where] if self.where else []
        where.append(f"{t} >= {m}")
        params: list[Any] = [query.since_ms]
        if query.after is not None:
            if self.row_values:
                where.append(f"({t}, {sid}, {key}) > ({m}, {m}, {m})")
                params.extend(query.after)
            else:
                where.append(
                    f"{t} >= {m} AND ({t} > {m} OR {sid} > {m} OR ({sid} = {m} AND {key} > {m}))"
                )
                ms, s, k = query.after
                params.extend((ms, ms, s, s, k))
        sql = (
            f"SELECT {t}, session_id, {key} FROM {self.table} WHERE {' AND '.join(where)}"
            f" ORDER BY {t}, {sid}, {key} LIMIT {m}"
        )
        return query, sql, (*params, query.limit + 1)


def audit_refs(rows: Iterable[Sequence[Any]]) -> list[AuditRef]:
    """Rows of :meth:`AuditStatements.list_statement` as :class:`AuditRef` values."""
    return [AuditRef(_text(s), _text(k), int(ms)) for ms, s, k in rows]
