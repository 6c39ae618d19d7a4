"""Fixtures of the Redis Cluster tests: one real cluster per session (servers.py), a fresh
namespace per test (its keys deleted afterwards on every node), a cluster client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster as AsyncCluster

from scheduler.store.clients import redis_client
from tests.cluster.servers import RedisCluster, start_cluster
from tests.procs import WorkerProcesses, producer


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """3 masters + 3 replicas on loopback, stopped by pid at the end of the session."""
    cluster = start_cluster(Path(tmp_path_factory.mktemp("redis-cluster")))
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster_url(redis_cluster: RedisCluster) -> str:
    return redis_cluster.url


def delete_namespace(url: str, namespace: str) -> None:
    """Delete every key of a namespace's hash tags ({ns} and {ns|p}) on every master."""
    import redis as sync_redis
    from redis.cluster import ClusterNode
    from redis.cluster import RedisCluster as SyncCluster

    from scheduler.store.cluster_url import parse_cluster_url

    address = parse_cluster_url(url)  # rediss+cluster: the URL's TLS options too
    nodes = [ClusterNode(h, p) for h, p in address.nodes]
    client = SyncCluster(startup_nodes=nodes, **address.client_kwargs())
    try:
        for pattern in ("{" + namespace + "}*", "{" + namespace + "|*"):
            for key in list(client.scan_iter(match=pattern, count=1000)):
                client.delete(key)
    except sync_redis.RedisError:
        pass  # a test that killed nodes: what is left dies with the cluster
    finally:
        client.close()


@pytest.fixture
def namespace(cluster_url: str) -> Iterator[str]:
    """A namespace no other test uses; its keys are deleted afterwards."""
    ns = f"c-{uuid.uuid4().hex[:10]}"
    yield ns
    delete_namespace(cluster_url, ns)


@pytest.fixture
async def cluster_redis(cluster_url: str) -> AsyncIterator[AsyncCluster]:
    """A redis-py cluster client for the test's own checks."""
    client = redis_client(cluster_url)
    yield client  # type: ignore[misc]
    await client.aclose()  # type: ignore[attr-defined]


# The integration scenarios imported by test_scenarios.py ask for `redis_url` and `redis`:
# here they get the cluster's seed URL and a cluster client.
@pytest.fixture(scope="session")
def redis_url(redis_cluster: RedisCluster) -> str:
    return redis_cluster.url


@pytest.fixture
async def redis(cluster_url: str) -> AsyncIterator[AsyncCluster]:
    client = redis_client(cluster_url)
    yield client  # type: ignore[misc]
    await client.aclose()  # type: ignore[attr-defined]


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    """Real `horae worker` processes on the cluster (as the imported scenarios' own modules give
    them)."""
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


@pytest.fixture
async def sched(redis_url: str, namespace: str) -> Any:
    """The test's own facade on the cluster: schedules and inspects; runs no worker."""
    async with producer(redis_url, namespace) as s:
        yield s
