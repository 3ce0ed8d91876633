"""The checks every store applies to its arguments, and the clock adapters stamp writes with.

Public for the layers above storage that keep their own records in a store (the agent-runtime
bridges, the testing kit): they validate ids and keys exactly as the adapters will, before any
I/O. The decisions themselves live once, in the adapters' shared module.
"""

from __future__ import annotations

from ._audit_index import check_audit_query
from ._cas import DEFAULT_TABLE, MAX_RECORD_CHARS, check_record_key, check_session_id, now_ms

__all__ = [
    "DEFAULT_TABLE",
    "MAX_RECORD_CHARS",
    "check_audit_query",
    "check_record_key",
    "check_session_id",
    "now_ms",
]
