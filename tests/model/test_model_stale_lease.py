"""The lease-token case the lifecycle state machine found, kept as a fixed example: a job's
attempt counter starts again after an operator's retry, a graceful release or a delete, so
its tokens must still differ, or the attempt that lost its lease settles its successor."""

from __future__ import annotations

import redis.asyncio as aioredis

from listeners.dispatch import DispatchResult
from scheduler.core.job import NewJob
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.validation import build_job
from scheduler.store.redis import RedisStore
from scheduler.worker.attempt import settlement

NOW = 1_800_000_000_000


def job(job_id: str) -> NewJob:
    return build_job(
        JobRequest(topic="t", run_at_ms=NOW, retry={"attempts": 1}, job_id=job_id),
        default_retry=RetryPolicy(),
        default_timeout_ms=60_000,
        now_ms=NOW,
    )


async def test_a_lease_lost_before_an_operators_retry_settles_nothing(
    redis: aioredis.Redis, namespace: str
) -> None:
    store = RedisStore(redis, namespace)
    try:
        await store.enqueue(job("j"), NOW)
        (first,), _, _ = await store.claim(NOW, 1, 10_000, "w")
        assert await store.cancel("j", NOW) == 2  # cancelled while running
        assert await store.complete([settlement(first, DispatchResult(1), NOW)], NOW, 100) == [2]
        assert await store.retry_job("j", NOW, "op") == 1
        (second,), _, _ = await store.claim(NOW, 1, 10_000, "w")
        assert (second.attempt, first.attempt) == (1, 1) and second.token != first.token
        # the first attempt's late result and heartbeat: refused, the second attempt keeps its lease
        assert await store.complete([settlement(first, DispatchResult(1), NOW)], NOW, 100) == [-1]
        assert await store.extend_leases([(first.id, first.token)], NOW, 10_000) == 1
        assert await store.release([(first.id, first.token)], NOW) == 0
        assert await store.complete([settlement(second, DispatchResult(1), NOW)], NOW, 100) == [1]
    finally:
        await store.aclose()


async def test_a_released_attempt_and_its_successor_have_different_tokens(
    redis: aioredis.Redis, namespace: str
) -> None:
    store = RedisStore(redis, namespace)
    try:
        await store.enqueue(job("j"), NOW)
        (first,), _, _ = await store.claim(NOW, 1, 10_000, "w")
        assert await store.release([(first.id, first.token)], NOW) == 1  # attempt 1 given back
        (second,), _, _ = await store.claim(NOW, 1, 10_000, "w")
        assert second.attempt == first.attempt == 1 and second.token != first.token
        assert await store.complete([settlement(first, DispatchResult(1), NOW)], NOW, 100) == [-1]
    finally:
        await store.aclose()
