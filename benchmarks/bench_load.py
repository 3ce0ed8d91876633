"""Approvals under concurrent approvers (not a test): decisions/s against raw CAS decisions/s.

``k`` approver *processes* (1, 4 and 16 by default) decide pending confirmations at once,
through the library and through a raw baseline, on the same store in the same run:

* **library**: each process opens its own adapter (``open_storage``), resumes the session and
  approves its share of tokens with ``confirmations_for(upstream).approve(token)``: the two-CAS
  protocol (claim, then terminal save), reloading after a conflict;
* **raw**: each process opens the store's driver directly (psycopg, PyMySQL, redis-py) and
  decides the same number of confirmations of an envelope *of the same text*, stored in its
  own table or key, by the smallest correct read-modify-write: read ``(cursor, body)``,
  ``json.loads``, set one record's ``status``, ``json.dumps``, and a conditional write
  (``UPDATE ... WHERE cursor = %s``; for Redis a one-key Lua CAS), retried on conflict. One
  CAS per decision, no validation, no claim: what a host would write without akchat-fsm,
  and unsafe for the reasons docs/guarantees.md gives.

Two shapes: ``hot`` (every process decides calls of ONE session, the contended case: each
write conflicts with the others') and ``spread`` (each process decides the calls of its own
session, the common case of approvers working on different conversations). The ratio printed
is library decisions/s divided by raw decisions/s for the same ``k`` and shape; each side is
measured ``--rounds`` times alternately and the median ratio of the rounds is printed.
The protocol's floor in the uncontended case is about 0.5 (two durable writes per decision
where the baseline makes one); the goal at 16 approvers is >= 0.6 (issue 26).

    .venv/bin/python benchmarks/bench_load.py [--approvers 1,4,16] [--per 12] [--rounds 3]
        [--only postgres,mysql,redis,redis-cluster] [--shapes hot,spread]

Servers: AKCHAT_PG_URL, AKCHAT_MYSQL_URL, AKCHAT_REDIS_URL (the test suite's defaults). A
backend whose server is missing is reported and skipped. Everything written uses a fresh
table or key prefix and is dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from akchat_fsm.session import ChatDefinition, ToolCallProposal, resume_chat_session
from akchat_fsm.storage import open_storage

PG_URL = os.environ.get("AKCHAT_PG_URL", "postgresql://127.0.0.1:5432/test")
MYSQL_URL = os.environ.get("AKCHAT_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("AKCHAT_REDIS_URL", "redis://127.0.0.1:6379/0")
DEFINITION = ChatDefinition("bench-load")
REDIS_CAS = """
local stored = redis.call('HGET', KEYS[1], 'cursor')
if stored ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'cursor', ARGV[2], 'body', ARGV[3])
return 1
"""


class NoOpUpstream:
    """Accepts every proposal; approve and deny do nothing (the protocol cost only)."""

    def propose_tool_call(self, id: str, name: str, args: Mapping[str, Any]) -> ToolCallProposal:
        return ToolCallProposal(id, name, dict(args))

    def approve(self, tool_call_id: str) -> None:
        return None

    def deny(self, tool_call_id: str, reason: str) -> None:
        return None


# ----------------------------------------------------------------------------- raw baselines
class RawStore:
    """The store's driver, one table (or key prefix) of ``(session_id, cursor, body)`` rows."""

    def put(self, sid: str, cursor: int, body: str) -> None:
        raise NotImplementedError

    def read(self, sid: str) -> tuple[int, str]:
        raise NotImplementedError

    def cas(self, sid: str, expected: int, body: str) -> bool:
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class RawPostgres(RawStore):
    def __init__(self, table: str) -> None:
        import psycopg

        self.table = table
        self.conn = psycopg.connect(PG_URL, autocommit=True)
        self.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table}"
            " (session_id text PRIMARY KEY, cursor bigint NOT NULL, body text NOT NULL)"
        )

    def put(self, sid: str, cursor: int, body: str) -> None:
        self.conn.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s)", (sid, cursor, body))

    def read(self, sid: str) -> tuple[int, str]:
        row = self.conn.execute(
            f"SELECT cursor, body FROM {self.table} WHERE session_id = %s", (sid,)
        ).fetchone()
        assert row is not None
        return int(row[0]), str(row[1])

    def cas(self, sid: str, expected: int, body: str) -> bool:
        update = (
            f"UPDATE {self.table} SET cursor = %s, body = %s WHERE session_id = %s AND cursor = %s"
        )
        return self.conn.execute(update, (expected + 1, body, sid, expected)).rowcount == 1

    def drop(self) -> None:
        self.conn.execute(f"DROP TABLE IF EXISTS {self.table}")

    def close(self) -> None:
        self.conn.close()


class RawMySQL(RawStore):
    def __init__(self, table: str) -> None:
        import pymysql  # type: ignore[import-untyped]

        parts = urlsplit(MYSQL_URL)
        self.table = table
        self.conn = pymysql.connect(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            database=parts.path.lstrip("/") or "test",
            autocommit=True,
            charset="utf8mb4",
            client_flag=pymysql.constants.CLIENT.FOUND_ROWS,
        )
        with self.conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (session_id VARCHAR(191) PRIMARY KEY,"
                " `cursor` BIGINT NOT NULL, body LONGTEXT NOT NULL) CHARACTER SET utf8mb4"
            )

    def put(self, sid: str, cursor: int, body: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s)", (sid, cursor, body))

    def read(self, sid: str) -> tuple[int, str]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT `cursor`, body FROM {self.table} WHERE session_id = %s", (sid,))
            row = cur.fetchone()
        assert row is not None
        return int(row[0]), str(row[1])

    def cas(self, sid: str, expected: int, body: str) -> bool:
        with self.conn.cursor() as cur:
            changed = cur.execute(
                f"UPDATE {self.table} SET `cursor` = %s, body = %s"
                " WHERE session_id = %s AND `cursor` = %s",
                (expected + 1, body, sid, expected),
            )
        return int(changed) == 1

    def drop(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {self.table}")

    def close(self) -> None:
        self.conn.close()


class RawRedis(RawStore):
    def __init__(self, prefix: str) -> None:
        import redis

        self.prefix = prefix
        self.conn = redis.Redis.from_url(REDIS_URL)
        self.sha = self.conn.script_load(REDIS_CAS)

    def put(self, sid: str, cursor: int, body: str) -> None:
        self.conn.hset(self.prefix + sid, mapping={"cursor": cursor, "body": body})

    def read(self, sid: str) -> tuple[int, str]:
        cursor, body = self.conn.hmget(self.prefix + sid, ["cursor", "body"])
        assert cursor is not None and body is not None
        return int(cursor), body.decode() if isinstance(body, bytes) else str(body)

    def cas(self, sid: str, expected: int, body: str) -> bool:
        key = self.prefix + sid
        return bool(self.conn.evalsha(self.sha, 1, key, str(expected), str(expected + 1), body))

    def drop(self) -> None:
        keys = list(self.conn.scan_iter(match=f"{self.prefix}*", count=10_000))
        if keys:
            self.conn.delete(*keys)

    def close(self) -> None:
        self.conn.close()


class RawRedisCluster(RawStore):
    """Each session's hash on the primary of its own slot, written by the one-key CAS and a
    ``WAIT 1`` in one round trip: the durable work the adapter's cluster mode does (ADR-0089)."""

    def __init__(self, prefix: str, url: str) -> None:
        import redis

        self.prefix = prefix
        self.cluster = redis.RedisCluster.from_url(url.split("?", 1)[0].replace("+cluster", ""))
        self.nodes: dict[str, tuple[Any, str]] = {}

    def _node(self, sid: str) -> tuple[Any, str, str]:
        key = self.prefix + "{" + sid + "}"
        if sid not in self.nodes:
            conn = self.cluster.get_redis_connection(self.cluster.get_node_from_key(key))
            self.nodes[sid] = (conn, conn.script_load(REDIS_CAS))
        conn, sha = self.nodes[sid]
        return conn, sha, key

    def put(self, sid: str, cursor: int, body: str) -> None:
        conn, _sha, key = self._node(sid)
        conn.hset(key, mapping={"cursor": cursor, "body": body})

    def read(self, sid: str) -> tuple[int, str]:
        conn, _sha, key = self._node(sid)
        cursor, body = conn.hmget(key, ["cursor", "body"])
        assert cursor is not None and body is not None
        return int(cursor), body.decode() if isinstance(body, bytes) else str(body)

    def cas(self, sid: str, expected: int, body: str) -> bool:
        conn, sha, key = self._node(sid)
        pipe = conn.pipeline(transaction=False)
        pipe.evalsha(sha, 1, key, str(expected), str(expected + 1), body)
        pipe.execute_command("WAIT", 1, 1000)
        applied, acks = pipe.execute()
        if applied == 1 and acks < 1:
            raise RuntimeError("no replica acknowledged a raw write within 1 s")
        return bool(applied == 1)

    def drop(self) -> None:
        pass  # the benchmark's own cluster is stopped, keys and all, at the end of the run

    def close(self) -> None:
        self.cluster.close()


RAW = {"postgres": RawPostgres, "mysql": RawMySQL, "redis": RawRedis}


@dataclass(frozen=True)
class Backend:
    name: str
    url: str  # the adapter's URL, with its own table / prefix
    raw_name: str  # the raw baseline's own table / prefix

    def raw(self) -> RawStore:
        if self.name == "redis-cluster":
            return RawRedisCluster(self.raw_name, self.url)
        store: RawStore = RAW[self.name](self.raw_name)
        return store


def backends(run: str) -> dict[str, Backend]:
    table = f"bench_load_{run}"
    return {
        "postgres": Backend("postgres", f"{PG_URL}?table={table}", f"{table}_raw"),
        "mysql": Backend("mysql", f"{MYSQL_URL}?table={table}", f"{table}_raw"),
        "redis": Backend("redis", f"{REDIS_URL}?prefix=bench-load:{run}:", f"bench-raw:{run}:"),
    }


# ----------------------------------------------------------------------------- the workers
def _library_worker(url: str, sid: str, tokens: list[str], start: Any, done: Any) -> None:
    storage = open_storage(url)
    try:
        session = resume_chat_session(DEFINITION, session_id=sid, storage=storage)
        coordinator = session.confirmations_for(NoOpUpstream())
        done.put("ready")
        start.wait()
        for token in tokens:
            coordinator.approve(token)
    finally:
        storage.close()
        done.put("done")


def _raw_worker(backend: Backend, sid: str, tokens: list[str], start: Any, done: Any) -> None:
    raw = backend.raw()
    try:
        raw.read(sid)
        done.put("ready")
        start.wait()
        for token in tokens:
            while True:
                cursor, body = raw.read(sid)
                wire = json.loads(body)
                for record in wire["confirmations"]:
                    if record["token"] == token:
                        record["status"] = "approved"
                wire["cursor"] = cursor + 1
                text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
                if raw.cas(sid, cursor, text):
                    break
    finally:
        raw.close()
        done.put("done")


def _timed(ctx: Any, target: Callable[..., None], jobs: list[tuple[Any, ...]]) -> float:
    """Start one process per job, release them together, and time until all are done."""
    start, done = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*job, start, done)) for job in jobs]
    for proc in procs:
        proc.start()
    for _ in procs:  # every process has connected and loaded before the clock starts
        if done.get(timeout=600) != "ready":
            raise RuntimeError("a worker failed before it was ready")
    t0 = time.perf_counter()
    start.set()
    for _ in procs:
        done.get(timeout=600)
    elapsed = time.perf_counter() - t0
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"a worker failed with exit code {proc.exitcode}")
    return elapsed


# ----------------------------------------------------------------------------- one measurement
def _prepare(backend: Backend, raw: RawStore, sids: list[str], per_session: int) -> list[list[str]]:
    """Propose ``per_session`` calls in each session (library store) and copy each envelope
    to the raw store; returns each session's tokens."""
    storage = open_storage(backend.url)
    tokens: list[list[str]] = []
    try:
        for sid in sids:
            session = resume_chat_session(DEFINITION, session_id=sid, storage=storage)
            coordinator = session.confirmations_for(NoOpUpstream())
            tokens.append(
                [coordinator.propose("payments.refund", {"n": n}).token for n in range(per_session)]
            )
            wire = session.snapshot.to_wire()
            text = json.dumps(wire, ensure_ascii=False, separators=(",", ":"))
            raw.put(sid, int(wire["cursor"]), text)
    finally:
        storage.close()
    return tokens


def measure(backend: Backend, shape: str, k: int, per: int, round_no: int) -> tuple[float, float]:
    """(library decisions/s, raw decisions/s) for ``k`` approvers deciding ``per`` calls each."""
    ctx = mp.get_context("spawn")
    raw = backend.raw()
    try:
        tag = f"{shape}-{k}-{round_no}-{uuid.uuid4().hex[:6]}"
        if shape == "hot":
            sids = [f"hot-{tag}"]
            (all_tokens,) = _prepare(backend, raw, sids, k * per)
            shares = [all_tokens[i::k] for i in range(k)]
            jobs_sids = sids * k
        else:
            sids = [f"spread-{tag}-{i}" for i in range(k)]
            shares = _prepare(backend, raw, sids, per)
            jobs_sids = sids
        lib_s = _timed(
            ctx,
            _library_worker,
            [(backend.url, sid, share) for sid, share in zip(jobs_sids, shares, strict=True)],
        )
        raw_s = _timed(
            ctx,
            _raw_worker,
            [(backend, sid, share) for sid, share in zip(jobs_sids, shares, strict=True)],
        )
    finally:
        raw.close()
    decisions = k * per
    return decisions / lib_s, decisions / raw_s


def _cleanup(backend: Backend) -> None:
    raw = backend.raw()
    try:
        raw.drop()
    finally:
        raw.close()
    if backend.name == "postgres":
        import psycopg

        table = urlsplit(backend.url).query.split("=", 1)[1]
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}, {table}__records, {table}__pending")
    elif backend.name == "mysql":
        table = urlsplit(backend.url).query.split("=", 1)[1]
        mysql = RawMySQL(table)
        try:
            with mysql.conn.cursor() as cur:
                cur.execute("SHOW TABLES LIKE %s", (f"{table}%",))
                for (name,) in cur.fetchall():
                    cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        finally:
            mysql.close()
    elif backend.name == "redis":
        RawRedis(urlsplit(backend.url).query.split("=", 1)[1]).drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--approvers", default="1,4,16")
    parser.add_argument("--per", type=int, default=12, help="decisions per approver")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="postgres,mysql,redis,redis-cluster")
    parser.add_argument("--shapes", default="hot,spread")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        run(args, stack)


def run(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    tag = uuid.uuid4().hex[:8]
    found = backends(tag)
    if "redis-cluster" in args.only.split(","):
        try:
            from _cluster import local_cluster

            port = stack.enter_context(local_cluster()).ports[0]
            url = f"redis+cluster://127.0.0.1:{port}/0?prefix=bench-load:{tag}:&shards=4"
            found["redis-cluster"] = Backend("redis-cluster", url, f"bench-raw:{tag}:")
        except Exception as exc:  # no redis-server installed: reported, not fatal
            print(f"redis-cluster skipped: {exc!r}")
    chosen = [b for name, b in found.items() if name in args.only.split(",")]
    print(f"{'store':<13} {'shape':<7} {'k':>3} {'library/s':>10} {'raw/s':>9} {'ratio':>7}")
    for backend in chosen:
        try:
            backend.raw().close()
        except Exception as exc:  # a missing server: reported, not fatal
            print(f"{backend.name:<13} skipped: {exc!r}")
            continue
        try:
            for shape in args.shapes.split(","):
                for k in (int(n) for n in args.approvers.split(",")):
                    pairs = [measure(backend, shape, k, args.per, r) for r in range(args.rounds)]
                    ratio = statistics.median(lib / raw for lib, raw in pairs)
                    lib = statistics.median(p[0] for p in pairs)
                    raw_rate = statistics.median(p[1] for p in pairs)
                    print(
                        f"{backend.name:<13} {shape:<7} {k:>3} {lib:>10.1f} {raw_rate:>9.1f}"
                        f" {ratio:>6.2f}x",
                        flush=True,
                    )
        finally:
            _cleanup(backend)


if __name__ == "__main__":
    main()
