"""The analysis' results as plain frozen values (collected from Spark, small:
one row per topic and day at most), and the alert rule, which is pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Literal

from audit.analytics.window import ReportWindow

AlertKind = Literal["failure_rate_above_baseline", "no_runs"]


def ratio(numerator: int, denominator: int) -> float | None:
    """numerator / denominator, None when the denominator is 0."""
    return numerator / denominator if denominator else None


@dataclass(frozen=True)
class Stats:
    """Jobs and attempts of one topic over one day (`day` set) or the whole window (`day` None).

    Jobs count by the local day of their terminal state, attempts by the day they finished.
    """

    topic: str
    day: date | None
    jobs: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    failure_rate: float | None = None
    attempts: int = 0
    failed_attempts: int = 0
    attempt_failure_rate: float | None = None
    retry_recovery_rate: float | None = None
    p50_duration_ms: float | None = None
    p95_duration_ms: float | None = None
    p99_duration_ms: float | None = None
    p50_lateness_ms: float | None = None
    p95_lateness_ms: float | None = None
    p99_lateness_ms: float | None = None
    timed_out: int = 0
    worker_lost: int = 0
    no_listener: int = 0
    with_failure: int = 0  # finished jobs with at least one failed attempt
    recovered: int = 0  # of which completed

    @staticmethod
    def columns() -> list[str]:
        return [f.name for f in fields(Stats)]


def add_up(topic: str, rows: Iterable[Stats]) -> Stats:
    """Counts of several rows summed, rates recomputed (percentiles are not additive: None)."""
    rows = list(rows)
    total = {
        name: sum(getattr(r, name) for r in rows)
        for name in (
            "jobs",
            "completed",
            "failed",
            "cancelled",
            "attempts",
            "failed_attempts",
            "timed_out",
            "worker_lost",
            "no_listener",
            "with_failure",
            "recovered",
        )
    }
    return Stats(
        topic=topic,
        day=None,
        **total,
        failure_rate=ratio(total["failed"], total["completed"] + total["failed"]),
        attempt_failure_rate=ratio(total["failed_attempts"], total["attempts"]),
        retry_recovery_rate=ratio(total["recovered"], total["with_failure"]),
    )


@dataclass(frozen=True)
class Signature:
    """Failed attempts of one topic on one day with one error signature."""

    day: date
    topic: str
    signature: str
    count: int
    example_job_id: str


@dataclass(frozen=True)
class TopError:
    """One signature over the window, all topics together."""

    signature: str
    count: int
    topics: tuple[str, ...]
    example_job_id: str


@dataclass(frozen=True)
class HistogramBin:
    """`jobs` jobs of `topic` that finished in the window after `attempts` attempts."""

    topic: str
    attempts: int
    jobs: int


@dataclass(frozen=True)
class HourRate:
    """Jobs of `topic` that ended in local hour `hour` (0..23) of a one-day report."""

    topic: str
    hour: int
    completed: int
    failed: int

    @property
    def failure_rate(self) -> float | None:
        return ratio(self.failed, self.completed + self.failed)


@dataclass(frozen=True)
class Alert:
    """A topic to look at: its failure rate rose above the baseline, or it stopped running."""

    topic: str
    kind: AlertKind
    failure_rate: float | None
    baseline_rate: float | None


@dataclass(frozen=True)
class AlertRule:
    """failure_rate > baseline_rate + margin, on at least min_jobs finished jobs in the window
    (completed + failed: the jobs the rate is computed on; cancelled ones are not counted).

    The baseline rate is the baseline days' failed / (completed + failed), i.e. the
    mean of the daily rates weighted by each day's jobs. A topic with no baseline
    rate is not compared. `no_runs`: no attempt and no finished job in the window
    while the baseline had some.
    """

    margin: float = 0.10
    min_jobs: int = 20

    def __post_init__(self) -> None:
        if not 0 <= self.margin <= 1:
            raise ValueError(f"alert margin must be within [0, 1]; got {self.margin}")
        if self.min_jobs < 0:
            raise ValueError(f"alert min_jobs must be >= 0; got {self.min_jobs}")


def find_alerts(
    window: Mapping[str, Stats], baseline: Mapping[str, Stats], rule: AlertRule
) -> list[Alert]:
    """The alerts, failure-rate ones first (largest rise first), then no-runs (by topic)."""
    rises: list[tuple[float, Alert]] = []
    silent: list[Alert] = []
    for topic in sorted(set(window) | set(baseline)):
        now, before = window.get(topic), baseline.get(topic)
        base_rate = before.failure_rate if before else None
        if now is None or (now.jobs == 0 and now.attempts == 0):
            if before is not None and (before.jobs > 0 or before.attempts > 0):
                silent.append(Alert(topic, "no_runs", None, base_rate))
            continue
        if (
            now.failure_rate is None
            or base_rate is None
            or now.completed + now.failed < rule.min_jobs
        ):
            continue
        if now.failure_rate > base_rate + rule.margin:
            rises.append(
                (
                    now.failure_rate - base_rate,
                    Alert(topic, "failure_rate_above_baseline", now.failure_rate, base_rate),
                )
            )
    rises.sort(key=lambda item: (-item[0], item[1].topic))
    return [a for _, a in rises] + silent


@dataclass(frozen=True)
class Analysis:
    """Everything the publish step writes."""

    window: ReportWindow
    daily: tuple[Stats, ...]  # report days, by topic then day
    baseline_daily: tuple[Stats, ...]  # baseline days (for the chart)
    totals: tuple[Stats, ...]  # per topic over the report days (percentiles over all its attempts)
    baseline: tuple[Stats, ...]  # per topic over the baseline days (counts and rates)
    histogram: tuple[HistogramBin, ...]
    signatures: tuple[Signature, ...]  # per day and topic, the most frequent first, capped
    top_errors: tuple[TopError, ...]
    alerts: tuple[Alert, ...]
    timings: Mapping[str, float] = field(default_factory=dict)
    hourly: tuple[HourRate, ...] = ()  # one-day reports only: per topic and local hour
    rule: AlertRule = AlertRule()

    def unjudged(self) -> Unjudged:
        """The topics that ran but that the alert rule could not judge, and why."""
        base = {s.topic: s.failure_rate for s in self.baseline}
        small, no_base = [], []
        for t in self.totals:
            if t.jobs == 0 and t.attempts == 0:
                continue
            if t.completed + t.failed < self.rule.min_jobs:
                small.append(t.topic)
            elif base.get(t.topic) is None:
                no_base.append(t.topic)
        return Unjudged(self.rule.min_jobs, tuple(small), tuple(no_base))

    @property
    def overall(self) -> Stats:
        """All topics together over the report days (no percentiles)."""
        return add_up("*", self.totals)


@dataclass(frozen=True)
class Unjudged:
    """Topics the alert rule did not compare: `too_small` had fewer than `min_jobs` finished
    (completed + failed) jobs; `no_baseline` had no finished job in the baseline days."""

    min_jobs: int
    too_small: tuple[str, ...]
    no_baseline: tuple[str, ...]
