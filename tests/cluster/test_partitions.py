"""A namespace split into partitions on a real Redis Cluster: jobs spread over partitions and
masters, a key keeps its jobs on one partition, reads aggregate, a topic-wide limit holds
across partitions, a worker may serve a subset, and the partition count of a live namespace
cannot change (README: Scaling out)."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.core.errors import ConfigError, InvalidFlowOption
from scheduler.core.keys import Keys
from scheduler.facade.topics import TopicOptions
from scheduler.store.partitions import partition_of
from tests.cluster.servers import RedisCluster
from tests.integration.engine_fixtures import eventually, is_true

P = 6


def scheduler(
    url: str,
    namespace: str,
    registry: ListenerRegistry | None = None,
    count: int = P,
    **worker: object,
) -> Scheduler:
    """A Scheduler on the cluster with `count` partitions, audit outbox on, no relay; `worker`:
    [worker] settings."""
    base = load_settings(env={}, redis_url=url, namespace=namespace)
    return Scheduler(
        settings=base.model_copy(
            update={
                "audit": base.audit.model_copy(update={"relay": False}),
                "cluster": base.cluster.model_copy(update={"partitions": count}),
                "worker": base.worker.model_copy(update=worker),
            }
        ),
        listeners=registry or ListenerRegistry(),
    )


async def test_jobs_spread_over_partitions_and_masters_and_reads_aggregate(
    redis_cluster: RedisCluster, cluster_url: str, namespace: str, cluster_redis: object
) -> None:
    async with scheduler(cluster_url, namespace) as s:
        ids = await s.schedule_many([{"topic": "spread", "delay": 3600} for _ in range(120)])
        keyed = await asyncio.gather(
            *(s.schedule_in("spread", 3600, key="tenant-7") for _ in range(10))
        )
        await s.schedule_cron("nightly-a", "0 3 * * *", topic="spread")
        await s.schedule_cron("nightly-b", "0 4 * * *", topic="spread")
        where = Counter(partition_of(i, P) for i in ids)
        assert set(where) == set(range(P)), where
        for p in range(P):  # each job on the partition of its id, and there only
            mine = [i for i in ids if partition_of(i, P) == p]
            assert await cluster_redis.exists(
                *(Keys(namespace, p).job(i) for i in mine[:5])
            ) == len(mine[:5])
        home = partition_of("tenant-7", P)
        assert all([await cluster_redis.exists(Keys(namespace, home).job(i)) for i in keyed])
        masters = {redis_cluster.owner_of(Keys(namespace, p).due).port for p in range(P)}
        assert len(masters) >= 2, f"6 partitions all on one master: {masters}"
        assert (await s.stats())["scheduled"] == 130
        assert (await s.get_job(keyed[0])).key == "tenant-7"  # type: ignore[union-attr]
        seen, cursor = [], None
        while True:  # pages walk every partition: each job exactly once
            page = await s.jobs(state="scheduled", limit=17, cursor=cursor)
            seen += [j.id for j in page.items]
            cursor = page.cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(ids + keyed)
        by_key, cursor = [], None
        while True:  # the key filter (the console's) across partitions
            page = await s.jobs(key="tenant-7", limit=4, cursor=cursor)
            by_key += [j.id for j in page.items]
            if (cursor := page.cursor) is None:
                break
        assert sorted(by_key) == sorted(keyed)
        assert (await s.stats_by_topic())["spread"][
            "scheduled"
        ] == 130  # summed over the partitions
        assert await s.cancel(keyed[3]) and (await s.get_job(keyed[3])).state is JobState.CANCELLED  # type: ignore[union-attr]


async def test_a_topic_concurrency_of_2_holds_across_partitions(
    cluster_url: str, namespace: str
) -> None:
    reg, running, peak, done = ListenerRegistry(), [0], [0], []

    @reg.on_event("limited")
    async def work(event: ScheduleArrivedEvent) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.05)
        running[0] -= 1
        done.append(event.scheduled_job_id)

    async with scheduler(cluster_url, namespace, reg) as s:
        await s.configure_topic("limited", TopicOptions(concurrency=2))
        ids = [await s.schedule_in("limited", 0) for _ in range(12)]
        ids += await s.schedule_many([{"topic": "limited"} for _ in range(12)])
        async with s.worker(concurrency=24):
            await eventually(lambda: is_true(len(done) == 24), timeout=30, what="24 limited jobs")
        assert peak[0] == 2, f"a topic-wide concurrency of 2 ran {peak[0]} at once"
        home = partition_of("topic:limited", P)
        assert all([await s.store.partition(home).get_job(i) for i in ids])
        # a schedule feeding the pinned topic lives (and ticks) on its home too, wherever its name
        # points
        names = [f"feed-{i}" for i in range(6)]
        for name in names:
            await s.schedule_cron(name, "0 3 * * *", topic="limited")
        assert all([await s.store.partition(home).get_cron(n) for n in names])
        assert (await s.get_cron("feed-3")) is not None and await s.pause_cron("feed-3")


async def test_a_limit_on_a_topic_spread_over_partitions_is_refused(
    cluster_url: str, namespace: str
) -> None:
    async with scheduler(cluster_url, namespace) as s:
        await s.schedule_many([{"topic": "busy", "delay": 600} for _ in range(12)])
        with pytest.raises(InvalidFlowOption, match="topic 'busy'.*wait or run on others"):
            await s.configure_topic("busy", TopicOptions(concurrency=3))
        await s.configure_topic("idle", TopicOptions(concurrency=3))  # no jobs yet: fine


async def test_a_worker_serves_only_its_partitions(cluster_url: str, namespace: str) -> None:
    reg, ran = ListenerRegistry(), []

    @reg.on_event("subset")
    async def work(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    async with scheduler(cluster_url, namespace, reg, partitions="0-2") as s:
        ids = await s.schedule_many([{"topic": "subset"} for _ in range(60)])
        async with s.worker():
            mine = {i for i in ids if partition_of(i, P) <= 2}
            await eventually(
                lambda: is_true(len(ran) == len(mine)),
                timeout=20,
                what="the served partitions' jobs",
            )
            await asyncio.sleep(0.3)
        assert set(ran) == mine
        assert (await s.stats())["scheduled"] == len(ids) - len(mine)


async def test_the_partition_count_of_a_live_namespace_cannot_change(
    cluster_url: str, namespace: str
) -> None:
    async with scheduler(cluster_url, namespace) as s:
        await s.schedule_in("t", 60)
    for other in (1, 3):
        with pytest.raises(
            ConfigError,
            match=f"has partitions=6 but this process is configured with partitions={other}",
        ):
            async with scheduler(cluster_url, namespace, count=other):
                pass
    plain = namespace + "-plain"
    try:
        async with scheduler(cluster_url, plain, count=1) as s:
            await s.schedule_in("t", 60)
        with pytest.raises(
            ConfigError, match="has partitions=1 but this process is configured with partitions=6"
        ):
            async with scheduler(cluster_url, plain):
                pass
    finally:
        from tests.cluster.conftest import delete_namespace

        delete_namespace(cluster_url, plain)
