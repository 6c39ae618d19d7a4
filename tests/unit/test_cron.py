"""Pure tests of scheduler.core.cron. Every expected instant is written as a UTC ISO
string computed by hand from the zone's offsets (stated next to each), so a
reader can check them without running anything.

Offsets: America/Chicago CST -06:00 / CDT -05:00; Europe/Berlin CET +01:00 /
CEST +02:00; Australia/Lord_Howe LHST +10:30 / LHDT +11:00 (a 30-minute shift).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from scheduler.core.cron import CronSpec, cron_job_id, fires_between, next_fire, parse_cron
from scheduler.core.errors import InvalidCron, InvalidTimezone

CHI, BER, LHI = "America/Chicago", "Europe/Berlin", "Australia/Lord_Howe"
QUARTER_MS = 15 * 60 * 1000


def ms(iso: str) -> int:
    """'2026-03-08T08:00:00Z' -> epoch ms."""
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fires(expr: str, tz: str, after: str, until: str, cap: int = 10_000) -> list[str]:
    return [iso(m) for m in fires_between(parse_cron(expr, tz), ms(after), ms(until), cap)]


# --- the 2026 transitions the expectations below rely on -------------------------------------


@pytest.mark.parametrize(
    ("tz", "instant", "before", "after"),
    [
        (CHI, "2026-03-08T08:00:00Z", "01:59:59-0600", "03:00:00-0500"),
        (CHI, "2026-11-01T07:00:00Z", "01:59:59-0500", "01:00:00-0600"),
        (BER, "2026-03-29T01:00:00Z", "01:59:59+0100", "03:00:00+0200"),
        (BER, "2026-10-25T01:00:00Z", "02:59:59+0200", "02:00:00+0100"),
        (LHI, "2026-04-04T15:00:00Z", "01:59:59+1100", "01:30:00+1030"),
        (LHI, "2026-10-03T15:30:00Z", "01:59:59+1030", "02:30:00+1100"),
    ],
)
def test_tzdata_has_the_transitions_we_assume(
    tz: str, instant: str, before: str, after: str
) -> None:
    at = datetime.fromisoformat(instant)
    assert (at - timedelta(seconds=1)).astimezone(ZoneInfo(tz)).strftime("%H:%M:%S%z") == before
    assert at.astimezone(ZoneInfo(tz)).strftime("%H:%M:%S%z") == after


# --- daily wall time inside the spring-forward gap: once, at the end of the gap -------------


@pytest.mark.parametrize(
    ("expr", "tz", "after", "until", "expected"),
    [
        # 02:30 CST 03-07 = 08:30Z; 03-08 02:30 missing -> 03:00 CDT = 08:00Z; 02:30 CDT 03-09 =
        # 07:30Z
        (
            "30 2 * * *",
            CHI,
            "2026-03-07T00:00:00Z",
            "2026-03-10T00:00:00Z",
            ["2026-03-07T08:30:00Z", "2026-03-08T08:00:00Z", "2026-03-09T07:30:00Z"],
        ),
        # 02:30 CET 03-28 = 01:30Z; 03-29 02:30 missing -> 03:00 CEST = 01:00Z; 02:30 CEST = 00:30Z
        (
            "30 2 * * *",
            BER,
            "2026-03-28T00:00:00Z",
            "2026-03-31T00:00:00Z",
            ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        ),
        # 02:15 LHST 10-03 = 10-02 15:45Z; 10-04 02:15 missing -> 02:30 LHDT = 10-03 15:30Z;
        # 02:15 LHDT 10-05 = 10-04 15:15Z
        (
            "15 2 * * *",
            LHI,
            "2026-10-02T00:00:00Z",
            "2026-10-05T00:00:00Z",
            ["2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"],
        ),
        # several matches inside one gap collapse into one fire at 03:00 CDT, then 02:00 CDT 03-09
        (
            "*/20 2 * * *",
            CHI,
            "2026-03-08T00:00:00Z",
            "2026-03-09T07:10:00Z",
            ["2026-03-08T08:00:00Z", "2026-03-09T07:00:00Z"],
        ),
    ],
)
def test_daily_in_gap_fires_once_after_the_gap(
    expr: str, tz: str, after: str, until: str, expected: list[str]
) -> None:
    assert fires(expr, tz, after, until) == expected


# --- daily wall time inside the fall-back overlap: first occurrence only --------------------


@pytest.mark.parametrize(
    ("expr", "tz", "after", "until", "expected"),
    [
        # 01:30 CDT 10-31 = 06:30Z; 11-01 01:30 CDT = 06:30Z (not 01:30 CST = 07:30Z); 01:30 CST
        # 11-02 = 07:30Z
        (
            "30 1 * * *",
            CHI,
            "2026-10-31T00:00:00Z",
            "2026-11-03T00:00:00Z",
            ["2026-10-31T06:30:00Z", "2026-11-01T06:30:00Z", "2026-11-02T07:30:00Z"],
        ),
        # 02:30 CEST 10-24 = 00:30Z; 10-25 02:30 CEST = 00:30Z (not CET 01:30Z); 02:30 CET 10-26 =
        # 01:30Z
        (
            "30 2 * * *",
            BER,
            "2026-10-24T00:00:00Z",
            "2026-10-27T00:00:00Z",
            ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        ),
        # 01:45 LHDT 04-04 = 04-03 14:45Z; 04-05 01:45 LHDT = 04-04 14:45Z (not LHST 15:15Z);
        # 01:45 LHST 04-06 = 04-05 15:15Z
        (
            "45 1 * * *",
            LHI,
            "2026-04-03T00:00:00Z",
            "2026-04-06T00:00:00Z",
            ["2026-04-03T14:45:00Z", "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"],
        ),
        # hour-restricted minute steps are wall-clock kind: 01:00/01:20/01:40 CDT once, then 11-02
        # 01:00 CST
        (
            "*/20 1 * * *",
            CHI,
            "2026-11-01T00:00:00Z",
            "2026-11-02T07:00:00Z",
            [
                "2026-11-01T06:00:00Z",
                "2026-11-01T06:20:00Z",
                "2026-11-01T06:40:00Z",
                "2026-11-02T07:00:00Z",
            ],
        ),
    ],
)
def test_daily_in_overlap_fires_once(
    expr: str, tz: str, after: str, until: str, expected: list[str]
) -> None:
    assert fires(expr, tz, after, until) == expected


def test_after_inside_second_occurrence_does_not_refire_the_first() -> None:
    spec = parse_cron("30 1 * * *", CHI)
    # 07:10Z = 01:10 CST, second pass through 01:xx; 01:30 already fired at 06:30Z -> 11-02 01:30
    # CST
    assert iso(next_fire(spec, ms("2026-11-01T07:10:00Z"))) == "2026-11-02T07:30:00Z"


# --- hourly across both changes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tz", "after", "until", "expected"),
    [
        # 00:00 CST, 01:00 CST, [02:00 missing -> 03:00 CDT, which is also 03:00 itself], 04:00 CDT,
        # 05:00 CDT
        (
            CHI,
            "2026-03-08T05:30:00Z",
            "2026-03-08T10:30:00Z",
            [
                "2026-03-08T06:00:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-08T08:00:00Z",
                "2026-03-08T09:00:00Z",
                "2026-03-08T10:00:00Z",
            ],
        ),
        # 00:00 CDT, 01:00 CDT, [01:00 CST = 07:00Z is a repeat: skipped], 02:00 CST, 03:00 CST,
        # 04:00 CST
        (
            CHI,
            "2026-11-01T04:30:00Z",
            "2026-11-01T10:30:00Z",
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T08:00:00Z",
                "2026-11-01T09:00:00Z",
                "2026-11-01T10:00:00Z",
            ],
        ),
        # 00:00 CET, 01:00 CET, [02:00 missing -> 03:00 CEST], 04:00 CEST
        (
            BER,
            "2026-03-28T22:30:00Z",
            "2026-03-29T02:30:00Z",
            [
                "2026-03-28T23:00:00Z",
                "2026-03-29T00:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z",
            ],
        ),
        # 00:00, 01:00, 02:00 CEST, [02:00 CET = 01:00Z skipped], 03:00 CET, 04:00 CET
        (
            BER,
            "2026-10-24T21:30:00Z",
            "2026-10-25T03:30:00Z",
            [
                "2026-10-24T22:00:00Z",
                "2026-10-24T23:00:00Z",
                "2026-10-25T00:00:00Z",
                "2026-10-25T02:00:00Z",
                "2026-10-25T03:00:00Z",
            ],
        ),
        # 00:00, 01:00 LHST, [02:00 missing -> 02:30 LHDT = 15:30Z], 03:00 LHDT, 04:00 LHDT
        (
            LHI,
            "2026-10-03T13:00:00Z",
            "2026-10-03T17:30:00Z",
            [
                "2026-10-03T13:30:00Z",
                "2026-10-03T14:30:00Z",
                "2026-10-03T15:30:00Z",
                "2026-10-03T16:00:00Z",
                "2026-10-03T17:00:00Z",
            ],
        ),
        # 00:00, 01:00 LHDT, then 02:00 LHST (90 real minutes later; 01:30-01:59 repeat, no full
        # hour in it)
        (
            LHI,
            "2026-04-04T12:30:00Z",
            "2026-04-04T17:00:00Z",
            [
                "2026-04-04T13:00:00Z",
                "2026-04-04T14:00:00Z",
                "2026-04-04T15:30:00Z",
                "2026-04-04T16:30:00Z",
            ],
        ),
    ],
)
def test_hourly_across_transitions(tz: str, after: str, until: str, expected: list[str]) -> None:
    assert fires("0 * * * *", tz, after, until) == expected


# --- "*/15": every real quarter hour through both changes -----------------------------------


@pytest.mark.parametrize(
    ("tz", "local_midnight", "next_local_midnight", "count"),
    [
        (CHI, "2026-03-08T06:00:00Z", "2026-03-09T05:00:00Z", 92),  # 23 h day
        (CHI, "2026-11-01T05:00:00Z", "2026-11-02T06:00:00Z", 100),  # 25 h day
        (BER, "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", 92),
        (BER, "2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z", 100),
        (LHI, "2026-10-03T13:30:00Z", "2026-10-04T13:00:00Z", 94),  # 23.5 h day
        (LHI, "2026-04-04T13:00:00Z", "2026-04-05T13:30:00Z", 98),  # 24.5 h day
    ],
)
def test_quarter_hours_follow_real_time(
    tz: str, local_midnight: str, next_local_midnight: str, count: int
) -> None:
    spec = parse_cron("*/15 * * * *", tz)
    start, end = ms(local_midnight), ms(next_local_midnight)
    wall_day = fires_between(spec, start - 1, end - 1, 10_000)  # fires in [midnight, next midnight)
    assert len(wall_day) == count
    assert wall_day[0] == start
    assert all(b - a == QUARTER_MS for a, b in zip(wall_day, wall_day[1:]))
    real_day = fires_between(
        spec, start + 7 * QUARTER_MS, start + 7 * QUARTER_MS + 24 * 3600_000, 10_000
    )
    assert len(real_day) == 96  # any 24 real hours hold exactly 96 quarter hours


def test_quarter_hours_fire_at_both_occurrences_in_overlap() -> None:
    got = fires("*/15 * * * *", CHI, "2026-11-01T06:05:00Z", "2026-11-01T08:00:00Z")
    # 01:15 CDT = 06:15Z and 01:15 CST = 07:15Z both fire
    assert got == [
        "2026-11-01T06:15:00Z",
        "2026-11-01T06:30:00Z",
        "2026-11-01T06:45:00Z",
        "2026-11-01T07:00:00Z",
        "2026-11-01T07:15:00Z",
        "2026-11-01T07:30:00Z",
        "2026-11-01T07:45:00Z",
        "2026-11-01T08:00:00Z",
    ]


def test_step_not_dividing_the_shift_follows_the_wall_plus_gap_rule() -> None:
    # "*/45" = :00 and :45. Lord Howe spring: 00:45, 01:00, 01:45 LHST; 02:00 missing -> 02:30 LHDT
    # (15:30Z); then 02:45 and 03:00 LHDT.
    got = fires("*/45 * * * *", LHI, "2026-10-03T14:00:00Z", "2026-10-03T16:00:00Z")
    assert got == [
        "2026-10-03T14:15:00Z",
        "2026-10-03T14:30:00Z",
        "2026-10-03T15:15:00Z",
        "2026-10-03T15:30:00Z",
        "2026-10-03T15:45:00Z",
        "2026-10-03T16:00:00Z",
    ]


# --- six fields, seconds first -----------------------------------------------------------------


def test_six_fields_read_seconds_first() -> None:
    spec = parse_cron(
        "5 0 * * * *", "UTC"
    )  # second 5 of minute 0 of every hour (not minute 5 of hour 0)
    assert spec.has_seconds
    assert fires("5 0 * * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z") == [
        "2026-01-01T00:00:05Z",
        "2026-01-01T01:00:05Z",
    ]
    # 03:30:30 daily in Berlin: CET 02:30:30Z on 03-28, CEST 01:30:30Z on the gap day 03-29
    assert fires("30 30 3 * * *", BER, "2026-03-28T00:00:00Z", "2026-03-30T00:00:00Z") == [
        "2026-03-28T02:30:30Z",
        "2026-03-29T01:30:30Z",
    ]
    # a seconds wall time inside the gap goes to the end of the gap: 03:00:00 CDT
    assert (
        iso(next_fire(parse_cron("15 30 2 * * *", CHI), ms("2026-03-08T00:00:00Z")))
        == "2026-03-08T08:00:00Z"
    )


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        # 01:59:50 CDT, 01:00:00 CST, 01:00:10 CST: every 10 real seconds through the overlap
        (
            "2026-11-01T06:59:45Z",
            ["2026-11-01T06:59:50Z", "2026-11-01T07:00:00Z", "2026-11-01T07:00:10Z"],
        ),
        # 01:59:50 CST, 03:00:00 CDT, 03:00:10 CDT: straight through the gap
        (
            "2026-03-08T07:59:45Z",
            ["2026-03-08T07:59:50Z", "2026-03-08T08:00:00Z", "2026-03-08T08:00:10Z"],
        ),
    ],
)
def test_seconds_step_keeps_real_time(after: str, expected: list[str]) -> None:
    assert fires("*/10 * * * * *", CHI, after, "2026-12-31T00:00:00Z", cap=3) == expected


# --- boundaries, cap, ids ------------------------------------------------------------------------


def test_next_fire_is_strictly_after() -> None:
    spec = parse_cron("*/15 * * * *", "UTC")
    assert iso(next_fire(spec, ms("2026-01-01T00:15:00Z"))) == "2026-01-01T00:30:00Z"
    assert iso(next_fire(spec, ms("2026-01-01T00:15:00Z") - 1)) == "2026-01-01T00:15:00Z"


def test_fires_between_is_half_open_and_capped() -> None:
    spec = parse_cron("*/15 * * * *", "UTC")
    after, until = ms("2026-01-01T00:00:00Z"), ms("2026-01-01T01:00:00Z")
    assert [iso(m) for m in fires_between(spec, after, until, 100)] == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
        "2026-01-01T00:45:00Z",
        "2026-01-01T01:00:00Z",
    ]
    assert [iso(m) for m in fires_between(spec, after, until, 2)] == [
        "2026-01-01T00:15:00Z",
        "2026-01-01T00:30:00Z",
    ]
    assert fires_between(spec, after, until, 0) == []
    assert fires_between(spec, until, after, 10) == []


def test_result_does_not_depend_on_the_process_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    try:
        assert fires("30 2 * * *", BER, "2026-03-28T12:00:00Z", "2026-03-29T12:00:00Z") == [
            "2026-03-29T01:00:00Z"
        ]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_cron_job_id_is_deterministic() -> None:
    assert cron_job_id("nightly", 1767225600000) == "cron:nightly:1767225600000"
    assert cron_job_id("nightly", 1767225600000) == cron_job_id("nightly", 1767225600000)
    assert cron_job_id("nightly", 1767225600000) != cron_job_id("nightly", 1767225600001)


def test_parse_normalizes_and_classifies() -> None:
    assert parse_cron("  */15   *  * * * ", CHI) == CronSpec(
        "*/15 * * * *", CHI, has_seconds=False, elapsed=True
    )
    assert parse_cron("@hourly", "UTC").expr == "0 * * * *"
    assert not parse_cron("0 * * * *", "UTC").elapsed
    assert not parse_cron("*/15 9-17 * * *", "UTC").elapsed
    assert parse_cron("0 */5 0-23 * * *", "UTC").elapsed


# --- invalid input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("61 * * * *", ["minute", "'61'", "0-59"]),
        ("0 24 * * *", ["hour", "'24'", "0-23"]),
        ("0 0 0 * *", ["day-of-month", "'0'", "1-31"]),
        ("* * * foo *", ["month", "'foo'", "JAN-DEC"]),
        ("0 0 * * 8", ["day-of-week", "'8'", "0-7"]),
        ("70 * * * * *", ["second", "'70'", "0-59"]),
        ("1-70/5 * * * *", ["minute", "'1-70/5'"]),
        ("H * * * *", ["minute", "'H'"]),
        ("R * * * *", ["minute", "'R'"]),
        ("* * * *", ["4 fields", "5", "6"]),
        ("* * * * * * *", ["7 fields"]),
        ("0 0 31 2 *", ["never fires", "'31'", "'2'"]),
        ("", ["non-empty"]),
    ],
)
def test_invalid_expression_names_field_and_value(expr: str, names: list[str]) -> None:
    with pytest.raises(InvalidCron) as caught:
        parse_cron(expr, "UTC")
    for name in names:
        assert name in str(caught.value)
    assert caught.value.code == "SCHEDULE_CRON_INVALID"


@pytest.mark.parametrize("tz", ["Mars/Olympus_Mons", "", "America/"])
def test_invalid_zone_names_the_value(tz: str) -> None:
    with pytest.raises(InvalidTimezone) as caught:
        parse_cron("0 * * * *", tz)
    assert repr(tz) in str(caught.value)
