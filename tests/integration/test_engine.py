"""The engine on a real Redis, time driven by a FakeClock: due times, retries,
terminal failure, listeners, timeouts, no listener (the rest: test_engine_control.py)."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from listeners import ListenerRegistry, ScheduleArrivedEvent, ScheduleFailedEvent
from scheduler import (
    Backoff,
    JobState,
    RetryPolicy,
)
from scheduler.core.timeutil import ms_to_utc
from scheduler.observe.metrics import Metrics
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    eventually,
    in_state,
    is_true,
    make_scheduler,
    outbox_events,
)


async def test_job_runs_at_its_due_time_and_not_before(redis_url: str, namespace: str) -> None:
    reg, clock, runs = ListenerRegistry(), FakeClock(START_MS), []

    @reg.on_event("billing.remind")
    async def remind(event: ScheduleArrivedEvent) -> None:
        runs.append((event, clock.now_ms()))

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_at(
            "billing.remind",
            ms_to_utc(START_MS + 60_000),
            payload={"invoiceId": "i-1"},
            metadata={"tenant": "t1"},
        )
        probe = await s.schedule_at("probe", ms_to_utc(START_MS + 59_900))
        info = await s.get_job(job_id)
        assert info is not None and info.state is JobState.SCHEDULED
        assert info.next_attempt_at == ms_to_utc(START_MS + 60_000)
        async with s.worker():
            clock.advance(59.9)
            await eventually(
                lambda: in_state(s, probe, JobState.COMPLETED), what="a claim at 59.9 s (the probe)"
            )
            assert runs == [], "the claim that took the probe left the job alone"
            clock.advance(0.1)
            await eventually(lambda: is_true(len(runs) == 1), what="the listener")
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
        event, at = runs[0]
        assert at == START_MS + 60_000
        assert (event.scheduled_job_id, event.topic, event.attempt, event.max_attempts) == (
            job_id,
            "billing.remind",
            1,
            5,
        )
        assert event.payload == {"invoiceId": "i-1"} and event.metadata == {"tenant": "t1"}
        assert event.run_at == ms_to_utc(START_MS + 60_000)
        info = await s.get_job(job_id)
        assert info is not None and info.attempts == 1 and info.last_error is None


async def test_default_exponential_retries_then_terminal_failure(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    attempts: list[int] = []
    failed_events: list[ScheduleFailedEvent] = []

    @reg.on_event("payments.charge")
    async def charge(event: ScheduleArrivedEvent) -> None:
        attempts.append(event.attempt)
        raise RuntimeError(f"card declined #{event.attempt}")

    @reg.on_event("schedule.failed")
    async def alert(event: ScheduleFailedEvent) -> None:
        failed_events.append(event)

    @reg.on_event("schedule.failed")
    async def broken_alert(event: ScheduleFailedEvent) -> None:
        raise ValueError("alerting is down")  # must never affect the job

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("payments.charge", 0, metadata={"tenant": "t9"})
        async with s.worker():
            expected_gaps = [30_000, 60_000, 120_000, 240_000]
            for n, gap in enumerate(expected_gaps, start=1):
                await eventually(
                    lambda: in_state(s, job_id, JobState.RETRYING, n),
                    what=f"retrying after attempt {n}",
                )
                info = await s.get_job(job_id)
                assert info is not None and info.attempts == n
                assert info.next_attempt_at == ms_to_utc(clock.now_ms() + gap)
                assert (
                    info.last_error is not None
                    and info.last_error["message"] == f"card declined #{n}"
                )
                probe = await s.schedule_at("probe", ms_to_utc(clock.now_ms() + gap - 1))
                clock.advance(gap / 1000 - 0.001)
                await eventually(
                    lambda: in_state(s, probe, JobState.COMPLETED),
                    what="a claim 1 ms before the retry",
                )
                assert attempts == list(range(1, n + 1)), "retry must not run before its backoff"
                clock.advance(0.001)
            await eventually(lambda: in_state(s, job_id, JobState.FAILED), what="terminal failure")
            await eventually(lambda: is_true(len(failed_events) == 1), what="schedule.failed")
        assert attempts == [1, 2, 3, 4, 5]
        info = await s.get_job(job_id)
        assert info is not None and info.attempts == 5 and info.next_attempt_at is None
        assert info.last_error is not None
        assert (
            info.last_error["type"] == "RuntimeError"
            and "card declined #5" in info.last_error["traceback"]
        )
        assert failed_events[0].to_dict() == {
            "scheduledJobId": job_id,
            "topic": "payments.charge",
            "lastError": dict(info.last_error),
            "attempts": 5,
            "metadata": {"tenant": "t9"},
        }
        types = [e.type for e in await outbox_events(redis, namespace, job_id)]
        assert types == ["scheduled"] + [
            "attempt_started",
            "attempt_failed",
            "retry_scheduled",
        ] * 4 + ["attempt_started", "attempt_failed", "failed", "schedule.failed"]


async def test_fixed_backoff_then_success_and_event_attempt_increments(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock, seen = ListenerRegistry(), FakeClock(START_MS), []

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        seen.append(event.attempt)
        if event.attempt < 3:
            raise ConnectionError("upstream 503")

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in(
            "flaky", "1s", retry=RetryPolicy(attempts=3, backoff=Backoff("fixed", delay_ms=10_000))
        )
        async with s.worker():
            clock.advance(1)
            for n in (1, 2):
                await eventually(lambda: is_true(len(seen) == n), what=f"attempt {n}")
                await eventually(lambda: in_state(s, job_id, JobState.RETRYING, n), what="retrying")
                info = await s.get_job(job_id)
                assert info is not None and info.next_attempt_at == ms_to_utc(
                    clock.now_ms() + 10_000
                )
                clock.advance(10)
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
        assert seen == [1, 2, 3]
        info = await s.get_job(job_id)
        assert info is not None and info.attempts == 3 and info.max_attempts == 3
        events = await outbox_events(redis, namespace, job_id)
        assert [e.type for e in events][-2:] == ["attempt_started", "completed"]
        assert events[-1].attempt == 3 and events[-1].get("outcome") == "succeeded"
        failed = [e for e in events if e.type == "attempt_failed"]
        assert [e.get("outcome") for e in failed] == ["failed", "failed"]
        assert "upstream 503" in failed[0].get("error")


async def test_all_listeners_run_concurrently_once_per_attempt(
    redis_url: str, namespace: str
) -> None:
    reg, calls = ListenerRegistry(), {"a": 0, "b": 0, "sync": 0}
    barrier = asyncio.Barrier(2)
    lock = threading.Lock()

    @reg.on_event("fan.out")
    async def a(event: ScheduleArrivedEvent) -> None:
        calls["a"] += 1
        await asyncio.wait_for(barrier.wait(), 5)  # only passes if b runs at the same time

    @reg.on_event("fan.out")
    async def b(event: ScheduleArrivedEvent) -> None:
        calls["b"] += 1
        await asyncio.wait_for(barrier.wait(), 5)

    @reg.on_event("fan.out")
    def sync_listener(event: ScheduleArrivedEvent) -> None:
        with lock:
            calls["sync"] += 1

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("fan.out", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
    assert calls == {"a": 1, "b": 1, "sync": 1}


async def test_one_failing_listener_fails_the_attempt(redis_url: str, namespace: str) -> None:
    reg, ok_runs = ListenerRegistry(), []

    @reg.on_event("mixed")
    async def good(event: ScheduleArrivedEvent) -> None:
        ok_runs.append(event.attempt)

    @reg.on_event("mixed")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise KeyError("missing")

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("mixed", 0, retry={"attempts": 1})
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.FAILED), what="failed")
        info = await s.get_job(job_id)
        assert info is not None and info.last_error is not None
        assert info.last_error["type"] == "KeyError" and info.last_error["listener"].endswith("bad")
        assert ok_runs == [1]


async def test_no_listener_completes_with_warning_and_counter(
    redis_url: str, namespace: str, caplog: pytest.LogCaptureFixture, redis: aioredis.Redis
) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    reg = ListenerRegistry()

    @reg.on_event("someone.else")  # a worker needs a listener (or all_topics) to start
    async def other(event: ScheduleArrivedEvent) -> None: ...

    s = make_scheduler(redis_url, namespace, reg)
    s.metrics = Metrics(provider.get_meter("test"))
    async with s:
        # no live worker serves the topic: the worker claims it and completes it as no_listener
        ids = [await s.schedule_in("nobody.listens", 0) for _ in range(2)]
        with caplog.at_level(logging.WARNING, logger="horae.worker"):
            async with s.worker():
                for job_id in ids:
                    await eventually(
                        lambda: in_state(s, job_id, JobState.COMPLETED), what="completed"
                    )
        warnings = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "no listener" in r.getMessage()
        ]
        assert len(warnings) == 2
        events = await outbox_events(redis, namespace, ids[0])
        assert events[-1].type == "completed" and events[-1].get("outcome") == "no_listener"
    points = [
        p
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "app_schedule_job_no_listener_total"
        for p in m.data.data_points
    ]
    # a served topic's counter starts at 0 (telemetry: ratios show 0, not "no data")
    assert sorted((p.attributes["topic"], p.value) for p in points) == [
        ("nobody.listens", 2),
        ("someone.else", 0),
    ]
    provider.shutdown()


async def test_timeout_cancels_the_listener_and_fails_the_attempt(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, cancelled = ListenerRegistry(), []

    @reg.on_event("slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(event.attempt)
            raise

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("slow", 0, timeout="200ms", retry={"attempts": 1})
        async with s.worker():
            await eventually(
                lambda: in_state(s, job_id, JobState.FAILED), what="timed out", timeout=5
            )
        info = await s.get_job(job_id)
        assert info is not None and info.last_error is not None
        assert info.last_error["type"] == "TimeoutError" and "0.2 s" in info.last_error["message"]
        assert cancelled == [1]
        failed = [
            e for e in await outbox_events(redis, namespace, job_id) if e.type == "attempt_failed"
        ]
        assert [e.get("outcome") for e in failed] == ["timed_out"]
