"""Job results on a real Redis (and PostgreSQL for the audit): what a job's listeners return is kept
with the job (JobInfo.result, `wait`), one listener's value or a mapping by listener name; None
stores nothing (no field, no event field); a result over [limits] result_bytes or not JSON fails
the attempt naming the listener and retries; it goes with the job's retention; it reaches the
audit's successful attempt row and `horae jobs show`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import redis.asyncio as aioredis
from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.cli.main import cli
from scheduler.core.keys import Keys
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    make_scheduler,
    outbox_events,
)

FIXED_1S = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}


async def test_wait_returns_the_result_of_one_or_several_listeners(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg = ListenerRegistry()

    @reg.on_event("report.one")
    async def render(event: ScheduleArrivedEvent) -> Any:
        return {"pages": event.payload["pages"], "big": 2**70, "ratio": 0.1}

    @reg.on_event("report.many")
    async def count(event: ScheduleArrivedEvent) -> Any:
        return 12

    @reg.on_event("report.many")
    def summary(event: ScheduleArrivedEvent) -> Any:  # a sync listener, in a thread
        return ["a", "é"]

    @reg.on_event("report.many")
    async def quiet(event: ScheduleArrivedEvent) -> None:
        return None

    @reg.on_event("report.none")
    async def nothing(event: ScheduleArrivedEvent) -> None:
        pass

    async with make_scheduler(redis_url, namespace, reg) as s:
        one = await s.schedule_in("report.one", 0, payload={"pages": 3})
        many = await s.schedule_in("report.many", 0)
        none = await s.schedule_in("report.none", 0)
        async with s.worker():
            info = await s.wait(one, timeout=10)
            many_info = await s.wait(many, timeout=10)
            none_info = await s.wait(none, timeout=10)
        assert info.state is JobState.COMPLETED
        assert info.result == {"pages": 3, "big": 2**70, "ratio": 0.1}
        name = f"{__name__}.test_wait_returns_the_result_of_one_or_several_listeners.<locals>"
        # several listeners: by name, only those that returned something
        assert many_info.result == {f"{name}.count": 12, f"{name}.summary": ["a", "é"]}
        assert none_info.state is JobState.COMPLETED and none_info.result is None
        assert (await s.get_job(one)).result == info.result  # type: ignore[union-attr]

        keys = Keys(namespace)
        assert json.loads(await redis.hget(keys.job(one), "result")) == info.result
        # None stores nothing: no field in the job hash, no field in its event
        assert not await redis.hexists(keys.job(none), "result")
        assert "result" not in (await redis.hgetall(keys.job(none)))
        [done] = [e for e in await outbox_events(redis, namespace, none) if e.type == "completed"]
        assert "result" not in done.fields
        [done] = [e for e in await outbox_events(redis, namespace, one) if e.type == "completed"]
        assert json.loads(done.get("result")) == info.result


async def test_a_result_too_large_or_not_json_fails_the_attempt_and_retries(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)

    @reg.on_event("export")
    async def export(event: ScheduleArrivedEvent) -> Any:
        if event.attempt == 1:
            return {"rows": "x" * 200}  # over the 128 bytes below
        if event.attempt == 2:
            return {"when": object()}
        return {"rows": 2}

    async with make_scheduler(redis_url, namespace, reg, clock, limits={"result_bytes": 128}) as s:
        job_id = await s.schedule_in("export", 0, retry=FIXED_1S)
        listener = f"{__name__}.test_a_result_too_large_or_not_json_fails_the_attempt_and_retries"
        listener += ".<locals>.export"
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.RETRYING, 1), what="attempt 1")
            info = await s.get_job(job_id)
            assert info is not None and info.last_error is not None and info.result is None
            assert info.last_error["type"] == "result_too_large"
            assert listener in info.last_error["message"]
            assert "[limits] result_bytes" in info.last_error["message"]
            assert not await redis.hexists(Keys(namespace).job(job_id), "result")
            clock.advance(1)
            await eventually(lambda: in_state(s, job_id, JobState.RETRYING, 2), what="attempt 2")
            info = await s.get_job(job_id)
            assert info is not None and info.last_error is not None
            assert info.last_error["type"] == "result_not_serializable"
            assert listener in info.last_error["message"]
            clock.advance(1)
            info = await s.wait(job_id, timeout=10)
        assert info.state is JobState.COMPLETED and info.attempts == 3
        assert info.result == {"rows": 2}
        failed = [
            e for e in await outbox_events(redis, namespace, job_id) if e.type == "attempt_failed"
        ]
        assert [json.loads(e.get("error"))["type"] for e in failed] == [
            "result_too_large",
            "result_not_serializable",
        ]
        assert all("result" not in e.fields for e in failed)


async def test_a_result_goes_with_its_job(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg = ListenerRegistry()

    @reg.on_event("t")
    async def keep(event: ScheduleArrivedEvent) -> Any:
        return {"n": event.payload}

    # keep only the newest completed job: the older one is pruned, its result with it
    clock = FakeClock(START_MS)
    async with make_scheduler(
        redis_url, namespace, reg, clock, retention={"completed_count": 1}
    ) as s:
        first = await s.schedule_in("t", 0, payload=1)
        async with s.worker():
            assert (await s.wait(first, timeout=10)).result == {"n": 1}
            assert await redis.hexists(Keys(namespace).job(first), "result")
            clock.advance(1)  # finished later: the newer of the two (ties go by id)
            second = await s.schedule_in("t", 0, payload=2)
            assert (await s.wait(second, timeout=10)).result == {"n": 2}
        assert await s.get_job(first) is None
        assert not await redis.exists(Keys(namespace).job(first))
        assert await s.delete(second)
        assert not await redis.exists(Keys(namespace).job(second))


async def test_the_result_reaches_the_audit_and_jobs_show(
    redis_url: str, database_url: str, namespace: str
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)

    @reg.on_event("invoice.send")
    async def send(event: ScheduleArrivedEvent) -> Any:
        if event.attempt == 1:
            raise RuntimeError("smtp down")
        return {"message_id": "m-1", "amount": 2**70, "rate": 0.1}

    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("invoice.send", 0, retry=FIXED_1S)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.RETRYING, 1), what="attempt 1")
            clock.advance(1)
            info = await s.wait(job_id, timeout=10)
        assert info.result == {"message_id": "m-1", "amount": 2**70, "rate": 0.1}
        await s.audit.flush(timeout=10)
        first, second = await s.audit.attempts(job_id)
        assert first.outcome == "failed" and first.result is None
        assert second.outcome == "succeeded" and second.result == info.result

    base = ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace]
    shown = await asyncio.to_thread(
        CliRunner().invoke, cli, [*base, "jobs", "show", job_id, "--json"]
    )
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["result"] == info.result
    assert [a["result"] for a in doc["audit_attempts"]] == [None, info.result]
    shown = await asyncio.to_thread(CliRunner().invoke, cli, [*base, "jobs", "show", job_id])
    assert shown.exit_code == 0, shown.output
    assert "result" in shown.stdout and '"message_id": "m-1"' in shown.stdout
