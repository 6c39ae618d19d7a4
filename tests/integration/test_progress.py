"""event.progress() and event.log() on a real Redis (and PostgreSQL for the audit): kept with
the job (JobInfo.progress, JobInfo.logs) while it runs and after, bounded (100 lines, 1 KiB
each), refused when invalid (nothing written), fenced by the lease token, carried to the
outbox only by an attempt that reported, to the audit's attempt rows and `horae jobs show`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidProgress, JobState, LeaseLost, LogLine, Progress
from scheduler.cli.main import cli
from scheduler.core.keys import Keys
from scheduler.core.progress import TEXT_BYTES, TRUNCATED
from scheduler.core.timeutil import ms_to_utc
from scheduler.store.scripts import ReportCode, ScriptCode
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    eventually,
    in_state,
    make_scheduler,
    outbox_events,
)

FIXED_1S = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1_000}}


async def test_progress_and_logs_are_kept_bounded_and_checked(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)
    reached, gate, refused = asyncio.Event(), asyncio.Event(), []

    @reg.on_event("report.render")
    async def render(event: ScheduleArrivedEvent) -> None:
        await event.progress(40, "rendered 4/10 pages")
        for n in range(120):
            await event.log(f"line {n}")
        await event.log("é" * 2_000)  # 4000 bytes: cut to 1 KiB
        for bad in ({"percent": 101}, {"percent": "40"}, {"percent": 50, "message": 7}):
            try:
                await event.progress(**bad)
            except InvalidProgress as exc:
                refused.append((exc.field, str(exc)))
        try:
            await event.log(None)  # type: ignore[arg-type]
        except InvalidProgress as exc:
            refused.append((exc.field, str(exc)))
        reached.set()
        await gate.wait()
        await event.progress(100, "done")

    @reg.on_event("plain")
    async def plain(event: ScheduleArrivedEvent) -> None:
        pass

    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("report.render", 0)
        quiet = await s.schedule_in("plain", 0)
        async with s.worker():
            await asyncio.wait_for(reached.wait(), timeout=10)
            info = await s.get_job(job_id)
            assert info is not None and info.state is JobState.RUNNING
            assert (
                info.progress == Progress(40, "rendered 4/10 pages") == (40, "rendered 4/10 pages")
            )
            assert refused == [
                ("percent", "percent must be from 0 to 100, got 101"),
                ("percent", "percent must be a number from 0 to 100, got str '40'"),
                ("message", "message must be a str, got int 7"),
                ("line", "line must be a str, got NoneType None"),
            ]  # and none of them was written: the progress is still the valid one
            assert len(info.logs) == 100 and info.logs[:2] == ["line 21", "line 22"]
            assert all(
                isinstance(line, LogLine) and line.attempt == 1 and line.at == ms_to_utc(START_MS)
                for line in info.logs
            )
            long = info.logs[-1]
            assert (
                long.endswith(TRUNCATED)
                and len(long.encode()) <= TEXT_BYTES
                and long.startswith("éé")
            )
            assert await redis.llen(Keys(namespace).logs(job_id)) == 100
            gate.set()
            info = await s.wait(job_id, timeout=10)
            await s.wait(quiet, timeout=10)
        assert (
            info.state is JobState.COMPLETED
            and info.progress == (100, "done")
            and len(info.logs) == 100
        )
        quiet_info = await s.get_job(quiet)
        assert quiet_info is not None and quiet_info.progress is None and quiet_info.logs == []

        [done] = [e for e in await outbox_events(redis, namespace, job_id) if e.type == "completed"]
        assert json.loads(done.get("progress")) == {"percent": 100, "message": "done"}
        assert json.loads(done.get("logs")) == [*(f"line {n}" for n in range(21, 120)), long]
        [plain_done] = [
            e for e in await outbox_events(redis, namespace, quiet) if e.type == "completed"
        ]
        assert (
            "progress" not in plain_done.fields and "logs" not in plain_done.fields
        )  # nothing reported: nothing extra

        assert await s.delete(job_id)
        assert (
            await redis.exists(Keys(namespace).logs(job_id)) == 0
        )  # the log list goes with the job


async def test_a_stale_attempt_cannot_write(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    reg, kept = ListenerRegistry(), []

    @reg.on_event("t")
    async def keep(event: ScheduleArrivedEvent) -> None:
        await event.progress(10, "mine")
        kept.append(event)

    async with make_scheduler(redis_url, namespace, reg) as s:
        job_id = await s.schedule_in("t", 0)
        async with s.worker():
            await eventually(lambda: in_state(s, job_id, JobState.COMPLETED), what="completed")
        [event] = kept
        with pytest.raises(LeaseLost, match=f"attempt 1 of job {job_id} no longer holds its lease"):
            await event.progress(90, "too late")  # its attempt was settled: the token is gone
        with pytest.raises(LeaseLost):
            await event.log("too late")
        info = await s.get_job(job_id)
        assert info is not None and info.progress == (10, "mine") and info.logs == []

        running = await s.schedule_in("t", "1h")
        claimed, _, _ = await s.store.claim(s.clock.now_ms() + 3_600_000, 1, 60_000, "w-1")
        [job] = claimed
        assert (
            await s.store.set_progress(running, job.token, f"{job.attempt} 5 ")
            == ReportCode.RECORDED
        )
        assert await s.store.set_progress(running, "w-0:1", "1 99 stale") == ScriptCode.LEASE_LOST
        assert await s.store.append_log(running, "w-0:1", "1 0 stale") == ScriptCode.LEASE_LOST
        info = await s.get_job(running)
        assert info is not None and info.progress == (5, None) and info.logs == []
        assert await redis.exists(Keys(namespace).logs(running)) == 0


def horae(redis_url: str, database_url: str, namespace: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(
        cli,
        ["--redis-url", redis_url, "--database-url", database_url, "--namespace", namespace, *args],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    return result.exit_code, result.stdout


async def test_each_attempts_report_reaches_the_audit_and_jobs_show(
    redis_url: str, database_url: str, namespace: str
) -> None:
    reg, clock = ListenerRegistry(), FakeClock(START_MS)

    @reg.on_event("export.run")
    async def export(event: ScheduleArrivedEvent) -> None:
        if event.attempt == 1:
            await event.progress(40, "half way")
            await event.log("a1 start")
            raise RuntimeError("disk full")
        await event.log("a2 start")
        await event.progress(100)
        await event.log("a2 end")

    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        job_id = await s.schedule_in("export.run", 0, retry=FIXED_1S)
        async with s.worker():
            await eventually(
                lambda: in_state(s, job_id, JobState.RETRYING, 1), what="attempt 1 failed"
            )
            clock.advance(1)
            info = await s.wait(job_id, timeout=10)
        assert info.state is JobState.COMPLETED and info.progress == (100, None)
        assert info.logs == ["a1 start", "a2 start", "a2 end"]
        assert [line.attempt for line in info.logs] == [1, 2, 2]  # type: ignore[attr-defined]
        await s.audit.flush(timeout=10)
        first, second = await s.audit.attempts(job_id)
        assert (first.progress, first.logs, first.outcome) == (
            Progress(40, "half way"),
            ["a1 start"],
            "failed",
        )
        assert (second.progress_percent, second.progress_message) == (100.0, None)
        assert second.progress == (100, None) and second.logs == ["a2 start", "a2 end"]

    code, out = await asyncio.to_thread(
        horae, redis_url, database_url, namespace, "jobs", "show", job_id, "--json"
    )
    assert code == 0, out
    doc: dict[str, Any] = json.loads(out)
    assert doc["progress"] == {"percent": 100, "message": None}
    assert [(line["attempt"], line["line"]) for line in doc["logs"]] == [
        (1, "a1 start"),
        (2, "a2 start"),
        (2, "a2 end"),
    ]
    assert [
        (a["progress_percent"], a["progress_message"], a["logs"]) for a in doc["audit_attempts"]
    ] == [(40.0, "half way", ["a1 start"]), (100.0, None, ["a2 start", "a2 end"])]
    code, out = await asyncio.to_thread(
        horae, redis_url, database_url, namespace, "jobs", "show", job_id
    )
    assert code == 0, out
    assert "100%" in out and "#1] a1 start" in out and "#2] a2 end" in out and "40% half way" in out
