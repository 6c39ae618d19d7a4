"""Listeners run by real `horae worker` processes in the multi-process and
crash tests (`horae worker --app tests.procs.worker_app:registry`).

Each listener records what it did in Redis, in the worker's own namespace
(HORAE_NAMESPACE), under `{ns}:test:*` keys so the test's namespace cleanup
deletes them:

    {ns}:test:runs     hash  job id -> how many times the listener ran it
    {ns}:test:by_pid   hash  worker pid -> how many runs that process did
    {ns}:test:events   list  JSON {job, attempt, pid, what: start|finish}
    {ns}:test:flow     list  JSON {job, topic, key, n, attempt, run, pid, start, end, ok, src}:
                             one per run of a FLOW_TOPICS listener (start/end: wall-clock ms)
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent

registry = ListenerRegistry()

COUNT_TOPIC = "mp.count"
BLOCK_TOPIC = "crash.block"

_client: aioredis.Redis | None = None


_init_lock: asyncio.Lock | None = None


async def _redis_ready() -> aioredis.Redis:
    """The client, initialised once: redis-py's cluster client fails calls made while several
    first calls initialise it at once (its slot map), so the first caller does it alone."""
    global _client, _init_lock
    if _client is None:
        _init_lock = _init_lock or asyncio.Lock()
        async with _init_lock:
            if _client is None:
                from scheduler.store.clients import redis_client
                from scheduler.store.cluster_url import is_cluster_url

                url = os.environ["HORAE_REDIS_URL"]  # a Redis Cluster's seeds in tests/cluster
                if is_cluster_url(url):
                    client = redis_client(url)
                    await client.initialize()  # type: ignore[attr-defined]
                    _client = client  # type: ignore[assignment]
                else:
                    _client = aioredis.Redis.from_url(url)
    return _client


def key(name: str) -> str:
    return "{" + os.environ["HORAE_NAMESPACE"] + "}:test:" + name


async def _record(event: ScheduleArrivedEvent, what: str) -> None:
    entry = {
        "job": event.scheduled_job_id,
        "attempt": event.attempt,
        "pid": os.getpid(),
        "what": what,
    }
    await (await _redis_ready()).rpush(key("events"), json.dumps(entry))


@registry.on_event(COUNT_TOPIC)
async def count_run(event: ScheduleArrivedEvent) -> None:
    """Count this run per job and per process (one MULTI: both or neither)."""
    pipe = (await _redis_ready()).pipeline(transaction=True)
    pipe.hincrby(key("runs"), event.scheduled_job_id, 1)
    pipe.hincrby(key("by_pid"), str(os.getpid()), 1)
    await pipe.execute()


@registry.on_event(BLOCK_TOPIC)
async def block(event: ScheduleArrivedEvent) -> None:
    """Record the start; on the attempts listed in payload["block"] sleep
    payload["sleep"] seconds (the test kills or stops the worker meanwhile);
    record the finish and succeed."""
    await _record(event, "start")
    if event.attempt in event.payload.get("block", ()):
        await asyncio.sleep(float(event.payload.get("sleep", 60)))
    await _record(event, "finish")


FAIL_ONCE_TOPIC = "mix.fail_once"
DOOMED_TOPIC = "mix.doomed"


@registry.on_event(FAIL_ONCE_TOPIC)
async def fail_once(event: ScheduleArrivedEvent) -> None:
    """Fails its first attempt, succeeds on the retry."""
    if event.attempt == 1:
        raise ConnectionError("first attempt fails")


@registry.on_event(DOOMED_TOPIC)
async def doomed(event: ScheduleArrivedEvent) -> None:
    """Always fails."""
    raise ValueError(f"doomed attempt {event.attempt}")


# Flow-control topics (tests/integration/test_flow_multiprocess.py): the test configures
# each one's policy, concurrency or rate limit; one listener records every run.
FLOW_TOPICS = {
    name: f"flow.{name}"
    for name in (
        "singleton",
        "exclusive",
        "short",
        "stately",
        "fifo",
        "dedupe",
        "prio",
        "rate",
        "conc",
    )
}


async def flow_run(event: ScheduleArrivedEvent) -> None:
    """Sleep payload["sleep"] seconds, then record the run (start and end ms, wall clock: one
    host, so the processes' times compare) in {ns}:test:flow; fail when the attempt is listed
    in payload["fail"] or this is one of the job's first payload["fail_runs"] runs (counted in
    {ns}:test:flow_runs: `retry` restarts the attempts, not this count). `src` is the
    scheduler package this process imported."""
    import scheduler

    p = event.payload if isinstance(event.payload, dict) else {}
    start = time.time() * 1000
    await asyncio.sleep(float(p.get("sleep", 0)))
    run = await (await _redis_ready()).hincrby(key("flow_runs"), event.scheduled_job_id, 1)
    fail = event.attempt in p.get("fail", ()) or run <= int(p.get("fail_runs", 0))
    entry = {
        "job": event.scheduled_job_id,
        "topic": event.topic,
        "key": p.get("key"),
        "n": p.get("n"),
        "attempt": event.attempt,
        "run": run,
        "pid": os.getpid(),
        "start": start,
        "end": time.time() * 1000,
        "ok": not fail,
        "src": scheduler.__file__,
    }
    await (await _redis_ready()).rpush(key("flow"), json.dumps(entry))
    if fail:
        raise ValueError(f"flow attempt {event.attempt} fails")


for _topic in FLOW_TOPICS.values():
    registry.on_event(_topic)(flow_run)
