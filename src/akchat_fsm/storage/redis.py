"""Redis adapter (redis-py, extra ``redis``): one Lua script is the whole compare-and-set.

Each session is a hash at ``prefix + session_id`` with fields ``cursor`` (a decimal string,
compared as a string: Lua numbers are doubles), ``body`` (the canonical JSON text),
``processing`` and ``pending`` ("1" while it has pending-index rows). Its records are one
hash at ``prefix + session_id + "#records"`` (fields
``v:<key>`` version, ``b:<key>`` text, ``p:<key>`` while processing, ``#processing`` their
count). The processing index is one sorted set at ``prefix + "#processing"``: a session is a
member, scored by its last write in epoch ms, while its envelope or a record is processing
(ADR-0085). The pending index (ADR-0029, ADR-0088) is a hash of a session's pending rows at
``prefix + session_id + "#pending"`` and sorted sets under ``prefix + "#pending:"`` (see
``_PENDING``). ``#`` never occurs in a session id, so no key can collide with another's. Every
write is one Lua script over those keys: it validates first and writes last, so an error
inside it never leaves a partial write, and the indexes change in the same atomic step.

We drive a pooled connection ourselves (connect, send, read) instead of
``Redis.execute_command`` so that each failure is classified by *when* it happened: before the
command left (``StorageUnavailable``) or while waiting for its reply (``OutcomeUnknown`` for a
write: the script may have run). The asyncio twin cannot tell "not sent" from "buffered, sent
later", so its failed sends of a write are ``OutcomeUnknown`` too. Writes are never retried;
a ``NOSCRIPT`` reply (the script cache was flushed: nothing ran) is answered once with
``EVAL`` of the same script, which also re-caches it. Durability is Redis configuration
(``appendonly``/``appendfsync``).

Cluster mode (``cluster=True``, ADR-0089) puts a session in bucket ``crc32(id) % shards``
and prefixes its keys and its bucket's index keys with the hash tag ``{prefix + bucket}``
(``_Plan.base``), so each script touches one slot; listings read every bucket and merge. The
adapter routes by ``MOVED`` replies itself (``_Routes``, ``_Hops``) and follows each write that
changed something with ``WAIT``: too few replica acknowledgements are ``OutcomeUnknown``.
"""

from __future__ import annotations

import hashlib
import re
import select
import zlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar
from urllib.parse import urlsplit

import redis
import redis.asyncio
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (
    ClusterCrossSlotError,
    MovedError,
    NoScriptError,
    RedisError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from ..errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from ..wire.decode import decode_session_snapshot
from ..wire.js import is_identifier
from ..wire.session import SessionSnapshot
from ._audit_index import (
    AuditQuery,
    audit_indexed,
    audit_sort_key,
    check_audit_query,
    make_audit_page,
)
from ._cas import (
    PendingRow,
    check_limit,
    check_record_key,
    check_session_id,
    loaded_text,
    now_ms,
    pending_rows,
    prepare_save,
    prepare_save_with_records,
    prepare_stored_record,
    record_prefix_matches_nothing,
)
from ._closing import AsyncClosing, Closing
from ._pending import (
    PendingQuery,
    admits,
    check_pending_query,
    check_token,
    encode_after,
    make_page,
    sort_key,
)
from ._read_only import read_only_refusal
from .port import (
    AuditRef,
    AuditRefPage,
    CreatedRecords,
    PendingApproval,
    PendingOrder,
    PendingPage,
    ProcessingSession,
    StoredRecord,
)

__all__ = [
    "CAS_SCRIPT",
    "MAX_SHARDS",
    "PENDING_SCAN_BUDGET",
    "AsyncRedisStorage",
    "RedisStorage",
    "map_redis_error",
]

DEFAULT_PREFIX = "akchat:session:"

#: The most pending-index entries one page examines when it filters on the instant it is not
#: sorted by (``pending_before_ms`` in expiry order, ``expiring_before_ms`` in newest order):
#: past it the page ends early, with a ``next_after`` to go on from (ADR-0088).
PENDING_SCAN_BUDGET: Final = 10_000

# Every script takes KEYS[1] the session hash, KEYS[2] its records hash, KEYS[3] the index,
# and ends with the same step: the session is in the index iff its envelope or one of its
# records is processing, scored by this write's time. All are O(1) but ZADD/ZREM (O(log n)).
_INDEX = """
if busy > 0 or redis.call('HGET', KEYS[1], 'processing') == '1' then
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2])
else
  redis.call('ZREM', KEYS[3], ARGV[2])
end
return 1
"""

# The pending index (ADR-0029, ADR-0088). KEYS[4] is the session's rows, a hash of token ->
# "expires since tool_call_id action" (ms zero-padded to 16 digits); ``ns`` (the adapter's
# prefix + "#pending:") names the shared sorted sets, every member scored 0 and ordered by
# bytes: ``e``/``e:<action>`` hold "expires sid tcid token action since", ``n``/``n:<action>``
# "since sid tcid token action expires", ``t`` "token sid". A space sorts below every
# identifier character, so the bytes order is the tuple order of ``sort_key``. ``reindex``
# rewrites a session's rows to those of ARGV[first..] (token, tool call id, action, padded
# expiry: four each): a token still pending keeps its since (``carry_since``'s rule), a new one
# takes ``now``; a row that did not change is not touched (the common save: a session whose
# approval still waits), one that left is removed. ``unindex`` removes them all (delete).
_PENDING = """
local function members(sid, tok, row)
  local e, s, tc, act = string.match(row, '^(%d+) (%d+) (%S+) (%S+)$')
  local tail = ' ' .. sid .. ' ' .. tc .. ' ' .. tok .. ' ' .. act .. ' '
  return act, e .. tail .. s, s .. tail .. e
end
local function unlist(ns, sid, tok, row)
  local act, me, mn = members(sid, tok, row)
  redis.call('ZREM', ns .. 'e', me)
  redis.call('ZREM', ns .. 'e:' .. act, me)
  redis.call('ZREM', ns .. 'n', mn)
  redis.call('ZREM', ns .. 'n:' .. act, mn)
  redis.call('ZREM', ns .. 't', tok .. ' ' .. sid)
end
local function list(ns, sid, tok, row)
  local act, me, mn = members(sid, tok, row)
  redis.call('ZADD', ns .. 'e', 0, me)
  redis.call('ZADD', ns .. 'e:' .. act, 0, me)
  redis.call('ZADD', ns .. 'n', 0, mn)
  redis.call('ZADD', ns .. 'n:' .. act, 0, mn)
  redis.call('ZADD', ns .. 't', 0, tok .. ' ' .. sid)
end
local function rows_of(rows)
  local flat, old = redis.call('HGETALL', rows), {}
  for i = 1, #flat, 2 do old[flat[i]] = flat[i + 1] end
  return old
end
local function unindex(ns, sid, rows, old)
  for tok, row in pairs(old) do unlist(ns, sid, tok, row) end
  redis.call('DEL', rows)
end
-- Redis never rolls a script back, so an error after its first write would leave that write:
-- every write script checks all it will parse before it writes. ``malformed`` checks ARGV[1]
-- (the index's score), ARGV[2], the stored rows ``old`` and, given ``first``, the padded
-- ``now`` and the rows from ARGV[first..]; it returns the error reply to give, or nil.
local function word(s) return s ~= nil and string.match(s, '^%S+$') ~= nil end
local function digits(s) return s ~= nil and string.match(s, '^%d+$') ~= nil end
local function malformed(old, first, now)
  if not tonumber(ARGV[1]) or not word(ARGV[2]) then
    return 'ERR akchat: a malformed written ms or session id'
  end
  for tok, row in pairs(old) do
    if not string.match(row, '^%d+ %d+ %S+ %S+$') then
      return 'ERR akchat: the stored pending row of ' .. tok .. ' is malformed'
    end
  end
  if first == nil then return nil end
  if not digits(now) or #ARGV < first - 1 or (#ARGV - first + 1) % 4 ~= 0 then
    return 'ERR akchat: malformed pending rows'
  end
  for i = first, #ARGV, 4 do
    if not (word(ARGV[i]) and word(ARGV[i + 1]) and word(ARGV[i + 2]) and digits(ARGV[i + 3])) then
      return 'ERR akchat: a malformed pending row'
    end
  end
  return nil
end
local function reindex(ns, sid, rows, old, now, first)
  local kept = {}
  for i = first, #ARGV, 4 do
    local tok = ARGV[i]
    -- A validated snapshot never repeats a token; one that does keeps its first row only.
    if kept[tok] == nil then
      local prev = old[tok]
      local s = prev and string.match(prev, '^%d+ (%d+)') or now
      local row = ARGV[i + 3] .. ' ' .. s .. ' ' .. ARGV[i + 1] .. ' ' .. ARGV[i + 2]
      kept[tok] = true
      if prev ~= row then
        if prev then unlist(ns, sid, tok, prev) end
        list(ns, sid, tok, row)
        redis.call('HSET', rows, tok, row)
      end
    end
  end
  for tok, row in pairs(old) do
    if kept[tok] == nil then
      unlist(ns, sid, tok, row)
      redis.call('HDEL', rows, tok)
    end
  end
end
"""

#: The compare of every CAS script: ARGV[3] the expected cursor ("" = create-only); 0 on a
#: mismatch, before anything is written. ``head`` is the envelope's cursor and pending flag.
_CAS_HEAD = """\
local head = redis.call('HMGET', KEYS[1], 'cursor', 'pending')
local stored = head[1]
if ARGV[3] == '' then
  if stored then return 0 end
elseif stored ~= ARGV[3] then
  return 0
end
"""

#: ARGV[1] written ms, ARGV[2] session id, ARGV[3] expected cursor ("" = create-only),
#: ARGV[4] new cursor, ARGV[5] body, ARGV[6] "1" if processing, ARGV[7] the pending index's
#: key prefix, ARGV[8] written ms padded, ARGV[9..] the pending rows. 1 when written, 0 on a
#: conflict (and then nothing, the pending index included, has changed). The envelope's
#: ``pending`` field says whether it has rows, so a save of a session without any reads none.
CAS_SCRIPT = (
    _PENDING
    + _CAS_HEAD
    + """\
local old = {}
if head[2] == '1' then old = rows_of(KEYS[4]) end
local busy = tonumber(redis.call('HGET', KEYS[2], '#processing') or '0')
local bad = malformed(old, 9, ARGV[8])
if not bad and (not busy or not digits(ARGV[4]) or (ARGV[6] ~= '0' and ARGV[6] ~= '1')) then
  bad = 'ERR akchat: a malformed cursor, processing flag or record count'
end
if bad then return redis.error_reply(bad) end
-- Parsed and checked: only writes from here on.
reindex(ARGV[7], ARGV[2], KEYS[4], old, ARGV[8], 9)
local rows = #ARGV > 8 and '1' or '0'
redis.call('HSET', KEYS[1], 'cursor', ARGV[4], 'body', ARGV[5], 'processing', ARGV[6],
  'pending', rows)
"""
    + _INDEX
)

#: :data:`CAS_SCRIPT` that also creates records, all or nothing (``save_with_records``,
#: ADR-0141): ARGV[1..8] as there, ARGV[9] the audit index's sorted set, ARGV[10] the record
#: count ``n``, then ``n`` triples (key, text, "1" if the key is audit-indexed), then the
#: pending rows. 0, and nothing written, if the cursor does not match or any key exists;
#: every check (the keys' absence included) runs before the first write.
CAS_RECORDS_SCRIPT = (
    _PENDING
    + _CAS_HEAD
    + """\
local n = tonumber(ARGV[10])
if not n or n < 1 or #ARGV < 10 + 3 * n then
  return redis.error_reply('ERR akchat: a malformed record count')
end
local first = 11 + 3 * n
for i = 11, first - 1, 3 do
  if redis.call('HEXISTS', KEYS[2], 'v:' .. ARGV[i]) == 1 then return 0 end
end
local old = {}
if head[2] == '1' then old = rows_of(KEYS[4]) end
local busy = tonumber(redis.call('HGET', KEYS[2], '#processing') or '0')
local bad = malformed(old, first, ARGV[8])
if not bad and (not busy or not digits(ARGV[4]) or (ARGV[6] ~= '0' and ARGV[6] ~= '1')) then
  bad = 'ERR akchat: a malformed cursor, processing flag or record count'
end
if bad then return redis.error_reply(bad) end
-- Parsed and checked: only writes from here on.
reindex(ARGV[7], ARGV[2], KEYS[4], old, ARGV[8], first)
local rows = #ARGV >= first and '1' or '0'
redis.call('HSET', KEYS[1], 'cursor', ARGV[4], 'body', ARGV[5], 'processing', ARGV[6],
  'pending', rows)
for i = 11, first - 1, 3 do
  local k = ARGV[i]
  redis.call('HSET', KEYS[2], 'v:' .. k, '1', 'b:' .. k, ARGV[i + 1])
  if ARGV[i + 2] == '1' then
    redis.call('HSET', KEYS[2], 'a:' .. k, ARGV[8])
    redis.call('ZADD', ARGV[9], 0, ARGV[8] .. ' ' .. ARGV[2] .. ' ' .. k)
  end
end
"""
    + _INDEX
)

#: The one-time backfill of a session saved before the pending index (ADR-0088): ARGV as
#: :data:`CAS_SCRIPT`'s but ARGV[3] is the cursor the backfill read; the rows are written only
#: if it is still stored (a later save has written its own rows).
BACKFILL_SCRIPT = (
    _PENDING
    + """\
if redis.call('HGET', KEYS[1], 'cursor') ~= ARGV[3] then return 0 end
local old = rows_of(KEYS[4])
local bad = malformed(old, 9, ARGV[8])
if bad then return redis.error_reply(bad) end
reindex(ARGV[7], ARGV[2], KEYS[4], old, ARGV[8], 9)
redis.call('HSET', KEYS[1], 'pending', #ARGV > 8 and '1' or '0')
return 1
"""
)

#: One page of the pending index, read-only: KEYS[1] a sorted set of ``_PENDING``; ARGV[1]
#: "rev" for descending; ARGV[2], ARGV[3] the lex bounds (min, max); ARGV[4] members wanted
#: (limit + 1); ARGV[5] the most members examined; ARGV[6] "" or the exclusive upper bound of
#: the member's last field (the other instant), padded. Replies [members, last]: ``last`` is
#: "" when the range is exhausted or enough were found, else the last member examined.
PAGE_SCRIPT = """\
local rev, lo, hi = ARGV[1] == 'rev', ARGV[2], ARGV[3]
local want, budget, bound = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local found, seen = {}, 0
while true do
  local ask = want - #found
  if bound ~= '' then ask = math.min(budget - seen, math.max(ask, 256)) end
  local got
  if rev then
    got = redis.call('ZREVRANGEBYLEX', KEYS[1], hi, lo, 'LIMIT', 0, ask)
  else
    got = redis.call('ZRANGEBYLEX', KEYS[1], lo, hi, 'LIMIT', 0, ask)
  end
  for _, m in ipairs(got) do
    seen = seen + 1
    if bound == '' or string.sub(m, -16) < bound then
      found[#found + 1] = m
      if #found >= want then return {found, ''} end
    end
  end
  if #got < ask then return {found, ''} end
  if seen >= budget then return {found, got[#got]} end
  if rev then hi = '(' .. got[#got] else lo = '(' .. got[#got] end
end
"""

#: ARGV[1] written ms, ARGV[2] session id, ARGV[3] key, ARGV[4] expected version ("" =
#: create-only), ARGV[5] new version, ARGV[6] text, ARGV[7] "1" if processing, ARGV[8] the
#: audit index's sorted set when the key is an audit entry's (else ""), ARGV[9] written ms
#: padded. An audit record is listed at its last write: its member "<ms> <sid> <key>" (scored
#: 0, ordered by bytes, so by ``audit_sort_key``), and ``a:<key>`` keeps the instant so the
#: next write or a delete finds the member (ADR-0139).
RECORD_SCRIPT = (
    """\
local v, p = 'v:' .. ARGV[3], 'p:' .. ARGV[3]
local stored = redis.call('HGET', KEYS[2], v)
if ARGV[4] == '' then
  if stored then return 0 end
elseif stored ~= ARGV[4] then
  return 0
end
local busy = tonumber(redis.call('HGET', KEYS[2], '#processing') or '0')
-- Checked before the first write (Redis never rolls a script back): all it parses.
if not busy or not tonumber(ARGV[1]) or not string.match(ARGV[5] or '', '^%d+$')
   or (ARGV[8] ~= '' and not string.match(ARGV[9] or '', '^%d+$')) then
  return redis.error_reply('ERR akchat: a malformed written ms, version or record count')
end
local was = redis.call('HEXISTS', KEYS[2], p) == 1
redis.call('HSET', KEYS[2], v, ARGV[5], 'b:' .. ARGV[3], ARGV[6])
if ARGV[8] ~= '' then
  local tail = ' ' .. ARGV[2] .. ' ' .. ARGV[3]
  local listed = redis.call('HGET', KEYS[2], 'a:' .. ARGV[3])
  if listed then redis.call('ZREM', ARGV[8], listed .. tail) end
  redis.call('HSET', KEYS[2], 'a:' .. ARGV[3], ARGV[9])
  redis.call('ZADD', ARGV[8], 0, ARGV[9] .. tail)
end
if ARGV[7] == '1' and not was then
  busy = busy + 1
  redis.call('HSET', KEYS[2], p, '1')
elseif ARGV[7] ~= '1' and was then
  busy = busy - 1
  redis.call('HDEL', KEYS[2], p)
end
if busy > 0 then
  redis.call('HSET', KEYS[2], '#processing', busy)
else
  redis.call('HDEL', KEYS[2], '#processing')
end
"""
    + _INDEX
)

#: ARGV[1] written ms, ARGV[2] session id, ARGV[3] key, ARGV[4] the audit index's sorted set.
#: Leaves the score of a session that stays listed unchanged (a delete is not a write of
#: state), like the memory adapter; an audit record leaves the audit index with it.
DELETE_RECORD_SCRIPT = """\
local busy = tonumber(redis.call('HGET', KEYS[2], '#processing') or '1')
if not busy then return redis.error_reply('ERR akchat: a malformed record count') end
if redis.call('HDEL', KEYS[2], 'v:' .. ARGV[3], 'b:' .. ARGV[3]) == 0 then return 0 end
local listed = redis.call('HGET', KEYS[2], 'a:' .. ARGV[3])
if listed then
  redis.call('ZREM', ARGV[4], listed .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
  redis.call('HDEL', KEYS[2], 'a:' .. ARGV[3])
end
if redis.call('HDEL', KEYS[2], 'p:' .. ARGV[3]) == 0 then return 1 end
busy = busy - 1
if busy > 0 then
  redis.call('HSET', KEYS[2], '#processing', busy)
  return 1
end
redis.call('HDEL', KEYS[2], '#processing')
if redis.call('HGET', KEYS[1], 'processing') ~= '1' then redis.call('ZREM', KEYS[3], ARGV[2]) end
return 1
"""

#: ARGV[1] written ms (unused), ARGV[2] session id, ARGV[3] the pending index's key prefix,
#: ARGV[4] the audit index's sorted set: the envelope, its records, its processing index
#: entry, its pending rows and its audit index entries.
DELETE_SCRIPT = (
    _PENDING
    + """\
local old = rows_of(KEYS[4])
local bad = malformed(old)
if bad then return redis.error_reply(bad) end
for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
  if string.sub(f, 1, 2) == 'a:' then
    local ms = redis.call('HGET', KEYS[2], f)
    redis.call('ZREM', ARGV[4], ms .. ' ' .. ARGV[2] .. ' ' .. string.sub(f, 3))
  end
end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[2])
unindex(ARGV[3], ARGV[2], KEYS[4], old)
return 1
"""
)

#: The one-time backfill of audit records written before the audit index (ADR-0139): KEYS[2]
#: the records hash, ARGV[1] the sorted set, ARGV[2] the session id, ARGV[3] the backfill's
#: clock padded, ARGV[4..] record keys. Each still stored and not yet listed is listed now.
AUDIT_BACKFILL_SCRIPT = """\
if not string.match(ARGV[3] or '', '^%d+$') then
  return redis.error_reply('ERR akchat: a malformed backfill instant')
end
local n = 0
for i = 4, #ARGV do
  local k = ARGV[i]
  if redis.call('HEXISTS', KEYS[2], 'v:' .. k) == 1
     and redis.call('HSETNX', KEYS[2], 'a:' .. k, ARGV[3]) == 1 then
    redis.call('ZADD', ARGV[1], 0, ARGV[3] .. ' ' .. ARGV[2] .. ' ' .. k)
    n = n + 1
  end
end
return n
"""

CAS_SHA = hashlib.sha1(CAS_SCRIPT.encode()).hexdigest()
_SOURCES = {
    hashlib.sha1(source.encode()).hexdigest(): source
    for source in (
        CAS_SCRIPT,
        CAS_RECORDS_SCRIPT,
        RECORD_SCRIPT,
        DELETE_RECORD_SCRIPT,
        DELETE_SCRIPT,
        BACKFILL_SCRIPT,
        PAGE_SCRIPT,
        AUDIT_BACKFILL_SCRIPT,
    )
}
_SHA = {source: sha for sha, source in _SOURCES.items()}

Phase = Literal["connect", "send", "reply"]


def map_redis_error(exc: BaseException, *, phase: Phase, write: bool) -> StorageError | ConfigError:
    """Classify a redis-py error by the phase it happened in.

    ``connect``/``send``: the command never fully reached the server, nothing ran. ``reply``:
    an error *reply* (``BUSY``, ``OOM``, ``READONLY``…) means the script did not write;
    a timeout or a dropped connection while waiting means a write may have applied. A
    ``WRONGTYPE`` reply means a key under the adapter's prefix holds something else: that
    store is not the adapter's, which no retry mends (``ConfigError``, like a PostgreSQL table
    of the wrong shape); so is a ``CROSSSLOT`` or ``MOVED`` reply to the single-node layout
    (the server is a Redis Cluster node: nothing ran, ADR-0089).
    """
    if isinstance(exc, ResponseError) and str(exc).startswith("WRONGTYPE"):
        return ConfigError(
            f"Redis: a key under this adapter's prefix holds another type of value: {exc}",
            hint="Use a prefix no other data lives under, or delete the foreign key.",
        )
    if isinstance(exc, ClusterCrossSlotError | MovedError):
        return ConfigError(
            f"Redis: this server is a Redis Cluster node, refusing the single-node layout: {exc}",
            hint="Open it in cluster mode: redis+cluster://host:port/ (ADR-0089).",
        )
    lost = isinstance(exc, RedisConnectionError | RedisTimeoutError | OSError)
    if phase == "reply" and write and lost:
        return OutcomeUnknown(f"Redis write may have applied: {exc}")
    return StorageUnavailable(f"Redis: {exc}")


# --------------------------------------------------------------------------- cluster mode
#: A cluster node, as ``MOVED`` names it.
_Node = tuple[str, int]
#: Redirections (and unreachable nodes) one command may meet before it is given up.
MAX_HOPS: Final = 5
#: The most buckets a cluster-mode store may have: every listing reads each bucket (a round
#: trip apiece) and a page's ``PENDING_SCAN_BUDGET`` is shared between them (ADR-0089).
MAX_SHARDS: Final = 256


@dataclass(frozen=True)
class ClusterOptions:
    """Cluster mode's settings (ADR-0089): bucket count, and the ``WAIT`` after each write."""

    shards: int
    wait_replicas: int
    wait_timeout_ms: int


def _count(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an integer in [{low}, {high}], got {value!r}.")
    return value


def cluster_options(
    cluster: object, shards: object, wait_replicas: object, wait_timeout: object
) -> ClusterOptions | None:
    """The validated cluster settings, or ``None`` for a single node (which takes none)."""
    if not cluster:
        if (shards, wait_replicas, wait_timeout) != (None, None, None):
            raise ConfigError("shards, wait_replicas and wait_timeout need cluster=True.")
        return None
    timeout = 1.0 if wait_timeout is None else wait_timeout
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < 3600:
        raise ConfigError(f"wait_timeout must be seconds in (0, 3600), got {wait_timeout!r}.")
    return ClusterOptions(
        _count(16 if shards is None else shards, "shards", 1, MAX_SHARDS),
        _count(1 if wait_replicas is None else wait_replicas, "wait_replicas", 0, 100),
        max(1, round(timeout * 1000)),
    )


def check_wait_within(cluster: ClusterOptions | None, socket_timeout: object) -> None:
    """``WAIT`` must return before the socket gives up on its reply (``ConfigError`` if not):
    else a write whose replicas are slow is reported by a socket timeout, and the connection
    is dropped, instead of by ``WAIT``'s count. ``socket_timeout`` is the pool's, the URL's
    own ``socket_timeout`` included; ``None`` waits forever."""
    if cluster is None or cluster.wait_replicas == 0 or not isinstance(socket_timeout, int | float):
        return
    if cluster.wait_timeout_ms >= socket_timeout * 1000:
        raise ConfigError(
            f"wait_timeout ({cluster.wait_timeout_ms} ms) must be shorter than socket_timeout "
            f"({socket_timeout} s): the socket would give up before WAIT replies.",
            hint="Lower wait_timeout or raise socket_timeout (ADR-0089).",
        )


class _Routes:
    """Which node serves which hash slot, learnt from ``MOVED`` replies (sans-I/O).

    A slot not yet seen goes to the first known node; its ``MOVED`` reply (the command did
    not run) names the owner. A node that cannot be reached loses its slots and goes to the
    back of the list, so after a failover the next command asks a live node and is moved to
    the promoted replica.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.url = parts
        self.nodes: list[_Node] = [(parts.hostname or "127.0.0.1", parts.port or 6379)]
        self.slots: dict[int, _Node] = {}

    def node(self, command: tuple[Any, ...]) -> _Node:
        key = command[3] if command[0] in ("EVALSHA", "EVAL") else command[1]
        return self.slots.get(key_slot(str(key).encode("utf-8")), self.nodes[0])

    def moved(self, moved: MovedError) -> None:
        node = (str(moved.host), int(moved.port))
        self.slots[int(moved.slot_id)] = node
        if node not in self.nodes:
            self.nodes.append(node)

    def unreachable(self, node: _Node) -> None:
        self.slots = {slot: n for slot, n in self.slots.items() if n != node}
        if len(self.nodes) > 1:
            self.nodes.remove(node)
            self.nodes.append(node)

    def url_of(self, node: _Node) -> str:
        user = self.url.netloc.rpartition("@")[0]
        host = f"[{node[0]}]" if ":" in node[0] else node[0]
        netloc = f"{user}@{host}:{node[1]}" if user else f"{host}:{node[1]}"
        return self.url._replace(netloc=netloc).geturl()


class _Hops:
    """One routed command's attempts (sans-I/O, shared by both drivers): the node to try
    next, what a miss teaches the routes, and the error once every hop has missed.

    A driver sends the command to each node it yields until one answers, and hands each
    ``MovedError`` or ``_Unreached`` (the command did not run there) to :meth:`missed`.
    """

    def __init__(self, routes: _Routes, command: tuple[Any, ...]) -> None:
        self.routes = routes
        self.command = command
        self.unreached: StorageError | ConfigError | None = None

    def __iter__(self) -> Iterator[_Node]:
        for _ in range(MAX_HOPS):
            yield self.routes.node(self.command)

    def missed(self, node: _Node, exc: MovedError | _Unreached) -> None:
        if isinstance(exc, MovedError):
            self.routes.moved(exc)  # the command did not run: send it where it belongs
        else:
            self.routes.unreachable(node)  # nothing was sent: ask another node
            self.unreached = exc.error

    def given_up(self) -> Exception:
        name = self.command[0]
        return self.unreached or StorageUnavailable(f"Redis Cluster: no node took {name}.")


class _Unreached(Exception):
    """A routed command that never left: another node may be asked (``error`` if none is)."""

    def __init__(self, error: StorageError | ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


def _unreached(exc: BaseException, write: bool, routed: bool) -> Exception:
    error = map_redis_error(exc, phase="connect", write=write)
    return _Unreached(error) if routed else error


class _Plan:
    """Everything but the I/O: options, key naming, routing, the commands to send."""

    def __init__(
        self,
        url: str,
        prefix: str,
        socket_timeout: float,
        connect_timeout: float,
        cluster: ClusterOptions | None = None,
    ):
        if not isinstance(url, str) or not url:
            raise ConfigError("url must be a redis:// URL.")
        if not isinstance(prefix, str) or "\x00" in prefix:
            raise ConfigError(f"Invalid key prefix {prefix!r}.")
        self.url = url
        self.prefix = prefix
        # No retries anywhere: a retried write could run twice (redis-py 8 retries by default).
        self.pool_kwargs: dict[str, Any] = {
            "socket_timeout": socket_timeout,
            "socket_connect_timeout": connect_timeout,
            "retry_on_timeout": False,
            "retry": Retry(NoBackoff(), 0),
        }
        self.cluster = cluster
        self.routes = None if cluster is None else _Routes(url)
        if cluster is not None and ("{" in prefix or "}" in prefix):
            raise ConfigError(
                f"A cluster-mode key prefix may not hold '{{' or '}}', got {prefix!r}.",
                hint="The adapter puts the hash tag around the prefix itself (ADR-0089).",
            )
        #: The prefix of every key of one bucket: the whole store on a single node, one hash
        #: slot each in cluster mode (ADR-0089); index reads visit every one of them.
        self.bases = (
            [prefix]
            if cluster is None
            else ["{" + prefix + str(b) + "}" for b in range(cluster.shards)]
        )
        # The pending index's shared keys (see _PENDING) and the backfill's marker (ADR-0088).
        self.pending = prefix + "#pending:"
        self.backfilled = self.pending + "backfilled"
        # The audit index's marker of its one backfill (ADR-0139).
        # "2": settles are indexed since ADR-0139's amendment, so a store backfilled by the
        # decisions-only build is backfilled once more (the backfill adds only what is missing).
        self.audit_backfilled = prefix + "#audit:backfilled2"
        #: Cluster mode: the bucket count, stored once in bucket 0 and checked by every
        #: instance before its first command, since another count would re-home sessions.
        self.layout = self.bases[0] + "#shards"

    def base(self, session_id: str) -> str:
        """The prefix of ``session_id``'s keys and of its bucket's index keys."""
        sid = check_session_id(session_id)
        if self.cluster is None:
            return self.prefix
        return self.bases[zlib.crc32(sid.encode("utf-8")) % self.cluster.shards]

    def key(self, session_id: str) -> str:
        return self.base(session_id) + check_session_id(session_id)

    def records(self, session_id: str) -> str:
        return self.key(session_id) + "#records"

    def pending_rows(self, session_id: str) -> str:
        return self.key(session_id) + "#pending"

    def index_of(self, session_id: str) -> str:
        return self.base(session_id) + "#processing"

    def pending_of(self, session_id: str) -> str:
        return self.base(session_id) + "#pending:"

    def audit_of(self, session_id: str) -> str:
        """The audit index's sorted set of ``session_id``'s bucket (ADR-0139)."""
        return self.base(session_id) + "#audit"

    def check_layout(self, read_only: bool) -> _Steps[None]:
        """Cluster mode: the store's bucket count is this instance's (``ConfigError`` if not)."""
        if self.cluster is None:
            return
        mine = str(self.cluster.shards)
        stored = yield ("GET", self.layout), False
        if stored is None and not read_only:
            yield ("SET", self.layout, mine, "NX"), True
            stored = yield ("GET", self.layout), False
        if stored is not None and bytes(stored).decode("ascii", "replace") != mine:
            raise ConfigError(
                f"This Redis Cluster store was laid out in {bytes(stored).decode()!r} buckets, "
                f"not {mine}: another count would look for each session in the wrong place.",
                hint="Open it with the shards it was created with (ADR-0089).",
            )

    def wait_command(
        self, command: tuple[Any, ...], write: bool, reply: Any
    ) -> tuple[Any, ...] | None:
        """The ``WAIT`` that follows a write in cluster mode, or ``None``.

        Not after a script that replied 0: it wrote nothing (a lost compare-and-set, a delete
        of nothing), so no replica has anything to acknowledge. Not after the layout marker:
        it holds no session's state, and a marker lost in a failover is written again, with
        the same count, by the next instance that opens.
        """
        c = self.cluster
        if not write or c is None or c.wait_replicas == 0 or command[1] == self.layout:
            return None
        if command[0] == "EVALSHA" and reply == 0:
            return None
        return ("WAIT", c.wait_replicas, c.wait_timeout_ms)

    def check_acks(self, reply: Any) -> None:
        """A write fewer replicas hold than asked for may be lost in a failover (ADR-0089)."""
        assert self.cluster is not None
        acks, wanted = int(reply), self.cluster.wait_replicas
        if acks < wanted:
            raise OutcomeUnknown(
                f"Redis Cluster: the write reached {acks} of the {wanted} replica(s) asked for "
                f"within {self.cluster.wait_timeout_ms} ms; a failover now may lose it."
            )

    def load_command(self, session_id: str) -> tuple[Any, ...]:
        return ("HMGET", self.key(session_id), "body", "cursor")

    def _script(self, source: str, session_id: str, written_ms: int, *args: str) -> tuple[Any, ...]:
        """``EVALSHA sha 4 session records index pending-rows written_ms session_id *args``."""
        keys = (
            self.key(session_id),
            self.records(session_id),
            self.index_of(session_id),
            self.pending_rows(session_id),
        )
        return ("EVALSHA", _SHA[source], 4, *keys, str(written_ms), session_id, *args)

    def delete_command(self, session_id: str) -> tuple[Any, ...]:
        sid = check_session_id(session_id)
        return self._script(DELETE_SCRIPT, sid, 0, self.pending_of(sid), self.audit_of(sid))

    def save_command(self, snapshot: Any, expected_cursor: Any) -> tuple[Any, ...]:
        p = prepare_save(snapshot, expected_cursor)
        expected = "" if p.expected is None else str(p.expected)
        flag = "1" if p.processing else "0"
        ns = self.pending_of(p.session_id)
        args = (expected, str(p.cursor), p.text, flag, ns, _pad(p.written_ms))
        rows = _row_args(p.pending)
        return self._script(CAS_SCRIPT, p.session_id, p.written_ms, *args, *rows)

    def save_with_records_command(
        self, snapshot: Any, expected_cursor: Any, records: Any
    ) -> tuple[Any, ...]:
        p, created = prepare_save_with_records(snapshot, expected_cursor, records)
        expected = "" if p.expected is None else str(p.expected)
        flag = "1" if p.processing else "0"
        ns = self.pending_of(p.session_id)
        args = (expected, str(p.cursor), p.text, flag, ns, _pad(p.written_ms))
        triples = [
            v for r in created for v in (r.key, r.text, "1" if audit_indexed(r.key) else "0")
        ]
        head = (self.audit_of(p.session_id), str(len(created)), *triples)
        rows = _row_args(p.pending)
        return self._script(CAS_RECORDS_SCRIPT, p.session_id, p.written_ms, *args, *head, *rows)

    def load_record_command(self, session_id: str, key: str) -> tuple[Any, ...]:
        k = check_record_key(key)
        return ("HMGET", self.records(session_id), f"v:{k}", f"b:{k}")

    def save_record_command(
        self, session_id: Any, key: Any, text: Any, expected: Any, processing: Any
    ) -> tuple[Any, ...]:
        p = prepare_stored_record(session_id, key, text, expected, processing)
        was = "" if p.expected is None else str(p.expected)
        audit = self.audit_of(p.session_id) if audit_indexed(p.key) else ""
        args = (p.key, was, str(p.version), p.text, "1" if p.processing else "0", audit)
        return self._script(RECORD_SCRIPT, p.session_id, p.written_ms, *args, _pad(p.written_ms))

    def delete_record_command(self, session_id: str, key: str) -> tuple[Any, ...]:
        sid, k = check_session_id(session_id), check_record_key(key)
        return self._script(DELETE_RECORD_SCRIPT, sid, 0, k, self.audit_of(sid))

    def list_processing(
        self, written_before_ms: Any, limit: Any
    ) -> _Steps[list[ProcessingSession]]:
        """One ZRANGEBYSCORE per bucket (one on a single node), merged oldest first."""
        count, before = check_limit(limit, written_before_ms)
        if count == 0:
            return []
        top = "+inf" if before is None else f"({before}"
        found: list[ProcessingSession] = []
        for base in self.bases:
            command = ("ZRANGEBYSCORE", base + "#processing", "-inf", top, "WITHSCORES")
            found += _processing((yield (*command, "LIMIT", 0, count), False))
        # ZRANGEBYSCORE's own order: by score, then by member bytes (ids are ASCII).
        return sorted(found, key=lambda s: (s.last_write_ms, s.session_id))[:count]

    # -------------------------------------------------------------- the pending index
    def list_pending(self, query: PendingQuery) -> _Steps[PendingPage]:
        """One page: a session's rows, or one PAGE_SCRIPT per bucket merged by the cursor."""
        if query.session_id is not None:
            # A session's rows are at most its envelope's bindings: read them all.
            reply = yield ("HGETALL", self.pending_rows(query.session_id)), False
            rows = [_stored_row(query.session_id, t, r) for t, r in _pairs(reply)]
            found = sorted(
                (row for row in rows if admits(query, row)),
                key=lambda row: sort_key(row, query.order),
                reverse=query.order == "newest",
            )
            return make_page(query, found[: query.limit + 1])
        newest = query.order == "newest"
        items: list[PendingApproval] = []
        stops: list[tuple[int, str, str]] = []
        for base in self.bases:
            command = self._page_command(query, base + "#pending:")
            if command is None:
                return PendingPage((), None)
            found, last = yield command, False
            items += [_member(query.order, m) for m in found]
            if last:  # this bucket's scan budget ran out after examining ``last``
                stops.append(sort_key(_member(query.order, last), query.order))
        items.sort(key=lambda item: sort_key(item, query.order), reverse=newest)
        if not stops:
            return make_page(query, items[: query.limit + 1])
        # A bucket cut short may hold entries past the first point where one stopped: the
        # page ends there, and goes on after it (listed or not).
        stop = max(stops) if newest else min(stops)
        kept = [i for i in items if _within(sort_key(i, query.order), stop, newest)]
        if len(kept) > query.limit:
            return make_page(query, kept[: query.limit + 1])
        return PendingPage(tuple(kept), encode_after(stop, query.order))

    def _page_command(self, query: PendingQuery, ns: str) -> tuple[Any, ...] | None:
        bounds = (query.expiring_before_ms, query.pending_before_ms)
        if any(bound is not None and bound <= 0 for bound in bounds):
            return None  # every stored instant is >= 0
        ascending = query.order == "expiry"
        lead, cross = bounds if ascending else bounds[::-1]
        name = ns + ("e" if ascending else "n")
        if query.action is not None:
            name += ":" + query.action
        after = None if query.after is None else _sort_text(query.after)
        lo, hi = "-", "+"
        if ascending:
            lo = "-" if after is None else f"({after}!"  # past every member of that key
            hi = "+" if lead is None else f"({_pad(lead)}"
        else:  # read from the top down: the tighter of the two upper bounds
            tops = [] if lead is None else [_pad(lead)]
            if after is not None:
                tops.append(f"{after} ")  # below every member of that key
            hi = f"({min(tops)}" if tops else "+"
        bound = "" if cross is None else _pad(cross)
        # One page's budget, shared by the buckets it reads (bounded work whatever ``shards``);
        # at least one entry each, so every page moves on (ADR-0089).
        budget = max(1, PENDING_SCAN_BUDGET // len(self.bases))
        rev = "" if ascending else "rev"
        return _page_script(name, rev, lo, hi, query.limit + 1, budget, bound)

    def find_token(self, token: str) -> _Steps[str | None]:
        """One ZRANGEBYLEX per bucket: the smallest session id filed under ``token``."""
        found: list[str] = []
        for base in self.bases:
            bounds = (f"({token} ", f"({token}!", "LIMIT", 0, 1)
            reply = yield ("ZRANGEBYLEX", base + "#pending:t", *bounds), False
            if reply:
                found.append(bytes(reply[0]).decode("ascii").split(" ", 1)[1])
        return min(found, default=None)

    def backfill(self, read_only: bool) -> _Steps[None]:
        """Index, once per store, the pending bindings of sessions saved before the index.

        Guarded by a marker key written last: a backfill cut short runs again in full (each
        session's rows are rewritten only if its cursor is still the one read, carrying the
        since of rows already there), so running it twice changes nothing. A read-only
        adapter never writes, and never answers from an index it knows to be incomplete: on a
        store without the marker it scans the same way and raises ``ConfigError`` at the first
        session a writable one would backfill (a valid envelope holding a pending binding) that
        has no ``pending`` field, i.e. was last saved before the index. An empty store, or
        one only saved with the index, lists as it is. A cluster-mode store has had the index
        from its first write (ADR-0089): nothing to backfill.
        """
        if self.cluster is not None:
            return
        if (yield ("EXISTS", self.backfilled), False):
            return
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + "*"
        cursor: Any = 0
        while True:
            cursor, names = yield ("SCAN", cursor, "MATCH", pattern, "COUNT", 1000), False
            for name in names:
                sid = bytes(name).decode("utf-8", "replace")[len(self.prefix) :]
                if not is_identifier(sid):
                    continue  # a derived key (#records, #pending...) or not a session
                command = ("HMGET", self.key(sid), "body", "cursor", "pending")
                body, stored, indexed = yield command, False
                if body is None or b'"status":"pending"' not in bytes(body):
                    continue
                decoded = decode_session_snapshot(bytes(body))
                if decoded.snapshot is None or stored is None:
                    continue  # left as it is: load reports it, the next save indexes it
                if read_only:
                    if indexed is None:
                        raise _unbackfilled(sid)
                    continue
                rows = _row_args(pending_rows(decoded.snapshot))
                args = (bytes(stored).decode("ascii"), "", "", "", self.pending)
                yield self._script(BACKFILL_SCRIPT, sid, 0, *args, _pad(now_ms()), *rows), True
            if int(cursor) == 0:
                break
        if not read_only:
            yield ("SET", self.backfilled, "1"), True

    # -------------------------------------------------------------- the audit index
    def list_audit(self, query: AuditQuery) -> _Steps[AuditRefPage]:
        """One ZRANGEBYLEX per bucket from the same lower bound, merged (ADR-0139)."""
        lo = "[" + _pad(query.since_ms)
        if query.after is not None:
            after = _audit_member(*query.after)
            if after >= lo[1:]:
                lo = "(" + after
        found: list[AuditRef] = []
        for base in self.bases:
            command = ("ZRANGEBYLEX", base + "#audit", lo, "+", "LIMIT", 0, query.limit + 1)
            found += [_audit_ref(m) for m in (yield command, False)]
        found.sort(key=audit_sort_key)
        return make_audit_page(query, found[: query.limit + 1])

    def audit_backfill(self, read_only: bool) -> _Steps[None]:
        """List, once per store, the audit records written before the audit index.

        As :meth:`backfill`: a marker written last, a run cut short runs again and changes
        nothing already listed; a read-only adapter writes nothing and raises ``ConfigError``
        at the first audit record not listed. Their instant is the backfill's clock (the
        store kept none), so a ``since_ms`` query lists them rather than misses them. A
        cluster-mode store is skipped, as for the pending index.
        """
        if self.cluster is not None:
            return
        if (yield ("EXISTS", self.audit_backfilled), False):
            return
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", self.prefix) + "*#records"
        cursor: Any = 0
        while True:
            cursor, names = yield ("SCAN", cursor, "MATCH", pattern, "COUNT", 1000), False
            for name in names:
                text = bytes(name).decode("utf-8", "replace")
                sid = text[len(self.prefix) : -len("#records")]
                if not is_identifier(sid):
                    continue
                fields = {
                    bytes(f).decode("utf-8", "replace") for f in (yield ("HKEYS", name), False)
                }
                unlisted = sorted(
                    f[2:]
                    for f in fields
                    if f.startswith("v:") and audit_indexed(f[2:]) and "a:" + f[2:] not in fields
                )
                if not unlisted:
                    continue
                if read_only:
                    raise _unbackfilled_audit(sid)
                args = (self.audit_of(sid), sid, _pad(now_ms()), *unlisted)
                yield ("EVALSHA", _SHA[AUDIT_BACKFILL_SCRIPT], 2, self.key(sid), name, *args), True
            if int(cursor) == 0:
                break
        if not read_only:
            yield ("SET", self.audit_backfilled, "1"), True


def _audit_member(ms: int, session_id: str, key: str) -> str:
    return f"{_pad(ms)} {session_id} {key}"


def _audit_ref(member: Any) -> AuditRef:
    ms, sid, key = bytes(member).decode("ascii").split(" ")
    return AuditRef(sid, key, int(ms))


def _unbackfilled_audit(session_id: str) -> ConfigError:
    return ConfigError(
        f"This Redis store was never backfilled: session {session_id!r} has audit records "
        "written before the audit index, so a read-only adapter would answer without them.",
        hint="Open the store once writable and call list_audit to backfill it (ADR-0139).",
    )


def _unbackfilled(session_id: str) -> ConfigError:
    return ConfigError(
        f"This Redis store was never backfilled: session {session_id!r} was saved before the "
        "pending index, so a read-only adapter would answer from an index that lacks it.",
        hint="Open the store once writable and call list_pending (or find_token) to backfill "
        "it; read-only adapters then list it (ADR-0088).",
    )


T = TypeVar("T")
#: A sans-I/O plan: it yields ``(command, write)`` and receives each reply (driven by ``_run``).
_Steps = Generator[tuple[tuple[Any, ...], bool], Any, T]


def _pad(ms: int) -> str:
    """An instant as the index stores it: 16 digits hold every safe integer, in order."""
    return f"{ms:016d}"


def _sort_text(key: tuple[int, str, str]) -> str:
    return f"{_pad(key[0])} {key[1]} {key[2]}"


def _within(key: tuple[int, str, str], stop: tuple[int, str, str], newest: bool) -> bool:
    """Whether ``key`` comes no later than ``stop`` in the page's order."""
    return key >= stop if newest else key <= stop


def _row_args(rows: tuple[PendingRow, ...]) -> list[str]:
    return [f for r in rows for f in (r.token, r.tool_call_id, r.action, _pad(r.expires_at_ms))]


def _page_script(*args: Any) -> tuple[Any, ...]:
    name, *rest = args
    return ("EVALSHA", _SHA[PAGE_SCRIPT], 1, name, *rest)


def _member(order: PendingOrder, member: Any) -> PendingApproval:
    first, sid, tcid, token, action, other = bytes(member).decode("ascii").split(" ")
    expires, since = (first, other) if order == "expiry" else (other, first)
    return PendingApproval(sid, token, tcid, action, int(expires), int(since))


def _stored_row(session_id: str, token: Any, row: Any) -> PendingApproval:
    expires, since, tcid, action = bytes(row).decode("ascii").split(" ")
    return PendingApproval(
        session_id, bytes(token).decode("ascii"), tcid, action, int(expires), int(since)
    )


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    # RESP3 answers HGETALL with a map, RESP2 with one flat list.
    if isinstance(reply, dict):
        return list(reply.items())
    return list(zip(reply[0::2], reply[1::2], strict=True))


def _record(reply: Any) -> StoredRecord | None:
    version, body = reply
    return None if version is None else (int(version), bytes(body).decode("utf-8"))


def _keys(reply: Any, prefix: str) -> list[str]:
    fields = (bytes(field).decode("utf-8") for field in reply)
    return sorted(f[2:] for f in fields if f.startswith("v:") and f[2:].startswith(prefix))


def _processing(reply: Any) -> list[ProcessingSession]:
    # RESP3 answers WITHSCORES with [member, score] pairs, RESP2 with one flat list.
    flat = bool(reply) and not isinstance(reply[0], list | tuple)
    pairs = zip(reply[0::2], reply[1::2], strict=True) if flat else (tuple(p) for p in reply)
    return [ProcessingSession(bytes(m).decode("utf-8"), int(float(ms))) for m, ms in pairs]


def _peer_hung_up(conn: Any) -> bool:
    """Has the server closed this idle pooled connection (or sent something unasked)?

    redis-py's pool checks this too, but an asyncio connection only notices the hang-up
    once its event loop has read the socket; polling the socket itself catches it before
    we send a write whose fate would then be unknown. ``False`` when it cannot tell.
    """
    sock = getattr(conn, "_sock", None)
    if sock is None:
        writer = getattr(conn, "_writer", None)
        sock = writer.get_extra_info("socket") if writer is not None else None
    try:
        fd = sock.fileno() if sock is not None else -1
        if fd < 0:
            return False
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _connected(pool: Any) -> int:
    """How many of a pool's connections hold a socket (the kit's leak check)."""
    conns = [
        *getattr(pool, "_available_connections", ()),
        *getattr(pool, "_in_use_connections", ()),
    ]
    return sum(
        1
        for c in conns
        if getattr(c, "_sock", None) is not None or getattr(c, "is_connected", False)
    )


def _loaded(session_id: str, reply: Any) -> str | None:
    body, cursor = reply  # HMGET: [body, cursor], each None when absent
    return loaded_text(session_id, body, cursor)


def _text(reply: Any) -> str | None:
    return None if reply is None else bytes(reply).decode("utf-8")


class RedisStorage(Closing):
    """Compare-and-set storage in Redis hashes, via one Lua script.

    ``RedisStorage(url="redis://127.0.0.1:6379/0", *, prefix="akchat:session:",
    socket_timeout=5.0, connect_timeout=5.0)``

    Owns a connection pool (thread-safe; each call borrows one connection). A reply not
    received within ``socket_timeout`` seconds is ``OutcomeUnknown`` for a write.
    ``read_only=True``: every write is refused (``ConfigError``) before it is sent; reads
    never write in Redis, so the store stays as it was. The first ``list_pending`` or
    ``find_token`` of an instance backfills, once per store, a store written before the
    pending index (ADR-0088); a read-only instance never writes, and raises ``ConfigError``
    rather than list a store that needs it. ``cluster=True`` (with
    ``shards``, ``wait_replicas``, ``wait_timeout``) lays the store out for Redis Cluster and
    follows every write that changed something with ``WAIT`` (ADR-0089).
    """

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        read_only: bool = False,
        cluster: bool = False,
        shards: int | None = None,
        wait_replicas: int | None = None,
        wait_timeout: float | None = None,
    ) -> None:
        options = cluster_options(cluster, shards, wait_replicas, wait_timeout)
        self._plan = _Plan(url, prefix, socket_timeout, connect_timeout, options)
        self.prefix = prefix
        self.read_only = bool(read_only)
        self._closed = False
        self._backfill_checked = False
        self._audit_checked = False
        self._layout_checked = False
        self._pools: dict[_Node, Any] = {}
        try:
            self.pool = redis.ConnectionPool.from_url(url, **self._plan.pool_kwargs)
        except (ValueError, RedisError) as exc:
            raise ConfigError(f"Invalid Redis URL: {exc}") from exc
        check_wait_within(options, self.pool.connection_kwargs.get("socket_timeout"))

    def _call(self, command: tuple[Any, ...], *, write: bool) -> Any:
        if self._closed:
            raise StorageUnavailable("RedisStorage is closed.")
        if write and self.read_only:
            raise read_only_refusal("RedisStorage", "a write")
        routes = self._plan.routes
        if routes is None:
            return self._send(self.pool, command, write=write, routed=False)
        if not self._layout_checked:
            self._layout_checked = True
            try:
                self._run(self._plan.check_layout(self.read_only))
            except BaseException:
                self._layout_checked = False
                raise
        hops = _Hops(routes, command)
        for node in hops:
            pool = self._pools.get(node) or self._pools.setdefault(
                node,
                self._node_pool(routes.url_of(node)),  # two threads: one pool wins
            )
            try:
                return self._send(pool, command, write=write, routed=True)
            except (MovedError, _Unreached) as exc:
                hops.missed(node, exc)
        raise hops.given_up()

    def _node_pool(self, url: str) -> Any:
        return redis.ConnectionPool.from_url(url, **self._plan.pool_kwargs)

    def _send(self, pool: Any, command: tuple[Any, ...], *, write: bool, routed: bool) -> Any:
        phase: Phase = "connect"
        try:
            conn: Any = pool.get_connection()
        except (RedisError, OSError) as exc:
            raise _unreached(exc, write, routed) from exc
        try:
            if _peer_hung_up(conn):
                conn.disconnect()
                conn.connect()
        except BaseException as exc:
            pool.release(conn)  # a failed reconnect must not strand it "in use"
            if isinstance(exc, RedisError | OSError):
                raise _unreached(exc, write, routed) from exc
            raise
        try:
            phase = "send"
            conn.send_command(*command)
            phase = "reply"
            try:
                reply = conn.read_response()
            except NoScriptError:
                if command[0] != "EVALSHA":
                    raise
                phase = "send"  # nothing ran: send the source once, which re-caches it
                conn.send_command("EVAL", _SOURCES[command[1]], *command[2:])
                phase = "reply"
                reply = conn.read_response()
            wait = self._plan.wait_command(command, write, reply)
            if wait is not None:  # the write is done: from here on its fate is the replicas'
                conn.send_command(*wait)
                self._plan.check_acks(conn.read_response())
            return reply
        except MovedError as moved:
            if routed:
                raise  # a whole error reply (the connection is in step): the router re-sends
            raise map_redis_error(moved, phase=phase, write=write) from moved  # single node
        except (RedisError, OSError) as exc:
            conn.disconnect()
            raise map_redis_error(exc, phase=phase, write=write) from exc
        except BaseException:
            conn.disconnect()  # interrupted mid-protocol: never reuse
            raise
        finally:
            pool.release(conn)

    def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        return _loaded(session_id, self._call(self._plan.load_command(session_id), write=False))

    def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        return bool(self._call(self._plan.save_command(snapshot, expected_cursor), write=True) == 1)

    def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records (one script); a missing one is not an error."""
        self._call(self._plan.delete_command(session_id), write=True)

    def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one script, all or nothing
        (``SaveWithRecords``): every key's absence is checked before the first write."""
        command = self._plan.save_with_records_command(snapshot, expected_cursor, records)
        return bool(self._call(command, write=True) == 1)

    # ------------------------------------------------------------------ records capability
    def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        return _record(self._call(self._plan.load_record_command(session_id, key), write=False))

    def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        command = self._plan.save_record_command(
            session_id, key, text, expected_version, processing
        )
        return bool(self._call(command, write=True) == 1)

    def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        records = self._plan.records(session_id)
        if record_prefix_matches_nothing(prefix):
            return []
        return _keys(self._call(("HKEYS", records), write=False), prefix)

    def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        self._call(self._plan.delete_record_command(session_id, key), write=True)

    # ------------------------------------------------------------------ processing index
    def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        return self._run(self._plan.list_processing(written_before_ms, limit))

    # ------------------------------------------------------------------ pending index
    def list_pending(
        self,
        *,
        action: str | None = None,
        session_id: str | None = None,
        expiring_before_ms: int | None = None,
        pending_before_ms: int | None = None,
        order: PendingOrder = "expiry",
        after: str | None = None,
        limit: int = 50,
    ) -> PendingPage:
        """One page of the pending bindings across sessions (see the port's ``PendingIndex``)."""
        query = check_pending_query(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        return self._indexed(self._plan.list_pending(query))

    def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        return self._indexed(self._plan.find_token(check_token(token)))

    def _indexed(self, steps: _Steps[T]) -> T:
        # The first index read of an instance backfills a store written before the index.
        if not self._backfill_checked:
            self._run(self._plan.backfill(self.read_only))
            self._backfill_checked = True
        return self._run(steps)

    # ------------------------------------------------------------------ audit index
    def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query = check_audit_query(since_ms=since_ms, after=after, limit=limit)
        # The first audit read of an instance backfills a store written before the index.
        if not self._audit_checked:
            self._run(self._plan.audit_backfill(self.read_only))
            self._audit_checked = True
        return self._run(self._plan.list_audit(query))

    def _run(self, steps: _Steps[T]) -> T:
        reply: Any = None
        while True:
            try:
                command, write = steps.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            reply = self._call(command, write=write)

    def open_connections(self) -> int:
        """Pooled connections holding a socket (0 once closed)."""
        return sum(_connected(pool) for pool in (self.pool, *self._pools.values()))

    def close(self) -> None:
        """Disconnect every pooled connection; later calls raise ``StorageUnavailable``."""
        self._closed = True
        for pool in (self.pool, *self._pools.values()):
            pool.disconnect()


class AsyncRedisStorage(AsyncClosing):
    """The asyncio twin of :class:`RedisStorage` (same arguments, ``redis.asyncio``)."""

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = DEFAULT_PREFIX,
        socket_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        read_only: bool = False,
        cluster: bool = False,
        shards: int | None = None,
        wait_replicas: int | None = None,
        wait_timeout: float | None = None,
    ) -> None:
        options = cluster_options(cluster, shards, wait_replicas, wait_timeout)
        self._plan = _Plan(url, prefix, socket_timeout, connect_timeout, options)
        self.prefix = prefix
        self.read_only = bool(read_only)
        self._closed = False
        self._backfill_checked = False
        self._audit_checked = False
        self._layout_checked = False
        self._pools: dict[_Node, Any] = {}
        try:
            self.pool = self._node_pool(url)
        except (ValueError, RedisError) as exc:
            raise ConfigError(f"Invalid Redis URL: {exc}") from exc
        check_wait_within(options, self.pool.connection_kwargs.get("socket_timeout"))

    async def _call(self, command: tuple[Any, ...], *, write: bool) -> Any:
        if self._closed:
            raise StorageUnavailable("AsyncRedisStorage is closed.")
        if write and self.read_only:
            raise read_only_refusal("AsyncRedisStorage", "a write")
        routes = self._plan.routes
        if routes is None:
            return await self._send(self.pool, command, write=write, routed=False)
        if not self._layout_checked:
            self._layout_checked = True
            try:
                await self._run(self._plan.check_layout(self.read_only))
            except BaseException:
                self._layout_checked = False
                raise
        hops = _Hops(routes, command)
        for node in hops:
            pool = self._pools.get(node) or self._pools.setdefault(
                node, self._node_pool(routes.url_of(node))
            )
            try:
                return await self._send(pool, command, write=write, routed=True)
            except (MovedError, _Unreached) as exc:
                hops.missed(node, exc)
        raise hops.given_up()

    def _node_pool(self, url: str) -> Any:
        kwargs = dict(self._plan.pool_kwargs, retry=AsyncRetry(NoBackoff(), 0))
        return redis.asyncio.ConnectionPool.from_url(url, **kwargs)

    async def _send(self, pool: Any, command: tuple[Any, ...], *, write: bool, routed: bool) -> Any:
        phase: Phase = "connect"
        try:
            conn: Any = await pool.get_connection()
        except (RedisError, OSError) as exc:
            raise _unreached(exc, write, routed) from exc
        try:
            if _peer_hung_up(conn):
                await conn.disconnect()
                await conn.connect()
        except BaseException as exc:
            await pool.release(conn)
            if isinstance(exc, RedisError | OSError):
                raise _unreached(exc, write, routed) from exc
            raise
        try:
            # Unlike a blocking sendall, asyncio hands the command to the transport's buffer,
            # and closing the transport after a send timeout still flushes that buffer: the
            # server may receive the whole command after we gave up. So a failed async send
            # is classified like a lost reply (a write's outcome is unknown), never as
            # "nothing applied". (Measured: a 64 MB body sent to a busy server applied.)
            phase = "reply"
            await conn.send_command(*command)
            try:
                reply = await conn.read_response()
            except NoScriptError:
                if command[0] != "EVALSHA":
                    raise
                await conn.send_command("EVAL", _SOURCES[command[1]], *command[2:])
                phase = "reply"
                reply = await conn.read_response()
            wait = self._plan.wait_command(command, write, reply)
            if wait is not None:  # the write is done: from here on its fate is the replicas'
                await conn.send_command(*wait)
                self._plan.check_acks(await conn.read_response())
            return reply
        except MovedError as moved:
            if routed:
                raise  # a whole error reply (the connection is in step): the router re-sends
            raise map_redis_error(moved, phase=phase, write=write) from moved  # single node
        except (RedisError, OSError) as exc:
            await conn.disconnect()
            raise map_redis_error(exc, phase=phase, write=write) from exc
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await pool.release(conn)

    async def load(self, session_id: str) -> str | None:
        """The stored JSON text for ``session_id``, or ``None``."""
        reply = await self._call(self._plan.load_command(session_id), write=False)
        return _loaded(session_id, reply)

    async def save(self, snapshot: SessionSnapshot, expected_cursor: int | None) -> bool:
        """Store ``snapshot`` iff the stored cursor equals ``expected_cursor`` (see the port)."""
        command = self._plan.save_command(snapshot, expected_cursor)
        return bool(await self._call(command, write=True) == 1)

    async def delete(self, session_id: str) -> None:
        """Forget ``session_id`` and its records (one script); a missing one is not an error."""
        await self._call(self._plan.delete_command(session_id), write=True)

    async def save_with_records(
        self, snapshot: SessionSnapshot, expected_cursor: int | None, records: CreatedRecords
    ) -> bool:
        """The save and the create-only ``records`` in one script, all or nothing
        (``SaveWithRecords``): every key's absence is checked before the first write."""
        command = self._plan.save_with_records_command(snapshot, expected_cursor, records)
        return bool(await self._call(command, write=True) == 1)

    # ------------------------------------------------------------------ records capability
    async def load_record(self, session_id: str, key: str) -> StoredRecord | None:
        """``(version, text)`` of the record ``key`` of ``session_id``, or ``None``."""
        command = self._plan.load_record_command(session_id, key)
        return _record(await self._call(command, write=False))

    async def save_record(
        self,
        session_id: str,
        key: str,
        text: str,
        expected_version: int | None,
        *,
        processing: bool = False,
    ) -> bool:
        """Store the record iff its stored version equals ``expected_version`` (see the port)."""
        command = self._plan.save_record_command(
            session_id, key, text, expected_version, processing
        )
        return bool(await self._call(command, write=True) == 1)

    async def list_records(self, session_id: str, prefix: str = "") -> list[str]:
        """The keys of ``session_id``'s records that start with ``prefix``, sorted."""
        records = self._plan.records(session_id)
        if record_prefix_matches_nothing(prefix):
            return []
        return _keys(await self._call(("HKEYS", records), write=False), prefix)

    async def delete_record(self, session_id: str, key: str) -> None:
        """Forget one record; a missing record is not an error."""
        await self._call(self._plan.delete_record_command(session_id, key), write=True)

    # ------------------------------------------------------------------ processing index
    async def list_processing(
        self, *, written_before_ms: int | None = None, limit: int = 1000
    ) -> list[ProcessingSession]:
        """Sessions holding processing work, oldest last write first (see the port)."""
        return await self._run(self._plan.list_processing(written_before_ms, limit))

    # ------------------------------------------------------------------ pending index
    async def list_pending(
        self,
        *,
        action: str | None = None,
        session_id: str | None = None,
        expiring_before_ms: int | None = None,
        pending_before_ms: int | None = None,
        order: PendingOrder = "expiry",
        after: str | None = None,
        limit: int = 50,
    ) -> PendingPage:
        """One page of the pending bindings across sessions (see the port's ``PendingIndex``)."""
        query = check_pending_query(
            action=action,
            session_id=session_id,
            expiring_before_ms=expiring_before_ms,
            pending_before_ms=pending_before_ms,
            order=order,
            after=after,
            limit=limit,
        )
        return await self._indexed(self._plan.list_pending(query))

    async def find_token(self, token: str) -> str | None:
        """The id of the session holding ``token`` pending, or ``None`` (see the port)."""
        return await self._indexed(self._plan.find_token(check_token(token)))

    async def _indexed(self, steps: _Steps[T]) -> T:
        # The first index read of an instance backfills a store written before the index.
        if not self._backfill_checked:
            await self._run(self._plan.backfill(self.read_only))
            self._backfill_checked = True
        return await self._run(steps)

    async def list_audit(
        self, *, since_ms: int | None = None, after: str | None = None, limit: int = 100
    ) -> AuditRefPage:
        """One page of the audit records across sessions, oldest first (see ``AuditIndex``)."""
        query = check_audit_query(since_ms=since_ms, after=after, limit=limit)
        # The first audit read of an instance backfills a store written before the index.
        if not self._audit_checked:
            await self._run(self._plan.audit_backfill(self.read_only))
            self._audit_checked = True
        return await self._run(self._plan.list_audit(query))

    async def _run(self, steps: _Steps[T]) -> T:
        reply: Any = None
        while True:
            try:
                command, write = steps.send(reply)
            except StopIteration as stop:
                result: T = stop.value
                return result
            reply = await self._call(command, write=write)

    def open_connections(self) -> int:
        """Pooled connections holding a socket (0 once closed)."""
        return sum(_connected(pool) for pool in (self.pool, *self._pools.values()))

    async def aclose(self) -> None:
        """Disconnect every pooled connection; later calls raise ``StorageUnavailable``."""
        self._closed = True
        for pool in (self.pool, *self._pools.values()):
            await pool.aclose()
