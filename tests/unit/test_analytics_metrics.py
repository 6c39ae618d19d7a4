"""Each metric of audit/analytics/metrics.py on small hand-built DataFrames
(one shared local SparkSession for the whole test process)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from audit.analytics import metrics
from tests.analytics_helpers import spark_session

pytestmark = pytest.mark.spark

D1, D2 = date(2026, 11, 20), date(2026, 11, 21)
T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
JOBS = (
    "job_id string, topic string, status string, attempts int, "
    "failed_attempts int, finished_at timestamp, local_day date"
)
ATTEMPTS = (
    "job_id string, topic string, outcome string, finished_at timestamp, duration_ms bigint, "
    "lateness_ms bigint, error_type string, error_message string, local_day date"
)


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    yield spark_session()


def jobs(spark: SparkSession, rows: Sequence[tuple[object, ...]]) -> DataFrame:
    """rows: (job_id, topic, status, attempts, failed_attempts, day)."""
    return spark.createDataFrame([(j, t, s, a, f, T0, d) for j, t, s, a, f, d in rows], JOBS)


def attempts(spark: SparkSession, rows: Sequence[tuple[Any, ...]]) -> DataFrame:
    """rows: (job_id, topic, outcome, duration, lateness, error_type, message, day, minutes after
    T0)."""
    return spark.createDataFrame(
        [
            (j, t, o, dur, late, et, em, d, T0 + timedelta(minutes=m))
            for j, t, o, dur, late, et, em, d, m in rows
        ],
        "job_id string, topic string, outcome string, duration_ms bigint, lateness_ms bigint, "
        "error_type string, error_message string, local_day date, finished_at timestamp",
    )


def by_key(frame: DataFrame, *keys: str) -> dict[object, dict[str, object]]:
    out = {}
    for row in frame.collect():
        data = row.asDict()
        key = tuple(data[k] for k in keys)
        out[key[0] if len(key) == 1 else key] = data
    return out


def percentile_cont(values: Sequence[float], p: float) -> float | None:
    """PostgreSQL's percentile_cont: linear interpolation at p * (n - 1)."""
    ordered = sorted(values)
    if not ordered:
        return None
    pos = p * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def test_job_counts_rates_and_recovery(spark: SparkSession) -> None:
    frame = jobs(
        spark,
        [
            ("a1", "a", "completed", 1, 0, D1),
            ("a2", "a", "completed", 3, 2, D1),  # recovered after 2 failed attempts
            ("a3", "a", "failed", 3, 3, D1),
            ("a4", "a", "cancelled", 1, 1, D1),  # finished with a failure, not recovered
            ("a5", "a", "completed", 1, 0, D2),
            ("b1", "b", "cancelled", 0, 0, D1),  # only cancelled: no rate
        ],
    )
    got = by_key(metrics.job_counts(frame, ["topic", "local_day"]), "topic", "local_day")
    a1 = got[("a", D1)]
    assert (a1["jobs"], a1["completed"], a1["failed"], a1["cancelled"]) == (4, 2, 1, 1)
    assert a1["failure_rate"] == 1 / 3
    assert (a1["with_failure"], a1["recovered"]) == (3, 1)
    assert a1["retry_recovery_rate"] == 1 / 3
    a2 = got[("a", D2)]
    assert (a2["jobs"], a2["failure_rate"], a2["retry_recovery_rate"]) == (1, 0.0, None)
    b = got[("b", D1)]
    assert (b["jobs"], b["cancelled"], b["failure_rate"], b["retry_recovery_rate"]) == (
        1,
        1,
        None,
        None,
    )
    whole = by_key(metrics.job_counts(frame, ["topic"]), "topic")["a"]
    assert (whole["jobs"], whole["failure_rate"]) == (5, 1 / 4)


def test_attempt_counts_outcomes_and_failure_rate(spark: SparkSession) -> None:
    frame = attempts(
        spark,
        [
            ("j1", "a", "failed", 10, 1, "ValueError", "x", D1, 0),
            ("j1", "a", "timed_out", 200, 2, "TimeoutError", "t", D1, 1),
            ("j1", "a", "succeeded", 30, 3, None, None, D1, 2),
            ("j2", "a", "worker_lost", None, 4, "WorkerLost", "w", D1, 3),
            ("j3", "a", "no_listener", 1, 5, None, None, D1, 4),
            ("j4", "b", "succeeded", 7, 0, None, None, D1, 5),
        ],
    )
    got = by_key(metrics.attempt_counts(frame, ["topic"]), "topic")
    a = got["a"]
    assert (
        a["attempts"],
        a["failed_attempts"],
        a["timed_out"],
        a["worker_lost"],
        a["no_listener"],
    ) == (5, 3, 1, 1, 1)
    assert a["attempt_failure_rate"] == 3 / 5
    assert got["b"]["attempt_failure_rate"] == 0.0
    assert got["b"]["failed_attempts"] == 0


def test_percentiles_are_exact_like_percentile_cont(spark: SparkSession) -> None:
    durations = [10, 20, 30, 40, 100, 7, 7, 1000, 55, 3]
    lateness = [0, 5, 1, 250, 3, 3, 9, 12, 2, 40]
    rows: list[tuple[Any, ...]] = [
        ("j", "a", "succeeded", d, late, None, None, D1, i)
        for i, (d, late) in enumerate(zip(durations, lateness))
    ]
    rows.append(("k", "a", "succeeded", None, None, None, None, D1, 99))  # nulls are ignored
    got = by_key(metrics.attempt_counts(attempts(spark, rows), ["topic"]), "topic")["a"]
    for p in (0.5, 0.95, 0.99):
        name = int(p * 100)
        assert got[f"p{name}_duration_ms"] == pytest.approx(
            percentile_cont(durations, p), rel=1e-12
        )
        assert got[f"p{name}_lateness_ms"] == pytest.approx(percentile_cont(lateness, p), rel=1e-12)
    assert got["p95_duration_ms"] == pytest.approx(
        100 + 0.55 * (1000 - 100)
    )  # pos 8.55 of 10 sorted


def test_percentiles_null_without_values(spark: SparkSession) -> None:
    frame = attempts(spark, [("j", "a", "worker_lost", None, None, "WorkerLost", "w", D1, 0)])
    got = by_key(metrics.attempt_counts(frame, ["topic"]), "topic")["a"]
    assert got["p50_duration_ms"] is None and got["p99_lateness_ms"] is None


def test_stats_full_outer_join_fills_missing_counts(spark: SparkSession) -> None:
    job_frame = jobs(spark, [("c1", "c", "completed", 1, 0, D1)])
    attempt_frame = attempts(
        spark, [("r1", "r", "failed", 5, 1, "E", "m", D1, 0)]
    )  # retrying, not finished
    got = by_key(metrics.stats(job_frame, attempt_frame, ["topic"]), "topic")
    assert (got["r"]["jobs"], got["r"]["failure_rate"], got["r"]["attempts"]) == (0, None, 1)
    assert (got["c"]["jobs"], got["c"]["attempts"], got["c"]["attempt_failure_rate"]) == (
        1,
        0,
        None,
    )


def test_attempts_histogram(spark: SparkSession) -> None:
    frame = jobs(
        spark,
        [
            ("1", "a", "completed", 1, 0, D1),
            ("2", "a", "completed", 1, 0, D1),
            ("3", "a", "failed", 3, 3, D1),
            ("4", "b", "cancelled", 0, 0, D1),
        ],
    )
    got = {
        (r["topic"], r["attempts"]): r["jobs"]
        for r in metrics.attempts_histogram(frame, ["topic"]).collect()
    }
    assert got == {("a", 1): 2, ("a", 3): 1, ("b", 0): 1}


def test_error_signatures_count_and_latest_example(spark: SparkSession) -> None:
    frame = attempts(
        spark,
        [
            ("job-1", "a", "failed", 1, 0, "CardDeclined", "card 4242 declined for 'inv-1'", D1, 0),
            ("job-2", "a", "failed", 1, 0, "CardDeclined", "card 1111 declined for 'inv-2'", D1, 5),
            ("job-0", "a", "failed", 1, 0, "CardDeclined", "card 9 declined for 'x'", D1, 1),
            (
                "job-3",
                "a",
                "timed_out",
                1,
                0,
                "TimeoutError",
                "attempt 2 timed out after 0.2 s",
                D1,
                2,
            ),
            ("job-4", "a", "succeeded", 1, 0, None, None, D1, 3),
            ("job-5", "b", "failed", 1, 0, "CardDeclined", 'card 5 declined for "y"', D2, 4),
        ],
    )
    got = by_key(
        metrics.error_signatures(frame, ["local_day", "topic"]), "local_day", "topic", "signature"
    )
    card = got[(D1, "a", "CardDeclined: card <n> declined for <str>")]
    assert (card["count"], card["example_job_id"]) == (3, "job-2")
    assert got[(D1, "a", "TimeoutError: attempt <n> timed out after <n> s")]["count"] == 1
    assert got[(D2, "b", "CardDeclined: card <n> declined for <str>")]["count"] == 1
    assert len(got) == 3  # the successful attempt has no signature


def test_top_signatures_caps_per_group_and_top_errors_merge_topics(spark: SparkSession) -> None:
    rows = [
        (f"j{i}", "a", "failed", 1, 0, "E", f"kind {'x' * (i % 3 + 1)}", D1, i) for i in range(9)
    ]
    rows += [("late", "b", "failed", 1, 0, "E", "kind x", D1, 100)]
    sigs = metrics.error_signatures(attempts(spark, rows), ["local_day", "topic"])
    capped = metrics.top_signatures(sigs, ["local_day", "topic"], 2).collect()
    assert sorted((r["topic"], r["signature"], r["count"]) for r in capped) == [
        ("a", "E: kind x", 3),
        ("a", "E: kind xx", 3),
        ("b", "E: kind x", 1),
    ]
    top = metrics.top_errors(sigs, 2).collect()
    assert [(r["signature"], r["count"], r["topics"], r["example_job_id"]) for r in top] == [
        ("E: kind x", 4, ["a", "b"], "late"),
        ("E: kind xx", 3, ["a"], "j7"),
    ]


def test_local_day_in_report_zone(spark: SparkSession) -> None:
    instants = [
        datetime(2026, 11, 21, 23, 30, tzinfo=UTC),
        datetime(2026, 3, 29, 0, 30, tzinfo=UTC),
        datetime(2026, 11, 22, 4, 59, tzinfo=UTC),
    ]
    frame = spark.createDataFrame([(t,) for t in instants], "ts timestamp")

    def days(zone: str) -> list[date]:
        return [r[0] for r in frame.select(metrics.local_day("ts", zone)).collect()]

    assert days("UTC") == [date(2026, 11, 21), date(2026, 3, 29), date(2026, 11, 22)]
    assert days("Europe/Paris") == [date(2026, 11, 22), date(2026, 3, 29), date(2026, 11, 22)]
    assert days("America/New_York") == [date(2026, 11, 21), date(2026, 3, 28), date(2026, 11, 21)]


def test_ratio_is_null_on_zero_denominator(spark: SparkSession) -> None:
    frame = spark.createDataFrame([(1, 0), (1, 4)], "n int, d int")
    assert [r[0] for r in frame.select(metrics.ratio(F.col("n"), F.col("d"))).collect()] == [
        None,
        0.25,
    ]


def test_jdbc_rows_become_dataset_rows(spark: SparkSession) -> None:
    """The export queries send timestamps as epoch µs and the day as a day number; the JDBC
    source turns them back into what the Parquet dataset holds."""
    from audit.analytics.jdbc import from_export_columns

    finished = datetime(2026, 11, 21, 23, 59, 59, 123456, tzinfo=UTC)
    us = int((finished - datetime(1970, 1, 1, tzinfo=UTC)) / timedelta(microseconds=1))
    row = (
        "j",
        2,
        "t",
        "w",
        us - 1_000,
        us,
        "failed",
        "E",
        "m",
        1,
        0,
        us - 5_000_000,
        (D2 - date(1970, 1, 1)).days,
    )
    frame = spark.createDataFrame(
        [row],
        "job_id string, attempt_no int, topic string, worker_id string, "
        "started_at bigint, finished_at bigint, outcome string, error_type string, "
        "error_message string, duration_ms bigint, lateness_ms bigint, "
        "job_created_at bigint, day int",
    )
    got = from_export_columns(frame, "attempts").collect()[0]
    assert got["day"] == D2 and got["attempt_no"] == 2
    assert got["finished_at"].replace(tzinfo=None) == finished.replace(
        tzinfo=None
    )  # session zone: UTC
