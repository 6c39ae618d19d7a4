"""Settlements are fenced by the lease token: a worker that stalled past its lease
(SIGSTOP, a long GC pause, a partition) and wakes up after another worker recovered
the job must not settle an attempt it no longer holds. complete.lua and fail.lua on
real Redis, called with the stale token, refuse (LEASE_LOST) and change nothing:
not the job, not the counts, not the outbox. The chaos run (tests/chaos) does the
same with real stopped processes."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from listeners import ListenerRegistry
from scheduler.core.job import Settlement
from scheduler.core.keys import Keys
from scheduler.store.scripts import ScriptCode, SettleCode
from scheduler.testing.clocks import FakeClock
from scheduler.worker.attempt import lost_settlement
from tests.integration.engine_fixtures import START_MS, make_scheduler

LEASE_MS = 2_000
RETRY = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}
ERROR = {"type": "ValueError", "message": "late"}


async def snapshot(redis: aioredis.Redis, namespace: str, job_id: str) -> tuple[Any, ...]:
    """Everything a settlement writes: the job hash, the state sets, the counts and the outbox."""
    k = Keys(namespace)
    return (
        await redis.hgetall(k.job(job_id)),
        await redis.zrange(k.active, 0, -1, withscores=True),
        await redis.zrange(k.due, 0, -1, withscores=True),
        await redis.zrange(k.completed, 0, -1),
        await redis.zrange(k.failed, 0, -1),
        await redis.hgetall(k.counts),
        await redis.xlen(k.outbox),
    )


async def recover(s: Any, now_ms: int) -> None:
    """What a live worker's housekeeping does with an expired lease: a worker_lost failure."""
    rows = await s.store.expired_leases(now_ms)
    assert len(rows) == 1
    assert await s.store.fail([lost_settlement(rows[0], now_ms)], now_ms) == [
        SettleCode.RETRY_SCHEDULED
    ]


async def test_a_stalled_worker_cannot_settle_a_job_recovered_and_leased_to_another(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        job_id = await s.schedule_in("t", 0, retry=RETRY)
        [stalled], _, _ = await s.store.claim(clock.now_ms(), 10, LEASE_MS, "w-stalled")
        clock.advance(LEASE_MS / 1000 + 0.001)  # the stalled worker's lease runs out
        await recover(s, clock.now_ms())
        clock.advance(1.0)  # the retry's backoff
        [live], _, _ = await s.store.claim(clock.now_ms(), 10, LEASE_MS, "w-live")
        assert (live.id, live.attempt) == (job_id, 2) and live.token != stalled.token

        before = await snapshot(redis, namespace, job_id)
        # the stalled worker wakes up and reports its attempt 1, as a success and as a failure
        now = clock.now_ms()
        assert await s.store.complete(
            [Settlement(job_id, stalled.token, "succeeded")], now, 100
        ) == [ScriptCode.LEASE_LOST]
        assert await s.store.fail(
            [Settlement(job_id, stalled.token, "failed", ERROR, now + 1_000)], now
        ) == [ScriptCode.LEASE_LOST]
        assert await s.store.fail(
            [Settlement(job_id, stalled.token, "failed", ERROR, -1)], now
        ) == [ScriptCode.LEASE_LOST]
        assert await snapshot(redis, namespace, job_id) == before, (
            "a stale settlement wrote something"
        )

        # the holder settles as usual, once; a repeat of its own write (a lost reply) changes
        # nothing
        done = [Settlement(job_id, live.token, "succeeded")]
        assert await s.store.complete(done, clock.now_ms(), 100) == [SettleCode.COMPLETED]
        after = await snapshot(redis, namespace, job_id)
        assert await s.store.complete(done, clock.now_ms(), 100) == [ScriptCode.LEASE_LOST]
        assert await snapshot(redis, namespace, job_id) == after
        info = await s.get_job(job_id)
        assert info is not None and info.state.value == "completed" and info.attempts == 2


async def test_a_stalled_worker_cannot_settle_a_job_recovered_and_waiting_for_its_retry(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        job_id = await s.schedule_in("t", 0, retry=RETRY)
        [stalled], _, _ = await s.store.claim(clock.now_ms(), 10, LEASE_MS, "w-stalled")
        clock.advance(LEASE_MS / 1000 + 0.001)
        await recover(s, clock.now_ms())

        before = await snapshot(redis, namespace, job_id)
        now = clock.now_ms()
        assert await s.store.complete(
            [Settlement(job_id, stalled.token, "succeeded")], now, 100
        ) == [ScriptCode.LEASE_LOST]
        assert await s.store.fail(
            [Settlement(job_id, stalled.token, "failed", ERROR, -1)], now
        ) == [ScriptCode.LEASE_LOST]
        assert await snapshot(redis, namespace, job_id) == before
        info = await s.get_job(job_id)
        assert info is not None and info.state.value == "retrying" and info.attempts == 1
