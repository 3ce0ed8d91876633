"""The statement parameters the SQL adapters with one statement per call share.

PostgreSQL and MySQL/MariaDB spell their SQL differently but bind it alike: the same
columns, in the same order, checked by the same shared decisions (:mod:`._cas`). Each
adapter's plan sets the four statements; this base binds their parameters, once.
"""

from __future__ import annotations

from typing import Any

from ._cas import check_record_key, check_session_id, prepare_save, prepare_stored_record

__all__ = ["SqlStatements"]


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
        p = prepare_save(snapshot, expected_cursor)
        if p.expected is None:
            return self.insert, (p.session_id, p.cursor, p.text, p.processing, p.written_ms)
        return self.update, (p.cursor, p.text, p.processing, p.written_ms, p.session_id, p.expected)

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
