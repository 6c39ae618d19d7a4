"""The whole path, engine to Postgres: for each way a job can end, the exact
audit row and attempt rows, through real Redis, a real worker, the relay and
a real PostgreSQL database of the test's own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually

FIXED_1S = {"type": "fixed", "delay": 1000}


def audited_scheduler(
    redis_url: str, database_url: str, namespace: str, registry: ListenerRegistry, clock: Any = None
) -> Scheduler:
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    return Scheduler(settings=settings, listeners=registry, clock=clock or FakeClock(START_MS))


def registry(release: asyncio.Event) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        return None

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        if event.attempt < 3:
            raise ConnectionError(f"gateway down #{event.attempt}")

    @reg.on_event("doomed")
    async def doomed(event: ScheduleArrivedEvent) -> None:
        raise ValueError("template missing")

    @reg.on_event("slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        await asyncio.sleep(30)

    @reg.on_event("held")
    async def held(event: ScheduleArrivedEvent) -> None:
        await release.wait()

    return reg


async def _state(s: Scheduler, job_id: str, state: JobState, attempts: int | None = None) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state is state and attempts in (None, info.attempts)


async def test_every_path_leaves_the_exact_audit_rows(
    redis_url: str, database_url: str, namespace: str
) -> None:
    release = asyncio.Event()
    clock = FakeClock(START_MS)
    async with audited_scheduler(redis_url, database_url, namespace, registry(release), clock) as s:
        jobs = {
            "ok": await s.schedule_in("ok", 0, metadata={"case": "ok"}),
            "flaky": await s.schedule_in("flaky", 0, retry={"attempts": 3, "backoff": FIXED_1S}),
            "doomed": await s.schedule_in("doomed", 0, retry={"attempts": 2, "backoff": FIXED_1S}),
            "none": await s.schedule_in("nobody.listens", 0),
            "timeout": await s.schedule_in("slow", 0, timeout="100ms", retry={"attempts": 1}),
            "waiting": await s.schedule_in("ok", "1h"),
            "running": await s.schedule_in("held", 0),
        }
        assert await s.cancel(jobs["waiting"])
        async with s.worker():
            await eventually(
                lambda: _state(s, jobs["running"], JobState.RUNNING), what="held job running"
            )
            assert await s.cancel(jobs["running"])
            release.set()
            for name in ("flaky", "doomed"):
                await eventually(
                    lambda: _state(s, jobs[name], JobState.RETRYING, 1), what=f"{name} retrying"
                )
            clock.advance(1)
            await eventually(
                lambda: _state(s, jobs["flaky"], JobState.RETRYING, 2), what="flaky 2nd retry"
            )
            clock.advance(1)
            for name, state in (
                ("ok", JobState.COMPLETED),
                ("flaky", JobState.COMPLETED),
                ("doomed", JobState.FAILED),
                ("none", JobState.COMPLETED),
                ("timeout", JobState.FAILED),
            ):
                await eventually(lambda: _state(s, jobs[name], state), what=f"{name} {state.value}")
            await asyncio.sleep(0.1)
            await s.audit.flush(timeout=10)

        rows = {name: await s.audit.get(job_id) for name, job_id in jobs.items()}
        attempts = {name: await s.audit.attempts(job_id) for name, job_id in jobs.items()}

    def outcomes(name: str) -> list[tuple[int, str | None]]:
        return [(a.attempt_no, a.outcome) for a in attempts[name]]

    ok = rows["ok"]
    assert ok is not None and (ok.status, ok.attempts, ok.max_attempts, ok.last_error) == (
        "completed",
        1,
        5,
        None,
    )
    assert ok.completed_at is not None and ok.failed_at is None and ok.metadata == {"case": "ok"}
    assert outcomes("ok") == [(1, "succeeded")]
    assert attempts["ok"][0].worker_id and attempts["ok"][0].lateness_ms == 0

    flaky = rows["flaky"]
    assert flaky is not None and (flaky.status, flaky.attempts, flaky.max_attempts) == (
        "completed",
        3,
        3,
    )
    assert flaky.last_error is not None and flaky.last_error["message"] == "gateway down #2"
    assert outcomes("flaky") == [(1, "failed"), (2, "failed"), (3, "succeeded")]
    assert [a.error_type for a in attempts["flaky"]] == ["ConnectionError", "ConnectionError", None]

    doomed = rows["doomed"]
    assert doomed is not None and (doomed.status, doomed.attempts) == ("failed", 2)
    assert doomed.completed_at is None and doomed.failed_at is not None
    assert doomed.last_error is not None and doomed.last_error["type"] == "ValueError"
    assert outcomes("doomed") == [(1, "failed"), (2, "failed")]

    none = rows["none"]
    assert (
        none is not None and none.status == "completed" and outcomes("none") == [(1, "no_listener")]
    )

    timeout = rows["timeout"]
    assert timeout is not None and timeout.status == "failed" and timeout.last_error is not None
    assert timeout.last_error["type"] == "TimeoutError" and outcomes("timeout") == [
        (1, "timed_out")
    ]

    waiting = rows["waiting"]
    assert waiting is not None and (waiting.status, waiting.attempts) == ("cancelled", 0)
    assert (
        waiting.cancelled_at is not None
        and waiting.completed_at is None
        and attempts["waiting"] == []
    )

    running = rows["running"]
    assert running is not None and (running.status, running.attempts) == ("cancelled", 1)
    assert running.cancelled_at is not None and running.completed_at is None
    assert outcomes("running") == [(1, "succeeded")], (
        "the in-flight attempt is recorded; cancelled wins"
    )

    failures = await _failures(redis_url, database_url, namespace)
    assert sorted(r.id for r in failures) == sorted([jobs["doomed"], jobs["timeout"]])


async def _failures(redis_url: str, database_url: str, namespace: str) -> list[Any]:
    async with audited_scheduler(redis_url, database_url, namespace, ListenerRegistry()) as s:
        failures = await s.audit.failures()
        only = await s.audit.failures(topic="slow")
        assert [r.topic for r in only] == ["slow"]
        return failures


async def test_flush_waits_for_the_relay_of_another_process(
    redis_url: str, database_url: str, namespace: str
) -> None:
    """A producer without a worker flushes while a separate Scheduler's worker relays."""
    reg = ListenerRegistry()
    reg.add("ok", lambda event: None)
    async with (
        audited_scheduler(redis_url, database_url, namespace, reg) as producer,
        audited_scheduler(redis_url, database_url, namespace, reg) as consumer,
    ):
        ids = [await producer.schedule_in("ok", 0) for _ in range(50)]
        with pytest.raises(TimeoutError):
            await producer.audit.flush(timeout=0.3)  # nobody relays yet
        async with consumer.worker():
            for job_id in ids:
                await eventually(
                    lambda: _state(consumer, job_id, JobState.COMPLETED), what="completed"
                )
            await producer.audit.flush(timeout=10)
        rows = [await producer.audit.get(j) for j in ids]
        assert [r.status if r else None for r in rows] == ["completed"] * 50
