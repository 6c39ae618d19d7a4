"""The nightly report wired through the cron feature: `horae worker` installs
horae.audit.nightly; its tick is an ordinary, audited job whose listener runs
the Spark pipeline in a subprocess over the previous day."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from audit.analytics.nightly import NIGHTLY_TOPIC, install_nightly
from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.core.timeutil import utc_to_ms
from scheduler.testing.clocks import FakeClock
from tests.analytics_helpers import require_spark
from tests.integration.engine_fixtures import eventually

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def at(text: str) -> int:
    return utc_to_ms(datetime.fromisoformat(text).replace(tzinfo=UTC))


async def _terminal(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state.terminal


async def test_nightly_tick_reports_on_the_previous_day(
    redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> None:
    require_spark()
    clock = FakeClock(at("2026-11-20T12:00:00"))
    reg = ListenerRegistry()

    @reg.on_event("nightly.ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        return None

    @reg.on_event("nightly.bad")
    async def bad(event: ScheduleArrivedEvent) -> None:
        raise ValueError("order 1234 not found")

    base = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    settings = base.model_copy(
        update={
            "analytics": base.analytics.model_copy(
                update={
                    "report_dir": str(tmp_path),
                    "dataset_uri": str(tmp_path / "dataset"),
                    "master": "local[2]",
                }
            )
        }
    )
    async with Scheduler(settings=settings, listeners=reg, clock=clock) as s:
        await install_nightly(s)
        info = await s.get_cron(NIGHTLY_TOPIC)
        assert info is not None and info.next_run_at == datetime(2026, 11, 21, 2, 30, tzinfo=UTC)
        assert reg.listeners(NIGHTLY_TOPIC), "the listener is registered"
        await install_nightly(s)  # every worker calls it: unchanged upsert, same next run
        assert (await s.get_cron(NIGHTLY_TOPIC)).next_run_at == info.next_run_at  # type: ignore[union-attr]
        async with s.worker():
            jobs = [await s.schedule_in("nightly.ok", 0) for _ in range(3)]
            jobs.append(await s.schedule_in("nightly.bad", 0, retry={"attempts": 1}))
            for job_id in jobs:
                await eventually(lambda: _terminal(s, job_id), what="the day's jobs")
            await s.audit.flush()
            clock.set_ms(at("2026-11-21T02:30:00"))
            tick = f"cron:{NIGHTLY_TOPIC}:{at('2026-11-21T02:30:00')}"
            await eventually(lambda: _terminal(s, tick), timeout=240, what="the nightly report job")
            job = await s.get_job(tick)
            assert job is not None and job.state is JobState.COMPLETED, job
            await s.audit.flush()
            row = await s.audit.get(tick)
            assert row is not None and row.status == "completed", (
                "the nightly run is audited like any job"
            )
    summary = json.loads((tmp_path / "nightly-2026-11-20" / "summary.json").read_text())
    assert summary["window"] == {"since": "2026-11-20", "until": "2026-11-20", "zone": "UTC"}
    topics = {t["topic"]: t for t in summary["topics"]}
    assert (topics["nightly.ok"]["jobs"], topics["nightly.ok"]["completed"]) == (3, 3)
    assert (topics["nightly.bad"]["failed"], topics["nightly.bad"]["failure_rate"]) == (1, 1.0)
    assert (tmp_path / "nightly-2026-11-20" / "report.html").is_file()
    assert any((tmp_path / "dataset").rglob("*.parquet")), (
        "the child used this process's dataset setting"
    )
