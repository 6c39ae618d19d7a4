"""Job operations on real Redis and PostgreSQL: retry (a fresh attempt budget, the
audit row back to active, attempt rows numbered on), delete (the id is free again,
counts stay right), reschedule (a new due time, workers woken), cancel_many, and
the actor of each operation in schedule_events."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidTimezone, JobState, Scheduler
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc
from scheduler.facade.operations import default_actor
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    is_true,
    make_scheduler,
    outbox_events,
)

IDLE = {
    "scheduled": 0,
    "waiting_for_parents": 0,
    "running": 0,
    "retrying": 0,
    "completed": 0,
    "failed": 0,
    "cancelled": 0,
    "dead_letter": 0,
}


async def events(db: asyncpg.Connection, job_id: str) -> list[tuple[str, int, dict[str, Any]]]:
    rows = await db.fetch(
        "SELECT event_type, attempt_no, fields FROM schedule_events WHERE job_id = $1"
        " ORDER BY stream_ms, stream_seq",
        job_id,
    )
    return [(r["event_type"], r["attempt_no"], r["fields"]) for r in rows]


def flaky_registry(failures: int, gate: asyncio.Event | None = None) -> ListenerRegistry:
    """`flaky` fails its first `failures` calls, then succeeds; `ok` always succeeds;
    `slow` waits for `gate` (when given)."""
    reg, calls = ListenerRegistry(), [0]

    if gate is not None:

        @reg.on_event("slow")
        async def slow(event: ScheduleArrivedEvent) -> None:
            await gate.wait()

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        calls[0] += 1
        if calls[0] <= failures:
            raise ValueError(f"boom {calls[0]}")

    @reg.on_event("ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        pass

    return reg


async def test_retry_of_a_failed_job_runs_it_again_with_a_fresh_budget(
    redis_url: str,
    database_url: str,
    namespace: str,
    db: asyncpg.Connection,
) -> None:
    clock = FakeClock(START_MS)
    policy = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1_000}}
    async with audited_scheduler(
        redis_url, database_url, namespace, flaky_registry(failures=3), clock
    ) as s:
        job_id = await s.schedule_in("flaky", 0, retry=policy)
        done = await s.schedule_in("ok", 0)
        async with s.worker():
            await eventually(
                lambda: in_state(s, job_id, JobState.RETRYING), what="attempt 1 failed"
            )
            clock.advance(1)
            await eventually(lambda: in_state(s, job_id, JobState.FAILED), what="failed for good")
            await eventually(lambda: in_state(s, done, JobState.COMPLETED), what="the ok job")
        assert not await s.retry(done), "a completed job is not retried"
        assert not await s.retry("no-such-job")
        assert await s.stats() == {**IDLE, "completed": 1, "failed": 1}

        assert await s.retry(job_id, actor="alice")
        assert not await s.retry(job_id), "waiting again: not failed any more"
        info = await s.get_job(job_id)
        assert info is not None and (info.state, info.attempts, info.finished_at) == (
            JobState.SCHEDULED,
            0,
            None,
        )
        assert info.next_attempt_at == ms_to_utc(START_MS + 1_000)
        assert info.last_error is not None and info.last_error["message"] == "boom 2", (
            "kept until replaced"
        )
        assert await s.stats() == {**IDLE, "completed": 1, "scheduled": 1}
        await s.start_relay()
        await s.audit.flush(timeout=10)
        row = await s.audit.get(job_id)
        assert row is not None and (row.status, row.attempts, row.failed_at) == ("active", 2, None)

        async with s.worker():
            # A fresh budget of 2: the run's first failure is retried, not terminal.
            await eventually(
                lambda: in_state(s, job_id, JobState.RETRYING), what="run 2, attempt 1 failed"
            )
            clock.advance(1)
            await eventually(
                lambda: in_state(s, job_id, JobState.COMPLETED), what="run 2 completed"
            )
        info = await s.get_job(job_id)
        assert info is not None and info.attempts == 2 and info.last_error is not None
        assert await s.stats() == {**IDLE, "completed": 2}
        await s.audit.flush(timeout=10)
        row, attempts = await s.audit.get(job_id), await s.audit.attempts(job_id)

    assert row is not None and (row.status, row.attempts) == ("completed", 4)
    assert [(a.attempt_no, a.outcome) for a in attempts] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (4, "succeeded"),
    ]
    retried = [(a, f) for kind, a, f in await events(db, job_id) if kind == "retried"]
    assert len(retried) == 1
    assert (
        retried[0][0] == 2
        and retried[0][1]["actor"] == "alice"
        and retried[0][1]["from"] == "failed"
    )


async def test_retry_of_a_cancelled_job_and_the_cancel_actor(
    redis_url: str,
    database_url: str,
    namespace: str,
    db: asyncpg.Connection,
) -> None:
    clock, gate = FakeClock(START_MS), asyncio.Event()
    reg = flaky_registry(failures=0, gate=gate)
    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        later = await s.schedule_in("ok", "1h")
        with s.acting_as("bob"):
            assert await s.cancel(later)
        assert await s.retry(later, actor="carol")
        async with s.worker():
            await eventually(
                lambda: in_state(s, later, JobState.COMPLETED), what="the retried job ran now"
            )
            running = await s.schedule_in("slow", 0)
            await eventually(
                lambda: in_state(s, running, JobState.RUNNING), what="the slow job running"
            )
            assert await s.cancel(running)
            assert not await s.retry(running), "its attempt is still in flight"
            gate.set()
            await eventually(lambda: _finished(s, running), what="the cancelled attempt finished")
        assert await s.retry(running)
        assert await s.stats() == {**IDLE, "completed": 1, "scheduled": 1}
        await s.start_relay()
        await s.audit.flush(timeout=10)
        row = await s.audit.get(later)
        kinds = [(kind, f.get("actor")) for kind, _, f in await events(db, later)]

    assert row is not None and (row.status, row.cancelled_at, row.completed_at is not None) == (
        "completed",
        None,
        True,
    )
    assert kinds == [
        ("scheduled", None),
        ("cancelled", "bob"),
        ("retried", "carol"),
        ("attempt_started", None),
        ("completed", None),
    ]


async def _finished(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.finished_at is not None


async def test_delete_frees_the_id_keeps_counts_and_refuses_a_running_job(
    redis_url: str,
    database_url: str,
    namespace: str,
    db: asyncpg.Connection,
    redis: aioredis.Redis,
) -> None:
    clock, gate = FakeClock(START_MS), asyncio.Event()
    reg = flaky_registry(failures=1, gate=gate)
    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        waiting = await s.schedule_in("ok", "1h", job_id="report-42", payload={"big": "x" * 2_000})
        assert await redis.exists(Keys(namespace).payload(waiting)), (
            "a payload too big to inline has its own key"
        )
        failed = await s.schedule_in("flaky", 0, retry={"attempts": 1})
        async with s.worker():
            await eventually(lambda: in_state(s, failed, JobState.FAILED), what="failed")
            running = await s.schedule_in("slow", 0)
            await eventually(lambda: in_state(s, running, JobState.RUNNING), what="running")
            assert not await s.delete(running)
            assert await s.cancel(running) and not await s.delete(running), (
                "cancelled, attempt in flight"
            )
            gate.set()
            await eventually(lambda: _finished(s, running), what="the cancelled attempt finished")
        assert await s.stats() == {**IDLE, "scheduled": 1, "failed": 1, "cancelled": 1}
        with s.acting_as("dave"):
            assert await s.delete(waiting) and await s.delete(failed) and await s.delete(running)
        assert not await s.delete(waiting) and not await s.delete("no-such-job")
        assert await s.get_job(waiting) is None and await s.stats() == IDLE
        keys = [k async for k in redis.scan_iter(match="{" + namespace + "}:[jp]:*")]
        assert keys == [], "no job hash or payload key left"
        assert not await s.retry(failed), "gone"

        clock.advance(60)
        again = await s.schedule_in("ok", "2h", job_id="report-42")
        info = await s.get_job(again)
        assert again == waiting and info is not None and info.state is JobState.SCHEDULED
        assert info.created_at == ms_to_utc(START_MS + 60_000), "a new job, not the deleted one"
        assert await s.stats() == {**IDLE, "scheduled": 1}
        await s.start_relay()
        await s.audit.flush(timeout=10)
        failed_row = await s.audit.get(failed)
        reused_row = await s.audit.get(waiting)
        failed_events = await events(db, failed)
        waiting_events = await events(db, waiting)

    assert failed_row is not None and failed_row.status == "failed", (
        "a finished job keeps its audit status"
    )
    assert failed_events[-1][0] == "deleted" and failed_events[-1][2]["actor"] == "dave"
    assert failed_events[-1][2]["from"] == "failed"
    assert [kind for kind, _, _ in waiting_events] == ["scheduled", "deleted", "scheduled"]
    assert (
        reused_row is not None
        and reused_row.status == "active"
        and reused_row.created_at == ms_to_utc(START_MS + 60_000)
    )


class SleepWatchingClock(FakeClock):
    """A FakeClock that remembers the deadline each sleeper waits for (None: none asleep)."""

    def __init__(self, start_ms: int) -> None:
        super().__init__(start_ms)
        self.asleep_until: int | None = None

    async def sleep_until(self, deadline_ms: int, wake: asyncio.Event) -> None:
        self.asleep_until = deadline_ms
        try:
            await super().sleep_until(deadline_ms, wake)
        finally:
            self.asleep_until = None


async def test_reschedule_moves_a_waiting_job_and_wakes_workers(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = SleepWatchingClock(START_MS)
    async with make_scheduler(redis_url, namespace, flaky_registry(failures=0), clock) as s:
        job_id = await s.schedule_in("ok", "1h")
        sleeper = await s.schedule_in("ok", "1h")  # now: nothing wakes a worker for it later
        # START_MS is 08:00 UTC: 09:10 wall time in Paris (UTC+1 in January) is 08:10 UTC.
        assert await s.reschedule(
            job_id, datetime(2027, 1, 15, 9, 10), "Europe/Paris", actor="erin"
        )
        info = await s.get_job(job_id)
        assert info is not None and info.state is JobState.SCHEDULED and info.tz == "Europe/Paris"
        assert info.run_at == info.next_attempt_at == ms_to_utc(START_MS + 600_000)
        async with s.worker():
            clock.advance(600)
            await eventually(
                lambda: in_state(s, job_id, JobState.COMPLETED), what="run at the new time"
            )
            assert not await s.reschedule(job_id, ms_to_utc(START_MS)), "a finished job"
            await eventually(
                lambda: is_true(clock.asleep_until is not None), what="the worker asleep"
            )
            assert await s.reschedule(sleeper, ms_to_utc(START_MS), actor="erin"), (
                "the past: due now"
            )
            # Only the wake-up message can make the sleeping worker run it: the clock stands still.
            await eventually(
                lambda: in_state(s, sleeper, JobState.COMPLETED), what="the woken worker"
            )
        assert not await s.reschedule("no-such-job", ms_to_utc(START_MS))
        with pytest.raises(InvalidTimezone):
            await s.reschedule(sleeper, datetime(2027, 1, 15, 9, 10), "Mars/Olympus")
        moved = [
            e for e in await outbox_events(redis, namespace, sleeper) if e.type == "rescheduled"
        ]
        assert [(e.get("run_at"), e.get("due"), e.get("tz"), e.get("actor")) for e in moved] == [
            (str(START_MS), str(clock.now_ms()), "UTC", "erin")
        ]
        info = await s.get_job(sleeper)
        assert info is not None and info.run_at == ms_to_utc(START_MS)


async def test_cancel_many_counts_only_the_jobs_it_cancelled(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, flaky_registry(failures=0), clock) as s:
        waiting = [await s.schedule_in("ok", "1h") for _ in range(3)]
        done = await s.schedule_in("ok", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, done, JobState.COMPLETED), what="completed")
        assert await s.cancel_many([*waiting, done, "no-such-job", waiting[0]]) == 3
        assert await s.cancel_many(waiting) == 0
        assert await s.cancel_many([]) == 0
        assert await s.stats() == {**IDLE, "cancelled": 3, "completed": 1}
        for job_id in waiting:
            cancelled = [
                e for e in await outbox_events(redis, namespace, job_id) if e.type == "cancelled"
            ]
            assert [e.get("actor") for e in cancelled] == [default_actor()]
