"""`horae services status` given a Redis Cluster (issue 17): run as a real process, it reports the
cluster's state, its masters and replicas up, the slots covered, the namespace's partition count
from `{ns}:meta`, and names each node (or seed) it cannot reach."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.servers import Node, RedisCluster, start_cluster
from tests.procs import HORAE, ROOT, child_env, producer


def status(url: str, namespace: str, **env: str) -> list[str]:
    """`horae services status` as a real process (its Postgres line is not this test's)."""
    full = {
        **child_env(),
        "HORAE_REDIS_URL": url,
        "HORAE_NAMESPACE": namespace,
        "HORAE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
        **env,
    }
    done = subprocess.run(
        [str(HORAE), "services", "status"],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def redis_line(lines: list[str]) -> str:
    return next(line for line in lines if line.startswith("redis: external "))


async def test_status_reports_the_cluster_its_nodes_and_the_partitions(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    url = f"{redis_cluster.url}?partitions=4"
    async with producer(url, namespace):  # records the layout in {ns}:meta
        pass
    lines = await asyncio.to_thread(status, url, namespace)
    text = "\n".join(lines)
    assert redis_line(lines).endswith(
        ": cluster_state ok, 3/3 masters up, 3/3 replicas up, 16384/16384 slots covered; "
        f"namespace '{namespace}': 4 partitions"
    ), text
    for node in redis_cluster.nodes:
        assert any(
            line.startswith(f"redis node 127.0.0.1:{node.port}: ") and line.endswith(", reachable")
            for line in lines
        ), text
    assert (
        sum(": master, slots " in line for line in lines) == 3
        and sum(": replica, " in line for line in lines) == 3
    )

    # The same cluster named by one seed and `[cluster] enabled`: still probed as a cluster; the
    # process configured with 2 partitions is told it would be refused.
    plain = f"redis://127.0.0.1:{redis_cluster.nodes[0].port}/0"
    lines = await asyncio.to_thread(
        status, plain, namespace, HORAE_CLUSTER__ENABLED="true", HORAE_CLUSTER__PARTITIONS="2"
    )
    assert (
        f"namespace '{namespace}': 4 partitions (this "
        f"process is configured with 2: it would be refused)" in redis_line(lines)
    ), lines


async def test_status_names_a_seed_that_is_no_node(
    redis_cluster: RedisCluster, namespace: str
) -> None:
    url = f"{redis_cluster.url},127.0.0.1:1"
    lines = await asyncio.to_thread(status, url, namespace)
    line = redis_line(lines)
    assert "cluster_state ok" in line and f"namespace '{namespace}': no data yet" in line, lines
    assert line.endswith("; not reachable: 127.0.0.1:1 (seed)"), lines
    assert any(
        x.startswith("redis seed 127.0.0.1:1: unreachable (ConnectionError")
        and x.endswith(", not a node of the cluster")
        for x in lines
    ), lines


@pytest.fixture
def doomed_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A throwaway cluster of 3 masters and no replicas: a test kills one."""
    cluster = start_cluster(tmp_path / "doomed", replicas=0)
    yield cluster
    cluster.stop()


async def test_status_names_a_master_that_is_down(doomed_cluster: RedisCluster) -> None:
    url = doomed_cluster.url  # taken while all three run: the dead one stays a seed
    victim = doomed_cluster.nodes[1]
    doomed_cluster.kill(victim)
    await _cluster_state(doomed_cluster.nodes[0], "fail")  # the others agreed it is gone
    lines = await asyncio.to_thread(status, url, "nobody")
    line, text = redis_line(lines), "\n".join(lines)
    assert (
        "cluster_state fail, 2/3 masters up, 0/0 replicas up" in line and "slots covered" in line
    ), text
    assert "16384/16384" not in line and line.endswith(
        f"; not reachable: 127.0.0.1:{victim.port}"
    ), text
    assert any(
        x.startswith(f"redis node 127.0.0.1:{victim.port}: master, slots ")
        and ", unreachable (ConnectionError" in x
        and x.endswith("the cluster marks it fail")
        for x in lines
    ), text


async def _cluster_state(node: Node, state: str, timeout: float = 30.0) -> None:
    """Until the node says cluster_state:`state`."""
    deadline = time.monotonic() + timeout
    while True:
        with node.client() as c:
            info = c.execute_command("CLUSTER", "INFO")
        if f"cluster_state:{state}" in (info.decode() if isinstance(info, bytes) else str(info)):
            return
        assert time.monotonic() < deadline, f"cluster_state not {state} after {timeout}s: {info!r}"
        await asyncio.sleep(0.1)
