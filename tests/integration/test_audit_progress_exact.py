"""An attempt's progress reaches the audit as its listener reported it (issue 33): the
settling script once re-encoded the percent with Lua's cjson, 14 significant digits
(33.333333333333336 became 33.333333333333), while Redis kept every digit."""

from __future__ import annotations

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, audited_scheduler

PERCENT = 100 / 3  # 33.333333333333336
MESSAGE = 'a "quoted" / slashed \\ line \U0001f600'


async def test_the_audit_keeps_every_digit_of_a_progress(
    redis_url: str, database_url: str, namespace: str
) -> None:
    reg = ListenerRegistry()

    @reg.on_event("export.run")
    async def export(event: ScheduleArrivedEvent) -> None:
        await event.progress(PERCENT, MESSAGE)

    async with audited_scheduler(redis_url, database_url, namespace, reg, FakeClock(START_MS)) as s:
        job_id = await s.schedule_in("export.run", 0)
        async with s.worker():
            info = await s.wait(job_id, timeout=10)
        assert info.state is JobState.COMPLETED and info.progress == (PERCENT, MESSAGE)
        await s.audit.flush(timeout=10)
        [attempt] = await s.audit.attempts(job_id)
    assert (attempt.progress_percent, attempt.progress_message) == (PERCENT, MESSAGE)
    assert attempt.progress == info.progress
