"""A real Redis Cluster on loopback for a benchmark: the test suite's own launcher
(tests/redis_cluster.py: three primaries, three replicas, from the installed ``redis-server``),
imported rather than written twice, on a free block of ports, stopped on exit."""

from __future__ import annotations

import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from redis_cluster import LocalCluster, free_base


@contextlib.contextmanager
def local_cluster() -> Iterator[LocalCluster]:
    """A started cluster, killed (every node) and its files removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as directory:
        cluster = LocalCluster(free_base(), Path(directory)).start()
        try:
            yield cluster
        finally:
            cluster.stop()
