"""Local handoff on a real Redis: a job a process schedules for now is leased to that
process's own running worker in the scheduling call (no wake-up, no claim), only
when the worker has a free slot, serves the topic and no other job is due; every
other case takes the ordinary path through the due set."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.core.job import ClaimedJob, NewJob
from scheduler.core.keys import Keys
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler


def count_claims(s: Scheduler) -> list[str]:
    """Ids of the jobs the worker's claim calls returned (a spy on our own store)."""
    claimed: list[str] = []
    claim = s.store.claim

    async def spy(*args: Any, **kwargs: Any) -> Any:
        result = await claim(*args, **kwargs)
        claimed.extend(job.id for job in result[0])
        return result

    s.store.claim = spy  # type: ignore[method-assign]
    return claimed


def new_job(job_id: str, due_ms: int, topic: str = "t") -> NewJob:
    return NewJob(
        id=job_id,
        topic=topic,
        due_ms=due_ms,
        run_at_ms=due_ms,
        tz="UTC",
        payload_json='{"n":1}',
        metadata_json="{}",
        max_attempts=3,
        backoff_type="fixed",
        backoff_delay_ms=1_000,
        backoff_max_delay_ms=3_600_000,
        backoff_jitter="none",
        timeout_ms=60_000,
    )


async def completed(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state is JobState.COMPLETED


async def test_a_job_for_now_goes_straight_to_the_idle_local_worker(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, seen = ListenerRegistry(), []

    @reg.on_event("t")
    async def listener(event: ScheduleArrivedEvent) -> None:
        seen.append((event.scheduled_job_id, event.attempt, event.payload))

    async with make_scheduler(redis_url, namespace, reg) as s:
        claimed = count_claims(s)
        async with s.worker(concurrency=2) as w:
            job_id = await s.schedule_in("t", 0, payload={"k": 1})
            await eventually(lambda: completed(s, job_id), what="the handed-off job completed")
        assert seen == [(job_id, 1, {"k": 1})]
        assert job_id not in claimed, "leased by the scheduling call, not by a claim"
        info = await s.get_job(job_id)
        assert info is not None and (info.attempts, info.state) == (1, JobState.COMPLETED)
        events = await redis.xrange(Keys(namespace).outbox)
        started = [
            f for _, f in events if f[b"e"] == b"attempt_started" and f[b"id"] == job_id.encode()
        ]
        assert [f[b"worker"] for f in started] == [w.id.encode()]
        assert await s.stats() == {
            **{st.value: 0 for st in JobState},
            "dead_letter": 0,
            "completed": 1,
        }


async def test_the_ordinary_path_when_handoff_is_off_busy_or_for_another_topic(
    redis_url: str, namespace: str
) -> None:
    reg, gate, ran = ListenerRegistry(), asyncio.Event(), []

    @reg.on_event("t")
    async def blocking(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)
        await gate.wait()

    @reg.on_event("other")
    async def other(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    async with make_scheduler(redis_url, namespace, reg) as s:
        claimed = count_claims(s)
        async with s.worker(concurrency=1, topics=["t"]):
            first = await s.schedule_in("t", 0)  # handed off: the one slot is now taken
            second = await s.schedule_in("t", 0)  # no free slot: queued, claimed later
            await s.schedule_in("other", 0)  # a topic this worker does not serve: queued
            await eventually(lambda: _true(ran == [first]), what="the first job running")
            gate.set()
            await eventually(lambda: completed(s, second), what="the queued job completed")
        assert first not in claimed and second in claimed
    async with make_scheduler(redis_url, namespace, reg, worker={"local_handoff": False}) as s:
        claimed = count_claims(s)
        async with s.worker():
            third = await s.schedule_in("t", 0)
            await eventually(lambda: completed(s, third), what="the job completed")
        assert third in claimed


async def test_a_job_never_jumps_ahead_of_one_already_due(redis_url: str, namespace: str) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        now = s.clock.now_ms()
        assert await s.store.enqueue(new_job("waiting", now - 5), now)
        done, leased = await s.store.enqueue_for(new_job("newer", now), now, "w", 30_000)
        created = done.result.created
        assert created and leased is None, "queued behind the one already due"
        done, leased = await s.store.enqueue_for(new_job("later", now + 60_000), now, "w", 30_000)
        created = done.result.created
        assert created and leased is None, "not due yet"
        claim = await s.store.claim(now, 10, 30_000, "w")
        assert [j.id for j in claim[0]] == ["waiting", "newer"]
        done, leased = await s.store.enqueue_for(new_job("alone", now), now, "w", 30_000)
        created = done.result.created
        assert created and isinstance(leased, ClaimedJob)
        assert (leased.id, leased.attempt, leased.token, leased.payload_json) == (
            "alone",
            1,
            "w:1:3",
            '{"n":1}',
        )
        done, leased = await s.store.enqueue_for(new_job("alone", now), now, "w", 30_000)
        created = done.result.created
        assert not created and leased is None, "an existing id is left alone"


async def test_a_handoff_that_lands_after_the_worker_stopped_is_given_back_uncounted(
    redis_url: str, namespace: str
) -> None:
    reg = ListenerRegistry()

    @reg.on_event("t")  # a handoff is only of a topic the worker has listeners for (issue 33)
    async def run_t(event: ScheduleArrivedEvent) -> None: ...

    async with make_scheduler(redis_url, namespace, reg) as s:
        worker = s.make_worker(all_topics=True)
        await worker.start()
        assert not worker._reserve("other.topic"), (
            "no listener here: claim.lua decides (it may be known)"
        )
        assert worker._reserve("t")  # a scheduling call's handoff is in flight ...
        await worker.stop(grace=0)
        assert (
            await worker.enqueue_local(new_job("other", s.clock.now_ms()), s.clock.now_ms()) is None
        ), "a stopped worker takes nothing"
        now = s.clock.now_ms()
        _, leased = await s.store.enqueue_for(new_job("late", now), now, worker.id, 30_000)
        assert leased is not None
        worker._adopt(leased)  # ... and lands after the stop

        async def back_in_line() -> bool:
            info = await s.get_job("late")
            return info is not None and info.state is JobState.SCHEDULED

        await eventually(back_in_line, what="the job given back")
        info = await s.get_job("late")
        assert info is not None and info.attempts == 0
        assert [j.id for j in (await s.store.claim(START_MS + 10, 10, 30_000, "w2"))[0]] == ["late"]


async def _true(value: bool) -> bool:
    return value


async def test_a_slot_held_for_a_handoff_that_did_not_happen_frees_the_claim_loop(
    redis_url: str, namespace: str
) -> None:
    reg, ran = ListenerRegistry(), []

    @reg.on_event("t")
    async def listener(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    async with make_scheduler(redis_url, namespace, reg) as s:
        async with s.worker(concurrency=1) as w:
            assert w._reserve("t")  # the one slot, held for a scheduling call in flight ...
            now = s.clock.now_ms()
            assert await s.store.enqueue(
                new_job("queued", now), now
            )  # ... while another job comes due
            # The wake-up arrived and stays unconsumed: the claim loop has no slot to claim with.
            await eventually(lambda: _true(w._wake.is_set()), what="the wake-up for the queued job")
            assert ran == []
            w._adopt(None)  # the call queued its job instead: the slot is free again
            await eventually(lambda: _true(ran == ["queued"]), what="the queued job claimed")


class LeadingWall(FakeClock):
    """A fake Redis clock with the process's own wall clock 3 ms ahead of it."""

    def wall_ms(self) -> int:
        return self.now_ms() + 3


async def test_schedule_at_now_takes_the_handoff_like_schedule_in_zero(
    redis_url: str, namespace: str
) -> None:
    """The caller's datetime.now() may lead the Redis-calibrated clock by a fraction of a
    millisecond: a run_at the process's own clock has reached counts as now (handed off);
    one further ahead waits in the due set for its instant, never run early."""
    clock, reg = LeadingWall(START_MS), ListenerRegistry()
    reg.add("t", lambda event: None)
    async with make_scheduler(redis_url, namespace, reg, clock=clock) as s:
        claimed = count_claims(s)
        async with s.worker(concurrency=4):

            def at(ms_ahead: int) -> datetime:
                return datetime.fromtimestamp((clock.now_ms() + ms_ahead) / 1000, tz=UTC)

            now_job = await s.schedule_at("t", at(3), "UTC")  # the wall clock's now
            await eventually(lambda: completed(s, now_job), what="the run-now job completed")
            later = await s.schedule_at("t", at(4), "UTC")  # 1 ms past what either clock calls now
            info = await s.get_job(later)
            assert info is not None and info.state is JobState.SCHEDULED, "not due yet: it waits"
            clock.advance(0.05)
            await eventually(lambda: completed(s, later), what="the later job completed")
        assert now_job not in claimed, "leased by the scheduling call, not by a claim"
        assert later in claimed


async def test_a_fake_clock_runs_nothing_before_its_time(redis_url: str, namespace: str) -> None:
    """Without a wall clock of its own (a test's fake clock), now is the clock's: a job
    1 ms ahead is not due."""
    clock, reg = FakeClock(START_MS), ListenerRegistry()
    reg.add("t", lambda event: None)
    async with make_scheduler(redis_url, namespace, reg, clock=clock) as s:
        job_id = await s.schedule_at(
            "t", datetime.fromtimestamp((START_MS + 1) / 1000, tz=UTC), "UTC"
        )
        info = await s.get_job(job_id)
        assert (
            info is not None
            and info.state is JobState.SCHEDULED
            and info.run_at == info.next_attempt_at
        )
