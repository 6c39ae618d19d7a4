"""The rollups' pure parts (audit/rollups.py) and the charts drawn from them (console/trends.py,
console/charts.py): lateness buckets and quantiles, what a batch adds, series over a window,
and SVG that escapes every text and never draws a failure too thin to see."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import scheduler.core.outbox as outbox
from audit.rollups import BUCKETS, BatchRollup, RollupRow, bucket_of, quantile_ms
from console.charts import depth_chart, finished_chart
from console.trends import build_series, check_range, window
from scheduler.core.errors import ScheduleError
from scheduler.core.outbox import OutboxEvent
from scheduler.core.timeutil import utc_to_ms

NOW = datetime(2027, 1, 15, 8, 30, 20, tzinfo=UTC)
T0 = utc_to_ms(datetime(2027, 1, 15, 8, 29, tzinfo=UTC))


def event(kind: str, ts_ms: int, **fields: str) -> OutboxEvent:
    return OutboxEvent(
        stream_id=f"{ts_ms}-0", type=kind, job_id="j", ts_ms=ts_ms, attempt=1, fields=fields
    )


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [
        (-5, 0),
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 2),
        (4, 3),
        (1023, 10),
        (1024, 11),
        (10**12, BUCKETS - 1),
    ],
)
def test_lateness_buckets_are_powers_of_two(ms: int, bucket: int) -> None:
    assert bucket_of(ms) == bucket


def test_quantiles_read_the_bucket_upper_bound() -> None:
    assert quantile_ms([0] * BUCKETS, 0.5) is None
    histogram = [0] * BUCKETS
    histogram[0], histogram[4], histogram[10] = 50, 49, 1  # < 1 ms, [8, 16) ms, [512, 1024) ms
    assert quantile_ms(histogram, 0.5) == 0
    assert quantile_ms(histogram, 0.9) == 16
    assert quantile_ms(histogram, 0.995) == 1024


def test_a_batch_adds_per_topic_and_minute_at_the_audits_times() -> None:
    rollup = BatchRollup()
    rollup.add("pay", event(outbox.ATTEMPT_STARTED, T0 + 5_000, due=str(T0 + 4_990)))  # 10 ms
    rollup.add("pay", event(outbox.ATTEMPT_FAILED, T0 + 6_000, finished=str(T0 + 5_500)))
    rollup.add("pay", event(outbox.RETRY_SCHEDULED, T0 + 6_000))
    rollup.add("pay", event(outbox.COMPLETED, T0 + 61_000, finished=str(T0 + 59_999)))
    rollup.add("pay", event(outbox.FAILED, T0 + 62_000))
    rollup.add("mail", event(outbox.DEDUPLICATED, T0 + 1))
    rollup.add("mail", event(outbox.SCHEDULED, T0 + 1))  # (counts nothing)
    rows = {(r["topic"], utc_to_ms(r["minute"])): r for r in rollup.rows()}
    assert sorted(rows) == [("mail", T0), ("pay", T0), ("pay", T0 + 60_000)]
    first = rows[("pay", T0)]
    assert (first["completed"], first["failed_attempts"], first["retried"]) == (1, 1, 1)
    assert first["lateness"][bucket_of(10)] == 1 and sum(first["lateness"]) == 1
    assert rows[("pay", T0 + 60_000)]["failed"] == 1
    assert rows[("mail", T0)]["deduplicated"] == 1
    assert utc_to_ms(first["hour"]) == T0 - T0 % 3_600_000


def row(minute: datetime, completed: int, failed: int, waiting: int | None = None) -> RollupRow:
    return RollupRow("pay", minute, completed, failed, 0, 0, 0, (1,) * 3, waiting, 0)


def test_series_fill_a_window_ending_with_nows_bucket() -> None:
    start, count, step, hourly = window("1h", NOW)
    assert (start, count, step, hourly) == (
        datetime(2027, 1, 15, 7, 31, tzinfo=UTC),
        60,
        60_000,
        False,
    )
    rows = [
        row(datetime(2027, 1, 15, 8, 30, tzinfo=UTC), 3, 2, 7),
        row(datetime(2027, 1, 15, 7, 30, tzinfo=UTC), 100, 100),  # before the window
    ]
    s = build_series("pay", rows, "1h", NOW)
    assert (s.completed[-1], s.failed[-1], s.total_completed, s.total_failed) == (3, 2, 3, 2)
    assert s.depth[-1] == 7 and s.depth[0] is None and s.latest_depth == 7
    assert s.failure_rate == 0.4 and s.starts == 3
    assert len(build_series("pay", rows, "24h", NOW).completed) == 24
    with pytest.raises(ScheduleError, match="range must be one of 1h, 24h"):
        check_range("7d")


def test_charts_escape_texts_and_show_small_failures() -> None:
    nasty = '<script>alert("x")</script>'
    s = build_series(nasty, [row(NOW - timedelta(minutes=1), 1000, 2, 5)], "1h", NOW)
    svg = finished_chart(s)
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "1,000 completed, 2 failed" in svg
    bad = svg.split('class="bar-bad"')[1]
    assert float(bad.split('height="')[1].split('"')[0]) >= 2.0  # 2 of 1000: still visible
    assert "<script>" not in depth_chart(s) and "5 waiting or retrying" in depth_chart(s)
    empty = build_series("pay", [], "24h", NOW)
    assert "No job of this topic finished in the last 24 hours" in finished_chart(empty)
    assert "No queue-depth sample" in depth_chart(empty)
