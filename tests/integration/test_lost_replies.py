"""A script call whose reply is lost (the connection broke after Redis ran it) is safe
to retry: enqueue with the same job id creates nothing twice, a repeated settlement is
fenced by its token (tests/integration/test_settlement_fence.py), and a claim that
landed unseen is given back by the worker, uncounted, instead of waiting for its lease
to expire and costing the job an attempt (worker_lost)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.core.errors import StorageError
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    eventually,
    in_state,
    make_scheduler,
    outbox_events,
)


async def test_a_claim_whose_reply_was_lost_is_given_back_and_runs_as_attempt_1(
    redis_url: str, namespace: str, redis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[int] = []
    reg = ListenerRegistry()

    @reg.on_event("t")
    async def run(event: ScheduleArrivedEvent) -> None:
        runs.append(event.attempt)

    clock = FakeClock(
        START_MS
    )  # frozen: a lease never expires here, so only the give-back can free the job
    async with make_scheduler(
        redis_url, namespace, reg, clock, worker={"local_handoff": False}
    ) as s:
        real_claim, lost = s.store.claim, []

        async def claim_losing_its_first_reply(*args: Any, **kwargs: Any) -> Any:
            reply = await real_claim(*args, **kwargs)  # Redis ran it: the jobs are leased
            if reply[0] and not lost:
                lost.append([job.id for job in reply[0]])
                raise StorageError(
                    "redis script claim failed: connection to Redis lost"
                )  # the reply never came
            return reply

        monkeypatch.setattr(s.store, "claim", claim_losing_its_first_reply)
        job_id = await s.schedule_in("t", 0, retry={"attempts": 1})
        async with s.worker():
            await eventually(
                lambda: in_state(s, job_id, JobState.COMPLETED, attempts=1), what="completed"
            )
        assert lost == [[job_id]], "the test lost no claim reply"
        assert runs == [1]
        events = [(e.type, e.attempt) for e in await outbox_events(redis, namespace, job_id)]
        assert events == [
            ("scheduled", 0),
            ("attempt_started", 1),
            ("attempt_released", 1),
            ("attempt_started", 1),
            ("completed", 1),
        ], events


async def test_scheduling_again_with_the_same_id_after_a_lost_reply_creates_one_job(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), FakeClock(START_MS)) as s:
        assert (
            await s.schedule_in("t", 60, job_id="order-1") == "order-1"
        )  # landed; say its reply was lost
        assert await s.schedule_in("t", 60, job_id="order-1") == "order-1"  # the retry
        assert (await s.stats())["scheduled"] == 1
        events = [e.type for e in await outbox_events(redis, namespace, "order-1")]
        assert events == ["scheduled"]
