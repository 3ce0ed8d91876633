"""The audit index's decisions, shared by every adapter and made once without I/O (ADR-0139).

Every record whose key starts with one of :data:`AUDIT_KEY_PREFIXES` is an audit entry: a
decision's under ``audit:`` (ADR-0132), any other kind under ``audit-<kind>:`` (an operator's
settle, ``audit-settle:``, ADR-0136).
The adapter lists it across sessions by ``(written_ms, session_id, key)``, the index entry written
by the very write that creates the record (as the processing index is, ADR-0085). Which keys are
indexed is :func:`audit_indexed`; a query's arguments are checked by :func:`check_audit_query`;
its keyset cursor is :func:`encode_audit_after` / :func:`decode_audit_after`; a fetched page
becomes an :class:`~akchat_fsm.storage.port.AuditRefPage` by :func:`make_audit_page`. Adapters
that filter in the host language (memory) use :func:`audit_admits`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from ..errors import ConfigError
from ..wire.js import MAX_SAFE_INTEGER, is_identifier
from ._cas import check_record_key
from .port import AuditRef, AuditRefPage

__all__ = [
    "AUDIT_HINT",
    "AUDIT_KEY_PREFIX",
    "AUDIT_KEY_PREFIXES",
    "AUDIT_KIND_PREFIX",
    "MAX_AUDIT_LIMIT",
    "AuditQuery",
    "audit_admits",
    "audit_indexed",
    "audit_sort_key",
    "audit_sql_predicate",
    "check_audit_query",
    "decode_audit_after",
    "encode_audit_after",
    "make_audit_page",
]

#: The record key prefix of the decisions' audit entries (ADR-0132).
AUDIT_KEY_PREFIX: Final = "audit:"
#: The prefix of every other kind of audit entry, ``audit-<kind>:`` (an operator's settle,
#: ``audit-settle:``, ADR-0136). The storage layer reserves the namespace and knows no kind.
AUDIT_KIND_PREFIX: Final = "audit-"
#: The one rule of the audit index: a record created under any of these is indexed, and no
#: other record is. Every adapter applies it: in Python (memory, Redis), or as the SQL of
#: :func:`audit_sql_predicate` (the partial indexes, MySQL's generated column).
AUDIT_KEY_PREFIXES: Final = (AUDIT_KEY_PREFIX, AUDIT_KIND_PREFIX)
#: The largest page :meth:`~akchat_fsm.storage.port.AuditIndex.list_audit` returns.
MAX_AUDIT_LIMIT: Final = 1000

AUDIT_HINT = (
    "list_audit() takes since_ms (an int, epoch ms) or None, an 'after' from a previous "
    "page, and a limit of 1..1000."
)

_AFTER_PREFIX: Final = "a1."
# A cursor holds one safe integer, an identifier and a record key: never longer than this.
_MAX_AFTER_CHARS: Final = 512


def audit_indexed(key: str) -> bool:
    """Whether a record under ``key`` belongs in the audit index."""
    return key.startswith(AUDIT_KEY_PREFIXES)


def audit_sql_predicate(prefix_of: str) -> str:
    """:func:`audit_indexed` in SQL: ``prefix_of`` is the dialect's "the first {n} characters
    of the key" with an ``{n}`` placeholder (``left(key, {n})``, ``substr(key, 1, {n})``).
    The prefixes are constants of this module (no quote in them), so the text is inert."""
    tests = (f"{prefix_of.format(n=len(p))} = '{p}'" for p in AUDIT_KEY_PREFIXES)
    return "(" + " OR ".join(tests) + ")"


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """A checked ``list_audit`` call; ``since_ms`` is clamped to ``0..MAX_SAFE_INTEGER``."""

    #: The lowest ``written_ms`` listed (0 when no bound was given: no write is older).
    since_ms: int
    #: The sort key of the last row of the previous page, or ``None``.
    after: tuple[int, str, str] | None
    limit: int


def check_audit_query(
    *, since_ms: object = None, after: object = None, limit: object = 100
) -> AuditQuery:
    """Validate a ``list_audit`` call before any I/O (``ConfigError`` otherwise)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_AUDIT_LIMIT:
        raise ConfigError(
            f"limit must be an int of 1..{MAX_AUDIT_LIMIT}, got {limit!r}.", hint=AUDIT_HINT
        )
    if since_ms is not None and (isinstance(since_ms, bool) or not isinstance(since_ms, int)):
        raise ConfigError(
            f"since_ms must be an int (epoch ms) or None, got {since_ms!r}.", hint=AUDIT_HINT
        )
    since = 0 if since_ms is None else min(max(0, since_ms), MAX_SAFE_INTEGER)
    return AuditQuery(since, None if after is None else decode_audit_after(after), limit)


def audit_sort_key(item: AuditRef) -> tuple[int, str, str]:
    """The key pages are sorted by, ascending."""
    return (item.written_ms, item.session_id, item.key)


def audit_admits(query: AuditQuery, item: AuditRef) -> bool:
    """Whether ``item`` is at or after ``since_ms`` and strictly after the keyset cursor."""
    if item.written_ms < query.since_ms:
        return False
    return query.after is None or audit_sort_key(item) > query.after


def make_audit_page(query: AuditQuery, fetched: Sequence[AuditRef]) -> AuditRefPage:
    """A page from up to ``limit + 1`` rows fetched in order (one more tells a next page exists)."""
    items = tuple(fetched[: query.limit])
    more = len(fetched) > query.limit and items
    return AuditRefPage(items, encode_audit_after(audit_sort_key(items[-1])) if more else None)


def encode_audit_after(key: tuple[int, str, str]) -> str:
    """The opaque cursor for the page after the row of sort ``key`` (URL- and shell-safe)."""
    raw = json.dumps(list(key), separators=(",", ":")).encode("ascii")
    return _AFTER_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_audit_after(after: object) -> tuple[int, str, str]:
    """The sort key inside a cursor; anything else is a ``ConfigError``."""
    bad = ConfigError(f"after is not a cursor of an audit page: {after!r:.80}.", hint=AUDIT_HINT)
    if (
        not isinstance(after, str)
        or len(after) > _MAX_AFTER_CHARS
        or not after.startswith(_AFTER_PREFIX)
    ):
        raise bad
    body = after[len(_AFTER_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
        value = json.loads(raw.decode("ascii"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad from None
    if not (isinstance(value, list) and len(value) == 3):
        raise bad
    ms, sid, key = value
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_SAFE_INTEGER:
        raise bad
    if not is_identifier(sid):
        raise bad
    try:
        check_record_key(key)
    except ConfigError:
        raise bad from None
    return (ms, sid, key)
