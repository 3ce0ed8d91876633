"""The Redis adapter on a real Redis Cluster (ADR-0089), sync and asyncio.

One loopback cluster (three primaries, three replicas; ``redis_cluster`` in conftest.py)
serves the whole module. The single-node layout is refused there before it writes anything;
cluster mode keeps every key of a session, and its bucket's index keys, in one hash slot,
passes the conformance kit, merges index pages across buckets in cursor order, and survives
the SIGKILL of a primary without losing a write it reported as applied.
"""

from __future__ import annotations

import threading
import uuid
import zlib
from typing import Any

import pytest
from redis.crc import key_slot
from storage_harness import Client, snap

from akchat_fsm import ConfirmationBinding, ConfirmationStatus, SessionSnapshot
from akchat_fsm.errors import ConfigError, OutcomeUnknown, StorageError, StorageUnavailable
from akchat_fsm.storage import PendingApproval
from akchat_fsm.storage.redis import MAX_SHARDS, AsyncRedisStorage, RedisStorage
from akchat_fsm.storage.url import open_storage
from akchat_fsm.testing import CHECKS, check_session_storage
from cleanup import SCAN_COUNT
from redis_cluster import LocalCluster, poll

pytestmark = pytest.mark.redis
MODES = pytest.mark.parametrize("mode", ["sync", "async"])


@pytest.fixture
def prefix() -> str:
    return f"akc:{uuid.uuid4().hex[:12]}:"


def _open(mode: str, cluster: LocalCluster, prefix: str, **kwargs: Any) -> Client:
    cls = AsyncRedisStorage if mode == "async" else RedisStorage
    return Client(cls(cluster.url, prefix=prefix, cluster=True, **kwargs), mode == "async")


def _keys(cluster: LocalCluster, prefix: str) -> dict[bytes, int]:
    """Every key holding ``prefix`` on every primary, with its hash slot."""
    found: dict[bytes, int] = {}
    for port, role in cluster.roles().items():
        if role == "master":
            with cluster.client(port) as r:
                for key in r.scan_iter(match=f"*{prefix}*", count=SCAN_COUNT):
                    found[key] = key_slot(key)
    return found


def _bucket(session_id: str, shards: int) -> int:
    """The documented layout: crc32 of the id's UTF-8 bytes, modulo the bucket count."""
    return zlib.crc32(session_id.encode()) % shards


def binding(n: int, expires: int) -> ConfirmationBinding:
    return ConfirmationBinding(
        token=f"tok-{n}",
        action="pay",
        input={"n": n},
        tool_call_id=f"call-{n}",
        expires_at=expires,
        status=ConfirmationStatus.PENDING,
    )


def with_pending(sid: str, *bindings: ConfirmationBinding) -> SessionSnapshot:
    return SessionSnapshot(
        session_id=sid,
        definition_id="def",
        definition_revision=1,
        updated_at="2026-11-29T00:00:00.000Z",
        cursor=0,
        confirmations=bindings,
    )


# --------------------------------------------------------------------------- the layout
@MODES
def test_the_single_node_layout_is_refused_and_writes_nothing(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    cls = AsyncRedisStorage if mode == "async" else RedisStorage
    c = Client(cls(redis_cluster.url, prefix=prefix), mode == "async")
    try:
        with pytest.raises(ConfigError, match="Redis Cluster node"):
            c.save(snap("s-1", 0), None)
        with pytest.raises(ConfigError, match="Redis Cluster node"):
            c.save_record("s-1", "k", "{}", None, processing=True)
        # A one-key read of a key another node owns gets MOVED: the same typed refusal,
        # never redis-py's own MovedError (a key the seed node owns just reads as absent).
        refused = 0
        for n in range(16):
            try:
                assert c.load(f"s-{n}") is None
            except ConfigError as exc:
                assert "Redis Cluster node" in str(exc)
                refused += 1
        assert refused > 0  # 3 primaries: 16 ids never all hash to the seed's slots
    finally:
        c.close()
    assert _keys(redis_cluster, prefix) == {}


@MODES
def test_every_key_of_a_session_shares_its_buckets_slot(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    c = _open(mode, redis_cluster, prefix, shards=3)
    try:
        for n in range(6):
            sid = f"s-{n}"
            assert c.save(with_pending(sid, binding(n, 10_000 + n)), None)
            assert c.save_record(sid, "k", "{}", None, processing=True)
        keys = _keys(redis_cluster, prefix)
    finally:
        c.close()
    by_slot: dict[int, set[bytes]] = {}
    for key, slot in keys.items():
        by_slot.setdefault(slot, set()).add(key)
    assert len(by_slot) == 3  # one slot per bucket, nothing outside them
    for n in range(6):
        sid = f"s-{n}"
        tag = "{" + f"{prefix}{_bucket(sid, 3)}" + "}"
        mine = {f"{tag}{sid}", f"{tag}{sid}#records", f"{tag}{sid}#pending"}
        assert {k.decode() for k in by_slot[key_slot(tag.encode())]} >= mine | {
            f"{tag}#processing",
            f"{tag}#pending:t",
        }


def test_another_bucket_count_on_the_same_store_is_refused(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    with RedisStorage(redis_cluster.url, prefix=prefix, cluster=True, shards=4) as first:
        assert first.save(snap("s-1", 0), None)
    other = RedisStorage(redis_cluster.url, prefix=prefix, cluster=True, shards=8)
    with other, pytest.raises(ConfigError, match="'4' buckets"):
        other.load("s-1")
    with RedisStorage(redis_cluster.url, prefix=prefix, cluster=True, shards=4) as again:
        assert again.load("s-1") is not None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"shards": 4},  # without cluster=True
        {"wait_replicas": 0},
        {"cluster": True, "shards": 0},
        {"cluster": True, "shards": True},
        {"cluster": True, "shards": MAX_SHARDS + 1},
        {"cluster": True, "wait_replicas": -1},
        {"cluster": True, "wait_timeout": 0},
        {"cluster": True, "prefix": "a{b}:"},
    ],
)
def test_bad_cluster_options_are_config_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RedisStorage("redis://127.0.0.1:1/0", **kwargs)


@pytest.mark.parametrize("cls", [RedisStorage, AsyncRedisStorage])
@pytest.mark.parametrize(
    ("url", "kwargs"),
    [
        ("redis://127.0.0.1:1/0", {"wait_timeout": 2.0, "socket_timeout": 2.0}),
        ("redis://127.0.0.1:1/0", {"wait_timeout": 6.0}),  # the default socket_timeout is 5 s
        ("redis://127.0.0.1:1/0?socket_timeout=0.5", {"wait_timeout": 1.0}),  # redis-py's own
    ],
)
def test_a_wait_the_socket_would_give_up_on_is_refused_at_construction(
    cls: Any, url: str, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ConfigError, match="socket_timeout"):
        cls(url, cluster=True, **kwargs)
    # Shorter than the socket's timeout, or no WAIT at all: accepted (no I/O yet).
    cls(url, cluster=True, wait_timeout=0.1, socket_timeout=5.0)
    cls(url, cluster=True, wait_replicas=0, **kwargs)


@pytest.mark.parametrize(
    "query",
    [
        "shards=x",
        "shards=-1",
        "shards=0",
        "shards=257",
        "wait_replicas=1.5",
        "wait_timeout=-1",
        "wait_timeout=a",
        "wait_timeout=5",  # not shorter than the default socket_timeout (5 s)
    ],
)
def test_bad_cluster_url_parameters_are_config_errors_before_any_io(query: str) -> None:
    with pytest.raises(ConfigError):
        open_storage(f"redis+cluster://127.0.0.1:1/0?{query}")


def test_a_cluster_url_opens_cluster_mode(redis_cluster: LocalCluster, prefix: str) -> None:
    port = redis_cluster.ports[1]  # any node is a seed
    url = f"redis+cluster://127.0.0.1:{port}/0?prefix={prefix}&shards=2&wait_replicas=1"
    with open_storage(url) as store:
        assert store.save(snap("s-1", 0), None)
    tag = "{" + f"{prefix}{_bucket('s-1', 2)}" + "}"
    assert f"{tag}s-1".encode() in _keys(redis_cluster, prefix)


@MODES
def test_a_cluster_nobody_answers_is_unavailable_even_for_a_write(mode: str) -> None:
    cls = AsyncRedisStorage if mode == "async" else RedisStorage
    c = Client(cls("redis://127.0.0.1:1/0", cluster=True, connect_timeout=0.5), mode == "async")
    try:
        with pytest.raises(StorageUnavailable):
            c.load("s-1")
        with pytest.raises(StorageUnavailable):  # never sent: nothing ran, not "unknown"
            c.save(snap("s-1", 0), None)
    finally:
        c.close()


@MODES
def test_a_read_only_instance_writes_not_even_the_bucket_count(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    c = _open(mode, redis_cluster, prefix, read_only=True)
    try:
        assert c.load("s-1") is None
        assert c._call("list_pending").items == ()
        assert c._call("list_processing") == []
        with pytest.raises(ConfigError):
            c.save(snap("s-1", 0), None)
    finally:
        c.close()
    assert _keys(redis_cluster, prefix) == {}


# --------------------------------------------------------------------------- the kit
def test_cluster_mode_passes_the_conformance_kit(redis_cluster: LocalCluster) -> None:
    prefix = f"kit:{uuid.uuid4().hex[:12]}:"
    options: dict[str, Any] = {"prefix": prefix, "cluster": True, "shards": 4}
    report = check_session_storage(
        lambda: RedisStorage(redis_cluster.url, **options),
        make_async=lambda: AsyncRedisStorage(redis_cluster.url, **options),
        # processes: spawn start-up costs ~10 s on two cores (the deep kit runs it on a node);
        # error_mapping needs a store-wide fault, which would stall the shared cluster.
        only=[name for name in CHECKS if name not in {"processes", "error_mapping"}],
        seed=26,
    )
    assert report.ok, str(report)
    assert not report.skipped, str(report)


# --------------------------------------------------------------------------- merged pages
@MODES
def test_pages_merge_the_buckets_in_cursor_order(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    c = _open(mode, redis_cluster, prefix, shards=5)
    try:
        for n in range(12):
            sid = f"s-{n}"
            # Expiry interleaves the buckets: a page must take from several of them.
            assert c.save(with_pending(sid, binding(n, 50_000 - 7 * n)), None)
        pages = []
        after = None
        while True:
            page = c._call("list_pending", limit=5, after=after)
            pages.append(page.items)
            if page.next_after is None:
                break
            after = page.next_after
        listed = [item for items in pages for item in items]
        expected: list[PendingApproval] = sorted(
            listed, key=lambda i: (i.expires_at_ms, i.session_id)
        )
        assert [i.session_id for i in listed] == [i.session_id for i in expected]
        assert len(listed) == 12 and [len(p) for p in pages] == [5, 5, 2]
        assert len({_bucket(i.session_id, 5) for i in pages[0]}) > 1
        newest = c._call("list_pending", order="newest", limit=12).items
        by_newest = sorted(
            listed, key=lambda i: (i.pending_since_ms, i.session_id, i.tool_call_id), reverse=True
        )
        assert list(newest) == by_newest
        assert c._call("find_token", "tok-7") == "s-7"
        assert c._call("find_token", "tok-99") is None
    finally:
        c.close()


@MODES
def test_a_scan_budget_cut_in_one_bucket_loses_and_repeats_nothing(
    redis_cluster: LocalCluster, prefix: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from akchat_fsm.storage import redis as adapter

    monkeypatch.setattr(adapter, "PENDING_SCAN_BUDGET", 3)
    c = _open(mode, redis_cluster, prefix, shards=3)
    try:
        for n in range(15):
            assert c.save(with_pending(f"s-{n}", binding(n, 90_000 + n)), None)
        # Filtering on the other instant makes each bucket examine at most 3 entries a page.
        seen: list[str] = []
        after = None
        for _ in range(40):
            page = c._call("list_pending", pending_before_ms=2**52, limit=4, after=after)
            seen += [item.session_id for item in page.items]
            after = page.next_after
            if after is None:
                break
        assert sorted(seen) == sorted(f"s-{n}" for n in range(15))
        assert len(seen) == 15
    finally:
        c.close()


@MODES
def test_the_buckets_share_one_scan_budget_a_page(
    redis_cluster: LocalCluster, prefix: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from akchat_fsm.storage import redis as adapter

    monkeypatch.setattr(adapter, "PENDING_SCAN_BUDGET", 4)
    c = _open(mode, redis_cluster, prefix, shards=2)
    try:
        # Expiries alternate between the two buckets, so each bucket's first entries
        # interleave with the other's: a page shows how far every bucket read.
        sids = [f"s-{n}" for n in range(40)]
        by_bucket = ([s for s in sids if _bucket(s, 2) == b] for b in (0, 1))
        pairs = list(zip(*by_bucket, strict=False))[:8]
        assert len(pairs) == 8
        for n, (a, b) in enumerate(pairs):
            assert c.save(with_pending(a, binding(2 * n, 90_000 + 2 * n)), None)
            assert c.save(with_pending(b, binding(2 * n + 1, 90_001 + 2 * n)), None)
        seen: list[str] = []
        after = None
        for _ in range(40):  # a cross filter admitting every row: only the budget cuts pages
            page = c._call("list_pending", pending_before_ms=2**52, limit=50, after=after)
            assert len(page.items) <= 4  # every row listed was examined: at most the budget
            seen += [item.token for item in page.items]
            after = page.next_after
            if after is None:
                break
        assert seen == [f"tok-{n}" for n in range(16)]  # and the walk still lists all, once
    finally:
        c.close()


@MODES
def test_the_processing_index_merges_the_buckets_oldest_first(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    c = _open(mode, redis_cluster, prefix, shards=4)
    try:
        for n in range(8):
            assert c.save_record(f"s-{n}", "k", "{}", None, processing=True)
        listed = c._call("list_processing", limit=100)
        assert sorted(s.session_id for s in listed) == [f"s-{n}" for n in range(8)]
        assert listed == sorted(listed, key=lambda s: (s.last_write_ms, s.session_id))
        assert c._call("list_processing", limit=3) == listed[:3]
    finally:
        c.close()


# --------------------------------------------------------------------------- durability
@MODES
def test_a_write_fewer_replicas_acknowledged_is_outcome_unknown(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    # Each primary has one replica: asking for two can never be met within the timeout.
    c = _open(mode, redis_cluster, prefix, wait_replicas=2, wait_timeout=0.05)
    try:
        with pytest.raises(OutcomeUnknown, match="1 of the 2 replica"):
            c.save(snap("s-1", 0), None)
    finally:
        c.close()
    with RedisStorage(redis_cluster.url, prefix=prefix, cluster=True) as reader:
        assert reader.load("s-1") is not None  # it did apply: "unknown", never "not applied"


def _waits(cluster: LocalCluster, port: int) -> int:
    """How many ``WAIT`` commands the node on ``port`` has run."""
    with cluster.client(port) as r:
        return int(r.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


@MODES
def test_a_write_that_changed_nothing_is_not_followed_by_wait(
    redis_cluster: LocalCluster, prefix: str, mode: str
) -> None:
    c = _open(mode, redis_cluster, prefix, shards=1)
    try:
        assert c.save(snap("s-1", 0), None)
        assert c.save_record("s-1", "k", "{}", None)
        primary = redis_cluster.primary_of("{" + prefix + "0}")
        before = _waits(redis_cluster, primary)
        # Lost compare-and-sets and a delete of nothing: no replica has anything to catch up on.
        assert not c.save(snap("s-1", 5), 4)
        assert not c.save(snap("s-1", 0), None)
        assert not c.save_record("s-1", "k", "{}", None)
        c.delete_record("s-1", "missing")
        assert _waits(redis_cluster, primary) == before
        assert c.save(snap("s-1", 1), 0)  # a write that applied is still followed by WAIT
        assert _waits(redis_cluster, primary) == before + 1
    finally:
        c.close()


class _Claims:
    """One writer per session, each save a claim ``cursor -> cursor + 1``, every answer kept.

    An attempt carries its number in the definition id; ``applied`` are the attempts the
    adapter reported written, ``unknown`` those it reported ``OutcomeUnknown``, ``refused``
    those it reported as not applied (``False`` or another ``StorageError``).
    """

    def __init__(self, store: RedisStorage, sessions: list[str]) -> None:
        self.store = store
        self.sessions = sessions
        self.cursor: dict[str, int | None] = dict.fromkeys(sessions)
        self.known = dict.fromkeys(sessions, True)
        self.applied: dict[str, list[int]] = {s: [] for s in sessions}
        self.unknown: dict[str, set[int]] = {s: set() for s in sessions}
        self.refused: dict[str, set[int]] = {s: set() for s in sessions}
        self.attempt = 0
        self.stop = threading.Event()

    def snapshot(self, sid: str, cursor: int) -> SessionSnapshot:
        self.attempt += 1
        return snap(sid, cursor, note=str(self.attempt))

    def step(self, sid: str) -> None:
        if not self.known[sid]:
            try:
                text = self.store.load(sid)
            except StorageError:
                return
            self.cursor[sid] = None if text is None else _stored(text)[0]
            self.known[sid] = True
        cursor = self.cursor[sid]
        nxt = 0 if cursor is None else cursor + 1
        s = self.snapshot(sid, nxt)
        try:
            written = self.store.save(s, cursor)
        except OutcomeUnknown:
            self.unknown[sid].add(self.attempt)
            self.known[sid] = False
            return
        except StorageError:
            self.refused[sid].add(self.attempt)
            return
        if written:
            self.applied[sid].append(self.attempt)
            self.cursor[sid] = nxt
        else:
            self.refused[sid].add(self.attempt)
            self.known[sid] = False

    def run(self) -> None:
        while not self.stop.is_set():
            for sid in self.sessions:
                self.step(sid)

    def applied_count(self, sessions: list[str]) -> int:
        return sum(len(self.applied[s]) for s in sessions)


def _stored(text: str) -> tuple[int, int]:
    import json

    data = json.loads(text)
    return int(data["cursor"]), int(data["definitionId"].removeprefix("def-"))


def test_a_killed_primary_loses_no_write_reported_applied(
    redis_cluster: LocalCluster, prefix: str
) -> None:
    shards = 6
    sessions = [f"s-{n}" for n in range(12)]
    tags = {s: "{" + f"{prefix}{_bucket(s, shards)}" + "}" for s in sessions}
    victim = redis_cluster.primary_of(tags[sessions[0]])
    on_victim = [s for s in sessions if redis_cluster.primary_of(tags[s]) == victim]
    store = RedisStorage(
        redis_cluster.url, prefix=prefix, cluster=True, shards=shards, socket_timeout=2.0
    )
    claims = _Claims(store, sessions)
    writer = threading.Thread(target=claims.run, daemon=True)
    writer.start()
    down = False
    try:
        poll("claims before the kill", lambda: claims.applied_count(on_victim) >= 20)
        before = claims.applied_count(on_victim)
        redis_cluster.kill(victim)
        down = True
        poll("a replica promoted", lambda: redis_cluster.primary_of(tags[on_victim[0]]) != victim)
        poll("every live node ok", lambda: all(redis_cluster.ok(p) for p in redis_cluster.live()))
        # The promoted replica has no replica of its own: WAIT 1 cannot be met, so until the
        # killed node rejoins (as its replica) every write there is reported unknown.
        down = False
        _restart(redis_cluster, victim)
        poll(
            "claims after the promotion",
            lambda: claims.applied_count(on_victim) >= before + 20,
            60,
        )
    finally:
        claims.stop.set()
        writer.join(30)
        if down:  # a step failed with the node killed: the module's later tests need it back
            _restart(redis_cluster, victim)
    assert not writer.is_alive()
    # The kill was seen: some claims on its slots were refused or left unknown meanwhile.
    assert any(claims.refused[s] or claims.unknown[s] for s in on_victim)
    try:
        for sid in sessions:
            text = store.load(sid)
            assert text is not None
            _, attempt = _stored(text)
            applied = claims.applied[sid]
            # The stored write is the last one reported applied, or a later one whose outcome
            # was reported unknown; never one reported as not applied.
            assert attempt not in claims.refused[sid]
            assert attempt == applied[-1] or (
                attempt in claims.unknown[sid] and attempt > applied[-1]
            ), (sid, attempt, applied[-3:], sorted(claims.unknown[sid]))
    finally:
        store.close()


def _restart(cluster: LocalCluster, port: int) -> None:
    """Bring the killed node back (it rejoins as a replica), so the module's cluster is whole."""
    cluster.restart(port)
    poll("the node rejoined", lambda: cluster.ok(port) and cluster.roles()[port] == "slave", 60)
    poll("every replica in sync", cluster.replicas_in_sync, 60)
