"""Schedules declared beside listeners, on a real Redis with a FakeClock: a worker's start
stores the declarations of the topics it serves (ticking in their zone, or every interval
with bounded jitter), workers starting together create one schedule whose ticks run once,
an unchanged restart keeps a due tick, a changed expression reschedules, and a declaration
gone from the code is removed without touching schedule_cron's schedules or topics the
worker does not serve."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import ConfigError, InvalidCron, JobState, Scheduler
from scheduler.cli.main import cli
from scheduler.core.job import CronInfo
from scheduler.core.timeutil import utc_to_ms
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import eventually, is_true, make_scheduler

Runs = list[tuple[str, datetime]]


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def ms(text: str) -> int:
    return utc_to_ms(utc(text))


def recording(runs: Runs, topic: str, **declared: Any) -> ListenerRegistry:
    """A registry whose one listener of `topic` (declaring `declared`) records (job id, run_at)."""
    reg = ListenerRegistry()

    @reg.on_event(topic, **declared)
    async def record(event: ScheduleArrivedEvent) -> None:
        runs.append((event.scheduled_job_id, event.run_at))

    return reg


async def cron(s: Scheduler, name: str) -> CronInfo:
    info = await s.get_cron(name)
    assert info is not None, f"no schedule {name}"
    return info


async def run_next_tick(s: Scheduler, clock: FakeClock, name: str, runs: Runs) -> datetime:
    """Move the clock to the schedule's next run; wait until a listener ran that tick."""
    due = (await cron(s, name)).next_run_at
    assert due is not None
    before = len(runs)
    clock.set_ms(utc_to_ms(due))
    await eventually(lambda: is_true(len(runs) > before and runs[-1][1] == due), what=f"tick {due}")
    return due


async def test_a_declared_cron_is_stored_at_worker_start_and_ticks_in_its_zone(
    redis_url: str, namespace: str
) -> None:
    runs: Runs = []
    reg = recording(runs, "billing.invoice", cron="0 3 * * *", tz="America/Chicago", misfire="skip")
    clock = FakeClock(ms("2026-10-31T12:00:00"))
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        assert await s.list_crons() == []  # a producer declares nothing: workers do
        async with s.worker():
            info = await cron(s, "billing.invoice:cron")
            assert (info.cron, info.tz, info.topic, info.misfire, info.declared, info.every) == (
                "0 3 * * *",
                "America/Chicago",
                "billing.invoice",
                "skip",
                True,
                None,
            )
            # 2026-11-01 is the fall-back night: 03:00 is CST (UTC-6) from then on.
            assert await run_next_tick(s, clock, "billing.invoice:cron", runs) == utc(
                "2026-11-01T09:00:00"
            )
            assert await run_next_tick(s, clock, "billing.invoice:cron", runs) == utc(
                "2026-11-02T09:00:00"
            )
        assert runs[0][0] == f"cron:billing.invoice:cron:{ms('2026-11-01T09:00:00')}"
        job = await s.get_job(runs[0][0])
        assert job is not None and job.cron == "billing.invoice:cron"
        assert job.metadata == {"cron": "billing.invoice:cron"}


async def test_workers_starting_together_create_one_schedule_and_run_each_tick_once(
    redis_url: str, namespace: str
) -> None:
    runs: Runs = []
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    schedulers = [
        make_scheduler(redis_url, namespace, recording(runs, "sync", every="10m"), clock)
        for _ in range(3)
    ]
    for s in schedulers:
        await s.connect()
    try:
        results = await asyncio.gather(*(s._sync_declared(["sync"]) for s in schedulers))
        assert sorted(len(r.created) for r in results) == [
            0,
            0,
            1,
        ]  # one creates, the others find it unchanged
        assert all(r.created + r.unchanged == ("sync:every",) for r in results)
        workers = [s.make_worker() for s in schedulers]
        await asyncio.gather(*(w.start() for w in workers))
        try:
            assert [c.name for c in await schedulers[0].list_crons()] == ["sync:every"]
            for _ in range(4):
                await run_next_tick(schedulers[0], clock, "sync:every", runs)
            await asyncio.sleep(
                0.2
            )  # a double run would have been recorded by now; the ids say it anyway
        finally:
            await asyncio.gather(*(w.stop() for w in workers))
        assert [r[1] for r in runs] == [utc(f"2026-06-01T12:{m}:00") for m in (10, 20, 30, 40)]
        assert len({r[0] for r in runs}) == 4
        for job_id, _ in runs:
            job = await schedulers[0].get_job(job_id)
            assert job is not None and job.state is JobState.COMPLETED and job.attempts == 1
    finally:
        for s in schedulers:
            await s.close()


async def test_an_unchanged_restart_keeps_a_due_tick_and_a_changed_expression_reschedules(
    redis_url: str, namespace: str
) -> None:
    runs: Runs = []
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    v1 = recording(runs, "report", cron="0 3 * * *", tz="Europe/Berlin")
    async with make_scheduler(redis_url, namespace, v1, clock) as s:
        async with s.worker():
            assert (await cron(s, "report:cron")).next_run_at == utc("2026-06-02T01:00:00")
        clock.set_ms(ms("2026-06-02T01:30:00"))  # the tick fell due while no worker ran
        async with s.worker():  # an unchanged declaration must not move `next` past the due tick
            await eventually(
                lambda: is_true(len(runs) == 1), what="the tick due during the restart"
            )
        assert runs[0][1] == utc("2026-06-02T01:00:00")
    v2 = recording(runs, "report", cron="30 4 * * *", tz="Europe/Berlin")
    async with make_scheduler(redis_url, namespace, v2, clock) as s:
        async with s.worker():
            info = await cron(s, "report:cron")
            assert (info.cron, info.next_run_at) == ("30 4 * * *", utc("2026-06-02T02:30:00"))
            assert info.last_run_at == utc("2026-06-02T01:00:00")  # the same schedule, updated
            assert await run_next_tick(s, clock, "report:cron", runs) == utc("2026-06-02T02:30:00")
    v3 = recording(runs, "report", every="1h", name="report:cron")  # the same name, now an interval
    async with make_scheduler(redis_url, namespace, v3, clock) as s:
        async with s.worker():
            info = await cron(s, "report:cron")
            assert (info.cron, info.every, info.next_run_at) == (
                "",
                timedelta(hours=1),
                utc("2026-06-02T03:00:00"),
            )


async def test_a_declaration_gone_from_the_code_is_removed_and_nothing_else(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    runs: Runs = []
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    v1 = recording(runs, "a", cron="0 * * * *")
    v1.on_event("b", every="5m")(lambda event: None)
    v1.on_event("c", every="5m")(lambda event: None)
    async with make_scheduler(redis_url, namespace, v1, clock) as s:
        async with s.worker():
            pass
        await s.schedule_cron(
            "a-by-hand", "0 * * * *", topic="a"
        )  # schedule_cron's: never a worker's to remove
        assert [c.name for c in await s.list_crons()] == [
            "a-by-hand",
            "a:cron",
            "b:every",
            "c:every",
        ]
    v2 = recording(runs, "a")  # a's declaration deleted; no listener of b or c any more
    v2.on_event("c", every="5m")(lambda event: None)
    async with make_scheduler(redis_url, namespace, v2, clock) as s:
        async with s.worker(topics=["a"]):  # serves a only: c's declaration is not its to keep
            pass
        assert [c.name for c in await s.list_crons()] == ["a-by-hand", "b:every", "c:every"]
        async with s.worker(
            all_topics=True
        ):  # every topic, but b has no listener here: not its schedule
            pass
        assert [c.name for c in await s.list_crons()] == ["a-by-hand", "b:every", "c:every"]
        assert not (await cron(s, "a-by-hand")).declared and (await cron(s, "b:every")).declared
    assert not await redis.exists("{" + namespace + "}:cron:a:cron")
    # What starting workers read instead of every schedule: the declared ones' names.
    assert await redis.smembers("{" + namespace + "}:crons_declared") == {b"b:every", b"c:every"}


async def test_a_declared_name_and_a_schedule_cron_name_never_take_each_other_over(
    redis_url: str, namespace: str
) -> None:
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    async with make_scheduler(redis_url, namespace, recording([], "a", every="1h"), clock) as s:
        await s.schedule_cron("a:every", "0 3 * * *", topic="a")
        worker = s.make_worker()
        with pytest.raises(
            ConfigError, match="'a:every' is declared beside a listener, but .* schedule_cron"
        ):
            await worker.start()
        assert (await cron(s, "a:every")).cron == "0 3 * * *"
        await s.delete_cron("a:every")
        async with s.worker():
            assert (await cron(s, "a:every")).declared
        with pytest.raises(InvalidCron, match="'a:every' is declared beside a listener") as info:
            await s.schedule_cron("a:every", "0 3 * * *", topic="a")
        assert info.value.field == "name" and (await cron(s, "a:every")).every == timedelta(hours=1)


async def test_a_declaration_the_scheduler_refuses_stops_the_start_before_anything_is_written(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    def positive(payload: Any) -> int:
        if not isinstance(payload, int) or payload <= 0:
            raise ValueError("must be a positive integer")
        return payload

    reg = ListenerRegistry()
    reg.on_event("fine", every="1h")(lambda event: None)
    reg.on_event("typed", positive, cron="0 3 * * *", payload=-1)(lambda event: None)
    async with make_scheduler(redis_url, namespace, reg) as s:
        with pytest.raises(
            ConfigError,
            match="'typed:cron' declared beside the listeners of topic 'typed': "
            "payload refused by the topic's schema: payload: must be a positive",
        ):
            await s.make_worker().start()
        assert await s.list_crons() == []


async def test_an_interval_ticks_every_period_with_bounded_jitter_and_shows_in_the_cli(
    redis_url: str, namespace: str
) -> None:
    runs: Runs = []
    clock = FakeClock(ms("2026-06-01T12:02:00"))  # past the 12:00 slot's tick, whatever its jitter
    reg = recording(runs, "poll", every="15m", jitter="2m")
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        async with s.worker():
            ticks = [await run_next_tick(s, clock, "poll:every", runs) for _ in range(6)]
        slots = [t.replace(minute=t.minute // 15 * 15, second=0, microsecond=0) for t in ticks]
        assert slots == [utc("2026-06-01T12:15:00") + timedelta(minutes=15 * i) for i in range(6)]
        assert all(timedelta(0) <= t - slot < timedelta(minutes=2) for t, slot in zip(ticks, slots))
        assert (
            len(set(t - slot for t, slot in zip(ticks, slots))) > 1
        )  # jittered, not a constant shift
        assert [r[0] for r in runs] == [f"cron:poll:every:{utc_to_ms(t)}" for t in ticks]
        assert (
            await s.pause_cron("poll:every") and (await cron(s, "poll:every")).next_run_at is None
        )
        clock.set_ms(
            utc_to_ms(slots[-1] + timedelta(minutes=62))
        )  # past the tick of the slot 1h after the last
        assert await s.resume_cron(
            "poll:every"
        )  # from the next tick after now: in the slot 1h15m after the last
        resumed = (await cron(s, "poll:every")).next_run_at
        assert resumed is not None
        assert timedelta(0) <= resumed - (slots[-1] + timedelta(minutes=75)) < timedelta(minutes=2)

    def horae(*args: str) -> Any:
        result = CliRunner().invoke(
            cli, ["--redis-url", redis_url, "--namespace", namespace, *args]
        )
        assert result.exit_code == 0, result.output
        return result.stdout

    shown = json.loads(await asyncio.to_thread(horae, "cron", "show", "poll:every", "--json"))
    assert (shown["cron"], shown["every"], shown["jitter"], shown["declared"]) == (
        "",
        900.0,
        120.0,
        True,
    )
    table = await asyncio.to_thread(horae, "cron", "show", "poll:every")
    assert "15m, jitter up to 2m" in table and "in code" in table
    listed = await asyncio.to_thread(horae, "cron", "list")
    assert "every 15m, jitter up to 2m" in listed
