"""Scheduler.wait and wait_many on a real Redis, time driven by a FakeClock: they return on
completion, failure for good and cancellation, at once for a finished job, raise on a timeout
or an unknown or deleted job, are woken by the engine (no polling: a frozen clock, and no
command while blocked), share one subscription, and work with the audit off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidDelay, InvalidJobId, JobNotFound, JobState, Scheduler, WaitTimeout
from scheduler.core.keys import Keys
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, in_state, make_scheduler

FIXED_1S = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1_000}}


def gated(reg: ListenerRegistry, topic: str, gate: asyncio.Event, fail: bool = False) -> list[int]:
    """A listener of `topic` that runs until `gate` is set (then fails when `fail`); the attempts it
    saw."""
    seen: list[int] = []

    @reg.on_event(topic)
    async def listener(event: ScheduleArrivedEvent) -> None:
        seen.append(event.attempt)
        await gate.wait()
        if fail:
            raise RuntimeError(f"attempt {event.attempt} failed")

    return seen


@contextmanager
def counted(s: Scheduler) -> Iterator[list[str]]:
    """Every command the scheduler's store sends (its one connection), as names, while the block
    runs."""
    wire, sent = s.store.wire, []
    call, call_many = wire.call, wire.call_many

    async def counting_call(*args: Any, raw: bool = False) -> Any:
        sent.append(str(args[0]))
        return await call(*args, raw=raw)

    async def counting_call_many(commands: Any, raw: Any = ()) -> Any:
        sent.extend(str(c[0]) for c in commands)
        return await call_many(commands, raw)

    wire.call, wire.call_many = counting_call, counting_call_many  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        del wire.call, wire.call_many


async def watched(redis: aioredis.Redis, namespace: str, job_id: str) -> bool:
    """The wait registered on the job (watch_job.lua flagged it)."""
    return await redis.hget(Keys(namespace).job(job_id), "w") == b"1"


async def test_wait_is_woken_by_the_completion_not_by_polling(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock, gate = ListenerRegistry(), FakeClock(START_MS), asyncio.Event()
    seen = gated(reg, "report.render", gate)
    # The waiter has a Scheduler (and so a connection) of its own: every command it sends is
    # counted.
    async with (
        make_scheduler(redis_url, namespace, reg, clock) as s,
        make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as waiter,
    ):
        job_id = await s.schedule_in("report.render", 0)
        async with s.worker():
            await eventually(
                lambda: in_state(s, job_id, JobState.RUNNING), what="the attempt running"
            )
            with counted(waiter) as sent:
                task = asyncio.create_task(waiter.wait(job_id))
                await eventually(
                    lambda: watched(redis, namespace, job_id), what="the wait registered"
                )
                # Real time passes while the clock stays frozen: a poller would send commands now.
                await asyncio.sleep(0.3)
                assert sent == ["EVALSHA"] and not task.done()
                opened = time.monotonic()
                gate.set()
                info = await asyncio.wait_for(task, timeout=5)
                woke_after = time.monotonic() - opened
            assert (
                info.state is JobState.COMPLETED
                and info.id == job_id
                and info.attempts == 1 == len(seen)
            )
            assert sent == [
                "EVALSHA",
                "HGETALL",
                "HMGET",
                "GET",
                "LRANGE",
            ]  # watch, then one read of the job
            assert (
                woke_after < 2.0
            )  # the settlement's publish, a round trip away (generous on a busy machine)
            assert clock.now_ms() == START_MS


async def test_wait_returns_only_when_the_job_fails_for_good(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock, gate = ListenerRegistry(), FakeClock(START_MS), asyncio.Event()
    gate.set()
    seen = gated(reg, "billing.charge", gate, fail=True)
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("billing.charge", "1s", retry=FIXED_1S)
        task = asyncio.create_task(s.wait(job_id, timeout=30))
        await eventually(lambda: watched(redis, namespace, job_id), what="the wait registered")
        async with s.worker():
            clock.advance(1)
            await eventually(
                lambda: in_state(s, job_id, JobState.RETRYING, 1), what="attempt 1 failed"
            )
            assert not task.done()  # a retry is not an end
            clock.advance(1)
            info = await asyncio.wait_for(task, timeout=10)
    assert info.state is JobState.FAILED and info.attempts == 2 == len(seen)
    assert info.last_error is not None and info.last_error["message"] == "attempt 2 failed"


async def test_wait_returns_on_cancel_waiting_or_running(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, gate = ListenerRegistry(), asyncio.Event()
    gated(reg, "slow", gate)
    async with make_scheduler(redis_url, namespace, reg) as s:
        later = await s.schedule_in("slow", "1h")
        task = asyncio.create_task(s.wait(later))
        await eventually(lambda: watched(redis, namespace, later), what="the wait registered")
        assert await s.cancel(later)
        info = await asyncio.wait_for(task, timeout=5)
        assert info.state is JobState.CANCELLED and info.attempts == 0

        running = await s.schedule_in("slow", 0)
        async with s.worker():
            await eventually(
                lambda: in_state(s, running, JobState.RUNNING), what="the attempt running"
            )
            task = asyncio.create_task(s.wait(running))
            await eventually(lambda: watched(redis, namespace, running), what="the wait registered")
            assert await s.cancel(running)
            info = await asyncio.wait_for(
                task, timeout=5
            )  # cancelled: terminal, its attempt still in flight
            assert info.state is JobState.CANCELLED
            gate.set()


async def test_a_finished_job_returns_at_once_and_bad_calls_raise(
    redis_url: str, namespace: str
) -> None:
    reg = ListenerRegistry()
    reg.on_event("quick")(lambda event: None)
    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("quick", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
        info = await s.wait(job_id, timeout=0)  # already terminal: no timeout can pass first
        assert info.state is JobState.COMPLETED and info == await s.get_job(job_id)

        with pytest.raises(JobNotFound, match="no job 'nope'") as unknown:
            await s.wait("nope")
        assert unknown.value.field == "job_id" and isinstance(unknown.value, LookupError)
        with pytest.raises(InvalidJobId, match="job_id"):
            await s.wait("")
        with pytest.raises(InvalidJobId, match="job_ids must be a list"):
            await s.wait_many(job_id)
        with pytest.raises(InvalidDelay, match="timeout must be a finite duration >= 0; got -1"):
            await s.wait(job_id, timeout=-1)

        later = await s.schedule_in("quick", "1h")
        started = time.monotonic()
        with pytest.raises(
            WaitTimeout, match=f"job '{later}' not finished after 0.2 s"
        ) as timed_out:
            await s.wait(later, timeout=0.2)
        assert isinstance(timed_out.value, TimeoutError) and time.monotonic() - started >= 0.2
        info = await s.get_job(later)
        assert info is not None and info.state is JobState.SCHEDULED  # waiting changed nothing


async def test_a_deleted_job_ends_the_wait_with_not_found(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        job_id = await s.schedule_in("later", "1h")
        task = asyncio.create_task(s.wait(job_id))
        await eventually(lambda: watched(redis, namespace, job_id), what="the wait registered")
        assert await s.delete(job_id)
        with pytest.raises(JobNotFound, match="was removed"):
            await asyncio.wait_for(task, timeout=5)


async def test_wait_many_in_order_with_one_shared_subscription(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    reg.on_event("batch")(lambda event: None)
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        ids = [await s.schedule_in("batch", f"{n}s") for n in (3, 1, 2)]
        many = asyncio.create_task(s.wait_many(ids, timeout=30))
        singles = [asyncio.create_task(s.wait(i)) for i in ids * 5]
        for job_id in ids:
            await eventually(lambda: watched(redis, namespace, job_id), what="the waits registered")
        # 18 waiters, one reader: a single subscription to the namespace's done channel
        [(_, subscribers)] = await redis.pubsub_numsub(Keys(namespace).done)
        assert subscribers == 1
        async with s.worker():
            clock.advance(3)
            infos = await asyncio.wait_for(many, timeout=10)
            assert [i.id for i in infos] == ids and all(
                i.state is JobState.COMPLETED for i in infos
            )
            assert [i.id for i in await asyncio.gather(*singles)] == ids * 5
        assert await s.wait_many([]) == []

        later = await s.schedule_in("batch", "1h")
        with pytest.raises(
            WaitTimeout, match=f"1 of 2 jobs not finished after 0.1 s \\(the first: '{later}'\\)"
        ):
            await s.wait_many([ids[0], later], timeout=0.1)
        with pytest.raises(JobNotFound, match="no job 'nope'"):
            await s.wait_many([later, "nope"], timeout=5)


async def test_wait_works_with_the_audit_off(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    reg.on_event("quiet")(lambda event: None)
    async with make_scheduler(
        redis_url, namespace, reg, clock, audit={"enabled": False, "relay": False}
    ) as s:
        job_id = await s.schedule_in("quiet", "1s")
        task = asyncio.create_task(s.wait(job_id, timeout=10))
        await eventually(lambda: watched(redis, namespace, job_id), what="the wait registered")
        async with s.worker():
            clock.advance(1)
            info = await task
    assert info.state is JobState.COMPLETED
    assert await redis.exists(Keys(namespace).outbox) == 0  # no outbox: the wait did not need one
