"""TLS to a Redis Cluster (issue 17, README: Scaling out, Security): a TLS-only cluster of 3
masters (`--port 0`, `--tls-cluster yes`, client certificates required) from the machine's
redis-server; horae given `rediss+cluster://` with ONE seed finds the other masters from the
slot map and reaches them over TLS with the URL's CA and client certificate, on redis-py's
cluster client and on its own wire alike; a worker process runs jobs of 3 partitions and its
relay audits them; a wrong CA or a missing client certificate is refused clearly;
`horae services status` reports the cluster."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
import redis
from redis.crc import key_slot

from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler import Scheduler, StorageError
from scheduler.core.keys import Keys
from scheduler.store.partitions import partition_of
from scheduler.testing.clocks import FakeClock
from tests.cluster.conftest import delete_namespace
from tests.cluster.servers import ClusterTls, Node, RedisCluster, start_cluster
from tests.cluster.test_cluster_status import status
from tests.integration.engine_fixtures import START_MS, make_scheduler
from tests.procs import WorkerProcesses, producer
from tests.procs.worker_app import COUNT_TOPIC
from tests.security.certs import Certs, issue, make_certs

JOBS = 30
PARTITIONS = 3


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("cluster-certs"))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[RedisCluster]:
    """3 masters, no replicas, TLS only; the nodes' certificate names 127.0.0.1 (what they
    announce)."""
    node_cert, node_key = issue(
        certs, "node", san="DNS:localhost,IP:127.0.0.1", usage="serverAuth,clientAuth"
    )
    client_cert, client_key = issue(certs, "client", san="DNS:horae-client", usage="clientAuth")
    tls = ClusterTls(certs.ca, node_cert, node_key, client_cert, client_key)
    cluster = start_cluster(tmp_path_factory.mktemp("tls-cluster"), replicas=0, tls=tls)
    yield cluster
    cluster.stop()


@pytest.fixture
def tls_namespace(tls_cluster: RedisCluster) -> Iterator[str]:
    """A fresh namespace whose PARTITIONS partitions live on as many different masters (so a
    worker given one seed must reach the others)."""
    with tls_cluster.nodes[0].client() as c:
        owners = [
            (int(lo), int(hi), int(master[1]))
            for lo, hi, master, *_ in c.execute_command("CLUSTER", "SLOTS")
        ]
    while True:
        ns = f"tls-{uuid.uuid4().hex[:10]}"
        slots = [key_slot(Keys(ns, p).prefix.encode()) for p in range(PARTITIONS)]
        if len({port for s in slots for lo, hi, port in owners if lo <= s <= hi}) == PARTITIONS:
            break
    yield ns
    delete_namespace(tls_cluster.url, ns)


def test_the_cluster_speaks_tls_only(tls_cluster: RedisCluster) -> None:
    """The premise of the other tests: no node answers in plaintext, none without a client
    certificate."""
    port, tls = tls_cluster.nodes[0].port, tls_cluster.tls
    assert tls is not None
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        redis.Redis(port=port, socket_timeout=2).ping()
    with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
        redis.Redis(port=port, socket_timeout=2, ssl=True, ssl_ca_certs=str(tls.ca)).ping()
    with tls_cluster.nodes[0].client() as c:
        assert c.ping()


async def test_a_worker_runs_three_partitions_over_tls_and_its_relay_audits_them(
    tls_cluster: RedisCluster, tls_namespace: str, database_url: str, tmp_path: Path
) -> None:
    url = tls_cluster.url_for(seeds=1, partitions=PARTITIONS)
    assert url.startswith("rediss+cluster://127.0.0.1:") and "," not in url.split("?")[0], url
    workers = WorkerProcesses(url, tls_namespace, tmp_path)
    try:
        worker = workers.spawn(
            "tls", env={"HORAE_AUDIT__RELAY": "true", "HORAE_DATABASE_URL": database_url}
        )
        await worker.wait_ready()
        async with producer(url, tls_namespace) as s:
            ids = [await s.schedule_in(COUNT_TOPIC, 0, job_id=f"tls-{i}") for i in range(JOBS)]
            deadline = time.monotonic() + 60
            while (await s.stats())["completed"] < JOBS and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert (await s.stats())["completed"] == JOBS, workers.logs()
        admin = redis.RedisCluster(
            host="127.0.0.1", port=tls_cluster.nodes[0].port, ssl=True, **tls_cluster.tls.query()
        )  # type: ignore[union-attr]
        try:
            runs = admin.hgetall("{" + tls_namespace + "}:test:runs")
            home = {i: partition_of(i, PARTITIONS) for i in ids}
            placed = {i: p for i, p in home.items() if admin.exists(Keys(tls_namespace, p).job(i))}
        finally:
            admin.close()
        assert {k.decode(): int(v) for k, v in runs.items()} == {i: 1 for i in ids}, (
            "each job ran once"
        )
        assert set(placed) == set(ids) and set(placed.values()) == set(range(PARTITIONS)), placed
        conn = await asyncpg.connect(database_url)
        try:
            deadline = time.monotonic() + 30
            while True:
                rows = await conn.fetch("SELECT id, status FROM schedule_audit")
                if len(rows) == JOBS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)
        finally:
            await conn.close()
        assert {r["id"]: r["status"] for r in rows} == {i: "completed" for i in ids}, workers.logs()
    finally:
        workers.close()


async def test_a_wrong_ca_or_no_client_certificate_is_refused_clearly(
    tls_cluster: RedisCluster, tls_namespace: str, certs: Certs
) -> None:
    wrong = tls_cluster.url_for(ca=certs.other_ca)
    settings = load_settings(
        path=None, env={"HORAE_AUDIT__RELAY": "false"}, redis_url=wrong, namespace=tls_namespace
    )
    with pytest.raises(
        StorageError
    ) as info:  # connect() calibrates the clock over redis-py's cluster client
        async with Scheduler(settings=settings, listeners=ListenerRegistry()):
            pass
    assert "certificate verify failed" in str(info.value), str(info.value)
    async with make_scheduler(
        wrong, tls_namespace, ListenerRegistry()
    ) as s:  # a FakeClock: the wire goes first
        with pytest.raises(StorageError) as wire_info:
            await s.get_job("x")
    text = str(wire_info.value)
    assert (
        "TLS certificate was refused" in text
        and "ssl_ca_certs" in text
        and "rediss+cluster" in text
    ), text

    no_client_cert = tls_cluster.url_for(client_cert=False)
    settings = load_settings(
        path=None,
        env={"HORAE_AUDIT__RELAY": "false"},
        redis_url=no_client_cert,
        namespace=tls_namespace,
    )
    with pytest.raises(StorageError):
        async with Scheduler(settings=settings, listeners=ListenerRegistry()):
            pass


async def test_services_status_reports_the_tls_cluster(
    tls_cluster: RedisCluster, tls_namespace: str, certs: Certs
) -> None:
    url = tls_cluster.url_for(partitions=PARTITIONS)
    async with producer(url, tls_namespace):  # records the layout in {ns}:meta
        pass
    lines = await asyncio.to_thread(status, url, tls_namespace)
    text = "\n".join(lines)
    redis_line = next(
        line for line in lines if line.startswith("redis: external rediss+cluster://")
    )
    assert (
        "cluster_state ok, 3/3 masters up, 0/0 replicas up, 16384/16384 slots covered; "
        f"namespace '{tls_namespace}': 3 partitions"
    ) in redis_line, text
    for node in tls_cluster.nodes:
        assert (
            f"redis node 127.0.0.1:{node.port}: master, slots " in text and "reachable" in text
        ), text
    wrong = await asyncio.to_thread(status, tls_cluster.url_for(ca=certs.other_ca), tls_namespace)
    assert "cluster unreachable" in "\n".join(wrong) and "certificate verify failed" in "\n".join(
        wrong
    ), wrong


async def test_a_moved_slot_is_followed_to_its_new_master_over_tls(
    tls_cluster: RedisCluster, tls_namespace: str
) -> None:
    async with make_scheduler(
        tls_cluster.url_for(seeds=1), tls_namespace, ListenerRegistry(), FakeClock(START_MS)
    ) as s:
        await s.schedule_in("tls.moving", "1h", job_id="before")
        source = tls_cluster.owner_of(Keys(tls_namespace).job("before"))
        target = next(n for n in tls_cluster.nodes if n is not source)
        _move_slot(key_slot(tls_namespace.encode()), source, target, tls_cluster.nodes)
        info = await s.get_job(
            "before"
        )  # the old owner answers MOVED: the wire follows it over TLS
        assert info is not None and info.topic == "tls.moving"
        await s.schedule_in("tls.moving", "1h", job_id="after")
    with target.client() as c:
        assert c.exists(Keys(tls_namespace).job("before"), Keys(tls_namespace).job("after")) == 2


def _move_slot(slot: int, source: Node, target: Node, nodes: list[Node]) -> None:
    """Move one slot with its keys (MIGRATE goes over TLS between the nodes: --tls-cluster yes)."""
    with source.client() as src, target.client() as dst:
        source_id, target_id = (
            src.execute_command("CLUSTER", "MYID"),
            dst.execute_command("CLUSTER", "MYID"),
        )
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
        assert keys, "the slot holds the namespace's keys"
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    for node in nodes:
        if node not in (source, target):
            with node.client() as c:
                c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
