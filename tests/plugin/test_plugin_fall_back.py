"""The nightly cron of issue 20: 01:30 America/Chicago across the 2026 fall-back night
(Sunday Nov 1: 02:00 CDT becomes 01:00 CST, so 01:30 happens twice), a listener that fails
twice before it succeeds, settled by one `advance` over two days of fake time."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from horae import Backoff, RetryPolicy, ScheduleArrivedEvent, on_event

TOPIC = "plugin.fall_back.nightly"
CHICAGO = ZoneInfo("America/Chicago")
FAILS_BEFORE_SUCCESS = 2
CALLS: list[tuple[str, int, datetime]] = []  # (job id, attempt, the fake clock when it ran)
NOW: list[object] = []  # the test's time machine, for the listener


@on_event(TOPIC)
async def nightly(event: ScheduleArrivedEvent) -> None:
    CALLS.append((event.scheduled_job_id, event.attempt, NOW[0].now()))  # type: ignore[attr-defined]
    if event.attempt <= FAILS_BEFORE_SUCCESS:
        raise RuntimeError(f"upstream down (attempt {event.attempt})")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


@pytest.mark.horae(start="2026-10-31T12:00:00Z", raise_errors=False)  # 07:00 CDT, Saturday
async def test_nightly_cron_in_chicago_across_fall_back_with_two_failing_attempts(
    horae, horae_clock
) -> None:
    NOW[:] = [horae_clock]
    CALLS.clear()
    await horae.schedule_cron(
        "nightly-chicago",
        "30 1 * * *",
        topic=TOPIC,
        tz="America/Chicago",
        retry=RetryPolicy(attempts=3, backoff=Backoff("exponential", delay_ms=600_000)),
    )

    await horae_clock.advance("48h")

    assert horae_clock.now() == utc(2026, 11, 2, 12)
    # Nov 1: 01:30 CDT (06:30Z) only, not 01:30 CST (07:30Z): an ambiguous wall time runs
    # at its first occurrence. Retries after 10 and 20 min, the last one at 07:00Z, the very
    # instant clocks fall back (01:00 CST). Nov 2: 01:30 CST (07:30Z).
    first, second = utc(2026, 11, 1, 6, 30), utc(2026, 11, 2, 7, 30)
    nov1 = [first, utc(2026, 11, 1, 6, 40), utc(2026, 11, 1, 7, 0)]
    nov2 = [second, utc(2026, 11, 2, 7, 40), utc(2026, 11, 2, 8, 0)]
    ids = [f"cron:nightly-chicago:{int(t.timestamp() * 1000)}" for t in (first, second)]
    assert CALLS == [
        (ids[0], 1, nov1[0]),
        (ids[0], 2, nov1[1]),
        (ids[0], 3, nov1[2]),
        (ids[1], 1, nov2[0]),
        (ids[1], 2, nov2[1]),
        (ids[1], 3, nov2[2]),
    ]
    assert [first.astimezone(CHICAGO).isoformat(), second.astimezone(CHICAGO).isoformat()] == [
        "2026-11-01T01:30:00-05:00",
        "2026-11-02T01:30:00-06:00",
    ]

    ran = await horae.ran(TOPIC)
    assert [(j.id, j.state.value, j.attempts) for j in ran] == [
        (ids[0], "completed", 3),
        (ids[1], "completed", 3),
    ]
    assert [[a.started_at for a in j.runs] for j in ran] == [nov1, nov2]
    assert [[a.outcome for a in j.runs] for j in ran] == [["failed", "failed", "succeeded"]] * 2
    assert ran[0].runs[0].error_message == "upstream down (attempt 1)"
    assert ran[0].run_at == first and ran[0].last_error is not None  # the last failure is kept
    assert await horae.failed(TOPIC) == []
    assert [e.attempt for e in horae_clock.errors] == [
        1,
        2,
        1,
        2,
    ]  # seen, not raised (raise_errors=False)
    cron = await horae.get_cron("nightly-chicago")
    assert cron is not None and cron.next_run_at == utc(2026, 11, 3, 7, 30)
