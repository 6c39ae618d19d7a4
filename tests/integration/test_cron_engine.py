"""Cron schedules on a real Redis with a FakeClock: upsert semantics, pause,
remove, ticks as ordinary jobs, misfire modes, and daylight-saving changes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidCron, InvalidTimezone, JobState, RetryPolicyInvalid
from scheduler.core.job import CronInfo
from scheduler.core.timeutil import utc_to_ms
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import eventually, make_scheduler


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def ms(text: str) -> int:
    return utc_to_ms(utc(text))


async def tick_jobs(redis: aioredis.Redis, namespace: str, name: str) -> list[str]:
    """Ids of the jobs a schedule created, oldest tick first."""
    keys = [
        k.decode()
        async for k in redis.scan_iter(match="{" + namespace + "*}:j:cron:" + name + ":*")
    ]
    return sorted((k.split("}:j:", 1)[1] for k in keys), key=lambda i: int(i.rsplit(":", 1)[1]))


def tick_of(job_id: str) -> datetime:
    return datetime.fromtimestamp(int(job_id.rsplit(":", 1)[1]) / 1000, tz=UTC)


async def test_upsert_list_pause_resume_remove(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        info = await s.schedule_cron(
            "nightly-invoices",
            "0 3 * * *",
            topic="billing.invoice",
            tz="America/Chicago",
            payload={"batch": 1},
            retry={"attempts": 2},
            metadata={"team": "billing"},
        )
        assert info.next_run_at == utc("2026-06-02T08:00:00")  # 03:00 CDT
        assert (info.cron, info.tz, info.topic, info.paused, info.last_run_at) == (
            "0 3 * * *",
            "America/Chicago",
            "billing.invoice",
            False,
            None,
        )
        assert (
            info.metadata == {"team": "billing", "cron": "nightly-invoices"}
            and info.max_attempts == 2
        )

        clock.advance(3600)  # an unchanged upsert one hour later keeps the next run
        again = await s.schedule_cron(
            "nightly-invoices",
            "0 3 * * *",
            topic="billing.invoice",
            tz="America/Chicago",
            payload={"batch": 2},
        )
        assert again.next_run_at == info.next_run_at and again.payload == {"batch": 2}
        moved = await s.schedule_cron(
            "nightly-invoices", "0 4 * * *", topic="billing.invoice", tz="America/Chicago"
        )
        assert moved.next_run_at == utc("2026-06-02T09:00:00")
        rezoned = await s.schedule_cron(
            "nightly-invoices", "0 4 * * *", topic="billing.invoice", tz="Europe/Berlin"
        )
        assert rezoned.next_run_at == utc("2026-06-02T02:00:00")

        await s.schedule_cron("every-5", "*/5 * * * *", topic="t")
        assert [c.name for c in await s.list_crons()] == ["every-5", "nightly-invoices"]
        assert await s.pause_cron("every-5") is True
        assert await s.pause_cron("every-5") is False
        paused = await s.get_cron("every-5")
        assert paused is not None and paused.paused and paused.next_run_at is None
        clock.advance(3 * 3600)
        assert await s.resume_cron("every-5") is True
        resumed = await s.get_cron("every-5")
        assert resumed is not None and resumed.next_run_at == utc("2026-06-01T16:05:00")
        with pytest.raises(InvalidCron, match="no cron schedule named 'ghost'"):
            await s.pause_cron("ghost")
        assert await s.delete_cron("every-5") is True
        assert await s.delete_cron("every-5") is False
        assert [c.name for c in await s.list_crons()] == ["nightly-invoices"]


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"cron": "61 * * * *"}, InvalidCron, "cron"),
        ({"cron": "* * * *"}, InvalidCron, "cron"),
        ({"tz": "America/Springfield"}, InvalidTimezone, "tz"),
        ({"misfire": "sometimes"}, InvalidCron, "misfire"),
        ({"name": ""}, InvalidCron, "name"),
        ({"retry": {"attempts": 99}}, RetryPolicyInvalid, "attempts"),
    ],
)
async def test_invalid_schedules_store_nothing(
    redis_url: str,
    namespace: str,
    redis: aioredis.Redis,
    kwargs: dict[str, Any],
    error: type,
    field: str,
) -> None:
    args: dict[str, Any] = {"name": "n", "cron": "0 * * * *", "topic": "t", **kwargs}
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        with pytest.raises(error) as info:
            await s.schedule_cron(args.pop("name"), args.pop("cron"), **args)
        assert info.value.field == field  # type: ignore[attr-defined]
    assert [k async for k in redis.scan_iter(match="{" + namespace + "}:*")] == []


async def test_ticks_become_ordinary_jobs_exactly_once(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock, runs = ListenerRegistry(), FakeClock(ms("2026-06-01T12:00:00")), []

    @reg.on_event("sync.inventory")
    async def sync(event: ScheduleArrivedEvent) -> None:
        runs.append((event.scheduled_job_id, event.run_at, event.metadata))

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        await s.schedule_cron(
            "inv", "30 */10 * * * *", topic="sync.inventory", payload={"full": False}
        )  # :00:30 ...
        async with s.worker():
            for expected in ("12:00:30", "12:10:30", "12:20:30"):
                info = await s.get_cron("inv")
                assert info is not None and info.next_run_at == utc(f"2026-06-01T{expected}")
                clock.set_ms(utc_to_ms(info.next_run_at))
                # Every process calls schedule_cron at startup: unchanged upserts never double-fire.
                await s.schedule_cron(
                    "inv", "30 */10 * * * *", topic="sync.inventory", payload={"full": False}
                )
                await eventually(
                    lambda: _count(
                        runs, len(runs) >= 1 and runs[-1][1] == utc(f"2026-06-01T{expected}")
                    ),
                    what=f"tick {expected}",
                )
            await asyncio.sleep(0.1)
        assert [r[1] for r in runs] == [
            utc(f"2026-06-01T{t}") for t in ("12:00:30", "12:10:30", "12:20:30")
        ]
        assert runs[0][0] == f"cron:inv:{ms('2026-06-01T12:00:30')}"
        assert runs[0][2] == {"cron": "inv"}
        job = await s.get_job(runs[0][0])
        assert job is not None and job.cron == "inv" and job.state is JobState.COMPLETED
        info = await s.get_cron("inv")
        assert info is not None and info.last_run_at == utc("2026-06-01T12:20:30")
        assert len(await tick_jobs(redis, namespace, "inv")) == 3


async def _count(_: Any, value: bool) -> bool:
    return value


@pytest.mark.parametrize(
    ("misfire", "expected_ticks"),
    [
        ("coalesce", ["2026-06-01T13:00:00"]),  # one run for all missed ticks
        ("skip", []),  # none; waits for the next
        ("all", [f"2026-06-01T{h}:00:00" for h in (13, 14, 15, 16, 17)]),
    ],
)
async def test_misfire_modes_after_downtime(
    redis_url: str, namespace: str, redis: aioredis.Redis, misfire: str, expected_ticks: list[str]
) -> None:
    clock = FakeClock(ms("2026-06-01T12:30:00"))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        await s.schedule_cron("hourly", "0 * * * *", topic="t", misfire=misfire)
        clock.set_ms(ms("2026-06-01T17:20:00"))  # no worker ran through 13:00..17:00
        async with s.worker(all_topics=True):
            await eventually(
                lambda: _next_is(s, "hourly", utc("2026-06-01T18:00:00")), what="schedule advanced"
            )
            await asyncio.sleep(0.1)
        jobs = await tick_jobs(redis, namespace, "hourly")
        assert [tick_of(j) for j in jobs] == [utc(t) for t in expected_ticks]


async def test_misfire_all_is_capped(redis_url: str, namespace: str, redis: aioredis.Redis) -> None:
    clock = FakeClock(ms("2026-06-01T12:00:30"))
    s = make_scheduler(redis_url, namespace, ListenerRegistry(), clock, cron={"misfire_cap": 7})
    async with s:
        await s.schedule_cron("minutely", "* * * * *", topic="t", misfire="all")
        clock.advance(3600)
        async with s.worker(all_topics=True):
            await eventually(
                lambda: _next_is(s, "minutely", utc("2026-06-01T13:01:00")),
                what="schedule advanced",
            )
        jobs = await tick_jobs(redis, namespace, "minutely")
        assert [tick_of(j) for j in jobs] == [utc(f"2026-06-01T12:{m:02d}:00") for m in range(1, 8)]


async def _next_is(s: Any, name: str, when: datetime) -> bool:
    info: CronInfo | None = await s.get_cron(name)
    return info is not None and info.next_run_at == when


async def run_ticks(s: Any, clock: FakeClock, name: str, until: datetime) -> list[datetime]:
    """Jump the clock from tick to tick until `until`; returns the fired ticks (UTC)."""
    fired = []
    while True:
        info = await s.get_cron(name)
        assert info is not None and info.next_run_at is not None
        if info.next_run_at > until:
            return fired
        clock.set_ms(utc_to_ms(info.next_run_at))
        await eventually(
            lambda: _last_run_is(s, name, info.next_run_at), what=f"tick {info.next_run_at}"
        )
        fired.append(info.next_run_at)


async def _last_run_is(s: Any, name: str, when: datetime) -> bool:
    info = await s.get_cron(name)
    return info is not None and info.last_run_at == when


@pytest.mark.parametrize(
    ("tz", "expr", "start", "until", "expected"),
    [
        # Spring forward: 02:30 does not exist on 03-08 → once, at 03:00 CDT (08:00Z).
        (
            "America/Chicago",
            "30 2 * * *",
            "2026-03-07T00:00:00",
            "2026-03-09T23:00:00",
            ["2026-03-07T08:30:00", "2026-03-08T08:00:00", "2026-03-09T07:30:00"],
        ),
        # Fall back: 01:30 happens twice on 11-01 → once (CDT, 06:30Z).
        (
            "America/Chicago",
            "30 1 * * *",
            "2026-10-31T00:00:00",
            "2026-11-02T23:00:00",
            ["2026-10-31T06:30:00", "2026-11-01T06:30:00", "2026-11-02T07:30:00"],
        ),
        # Berlin: 02:30 in the 03-29 gap → 03:00 CEST (01:00Z); 02:30 twice on 10-25 → first
        # (00:30Z).
        (
            "Europe/Berlin",
            "30 2 * * *",
            "2026-03-28T00:00:00",
            "2026-03-29T23:00:00",
            ["2026-03-28T01:30:00", "2026-03-29T01:00:00"],
        ),
        (
            "Europe/Berlin",
            "30 2 * * *",
            "2026-10-24T00:00:00",
            "2026-10-25T23:00:00",
            ["2026-10-24T00:30:00", "2026-10-25T00:30:00"],
        ),
        # Lord Howe shifts 30 minutes: 02:15 on 10-04 falls in 02:00→02:30 → 02:30 LHDT (15:30Z on
        # 10-03).
        (
            "Australia/Lord_Howe",
            "15 2 * * *",
            "2026-10-02T12:00:00",
            "2026-10-04T12:00:00",
            ["2026-10-02T15:45:00", "2026-10-03T15:30:00"],
        ),
        # Lord Howe fall back on 04-05: 01:45 occurs twice (+11 then +10:30) → first only (14:45Z on
        # 04-04).
        (
            "Australia/Lord_Howe",
            "45 1 * * *",
            "2026-04-03T12:00:00",
            "2026-04-05T16:00:00",
            ["2026-04-03T14:45:00", "2026-04-04T14:45:00", "2026-04-05T15:15:00"],
        ),
    ],
)
async def test_daylight_saving_daily_wall_times(
    redis_url: str,
    namespace: str,
    redis: aioredis.Redis,
    tz: str,
    expr: str,
    start: str,
    until: str,
    expected: list[str],
) -> None:
    clock = FakeClock(ms(start))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        await s.schedule_cron("dst", expr, topic="t", tz=tz)
        async with s.worker(all_topics=True):
            fired = await run_ticks(s, clock, "dst", utc(until))
        assert fired == [utc(t) for t in expected]
        assert [tick_of(j) for j in await tick_jobs(redis, namespace, "dst")] == fired


async def test_every_15_minutes_keeps_real_time_through_fall_back(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(ms("2026-11-01T05:50:00"))  # 00:50 CDT, Chicago
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        await s.schedule_cron("q", "*/15 * * * *", topic="t", tz="America/Chicago")
        async with s.worker(all_topics=True):
            fired = await run_ticks(s, clock, "q", utc("2026-11-01T08:30:00"))
        # 01:00 CDT .. 01:45 CDT, then 01:00 CST .. 01:45 CST, then 02:00 CST..: every 15 real
        # minutes.
        expected = [ms("2026-11-01T06:00:00") + i * 900_000 for i in range(11)]
        assert [utc_to_ms(f) for f in fired] == expected


async def test_schedules_are_evaluated_by_due_time_not_scanned(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(ms("2026-06-01T12:00:00"))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        for i in range(300):
            await s.schedule_cron(f"far-{i}", "0 0 1 1 *", topic="t")
        await s.schedule_cron("near", "*/5 * * * *", topic="t")
        due = await s.store.due_crons(ms("2026-06-01T12:05:00"), 1000)
        assert [r["name"] for r in due] == ["near"]


async def test_a_stale_read_cannot_fire_a_future_tick(redis_url: str, namespace: str) -> None:
    """A worker that read `next` after another advanced it must not fire that future tick early."""
    from scheduler.core.job import CronFire
    from scheduler.store.scripts import ScriptCode

    clock = FakeClock(ms("2026-06-01T12:00:00"))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        info = await s.schedule_cron("c", "*/5 * * * *", topic="t")
        assert info.next_run_at is not None
        future = utc_to_ms(info.next_run_at)
        stale = CronFire("c", future, future + 300_000, ((future, f"cron:c:{future}", ""),))
        assert await s.store.fire_crons([stale], clock.now_ms()) == [ScriptCode.STALE]
        assert await s.get_job(f"cron:c:{future}") is None
        assert await s.store.fire_crons([stale], future) == [1], "the same fire is fine once due"


async def test_a_stored_schedule_that_no_longer_parses_is_paused_not_spun_on(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    from scheduler.core.keys import Keys

    clock = FakeClock(ms("2026-06-01T12:00:00"))
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock) as s:
        await s.schedule_cron("legacy", "*/5 * * * *", topic="t")
        await redis.hset(Keys(namespace).cron("legacy"), "expr", "*/5 * * * * * * *")  # older rules
        clock.advance(600)
        async with s.worker(all_topics=True):
            await eventually(lambda: _is_paused(s, "legacy"), what="the broken schedule paused")
        assert await tick_jobs(redis, namespace, "legacy") == []


async def _is_paused(s: Any, name: str) -> bool:
    info = await s.get_cron(name)
    return info is not None and info.paused
