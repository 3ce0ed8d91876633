"""The pending index's decisions, shared by every adapter and made once without I/O (ADR-0029).

An adapter keeps one row per pending confirmation binding, written by the same atomic
statement (or transaction) as the envelope save that makes it pending or not. What a save
writes comes from :func:`pending_rows` (carried on ``PreparedSave.pending``); which rows keep
their ``pending_since_ms`` from :func:`carry_since`; a query's arguments are checked by
:func:`check_pending_query`; its keyset cursor is :func:`encode_after` / :func:`decode_after`;
the row order is :func:`sort_key`; a fetched page becomes a :class:`PendingPage` by
:func:`make_page`. Adapters that filter in the host language (memory) use :func:`admits`.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..errors import ConfigError
from ..wire.js import MAX_SAFE_INTEGER, is_identifier
from ._cas import PendingRow, pending_rows
from .port import PendingApproval, PendingOrder, PendingPage

__all__ = [
    "MAX_PENDING_LIMIT",
    "PENDING_HINT",
    "PendingQuery",
    "PendingRow",
    "admits",
    "carry_since",
    "check_pending_query",
    "check_token",
    "decode_after",
    "encode_after",
    "make_page",
    "pending_rows",
    "sort_key",
]

PENDING_HINT = (
    "list_pending() takes identifiers for action and session_id, int epoch-ms bounds, "
    "order 'expiry' or 'newest', an 'after' from a previous page of the same order, "
    "and a limit of 1..1000."
)

#: The largest page :meth:`~akchat_fsm.storage.port.PendingIndex.list_pending` returns.
MAX_PENDING_LIMIT: Final = 1000

_ORDERS: Final = ("expiry", "newest")
# A cursor holds one safe integer and two identifiers: it is never longer than this.
_MAX_AFTER_CHARS: Final = 512
_AFTER_PREFIX: Final = "p1."


def carry_since(
    session_id: str,
    rows: Iterable[PendingRow],
    previous: Mapping[str, int],
    written_ms: int,
) -> tuple[PendingApproval, ...]:
    """The index rows a save stores: ``previous`` maps a token already pending to its since.

    A binding still pending keeps the instant it first became pending; a newly pending one
    takes ``written_ms`` (the adapter's clock at this write).
    """
    return tuple(
        PendingApproval(
            session_id,
            row.token,
            row.tool_call_id,
            row.action,
            row.expires_at_ms,
            previous.get(row.token, written_ms),
        )
        for row in rows
    )


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True, slots=True)
class PendingQuery:
    """A checked ``list_pending`` call; bounds are clamped to the safe-integer range."""

    action: str | None
    session_id: str | None
    expiring_before_ms: int | None
    pending_before_ms: int | None
    order: PendingOrder
    #: The sort key of the last row of the previous page (see :func:`sort_key`), or ``None``.
    after: tuple[int, str, str] | None
    limit: int


def _identifier(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not is_identifier(value):
        raise ConfigError(
            f"{what} must be an identifier or None, got {value!r}.", hint=PENDING_HINT
        )
    return str(value)


def _bound(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{what} must be an int (epoch ms) or None, got {value!r}.", hint=PENDING_HINT
        )
    return min(max(-MAX_SAFE_INTEGER, value), MAX_SAFE_INTEGER)


def check_pending_query(
    *,
    action: object = None,
    session_id: object = None,
    expiring_before_ms: object = None,
    pending_before_ms: object = None,
    order: object = "expiry",
    after: object = None,
    limit: object = 50,
) -> PendingQuery:
    """Validate a ``list_pending`` call before any I/O (``ConfigError`` otherwise)."""
    if order not in _ORDERS or not isinstance(order, str):
        raise ConfigError(f"order must be 'expiry' or 'newest', got {order!r}.", hint=PENDING_HINT)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PENDING_LIMIT:
        raise ConfigError(
            f"limit must be an int of 1..{MAX_PENDING_LIMIT}, got {limit!r}.", hint=PENDING_HINT
        )
    checked: PendingOrder = "expiry" if order == "expiry" else "newest"
    return PendingQuery(
        _identifier(action, "action"),
        _identifier(session_id, "session_id"),
        _bound(expiring_before_ms, "expiring_before_ms"),
        _bound(pending_before_ms, "pending_before_ms"),
        checked,
        None if after is None else decode_after(after, checked),
        limit,
    )


def check_token(token: object) -> str:
    """``find_token``'s argument: an identifier (a confirmation token), else ``ConfigError``."""
    if not is_identifier(token):
        raise ConfigError(
            f"A confirmation token is an identifier, got {token!r}.", hint=PENDING_HINT
        )
    return str(token)


def sort_key(item: PendingApproval, order: PendingOrder) -> tuple[int, str, str]:
    """The key a page is sorted by: ascending for ``"expiry"``, descending for ``"newest"``."""
    first = item.expires_at_ms if order == "expiry" else item.pending_since_ms
    return (first, item.session_id, item.tool_call_id)


def admits(query: PendingQuery, item: PendingApproval) -> bool:
    """Whether ``item`` passes ``query``'s filters and lies after its keyset cursor."""
    if query.action is not None and item.action != query.action:
        return False
    if query.session_id is not None and item.session_id != query.session_id:
        return False
    if query.expiring_before_ms is not None and not item.expires_at_ms < query.expiring_before_ms:
        return False
    if query.pending_before_ms is not None and not item.pending_since_ms < query.pending_before_ms:
        return False
    if query.after is None:
        return True
    key = sort_key(item, query.order)
    return key > query.after if query.order == "expiry" else key < query.after


def make_page(query: PendingQuery, fetched: Sequence[PendingApproval]) -> PendingPage:
    """A page from up to ``limit + 1`` rows fetched in order (one more tells a next page exists)."""
    items = tuple(fetched[: query.limit])
    more = len(fetched) > query.limit and items
    return PendingPage(
        items, encode_after(sort_key(items[-1], query.order), query.order) if more else None
    )


# --------------------------------------------------------------------------- the cursor


def encode_after(key: tuple[int, str, str], order: PendingOrder) -> str:
    """The opaque cursor for the page after the row of sort ``key`` (URL- and shell-safe)."""
    raw = json.dumps([order, *key], separators=(",", ":")).encode("ascii")
    return _AFTER_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_after(after: object, order: PendingOrder) -> tuple[int, str, str]:
    """The sort key inside a cursor of ``order``; anything else is a ``ConfigError``."""
    bad = ConfigError(
        f"after is not a cursor of a page in {order!r} order: {after!r:.80}.", hint=PENDING_HINT
    )
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
    if not (isinstance(value, list) and len(value) == 4 and value[0] == order):
        raise bad
    _, first, sid, tcid = value
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= MAX_SAFE_INTEGER:
        raise bad
    if not (is_identifier(sid) and is_identifier(tcid)):
        raise bad
    return (first, sid, tcid)
