"""A real Redis Cluster on loopback, started from the installed ``redis-server`` (ADR-0089).

Three primaries and three replicas, each a child process of the test run with its files in
a temporary directory; :meth:`LocalCluster.stop` kills them all. Every wait polls the servers
(``PING``, ``CLUSTER INFO``, ``INFO replication``) against a deadline: nothing sleeps a fixed
time to let the cluster settle.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.crc import key_slot

SERVER = shutil.which("redis-server")
CLI = shutil.which("redis-cli")
#: The first port tried; every xdist worker takes its own block of ``PORTS_PER_WORKER``.
BASE_PORT = int(os.environ.get("AKCHAT_REDIS_CLUSTER_PORT", "7100"))
PORTS_PER_WORKER = 20


def worker_base(offset: int = 0) -> int:
    """The first port of this xdist worker's block (``gw3`` -> base + 60), plus ``offset``."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    return BASE_PORT + PORTS_PER_WORKER * index + offset


def free_base(blocks: int = 10) -> int:
    """This worker's first port block whose six ports are all free (another tox env, run in
    parallel, has the same worker names): base, then base + 200, + 400 ..."""
    for block in range(blocks):
        base = worker_base(200 * block)
        if not any(_in_use(base + i) for i in range(6)):
            return base
    raise RuntimeError(
        f"no free block of ports from {worker_base()}: set AKCHAT_REDIS_CLUSTER_PORT"
    )


def _in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def poll(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Ask ``done()`` again and again until it is true; ``TimeoutError`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"Redis Cluster: {what} did not happen within {timeout} s")
        time.sleep(0.05)  # a polling interval, not a wait for something to be done


class LocalCluster:
    """``LocalCluster(base_port, directory, node_timeout_ms)``: six nodes on ports base..+5."""

    def __init__(self, base_port: int, directory: Path, node_timeout_ms: int = 5000) -> None:
        self.ports = [base_port + i for i in range(6)]
        self.directory = directory
        self.node_timeout_ms = node_timeout_ms
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_timeout=5, socket_connect_timeout=5)

    def start(self) -> LocalCluster:
        busy = [p for p in self.ports if _in_use(p)]
        if busy:
            raise RuntimeError(f"ports {busy} are taken: set AKCHAT_REDIS_CLUSTER_PORT")
        assert SERVER is not None and CLI is not None
        try:
            for port in self.ports:
                self.restart(port)
            for port in self.ports:
                poll(f"node {port} answering", lambda p=port: self._pings(p))
            nodes = [f"127.0.0.1:{p}" for p in self.ports]
            subprocess.run(
                [CLI, "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
                check=True,
                stdout=subprocess.DEVNULL,
                timeout=60,
            )
            poll("every node in cluster_state:ok", lambda: all(self.ok(p) for p in self.ports))
            poll("every replica in sync", self.replicas_in_sync)
        except BaseException:
            self.stop()
            raise
        return self

    def restart(self, port: int) -> None:
        """Start (or start again, from its nodes file) the node on ``port``."""
        assert SERVER is not None
        self.processes[port] = subprocess.Popen(
            [
                SERVER,
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "no",
                "--repl-diskless-sync-delay", "0",
                "--logfile", f"{port}.log",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def _pings(self, port: int) -> bool:
        try:
            with self.client(port) as r:
                return bool(r.ping())
        except redis.RedisError:
            return False

    def ok(self, port: int) -> bool:
        try:
            with self.client(port) as r:
                return b"cluster_state:ok" in r.execute_command("CLUSTER", "INFO")
        except redis.RedisError:
            return False

    def roles(self) -> dict[int, str]:
        """``port -> "master" | "slave"`` of every live node."""
        found = {}
        for port in self.live():
            with self.client(port) as r:
                found[port] = r.info("replication")["role"]
        return found

    def replicas_in_sync(self) -> bool:
        for port in self.live():
            with self.client(port) as r:
                info = r.info("replication")
            if info["role"] == "slave" and info.get("master_link_status") != "up":
                return False
        return True

    def primary_of(self, key: str) -> int:
        """The port of the primary serving ``key``'s hash slot, as the cluster sees it now."""
        slot = key_slot(key.encode())
        for port in self.live():
            try:
                with self.client(port) as r:
                    slots = r.execute_command("CLUSTER", "SLOTS")
            except redis.RedisError:
                continue
            for start, end, primary, *_ in slots:
                if start <= slot <= end:
                    return int(primary[1])
        raise LookupError(slot)

    def live(self) -> list[int]:
        return [p for p, proc in self.processes.items() if proc.poll() is None]

    def kill(self, port: int) -> None:
        """SIGKILL one node: no shutdown, no last write to disk."""
        self.processes[port].send_signal(signal.SIGKILL)
        self.processes[port].wait(10)

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.processes.values():
            proc.wait(10)
