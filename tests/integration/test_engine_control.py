"""The engine on a real Redis, time driven by a FakeClock: cancellation, graceful
stop, refused input, zones, idempotency, retention, wake-ups, the outbox switch, heartbeats."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import (
    InvalidDelay,
    InvalidJobId,
    InvalidPayload,
    InvalidTimezone,
    InvalidTopic,
    JobState,
    RetryPolicyInvalid,
)
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    eventually,
    in_state,
    is_true,
    make_scheduler,
    ns_keys,
    outbox_events,
)


async def test_cancel_waiting_and_retrying_jobs_stops_future_attempts(
    redis_url: str, namespace: str
) -> None:
    reg, clock, runs = ListenerRegistry(), FakeClock(START_MS), []

    @reg.on_event("c")
    async def fails(event: ScheduleArrivedEvent) -> None:
        runs.append(event.scheduled_job_id)
        raise RuntimeError("no")

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        waiting = await s.schedule_in("c", "1m")
        retrying = await s.schedule_in("c", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, retrying, JobState.RETRYING), what="retrying")
            assert await s.cancel(waiting) is True
            assert await s.cancel(retrying) is True
            probe = await s.schedule_in("probe", "1h")
            clock.advance(3600)
            await eventually(
                lambda: in_state(s, probe, JobState.COMPLETED), what="a claim after both were due"
            )
        assert runs == [retrying]
        for job_id in (waiting, retrying):
            info = await s.get_job(job_id)
            assert (
                info is not None
                and info.state is JobState.CANCELLED
                and info.next_attempt_at is None
            )
        assert await s.cancel(waiting) is False, "cancelling twice changes nothing"
        assert await s.cancel("no-such-job") is False
        assert (await s.stats())["cancelled"] == 2 and (await s.stats())["retrying"] == 0


async def test_cancel_during_running_attempt_lets_it_finish_but_ends_cancelled(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, started, release, finished = ListenerRegistry(), asyncio.Event(), asyncio.Event(), []

    @reg.on_event("long")
    async def long(event: ScheduleArrivedEvent) -> None:
        started.set()
        await release.wait()
        finished.append(event.attempt)

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("long", 0)
        async with s.worker():
            await asyncio.wait_for(started.wait(), 5)
            assert await s.cancel(job_id) is True
            release.set()
            await eventually(lambda: is_true(finished == [1]), what="the attempt to finish")

            async def recorded() -> bool:
                return "attempt_succeeded" in [
                    e.type for e in await outbox_events(redis, namespace, job_id)
                ]

            await eventually(recorded, what="the attempt's outcome to be recorded")
        info = await s.get_job(job_id)
        assert info is not None and info.state is JobState.CANCELLED and info.attempts == 1
        types = [(e.type, e.get("outcome")) for e in await outbox_events(redis, namespace, job_id)]
        assert types == [
            ("scheduled", ""),
            ("attempt_started", ""),
            ("cancelled", ""),
            ("attempt_succeeded", "succeeded"),
        ]
        assert await s.cancel(job_id) is False
        done = await s.schedule_in("long", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, done, JobState.COMPLETED), what="completed")
        assert await s.cancel(done) is False, "a finished job cannot be cancelled"
        assert (await s.get_job(done)).state is JobState.COMPLETED  # type: ignore[union-attr]


async def test_graceful_stop_releases_unfinished_attempts_without_counting(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, started, stopped = ListenerRegistry(), asyncio.Event(), []

    @reg.on_event("stuck")
    async def stuck(event: ScheduleArrivedEvent) -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            stopped.append(event.attempt)  # a released job must not keep running here
            raise

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("stuck", 0)
        worker = s.make_worker()
        await worker.start()
        await asyncio.wait_for(started.wait(), 5)
        await worker.stop(grace=0.1)
        assert stopped == [1]
        info = await s.get_job(job_id)
        assert info is not None and info.state is JobState.SCHEDULED and info.attempts == 0
        types = [e.type for e in await outbox_events(redis, namespace, job_id)]
        assert types == ["scheduled", "attempt_started", "attempt_released"]
        assert await s.stats() == {
            **{st.value: 0 for st in JobState},
            "dead_letter": 0,
            "scheduled": 1,
        }


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"topic": ""}, InvalidTopic, "topic"),
        ({"topic": "schedule.failed"}, InvalidTopic, "topic"),
        ({"topic": 5}, InvalidTopic, "topic"),
        ({"job_id": ""}, InvalidJobId, "job_id"),
        ({"job_id": "x" * 201}, InvalidJobId, "job_id"),
        ({"tz": "Europe/Atlantis"}, InvalidTimezone, "tz"),
        ({"payload": {"when": datetime(2026, 1, 1)}}, InvalidPayload, "payload"),
        ({"payload": float("nan")}, InvalidPayload, "payload"),
        ({"metadata": ["not", "a", "mapping"]}, InvalidPayload, "metadata"),
        ({"retry": {"attempts": 0}}, RetryPolicyInvalid, "attempts"),
        (
            {"retry": {"attempts": 3, "backoff": {"type": "fixed", "delay": 500}}},
            RetryPolicyInvalid,
            "backoff.delay",
        ),
        ({"timeout": "-1s"}, InvalidDelay, "timeout"),
        ({"run_at": "tomorrow"}, InvalidDelay, "run_at"),
    ],
)
async def test_bad_input_is_refused_and_nothing_is_written(
    redis_url: str,
    namespace: str,
    redis: aioredis.Redis,
    kwargs: dict[str, Any],
    error: type,
    field: str,
) -> None:
    args: dict[str, Any] = {
        "topic": "ok",
        "run_at": datetime(2030, 1, 1, tzinfo=UTC),
        **kwargs,
    }
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        with pytest.raises(error) as info:
            await s.schedule_at(args.pop("topic"), args.pop("run_at"), **args)
        assert info.value.field == field  # type: ignore[attr-defined]
        for bad_delay in ("5 minutes", -3):
            with pytest.raises(InvalidDelay):
                await s.schedule_in("ok", bad_delay)
    assert await ns_keys(redis, namespace) == []


async def test_naive_run_at_is_wall_time_in_its_zone(redis_url: str, namespace: str) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        berlin = await s.schedule_at(
            "t", datetime(2030, 3, 31, 2, 30), tz="Europe/Berlin"
        )  # in the gap
        chicago = await s.schedule_at(
            "t", datetime(2030, 11, 3, 1, 30), tz="America/Chicago"
        )  # overlap
        info_b, info_c = await s.get_job(berlin), await s.get_job(chicago)
        assert info_b is not None and info_b.run_at == datetime(2030, 3, 31, 1, 0, tzinfo=UTC)
        assert info_b.tz == "Europe/Berlin"
        assert info_c is not None and info_c.run_at == datetime(2030, 11, 3, 6, 30, tzinfo=UTC)


async def test_job_id_is_an_idempotency_key_and_stats_count_per_topic(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        first = await s.schedule_in("a", "1h", job_id="invoice-42", payload={"v": 1})
        again = await s.schedule_in("a", "2h", job_id="invoice-42", payload={"v": 2})
        await s.schedule_in("b", "1h")
        assert first == again == "invoice-42"
        info = await s.get_job("invoice-42")
        assert info is not None and info.payload == {"v": 1}
        assert (await s.stats())["scheduled"] == 2
        assert (await s.stats(topic="a"))["scheduled"] == 1
        assert (await s.stats(topic="zzz"))["scheduled"] == 0


async def test_retention_keeps_newest_completed_and_prunes_by_age(
    redis_url: str, namespace: str
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)

    @reg.on_event("bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise RuntimeError("x")

    # Housekeeping would prune on its own first tick; this test calls prune() itself.
    s = make_scheduler(
        redis_url,
        namespace,
        reg,
        clock,
        retention={"completed_count": 3},
        worker={"recover_interval_s": 3600},
    )
    async with s:
        done = []
        async with s.worker() as worker:
            for _ in range(5):
                job_id = await s.schedule_in("ok", 0)
                await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
                done.append(job_id)
                clock.advance(1)
            failed = await s.schedule_in("bad", 0, retry={"attempts": 1})
            await eventually(lambda: in_state(s, failed, JobState.FAILED), what="failed")
            assert [await s.get_job(j) is not None for j in done] == [
                False,
                False,
                True,
                True,
                True,
            ]
            assert (await s.stats())["completed"] == 3
            clock.advance(7 * 86400 + 10)
            assert await worker.prune() == 3
            assert [await s.get_job(j) for j in done] == [None] * 5
            assert await s.get_job(failed) is not None, "failed jobs are kept 30 days"
            clock.advance(23 * 86400)
            assert await worker.prune() == 1
            assert await s.get_job(failed) is None
            assert await s.stats() == {**{st.value: 0 for st in JobState}, "dead_letter": 0}
        leftovers = [
            k for k in await ns_keys(s.store.redis, namespace) if b"}:j:" in k or b"}:p:" in k
        ]
        assert leftovers == [], "pruned jobs leave neither hash nor payload behind"


async def test_idle_worker_wakes_for_an_earlier_job_without_polling(
    redis_url: str, namespace: str
) -> None:
    """A worker sleeping toward a far job is woken by pub/sub for a nearer one. The fake clock
    never moves, so neither the far job's time nor the idle re-check can be what wakes it."""
    reg, ran = ListenerRegistry(), []

    @reg.on_event("soon")
    async def soon(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    async with make_scheduler(redis_url, namespace, reg, worker={"local_handoff": False}) as s:
        await s.schedule_in("soon", "1h")
        first = await s.schedule_in("soon", 0)
        async with s.worker():
            # Once the first job ran, the worker planned its sleep toward the 1h job.
            await eventually(lambda: in_state(s, first, JobState.COMPLETED), what="the first job")
            job_id = await s.schedule_in("soon", 0)
            await eventually(lambda: is_true(job_id in ran), what="the near job")
        assert ran == [first, job_id]


async def test_listener_sees_past_run_at_immediately(redis_url: str, namespace: str) -> None:
    reg, clock, runs = ListenerRegistry(), FakeClock(START_MS), []

    @reg.on_event("late")
    async def late(event: ScheduleArrivedEvent) -> None:
        runs.append(event.run_at)

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        past = ms_to_utc(START_MS) - timedelta(days=1)
        job_id = await s.schedule_at("late", past)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
        assert runs == [past], "run_at is reported as asked, the job ran at once"


async def test_audit_off_writes_no_outbox_at_all(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg = ListenerRegistry()
    reg.add("t", lambda event: None)
    s = make_scheduler(redis_url, namespace, reg, audit={"enabled": False})
    async with s:
        job_id = await s.schedule_in("t", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
    assert await redis.exists(Keys(namespace).outbox) == 0


async def test_heartbeat_counts_only_leases_taken_by_another_worker(
    redis_url: str, namespace: str
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        for _ in range(3):
            await s.schedule_in("t", 0)
        jobs, _, _ = await s.store.claim(clock.now_ms(), 10, 30_000, "w1")
        assert len(jobs) == 3
        done, stolen, alive = jobs
        from scheduler.core.job import Settlement

        assert await s.store.complete(
            [Settlement(done.id, done.token, "succeeded")], clock.now_ms(), 100
        ) == [1]
        clock.advance(31)  # stolen's lease expires; another worker recovers and re-claims it
        assert await s.store.fail(
            [
                Settlement(
                    stolen.id,
                    stolen.token,
                    "worker_lost",
                    '{"type":"WorkerLost"}',
                    clock.now_ms(),
                    True,
                )
            ],
            clock.now_ms(),
        ) == [3]
        await s.store.claim(clock.now_ms(), 10, 30_000, "w2")
        leases = [(j.id, j.token) for j in jobs]
        assert await s.store.extend_leases(leases, clock.now_ms(), 30_000) == 1, (
            "only the stolen one"
        )


async def test_state_totals_are_the_sums_over_topics_and_a_topic_may_contain_a_bar(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        for topic in ("a", "a", "b|c", "d"):
            await s.schedule_in(topic, 60)
        cancel_me = await s.schedule_in("d", 60)
        assert await s.cancel(cancel_me)
        await redis.hset(
            Keys(namespace).counts, "scheduled", 99
        )  # an older layout's bare total: not summed
        assert await s.stats() == {
            **{st.value: 0 for st in JobState},
            "dead_letter": 0,
            "scheduled": 4,
            "cancelled": 1,
        }
        assert (await s.stats(topic="b|c"))["scheduled"] == 1
        assert (await s.stats(topic="d")) == {
            **{st.value: 0 for st in JobState},
            "dead_letter": 0,
            "scheduled": 1,
            "cancelled": 1,
        }
