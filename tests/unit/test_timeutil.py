"""Wall times in zones (gaps, overlaps) and duration strings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from scheduler import InvalidDelay, InvalidTimezone
from scheduler.core.timeutil import parse_duration, resolve_run_at, utc_to_ms


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("wall", "tz", "expected"),
    [
        ("2026-07-01T09:00", "Europe/Berlin", "2026-07-01T07:00"),  # CEST, +2
        ("2026-12-01T09:00", "Europe/Berlin", "2026-12-01T08:00"),  # CET, +1
        ("2026-03-29T02:30", "Europe/Berlin", "2026-03-29T01:00"),  # gap 02:00-03:00 → 03:00 CEST
        ("2026-10-25T02:30", "Europe/Berlin", "2026-10-25T00:30"),  # overlap → first (CEST)
        ("2026-03-08T02:30", "America/Chicago", "2026-03-08T08:00"),  # gap → 03:00 CDT
        ("2026-11-01T01:30", "America/Chicago", "2026-11-01T06:30"),  # overlap → first (CDT)
        (
            "2026-10-04T02:15",
            "Australia/Lord_Howe",
            "2026-10-03T15:30",
        ),  # 30-min gap → 02:30 LHDT (+11)
        ("2026-04-05T01:45", "Australia/Lord_Howe", "2026-04-04T14:45"),  # overlap → first (+11)
        ("2026-05-01T12:00", "UTC", "2026-05-01T12:00"),
    ],
)
def test_naive_wall_time_in_zone(wall: str, tz: str, expected: str) -> None:
    assert resolve_run_at(datetime.fromisoformat(wall), tz) == utc(expected)


def test_aware_datetime_is_used_as_is() -> None:
    aware = datetime(2026, 3, 29, 2, 30, tzinfo=timezone(timedelta(hours=5)))
    assert resolve_run_at(aware, "Europe/Berlin") == utc("2026-03-28T21:30")


def test_unknown_zone_names_the_value() -> None:
    with pytest.raises(InvalidTimezone, match="'Mars/Olympus'"):
        resolve_run_at(datetime(2026, 1, 1), "Mars/Olympus")
    with pytest.raises(InvalidTimezone):
        resolve_run_at(datetime(2026, 1, 1), "")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("250ms", 0.25),
        (" 1.5 s", 1.5),
        (timedelta(minutes=2), 120),
        (7, 7),
        (0.5, 0.5),
        (0, 0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        "5 minutes",
        "-5s",
        "",
        "5x",
        -1,
        timedelta(seconds=-1),
        float("nan"),
        float("inf"),
        True,
        None,
        [5],
    ],
)
def test_bad_durations_are_rejected(value: object) -> None:
    with pytest.raises(InvalidDelay) as info:
        parse_duration(value, "delay")  # type: ignore[arg-type]
    assert "delay" in str(info.value)


def test_a_datetime_now_read_before_the_call_is_never_later_than_the_callers_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """schedule_at(topic, datetime.now(tz)) is due now (the run-now path, local handoff
    included) at every instant within a millisecond, as schedule_in(0) is: run_at and the
    caller's clock round alike (truncating the clock missed half of them)."""
    from scheduler.core.clock import SystemClock, caller_now_ms

    clock, base = SystemClock(), 1_800_000_000.0
    for micros in range(0, 1000, 7):
        instant = base + micros / 1_000_000
        run_at = datetime.fromtimestamp(instant, tz=UTC)  # what datetime.now() read
        for later in (0.0, 0.000_05):  # the call reads its clock then, or 50 µs after
            monkeypatch.setattr("scheduler.core.clock.time.time", lambda: instant + later)
            assert utc_to_ms(resolve_run_at(run_at, "UTC")) <= caller_now_ms(clock), (micros, later)
