"""[worker] batch_window_ms on a real Redis: under load a worker's claims go out at most once
per window, each carrying the jobs that became due meanwhile (fewer script calls per job);
the first job after a quiet spell is claimed at once."""

from __future__ import annotations

import asyncio
from typing import Any

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from tests.integration.engine_fixtures import eventually, make_scheduler


def claim_batches(s: Scheduler) -> list[list[str]]:
    """The job ids of each claim call that returned any (a spy on our own store)."""
    batches: list[list[str]] = []
    claim = s.store.claim

    async def spy(*args: Any, **kwargs: Any) -> Any:
        result = await claim(*args, **kwargs)
        if result[0]:
            batches.append([job.id for job in result[0]])
        return result

    s.store.claim = spy  # type: ignore[method-assign]
    return batches


async def _true(value: bool) -> bool:
    return value


async def run_six(redis_url: str, namespace: str, window_ms: float) -> list[list[str]]:
    """One job, then (once it ran) five more 10 ms apart; the claims' batches."""
    reg, ran = ListenerRegistry(), []

    @reg.on_event("t")
    async def listener(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    worker = {"local_handoff": False, "batch_window_ms": window_ms}
    async with make_scheduler(redis_url, namespace, reg, worker=worker) as s:
        batches = claim_batches(s)
        async with s.worker(concurrency=10):
            ids = [await s.schedule_in("t", 0)]
            await eventually(lambda: _true(len(ran) == 1), what="the first job ran")
            for _ in range(5):
                ids.append(await s.schedule_in("t", 0))
                await asyncio.sleep(0.01)
            await eventually(lambda: _true(len(ran) == 6), what="all six ran")
        assert sorted(ran) == sorted(ids)
        for job_id in ids:
            info = await s.get_job(job_id)
            assert info is not None and info.state is JobState.COMPLETED
        assert sorted(j for b in batches for j in b) == sorted(ids) and batches[0] == ids[:1]
        return batches


async def test_jobs_due_within_a_window_come_in_one_claim(redis_url: str, namespace: str) -> None:
    batches = await run_six(redis_url, namespace, window_ms=1_000)
    assert [len(b) for b in batches] == [1, 5]


async def test_without_a_window_each_wake_up_claims_at_once(redis_url: str, namespace: str) -> None:
    batches = await run_six(redis_url, namespace, window_ms=0)
    assert len(batches) >= 4, batches


async def test_a_backlog_is_claimed_as_slots_free_without_waiting_for_the_window(
    redis_url: str, namespace: str
) -> None:
    """A claim that came back full (only the slots limited it) is followed as soon as a slot
    frees: the window batches a trickle, it never slows a backlog down."""
    reg, ran = ListenerRegistry(), []

    @reg.on_event("t")
    async def listener(event: ScheduleArrivedEvent) -> None:
        ran.append(event.scheduled_job_id)

    worker = {"local_handoff": False, "batch_window_ms": 5_000}
    async with make_scheduler(redis_url, namespace, reg, worker=worker) as s:
        batches = claim_batches(s)
        ids = [await s.schedule_in("t", 0) for _ in range(8)]
        loop = asyncio.get_running_loop()
        async with s.worker(concurrency=2):
            started = loop.time()
            await eventually(lambda: _true(len(ran) == 8), what="the backlog ran")
            took = loop.time() - started
    assert sorted(ran) == sorted(ids)
    assert len(batches) >= 4 and all(len(b) <= 2 for b in batches), batches
    assert took < 2.5, f"the backlog waited for the window: {took:.2f} s"
