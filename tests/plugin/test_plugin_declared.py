"""A schedule declared beside its listener (`@on_event(topic, cron=..., tz=...)`) is stored
by the fixture's worker at start, so a test of a declared nightly job needs no
schedule_cron call: advance and assert."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from horae import ScheduleArrivedEvent, on_event

TOPIC = "plugin.declared.nightly"
RUNS: list[datetime] = []


@on_event(TOPIC, cron="0 3 * * *", tz="America/Chicago")
async def nightly(event: ScheduleArrivedEvent) -> None:
    RUNS.append(event.run_at)


@pytest.mark.horae(start="2026-10-31T12:00:00Z")
async def test_a_declared_cron_runs_in_its_zone_across_fall_back(horae, horae_clock) -> None:
    RUNS.clear()
    await horae_clock.advance("49h")

    nights = [
        datetime(2026, 11, 1, 9, tzinfo=UTC),
        datetime(2026, 11, 2, 9, tzinfo=UTC),
    ]
    assert (
        sorted(job.run_at for job in await horae.ran(TOPIC)) == nights
    )  # 03:00 CST, after fall-back
    assert sorted(RUNS) == nights
    assert f"{TOPIC}:cron" in [info.name for info in await horae.list_crons()]
