"""A worker claims the topics it has listeners for, plus topics no live worker
serves (issue 13): the claim filter and the worker registry against real Redis,
then two real worker processes with different listener modules."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.errors import ConfigError
from scheduler.core.keys import Keys
from scheduler.core.outbox import NO_LISTENER, SUCCEEDED, decode_entry
from scheduler.store.redis import RedisStore
from scheduler.worker.advertise import entry_json
from tests.integration.engine_fixtures import START_MS, make_scheduler
from tests.integration.test_local_handoff import new_job
from tests.procs import HORAE, WorkerProcesses, app_key, producer
from tests.procs.topic_apps import A_TOPIC, B_TOPIC

NOW = START_MS
TTL = 10_000


async def add_jobs(store: RedisStore, topic: str, n: int, due_ms: int, prefix: str) -> list[str]:
    ids = [f"{prefix}{i:04d}" for i in range(n)]
    for job_id in ids:
        await store.enqueue(new_job(job_id, due_ms, topic), NOW)
    return ids


async def advertise(store: RedisStore, worker_id: str, topics: list[str], now: int = NOW) -> None:
    await store.advertise_worker(
        worker_id, entry_json(topics, 10, 0, False, 1, now, TTL, host="h"), topics, now, TTL
    )


async def test_claim_takes_own_and_unserved_topics_and_skips_served_ones(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        await advertise(store, "A", ["a"])
        a_ids = await add_jobs(
            store, "a", 150, NOW - 10, "a"
        )  # 150 of a, due first: more than a page
        b_ids = await add_jobs(store, "b", 5, NOW - 5, "b")
        c_ids = await add_jobs(store, "c", 3, NOW - 1, "c")  # nobody serves c
        jobs, next_due, _ = await store.claim(NOW, 100, 30_000, "B", ["b"], unserved=True)
        assert sorted(j.id for j in jobs) == sorted(b_ids + c_ids)
        assert next_due == NOW + TTL, (
            "the only jobs left are A's: re-check when A's mark would expire"
        )
        jobs, _, _ = await store.claim(
            NOW, 100, 30_000, "B2", ["b"]
        )  # explicit topics: exactly those
        assert jobs == []
        # A stops beating: once its mark is past, its jobs are unserved and B takes them
        jobs, _, _ = await store.claim(NOW + TTL, 100, 30_000, "B", ["b"], unserved=True)
        assert [j.id for j in jobs] == a_ids[:100]


async def test_a_worker_sleeps_until_the_next_job_it_may_take(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        await advertise(store, "A", ["a"])
        await add_jobs(store, "a", 3, NOW - 10, "a")
        await add_jobs(store, "a", 100, NOW + 100, "later")  # more than a page of the next_due scan
        await add_jobs(store, "b", 1, NOW + 500, "b")
        jobs, next_due, _ = await store.claim(NOW, 10, 30_000, "B", ["b"], unserved=True)
        assert jobs == [] and next_due == NOW + 500
        jobs, next_due, _ = await store.claim(NOW, 2, 30_000, "A", ["a"], unserved=True)
        assert len(jobs) == 2 and next_due == NOW, "a full batch: claim again at once"


async def test_forget_hands_topics_to_other_live_workers_or_leaves_them_unserved(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store, k = s.store, Keys(namespace)
        await advertise(store, "A", ["a", "x"])
        await advertise(store, "A2", ["a"], now=NOW - 1_000)
        assert await store.forget_worker("A", NOW)
        assert not await store.forget_worker("A", NOW)
        served = await redis.hgetall(k.served)
        assert served == {b"a": str(NOW - 1_000 + TTL).encode()}, "x: unserved; a: A2's mark"
        # a dead worker's entry is removed by the next heartbeat of any worker
        assert await store.advertise_worker(
            "B", entry_json(["b"], 1, 0, False, 2, NOW + TTL, TTL), ["b"], NOW + TTL, TTL
        ) == (1, None)
        assert sorted(await store.worker_entries()) == ["B"]


async def test_workers_lists_live_workers_and_a_worker_without_listeners_refuses_to_start(
    redis_url: str, namespace: str
) -> None:
    reg = ListenerRegistry()

    @reg.on_event("t.one")
    async def one(event: ScheduleArrivedEvent) -> None: ...

    async with make_scheduler(redis_url, namespace, reg) as s:
        async with s.worker(concurrency=3) as w:
            infos = await s.workers()
            assert [(i.id, i.topics, i.concurrency, i.all_topics) for i in infos] == [
                (w.id, ("t.one",), 3, False)
            ]
            assert infos[0].last_heartbeat.tzinfo is not None
        assert await s.workers() == []
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        with pytest.raises(ConfigError, match="no listeners"):
            await s.make_worker().start()
        async with s.worker(all_topics=True) as w:
            assert [(i.id, i.topics, i.all_topics) for i in await s.workers()] == [(w.id, (), True)]


# ------------------------------------------------------------ real processes
JOBS = 200
WORKER_ENV = {"HORAE_RETENTION__COMPLETED_COUNT": "10000", "HORAE_WORKER__REGISTRY_TTL_MS": "1500"}
APP = "tests.procs.topic_apps:"


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


async def wait_for(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def completions(redis: aioredis.Redis, namespace: str) -> dict[str, str]:
    """job id -> outcome of its `completed` event."""
    entries = await redis.xrange(Keys(namespace).outbox)
    events = [
        decode_entry(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in entries
    ]
    return {e.job_id: e.get("outcome") for e in events if e.type == "completed"}


@pytest.mark.slow
async def test_two_workers_with_different_listeners_run_only_their_own_topics(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    a = workers.spawn("a", app=APP + "registry_a", grace=5, env=WORKER_ENV)
    b = workers.spawn("b", app=APP + "registry_b", grace=5, env=WORKER_ENV)
    await a.wait_ready()
    await b.wait_ready()
    async with producer(redis_url, namespace) as s:
        listed = {i.pid: i.topics for i in await s.workers()}
        assert listed == {a.pid: (A_TOPIC,), b.pid: (B_TOPIC,)}, workers.logs()
        shown = subprocess.run(
            [str(HORAE), "workers", "list"],
            env={**workers.env({}), "COLUMNS": "250"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert all(
            f" {w.pid} " in shown.stdout and t in shown.stdout
            for w, t in ((a, A_TOPIC), (b, B_TOPIC))
        )
        ids = {A_TOPIC: [], B_TOPIC: []}  # type: dict[str, list[str]]
        for i in range(JOBS):
            for topic in (A_TOPIC, B_TOPIC):
                ids[topic].append(await s.schedule_in(topic, 0, payload={"i": i}))
        orphans = [await s.schedule_in("nobody.topic", 0) for _ in range(5)]
        everything = ids[A_TOPIC] + ids[B_TOPIC] + orphans

        async def all_done() -> dict[str, str] | None:
            done = await completions(redis, namespace)
            return done if all(j in done for j in everything) else None

        done = await wait_for(all_done, 60, "every job completed")
        ran_by = {
            k.decode(): int(v)
            for k, v in (await redis.hgetall(app_key(namespace, "ran_by"))).items()
        }
        assert {ran_by.get(j) for j in ids[A_TOPIC]} == {a.pid}
        assert {ran_by.get(j) for j in ids[B_TOPIC]} == {b.pid}
        assert all(done[j] == SUCCEEDED for j in ids[A_TOPIC] + ids[B_TOPIC]), (
            "no job was swallowed"
        )
        assert all(done[j] == NO_LISTENER for j in orphans), "a topic nobody serves still completes"
        assert "no listener for topic 'nobody.topic'" in a.log() + b.log()

        # A stops: its topic stays known (issue 33), so B leaves its jobs waiting for a worker of
        # the topic
        a.signal(signal.SIGTERM)
        code, _ = await a.wait_exit(20)
        assert code == 0, workers.logs()
        assert [i.pid for i in await s.workers()] == [b.pid]
        late = [await s.schedule_in(A_TOPIC, 0) for _ in range(20)]
        await asyncio.sleep(2.0)
        done = await completions(redis, namespace)
        assert not [j for j in late if j in done], "a known topic's jobs wait for its worker"
        a2 = workers.spawn("a2", app=APP + "registry_a", grace=5, env=WORKER_ENV)
        await a2.wait_ready()

        async def late_done() -> dict[str, str] | None:
            done = await completions(redis, namespace)
            return done if all(j in done for j in late) else None

        done = await wait_for(late_done, 30, "A's topic completed once A is back")
        assert all(done[j] == SUCCEEDED for j in late)
        assert "no listener for topic 'a.topic'" not in b.log()
