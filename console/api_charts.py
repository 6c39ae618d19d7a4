"""The JSON form of the charts (`GET /api/v1/charts`): the same series the overview and the
topic page draw (console/trends.py), one value per minute or hour, oldest first."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, PlainSerializer

from console.trends import Series, Trends
from scheduler.core.timeutil import rfc3339

Stamp = Annotated[datetime, PlainSerializer(rfc3339, return_type=str)]


class SeriesOut(BaseModel):
    topic: str
    start: Stamp = Field(description="the first bucket's start")
    step_s: int = Field(description="a bucket's length: 60 (range 1h) or 3600 (range 24h)")
    completed: list[int] = Field(description="jobs completed per bucket")
    failed: list[int] = Field(description="jobs failed for good per bucket")
    retried: list[int] = Field(description="retries scheduled after a failed attempt")
    failed_attempts: list[int] = Field(description="attempts that failed, timed out or were lost")
    deduplicated: list[int] = Field(description="calls a dedupe key or the policy kept out")
    waiting: list[int | None] = Field(
        description="jobs scheduled in Redis when sampled (an hour: its largest); null: no sample"
    )
    retrying: list[int | None] = Field(description="jobs retrying when sampled; null: no sample")
    lateness_buckets: list[int] = Field(
        description="attempt starts per lateness bucket: 0 holds < 1 ms, i >= 1 holds "
        "[2^(i-1), 2^i) ms, the last one the rest"
    )
    total_completed: int
    total_failed: int
    total_retried: int
    lateness_p50_ms: int | None = Field(description="bucket upper bound; null: no start")
    lateness_p99_ms: int | None = Field(description="bucket upper bound; null: no start")

    @classmethod
    def of(cls, s: Series) -> SeriesOut:
        return cls(
            topic=s.topic,
            start=s.start,
            step_s=s.step_s,
            completed=list(s.completed),
            failed=list(s.failed),
            retried=list(s.retried),
            failed_attempts=list(s.failed_attempts),
            deduplicated=list(s.deduplicated),
            waiting=list(s.waiting),
            retrying=list(s.retrying),
            lateness_buckets=list(s.lateness),
            total_completed=s.total_completed,
            total_failed=s.total_failed,
            total_retried=s.total_retried,
            lateness_p50_ms=s.p50_ms,
            lateness_p99_ms=s.p99_ms,
        )


class ChartsOut(BaseModel):
    range: Literal["1h", "24h"]
    at: Stamp = Field(description="the instant the series end with")
    topics: list[SeriesOut]
    problem: str | None = Field(
        None, description="why the series are empty when the audit trail could not say"
    )

    @classmethod
    def of(cls, t: Trends) -> ChartsOut:
        return cls(
            range=t.range,
            at=t.at,
            topics=[SeriesOut.of(s) for s in t.series.values()],
            problem=t.problem,
        )
