"""A job's backoff cap and jitter on a real Redis: stored only when not the default,
carried through claim, local handoff, lease recovery, cron ticks and get_job, and a
failed attempt rescheduled inside the window they allow (time driven by a FakeClock)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Backoff, JobState, RetryPolicy
from scheduler.core.cron import cron_job_id
from scheduler.core.keys import Keys
from scheduler.core.request import JobRequest
from scheduler.core.timeutil import ms_to_utc, utc_to_ms
from scheduler.core.validation import build_job
from scheduler.store.scripts import SettleCode
from scheduler.testing.clocks import FakeClock
from scheduler.worker.attempt import lost_settlement
from scheduler.worker.ticker import fire_due_crons
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler

CUSTOM = {
    "attempts": 4,
    "backoff": {"type": "exponential", "delay": 20_000, "max_delay": 30_000, "jitter": "full"},
}


async def _fields(redis: aioredis.Redis, namespace: str, job_id: str) -> set[str]:
    return {k.decode() for k in await redis.hkeys(Keys(namespace).job(job_id))}


async def _retrying(s: Any, job_id: str, attempts: int) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state is JobState.RETRYING and info.attempts == attempts


async def _retried_within(
    s: Any, clock: FakeClock, job_id: str, attempts: int, high_ms: int
) -> None:
    """Wait for the job to be retrying after `attempts`, due 1 s..high_ms after the clock."""
    await eventually(
        lambda: _retrying(s, job_id, attempts), what=f"retrying after attempt {attempts}"
    )
    info = await s.get_job(job_id)
    assert info is not None and info.next_attempt_at is not None
    failed_at = clock.now_ms()
    assert ms_to_utc(failed_at + 1_000) <= info.next_attempt_at <= ms_to_utc(failed_at + high_ms)


async def test_the_cap_and_jitter_are_stored_only_when_not_the_default(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        plain = await s.schedule_in("t", "1h")
        explicit = await s.schedule_in(
            "t", "1h", retry=RetryPolicy(5, Backoff("exponential", 30_000, 3_600_000, "none"))
        )
        custom = await s.schedule_in("t", "1h", retry=CUSTOM)
        for job_id in (plain, explicit):
            assert not {"bmax", "bjit", "max", "btype", "bdelay"} & await _fields(
                redis, namespace, job_id
            )
            info = await s.get_job(job_id)
            assert info is not None and (info.backoff_max_delay_ms, info.backoff_jitter) == (
                3_600_000,
                "none",
            )
        assert {"bmax", "bjit"} <= await _fields(redis, namespace, custom)
        assert await redis.hmget(Keys(namespace).job(custom), "bmax", "bjit") == [b"30000", b"full"]
        info = await s.get_job(custom)
        assert info is not None
        assert (
            info.max_attempts,
            info.backoff_type,
            info.backoff_delay_ms,
            info.backoff_max_delay_ms,
            info.backoff_jitter,
        ) == (4, "exponential", 20_000, 30_000, "full")

        only_jitter = await s.schedule_in("t", "1h", retry={"backoff": {"jitter": "equal"}})
        fields = await _fields(redis, namespace, only_jitter)
        assert "bjit" in fields and "bmax" not in fields


async def test_claim_and_local_handoff_carry_the_cap_and_jitter(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        now = s.clock.now_ms()
        custom = await s.schedule_in("t", 0, retry=CUSTOM)
        plain = await s.schedule_in("t", 0)
        claimed, _, _ = await s.store.claim(now, 10, 30_000, "w")
        by_id = {c.id: c for c in claimed}
        assert (by_id[custom].backoff_max_delay_ms, by_id[custom].backoff_jitter) == (
            30_000,
            "full",
        )
        assert (by_id[plain].backoff_max_delay_ms, by_id[plain].backoff_jitter) == (
            3_600_000,
            "none",
        )

        job = build_job(
            JobRequest(topic="t", run_at_ms=now, retry=CUSTOM, job_id="handed"),
            default_retry=s.default_retry,
            default_timeout_ms=60_000,
            now_ms=now,
        )
        created, leased = await s.store.enqueue_for(job, now, "w", 30_000)
        assert created and leased is not None
        assert (leased.backoff_max_delay_ms, leased.backoff_jitter) == (30_000, "full")


async def test_a_failed_attempt_is_rescheduled_within_the_capped_jittered_window(
    redis_url: str, namespace: str
) -> None:
    clock = FakeClock(START_MS)
    reg, seen = ListenerRegistry(), []

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        seen.append(event.attempt)
        raise ConnectionError("upstream 503")

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("flaky", "1s", retry=CUSTOM)
        async with s.worker():
            clock.advance(1)
            # retry 1: 20 s, full jitter: uniform(0, 20 s), at least 1 s
            await _retried_within(s, clock, job_id, 1, 20_000)
            clock.advance(20)
            # retry 2: 40 s capped at 30 s, then full jitter
            await _retried_within(s, clock, job_id, 2, 30_000)
        assert seen == [1, 2]


async def test_a_lost_worker_is_retried_under_the_jobs_cap(redis_url: str, namespace: str) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        now = s.clock.now_ms()
        retry = {
            "attempts": 5,
            "backoff": {
                "type": "exponential",
                "delay": 20_000,
                "max_delay": 25_000,
                "jitter": "equal",
            },
        }
        job_id = await s.schedule_in("t", 0, retry=retry)
        await s.store.claim(now, 10, 1_000, "w")  # attempt 1
        await s.store.fail(
            [lost_settlement(await _lease(s, now + 2_000, job_id), now + 2_000)], now + 2_000
        )
        await s.store.claim(now + 30_000, 10, 1_000, "w")  # attempt 2
        later = now + 32_000
        [row] = [r for r in await s.store.expired_leases(later) if r["id"] == job_id]
        assert (row["bmax"], row["bjit"], row["bdelay"]) == ("25000", "equal", "20000")
        codes = await s.store.fail([lost_settlement(row, later, lambda: 0.0)], later)
        assert codes == [SettleCode.RETRY_SCHEDULED]
        info = await s.get_job(job_id)
        # retry 2: 40 s capped at 25 s, equal jitter with a draw of 0: 12.5 s
        assert info is not None and info.next_attempt_at == ms_to_utc(later + 12_500)


async def _lease(s: Any, now: int, job_id: str) -> dict[str, str]:
    [row] = [r for r in await s.store.expired_leases(now) if r["id"] == job_id]
    return row


async def _fire_next_tick(s: Any, name: str) -> str:
    """Move the clock to the schedule's next run, fire the due ticks; the tick job's id."""
    info = await s.get_cron(name)
    assert info is not None and info.next_run_at is not None
    tick_ms = utc_to_ms(info.next_run_at)
    s.clock.set_ms(tick_ms)
    assert await fire_due_crons(s.store, s.clock, s.settings.cron, s.tracer) >= 1
    return cron_job_id(name, tick_ms)


async def test_cron_ticks_carry_the_schedules_cap_and_jitter(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        retry = RetryPolicy(3, Backoff("exponential", 1000, max_delay_ms=5000, jitter="equal"))
        await s.schedule_cron("capped", "*/5 * * * *", topic="t", retry=retry)
        await s.schedule_cron("plain", "*/5 * * * *", topic="t")
        capped, plain = await _fire_next_tick(s, "capped"), cron_job_id("plain", s.clock.now_ms())

        assert await redis.hmget(Keys(namespace).job(capped), "bmax", "bjit") == [b"5000", b"equal"]
        info = await s.get_job(capped)
        assert info is not None and info.cron == "capped"
        assert (
            info.max_attempts,
            info.backoff_type,
            info.backoff_delay_ms,
            info.backoff_max_delay_ms,
            info.backoff_jitter,
        ) == (3, "exponential", 1_000, 5_000, "equal")

        assert not {"bmax", "bjit"} & await _fields(redis, namespace, plain)
        info = await s.get_job(plain)
        assert info is not None and (info.backoff_max_delay_ms, info.backoff_jitter) == (
            3_600_000,
            "none",
        )


async def test_cron_ticks_take_the_configured_cap_and_jitter(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    s = make_scheduler(
        redis_url, namespace, ListenerRegistry(), retry={"max_delay_ms": 60_000, "jitter": "full"}
    )
    async with s:
        await s.schedule_cron("configured", "*/5 * * * *", topic="t")
        job_id = await _fire_next_tick(s, "configured")
        assert await redis.hmget(Keys(namespace).job(job_id), "bmax", "bjit") == [b"60000", b"full"]
        info = await s.get_job(job_id)
        assert info is not None and (info.backoff_max_delay_ms, info.backoff_jitter) == (
            60_000,
            "full",
        )


async def test_a_schedule_stored_before_the_cap_and_jitter_fires_with_the_defaults(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        await s.schedule_cron(
            "legacy",
            "*/5 * * * *",
            topic="t",
            retry={"attempts": 3, "backoff": {"max_delay": 60_000, "jitter": "full"}},
        )
        key = Keys(namespace).cron("legacy")
        assert await redis.hdel(key, "bmax", "bjit") == 2, "the schedule stores both"
        job_id = await _fire_next_tick(s, "legacy")
        assert not {"bmax", "bjit"} & await _fields(redis, namespace, job_id)
        info = await s.get_job(job_id)
        assert info is not None and info.max_attempts == 3
        assert (info.backoff_max_delay_ms, info.backoff_jitter) == (3_600_000, "none")
        cron = await s.get_cron("legacy")
        assert cron is not None and cron.next_run_at is not None and cron.last_run_at is not None
