"""Topics are never forgotten by accident (issue 33): a topic a worker with listeners for it served
stays known until `horae topics forget` or [worker] topic_memory; its jobs wait for a worker
(visible as unserved) instead of completing as no_listener when its only worker restarts.
The claim rule against real Redis, then real `horae worker` processes (SIGTERM mid-job)."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.errors import InvalidTopic
from scheduler.core.keys import Keys
from scheduler.core.outbox import NO_LISTENER, SUCCEEDED
from scheduler.ops.servers import free_port
from scheduler.store.redis import RedisStore
from scheduler.worker.advertise import entry_json
from tests.integration.engine_fixtures import START_MS, make_scheduler
from tests.integration.test_worker_topics import add_jobs, completions, wait_for
from tests.procs import HORAE, WorkerProcesses, app_key, producer
from tests.procs.topic_apps import A_TOPIC, SLOW_TOPIC

NOW = START_MS
TTL = 10_000
WEEK = 7 * 86_400_000


async def serve(
    store: RedisStore, worker_id: str, topics: list[str], now: int = NOW, app: str = "app"
) -> None:
    """A heartbeat of a worker with listeners for `topics`."""
    await store.advertise_worker(
        worker_id,
        entry_json(topics, 10, 0, False, 1, now, TTL, host="h"),
        topics,
        now,
        TTL,
        [(t, app) for t in topics],
    )


async def done(s: Any, job_id: str) -> Any:
    info = await s.get_job(job_id)
    return info if info is not None and info.state == "completed" else None


# ------------------------------------------------------------ the claim rule, real Redis
async def test_a_known_topic_waits_for_its_worker_until_the_memory_passes(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        await serve(store, "S", ["slow"], app="nuslow")
        assert await store.forget_worker(
            "S", NOW + 1
        )  # its only worker stops: no live worker serves it
        slow = await add_jobs(store, "slow", 2, NOW, "s")
        never = await add_jobs(store, "never", 1, NOW, "n")
        later = NOW + TTL  # every served-until mark has passed
        for unserved, topics in (
            (True, ["other"]),
            (False, []),
        ):  # default worker, --all-topics worker
            jobs, next_due, _ = await store.claim(
                later, 10, 30_000, "B", topics, unserved, ["other"], WEEK
            )
            assert [j.id for j in jobs] == never, (
                "a topic never served still completes as no_listener"
            )
            assert next_due == NOW + WEEK, "re-check when the memory of the waiting topic ends"
            await store.release([(j.id, j.token) for j in jobs], later)
        jobs, _, _ = await store.claim(later, 10, 30_000, "X", ["slow"], False, [], WEEK)
        assert jobs == [], "explicit topics without a listener: a known topic still waits"
        jobs, _, _ = await store.claim(later, 10, 30_000, "S2", ["slow"], True, ["slow"], WEEK)
        assert sorted(j.id for j in jobs) == sorted(never + slow), (
            "a worker with listeners for it takes them"
        )
        await store.release([(j.id, j.token) for j in jobs], later)
        # a week after its last heartbeat the topic is forgotten, even before housekeeping prunes it
        jobs, _, _ = await store.claim(
            NOW + WEEK, 10, 30_000, "B", ["other"], True, ["other"], WEEK
        )
        assert sorted(j.id for j in jobs) == sorted(slow + never)
        assert await store.forget_topics([], NOW + WEEK, WEEK) == 1, "housekeeping prunes it"
        assert await store.forget_topics([], NOW + WEEK, WEEK) == 0


async def test_the_memory_is_kept_by_the_last_heartbeat_and_reported_with_waiting_jobs(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        await serve(store, "S", ["slow"], now=NOW - 5_000, app="nuslow")
        await serve(
            store, "S", ["slow"], now=NOW - 9_000, app="late"
        )  # a clock behind: never moves it back
        await serve(store, "A", ["app"], now=NOW, app="nuapp")
        assert (
            await redis.hget(Keys(namespace).known_topics, "slow")
            == f"{NOW - 5_000}|S|nuslow".encode()
        )
        assert await store.forget_worker("S", NOW)
        await add_jobs(store, "slow", 3, NOW - 2_000, "s")
        await add_jobs(store, "slow", 1, NOW + 60_000, "f")  # not due yet: not waiting
        known = {t.topic: t for t in await s.known_topics()}
        assert set(known) == {"slow", "app"}
        assert (
            known["slow"].served,
            known["slow"].waiting,
            known["slow"].app,
            known["slow"].worker,
        ) == (False, 3, "nuslow", "S")
        assert (
            known["slow"].waiting_since is not None
            and known["slow"].waiting_since.timestamp() * 1000 == NOW - 2_000
        )
        assert (known["app"].served, known["app"].waiting, known["app"].waiting_since) == (
            True,
            0,
            None,
        )
        assert await s.forget_topic("slow") and not await s.forget_topic("slow")
        assert [t.topic for t in await s.known_topics()] == ["app"]
        with pytest.raises(InvalidTopic, match="topic"):
            await s.forget_topic("")


async def test_an_in_process_worker_leaves_a_known_topic_and_takes_it_after_the_memory(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The controllable clock (FakeClock): the default memory of 7 days, passed in one step."""
    slow, other = ListenerRegistry(), ListenerRegistry()
    ran: list[str] = []

    @slow.on_event("slow")
    async def run_slow(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    @other.on_event("other")
    async def run_other(event: ScheduleArrivedEvent) -> None: ...

    async with make_scheduler(redis_url, namespace, slow) as s:
        async with s.worker():
            pass  # served "slow", then stopped
        clock = s.clock
    async with make_scheduler(redis_url, namespace, other, clock=clock) as s:
        assert s.settings.worker.topic_memory == "7d"
        job = await s.schedule_in("slow", 0)
        async with s.worker() as w:
            await asyncio.sleep(0.5)
            assert (await s.get_job(job)).state == "scheduled", (
                "a known topic's job waits for its worker"
            )
            assert w.next_due_ms is not None and w.next_due_ms <= clock.now_ms() + 7 * 86_400_000
            clock.advance(7 * 86_400)  # wakes the claim loop sleeping on the clock
            info = await wait_for(
                lambda: done(s, job), 10, "the job completed once the memory passed"
            )
        assert ran == [] and f"no listener for topic 'slow'; job {info.id} completed" in caplog.text


# ------------------------------------------------------------ real processes
WORKER_ENV = {"HORAE_RETENTION__COMPLETED_COUNT": "10000", "HORAE_WORKER__REGISTRY_TTL_MS": "1500"}
APP = "tests.procs.topic_apps:"


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


def horae(workers: WorkerProcesses, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(HORAE), *args],
        env={**workers.env({}), "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def lines(log: str, *needles: str) -> list[str]:
    return [line for line in log.splitlines() if any(n in line for n in needles)]


async def outcome(redis: aioredis.Redis, namespace: str, job_id: str) -> str | None:
    return (await completions(redis, namespace)).get(job_id)


@pytest.mark.slow
async def test_rolling_deploy_of_a_topics_only_worker_leaves_its_job_waiting_until_it_is_back(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    port = free_port()
    a = workers.spawn(
        "nuapp",
        app=APP + "registry_a",
        grace=5,
        extra_args=("--metrics-port", str(port)),
        env={**WORKER_ENV, "HORAE_TELEMETRY__EXPORTER": "prometheus"},
    )
    b = workers.spawn("nuslow", app=APP + "registry_slow", grace=0.5, env=WORKER_ENV)
    await a.wait_ready()
    await b.wait_ready()
    async with producer(redis_url, namespace) as s:
        job = await s.schedule_in(SLOW_TOPIC, 0, payload={"sleep": 10})
        started = app_key(namespace, "started")
        await wait_for(lambda: redis.hexists(started, job), 20, "the slow job started on B")
        b.signal(signal.SIGTERM)  # B's rolling restart, during the 10 s job
        code, _ = await b.wait_exit(20)
        assert code == 0, workers.logs()
        assert "released 1 unfinished attempts" in b.log()

        async def reported() -> Any:
            return [t for t in await s.known_topics() if t.topic == SLOW_TOPIC and t.waiting == 1]

        (waiting,) = await wait_for(reported, 10, "the slow job reported waiting for a worker")
        assert (
            not waiting.served
            and waiting.app == "tests.procs.topic_apps"
            and waiting.waiting_since is not None
        )
        await wait_for(
            lambda: asyncio.sleep(0, "topic_unserved" in a.log() or "wait for a worker" in a.log()),
            15,
            "A's WARN about the unserved topic",
        )
        assert await outcome(redis, namespace, job) is None, (
            "the job of a known topic was not completed"
        )
        assert (await s.get_job(job)).state == "scheduled"
        assert "no listener for topic 'probe.slow'" not in a.log(), workers.logs()
        scraped = await asyncio.to_thread(
            lambda: (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                .read()
                .decode()
            )
        )
        assert re.search(r'horae_jobs_unserved\{[^}]*topic="probe\.slow"[^}]*\} 1\.0', scraped), (
            scraped
        )
        listed, stats = horae(workers, "topics", "list"), horae(workers, "jobs", "stats")
        assert listed.returncode == 0 and stats.returncode == 0, listed.stderr + stats.stderr
        # (the topic is listed twice: among every topic, unconfigured, then among the known ones,
        # unserved)
        row = [line for line in listed.stdout.splitlines() if SLOW_TOPIC in line][-1]
        assert " no " in row and " 1 " in row, listed.stdout
        assert (
            f"unserved: 1 due jobs of topic {SLOW_TOPIC} wait for a worker since" in stats.stdout
        ), stats.stdout

        b2 = workers.spawn(
            "nuslow-2", app=APP + "registry_slow", grace=5, env=WORKER_ENV
        )  # the new deployment
        await b2.wait_ready()
        await wait_for(
            lambda: outcome(redis, namespace, job), 30, "the job ran on the restarted worker"
        )
        assert await outcome(redis, namespace, job) == SUCCEEDED
        assert int(await redis.hget(app_key(namespace, "ran_by"), job)) == b2.pid
        assert [t.waiting for t in await s.known_topics() if t.topic == SLOW_TOPIC] == [0]

        async def gauge_back_to_0() -> bool:
            text = await asyncio.to_thread(
                lambda: (
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)
                    .read()
                    .decode()
                )
            )
            return (
                re.search(r'horae_jobs_unserved\{[^}]*topic="probe\.slow"[^}]*\} 0\.0', text)
                is not None
            )

        await wait_for(
            gauge_back_to_0, 15, "horae_jobs_unserved back to 0 once the topic is served"
        )
    print("\n--- rolling deploy, worker nuslow (SIGTERM mid-job):")
    print("\n".join(lines(b.log(), "released", "stopped", "running")))
    print("--- worker nuapp:")
    print("\n".join(lines(a.log(), "no listener", "wait for a worker", "running")))
    print("--- horae topics list / jobs stats while it waited:")
    print(row)
    print("\n".join(lines(stats.stdout, "unserved")))
    print("--- worker nuslow-2:")
    print("\n".join(lines(b2.log(), "running", "no listener")))


@pytest.mark.slow
async def test_topics_forget_lets_the_no_listener_completion_apply_again(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    a = workers.spawn("nuapp", app=APP + "registry_a", grace=5, env=WORKER_ENV)
    b = workers.spawn("nuslow", app=APP + "registry_slow", grace=5, env=WORKER_ENV)
    await a.wait_ready()
    await b.wait_ready()
    b.signal(signal.SIGTERM)
    assert (await b.wait_exit(20))[0] == 0, workers.logs()
    async with producer(redis_url, namespace) as s:
        job = await s.schedule_in(SLOW_TOPIC, 0)
        await asyncio.sleep(2.0)  # A claims many times meanwhile
        assert await outcome(redis, namespace, job) is None, workers.logs()
        gone = horae(workers, "topics", "forget", SLOW_TOPIC)
        assert gone.returncode == 0 and f"forgot topic {SLOW_TOPIC}" in gone.stdout, gone.stderr
        await wait_for(
            lambda: outcome(redis, namespace, job), 15, "the forgotten topic's job completed"
        )
        assert await outcome(redis, namespace, job) == NO_LISTENER
        assert "no listener for topic 'probe.slow'" in a.log()
        again = horae(workers, "topics", "forget", SLOW_TOPIC)
        assert again.returncode == 1 and "not known" in again.stderr, again.stderr
        bad = horae(workers, "topics", "forget", " ")
        assert bad.returncode == 2 and "topic must be a non-empty string" in bad.stderr, bad.stderr


@pytest.mark.slow
async def test_a_known_topic_is_forgotten_when_the_configured_memory_passes(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    env = {**WORKER_ENV, "HORAE_WORKER__TOPIC_MEMORY": "4s"}
    a = workers.spawn("nuapp", app=APP + "registry_a", grace=5, env=env)
    b = workers.spawn("nuslow", app=APP + "registry_slow", grace=5, env=env)
    await a.wait_ready()
    await b.wait_ready()
    b.signal(signal.SIGTERM)
    assert (await b.wait_exit(20))[0] == 0, workers.logs()
    stopped = time.monotonic()
    async with producer(redis_url, namespace) as s:
        job = await s.schedule_in(SLOW_TOPIC, 0)
        await wait_for(
            lambda: outcome(redis, namespace, job), 20, "the job completed once the memory passed"
        )
        waited = time.monotonic() - stopped
    assert await outcome(redis, namespace, job) == NO_LISTENER
    assert waited >= 2.0, (
        f"completed {waited:.1f} s after its worker stopped: before the 4 s memory passed"
    )


@pytest.mark.slow
async def test_a_topic_never_served_still_completes_as_no_listener(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    a = workers.spawn("nuapp", app=APP + "registry_a", grace=5, env=WORKER_ENV)
    await a.wait_ready()
    async with producer(redis_url, namespace) as s:
        jobs = [await s.schedule_in("nobody.topic", 0) for _ in range(3)]
        mine = await s.schedule_in(A_TOPIC, 0)
        for job in jobs + [mine]:
            await wait_for(
                lambda job=job: outcome(redis, namespace, job), 15, "every job completed"
            )
        assert [await outcome(redis, namespace, j) for j in jobs] == [NO_LISTENER] * 3
        assert [(await s.get_job(j)).outcome for j in jobs] == [NO_LISTENER] * 3, (
            "jobs show says why"
        )
        assert await outcome(redis, namespace, mine) == SUCCEEDED
        assert [t.topic for t in await s.known_topics()] == [A_TOPIC], "never served: not known"
    assert "no listener for topic 'nobody.topic'" in a.log()
