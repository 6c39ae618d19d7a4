"""Helpers for engine tests: a Scheduler on the test's namespace with a FakeClock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler import JobState, Scheduler
from scheduler.core.keys import Keys
from scheduler.core.outbox import decode_entry
from scheduler.testing.clocks import FakeClock

START_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def make_scheduler(
    redis_url: str,
    namespace: str,
    registry: ListenerRegistry,
    clock: Any = None,
    **sections: dict[str, Any],
) -> Scheduler:
    """A Scheduler isolated from the environment (no config file, no env vars)."""
    base = load_settings(path=None, env={}, redis_url=redis_url, namespace=namespace)
    updates = {
        name: getattr(base, name).model_copy(update=values) for name, values in sections.items()
    }
    # The outbox is written (tests read it); no relay, so no PostgreSQL is needed.
    settings = base.model_copy(
        update={"audit": base.audit.model_copy(update={"relay": False}), **updates}
    )
    return Scheduler(settings=settings, listeners=registry, clock=clock or FakeClock(START_MS))


def audited_scheduler(
    redis_url: str, database_url: str, namespace: str, registry: ListenerRegistry, clock: Any
) -> Scheduler:
    """A Scheduler with the audit on (its relay writes to `database_url`), isolated from the
    environment."""
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    return Scheduler(settings=settings, listeners=registry, clock=clock)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition"
) -> None:
    """Poll `check` until true; fail with `what` after `timeout` real seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)


async def outbox_events(redis: aioredis.Redis, namespace: str, job_id: str) -> list[Any]:
    """The decoded outbox events of one job, in stream order."""
    entries = []
    for stream in await outboxes(redis, namespace):
        entries += await redis.xrange(stream)
    events = [
        decode_entry(i.decode(), {k.decode(): v.decode() for k, v in f.items()}) for i, f in entries
    ]
    return [e for e in events if e.job_id == job_id]


async def outboxes(redis: aioredis.Redis, namespace: str) -> list[str]:
    """The namespace's outbox streams: its own, or one per partition (tests/cluster)."""
    stored = await redis.hget(Keys(namespace).meta, "partitions")
    if stored is None or int(stored) <= 1:
        return [Keys(namespace).outbox]
    return [Keys(namespace, p).outbox for p in range(int(stored))]


async def job_keys(redis: aioredis.Redis, namespace: str, job_id: str) -> Keys:
    """The Keys of the partition holding a job (the namespace's own when unpartitioned)."""
    stored = await redis.hget(Keys(namespace).meta, "partitions")
    if stored is None or int(stored) <= 1:
        return Keys(namespace)
    for p in range(int(stored)):
        if await redis.exists(Keys(namespace, p).job(job_id)):
            return Keys(namespace, p)
    raise AssertionError(f"job {job_id} is on no partition of {namespace}")


async def ns_keys(redis: aioredis.Redis, namespace: str) -> list[bytes]:
    """Every key of the namespace (a test's own; SCAN is fine at test sizes)."""
    return [k async for k in redis.scan_iter(match="{" + namespace + "}:*")]


async def is_true(value: bool) -> bool:
    """An awaitable of value, for eventually(lambda: is_true(...))."""
    return value


async def in_state(s: Any, job_id: str, state: JobState, attempts: int | None = None) -> bool:
    """The job is in `state` (and has made `attempts` attempts, when given)."""
    info = await s.get_job(job_id)
    return info is not None and info.state is state and attempts in (None, info.attempts)
