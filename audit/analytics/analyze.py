"""Analyze: read a window (baseline included) from a Source, compute the
metrics with Spark (metrics.py) and collect the small results (results.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any, Final

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from audit.analytics import metrics
from audit.analytics.results import (
    AlertRule,
    Analysis,
    HistogramBin,
    HourRate,
    Signature,
    Stats,
    TopError,
    add_up,
    find_alerts,
)
from audit.analytics.sources import Source
from audit.analytics.window import ReportWindow

JOB_COLUMNS: Final = ("topic", "status", "attempts", "failed_attempts", "finished_at")
ATTEMPT_COLUMNS: Final = (
    "job_id",
    "topic",
    "outcome",
    "finished_at",
    "duration_ms",
    "lateness_ms",
    "error_type",
    "error_message",
)

Step = Callable[[str], None]  # called with a step's name as it starts


def prepare(frame: DataFrame, columns: tuple[str, ...], window: ReportWindow) -> DataFrame:
    """The rows of the baseline and report days: local_day in the report zone and period."""
    day = metrics.local_day("finished_at", window.zone)
    return (
        frame.select(*columns)
        .withColumn("local_day", day)
        .where(F.col("local_day").between(F.lit(window.baseline_start), F.lit(window.until)))
        .withColumn(
            "period",
            F.when(F.col("local_day") >= F.lit(window.since), "window").otherwise("baseline"),
        )
    )


def _stats(row: Row, day_column: str | None) -> Stats:
    data: dict[str, Any] = row.asDict()
    values = {name: data.get(name) for name in Stats.columns() if name not in ("topic", "day")}
    return Stats(
        topic=data["topic"],
        day=data[day_column] if day_column else None,
        **{k: v for k, v in values.items() if v is not None},
    )


class _Timer:
    def __init__(self, step: Step | None) -> None:
        self.step = step
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.step is not None:
            self.step(name)
        started = time.perf_counter()
        yield
        self.timings[name] = time.perf_counter() - started


def analyze(
    spark: SparkSession,
    source: Source,
    window: ReportWindow,
    rule: AlertRule,
    *,
    top_n: int = 20,
    signatures_per_day: int = 50,
    step: Step | None = None,
) -> Analysis:
    """Compute every metric of the report window and its baseline.

    Args:
        spark: the session (local or cluster).
        source: where jobs and attempts come from.
        window: report days, zone and baseline length.
        rule: when a topic raises an alert.
        top_n: top error signatures kept for the window.
        signatures_per_day: signatures kept per topic and day (for the Postgres table), most
            frequent first.
        step: told the name of each step as it starts (progress display).
    """
    timer = _Timer(step)
    with timer("read"):
        jobs = prepare(source.read(spark, "jobs", window), JOB_COLUMNS, window).cache()
        attempts = prepare(source.read(spark, "attempts", window), ATTEMPT_COLUMNS, window).cache()
    in_window = F.col("period") == "window"
    window_jobs, window_attempts = jobs.where(in_window), attempts.where(in_window)
    try:
        with timer("daily metrics"):
            # Percentiles only for the report days: the baseline needs counts (rates, alerts, the
            # chart).
            daily_rows = metrics.stats(
                window_jobs, window_attempts, ["topic", "local_day"]
            ).collect()
            daily_rows += metrics.stats(
                jobs.where(~in_window),
                attempts.where(~in_window),
                ["topic", "local_day"],
                percentiles=False,
            ).collect()
        with timer("window totals"):
            totals = sorted(
                (
                    _stats(r, None)
                    for r in metrics.stats(window_jobs, window_attempts, ["topic"]).collect()
                ),
                key=lambda s: s.topic,
            )
        hourly: list[HourRate] = []
        if window.since == window.until:  # one day: the chart shows its hours
            with timer("hourly rates"):
                by_hour = window_jobs.withColumn(
                    "local_hour", metrics.local_hour("finished_at", window.zone)
                )
                hourly = sorted(
                    (
                        HourRate(r["topic"], r["local_hour"], r["completed"], r["failed"])
                        for r in metrics.job_counts(by_hour, ["topic", "local_hour"]).collect()
                    ),
                    key=lambda h: (h.topic, h.hour),
                )
        with timer("attempts histogram"):
            histogram = sorted(
                (
                    HistogramBin(r["topic"], r["attempts"], r["jobs"])
                    for r in metrics.attempts_histogram(window_jobs, ["topic"]).collect()
                ),
                key=lambda b: (b.topic, b.attempts),
            )
        with timer("error signatures"):
            signatures = metrics.error_signatures(window_attempts, ["local_day", "topic"]).cache()
            kept = [
                Signature(
                    r["local_day"], r["topic"], r["signature"], r["count"], r["example_job_id"]
                )
                for r in metrics.top_signatures(
                    signatures, ["local_day", "topic"], signatures_per_day
                ).collect()
            ]
            top = [
                TopError(r["signature"], r["count"], tuple(r["topics"]), r["example_job_id"])
                for r in metrics.top_errors(signatures, top_n).collect()
            ]
            signatures.unpersist()
    finally:
        jobs.unpersist()
        attempts.unpersist()
    daily = sorted(
        (_stats(r, "local_day") for r in daily_rows), key=lambda s: (s.topic, s.day or date.min)
    )
    in_report = [s for s in daily if s.day is not None and s.day >= window.since]
    before = [s for s in daily if s.day is not None and s.day < window.since]
    baseline = [
        add_up(topic, [s for s in before if s.topic == topic])
        for topic in sorted({s.topic for s in before})
    ]
    alerts = find_alerts({s.topic: s for s in totals}, {s.topic: s for s in baseline}, rule)
    kept.sort(key=lambda s: (s.day, s.topic, -s.count, s.signature))
    return Analysis(
        window=window,
        daily=tuple(in_report),
        baseline_daily=tuple(before),
        totals=tuple(totals),
        baseline=tuple(baseline),
        histogram=tuple(histogram),
        signatures=tuple(kept),
        top_errors=tuple(top),
        alerts=tuple(alerts),
        timings=timer.timings,
        hourly=tuple(hourly),
        rule=rule,
    )
