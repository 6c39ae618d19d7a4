"""One store for any number of partitions (README: Scaling out): the same RedisStore serves an
unpartitioned namespace (one partition, its commands as they always were: no lookup of a job's
partition) and one of 3 partitions on one Redis (a job found by id wherever its key placed it,
reads summed and merged, the listing partition after partition); store.partition(p) is the
store of one partition a worker's loop uses, and a call that acts on one partition refuses a
store of several."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.job import JobState, Settlement
from scheduler.core.keys import Keys
from scheduler.store.partitions import partition_of
from scheduler.store.redis import RedisStore
from scheduler.testing.under_test import delete_namespace
from scheduler.worker.loop import Worker
from scheduler.worker.partitioned import PartitionedWorker
from tests.integration.engine_fixtures import START_MS, make_scheduler

P = 3


@contextmanager
def sent_by(store: RedisStore) -> Iterator[list[tuple[str, ...]]]:
    """Every command the store sends while the block runs: (name, first key) each; a script
    call as ("EVALSHA", its first key)."""
    wire, sent = store.wire, []
    call, call_many = wire.call, wire.call_many

    def shown(command: tuple[Any, ...]) -> tuple[str, ...]:
        name = str(command[0]).upper()
        return (name, str(command[3] if name == "EVALSHA" else command[1]))

    async def counting_call(*args: Any, raw: bool = False) -> Any:
        sent.append(shown(args))
        return await call(*args, raw=raw)

    async def counting_call_many(commands: Any, raw: Any = (), **kw: Any) -> Any:
        sent.extend(shown(c) for c in commands)
        return await call_many(commands, raw, **kw)

    wire.call, wire.call_many = counting_call, counting_call_many  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del wire.call, wire.call_many


async def test_one_partition_sends_one_script_call_per_step_and_looks_nothing_up(
    redis_url: str, namespace: str
) -> None:
    """The hot path unpartitioned: enqueue, claim, complete (and an operation by id) are each
    one script call on the namespace's own keys, as before the store spanned partitions."""
    k = Keys(namespace)
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        assert store.count == 1 and store.parts == (k,) and store.single == k
        with sent_by(store) as sent:
            await s.schedule_in("hot.path", 0, job_id="a")
            await s.schedule_in("hot.path", 0, job_id="b")
        assert sent == [("EVALSHA", k.job("a")), ("EVALSHA", k.job("b"))]
        with sent_by(store) as sent:
            jobs, _, _ = await store.claim(START_MS, 10, 30_000, "w1")
            assert sorted(j.id for j in jobs) == ["a", "b"]
            first, second = sorted(jobs, key=lambda j: j.id)
            await store.complete([Settlement(first.id, first.token, "completed")], START_MS, 100)
            await store.cancel(second.id, START_MS)
        assert sent == [("EVALSHA", k.due), ("EVALSHA", k.active), ("EVALSHA", k.job("b"))]
        with sent_by(store) as sent:
            info = await s.get_job("a")
        assert info is not None and info.state is JobState.COMPLETED
        assert [name for name, _ in sent] == ["HGETALL", "HMGET", "GET", "LRANGE"]


async def test_three_partitions_in_one_store(redis_url: str, namespace: str) -> None:
    ids = [f"job-{n}" for n in range(12)]
    try:
        async with make_scheduler(
            redis_url, namespace, ListenerRegistry(), cluster={"partitions": P}
        ) as s:
            store = s.store
            assert store.count == P and store.parts == tuple(Keys(namespace, p) for p in range(P))
            for job_id in ids:
                await s.schedule_in("spread", 0, job_id=job_id)
            where = {j: partition_of(j, P) for j in ids}
            assert len(set(where.values())) == P  # (these ids land on every partition)
            # each job is on its id's partition, found there by id from the namespace's store
            for job_id, p in where.items():
                part = store.partition(p)
                assert part.count == 1 and part.single == Keys(namespace, p)
                assert (await part.get_job(job_id)) is not None
                assert (await store.get_job(job_id)) is not None
                other = store.partition((p + 1) % P)
                assert await other.get_job(job_id) is None
            # reads over every partition: counts summed, one listing walking them all
            assert (await s.stats())["scheduled"] == len(ids)
            assert (await store.stats_by_topic())["spread"]["scheduled"] == len(ids)
            listed: list[str] = []
            cursor = None
            while True:
                page = await s.jobs(topic="spread", limit=5, cursor=cursor)
                listed += [j.id for j in page.items]
                if page.cursor is None:
                    break
                cursor = page.cursor
            assert sorted(listed) == sorted(ids)
            # an operation by id goes to the partition holding the job
            victim = ids[3]
            assert await s.cancel(victim)
            cancelled = await store.partition(where[victim]).get_job(victim)
            assert cancelled is not None and cancelled.state is JobState.CANCELLED
            assert await s.cancel("no-such-job") is False
            # a call acting on one partition refuses the store of all three
            with pytest.raises(TypeError, match="partition"):
                await store.claim(START_MS, 1, 1000, "w1")
            with pytest.raises(TypeError, match="partition"):
                _ = store.single
            # the worker's loop claims on its own partition only
            part = store.partition(where[ids[0]])
            jobs, _, _ = await part.claim(START_MS, 100, 30_000, "w1")
            mine = {j for j, p in where.items() if p == where[ids[0]] and j != victim}
            assert {j.id for j in jobs} == mine
            await part.release([(j.id, j.token) for j in jobs], START_MS)
    finally:
        await delete_namespace(redis_url, namespace)


async def test_a_partitioned_worker_declares_what_it_shares_with_its_loops(
    redis_url: str, namespace: str
) -> None:
    registry = ListenerRegistry()

    @registry.on_event("shared.attrs")
    async def noop(event: ScheduleArrivedEvent) -> None:
        return None

    try:
        async with make_scheduler(redis_url, namespace, registry, cluster={"partitions": P}) as s:
            w = s.make_worker(topics=["shared.attrs"], grace=2.0)
            assert isinstance(w, PartitionedWorker) and len(w.workers) == P
            first = w.workers[0]
            assert [loop.store.single for loop in w.workers] == list(s.store.parts)
            assert all(loop.id == w.id for loop in w.workers)
            assert (w.registry, w.clock, w.settings, w.retention, w.metrics) == (
                first.registry,
                first.clock,
                first.settings,
                first.retention,
                first.metrics,
            )
            assert (w.cron, w.tracer, w.pool) == (first.cron, first.tracer, first.pool)
            assert (w.topics, w.all_topics, w.grace) == (("shared.attrs",), False, 2.0)
            with pytest.raises(AttributeError):
                _ = w.no_such_attribute  # type: ignore[attr-defined]
        async with make_scheduler(redis_url, namespace + "-one", registry) as s:
            one = s.make_worker(topics=["shared.attrs"])
            assert isinstance(one, Worker) and one.store is s.store
    finally:
        await delete_namespace(redis_url, namespace)
        await delete_namespace(redis_url, namespace + "-one")
