"""The whole report: export -> analyze -> publish, with progress callbacks.
Synchronous (the CLI and `python -m audit.analytics` call it; the nightly
listener runs it in a subprocess). Spark is imported only when analyzing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from audit.analytics import pg
from audit.analytics.errors import AnalyticsError
from audit.analytics.export import ExportResult, days_to_export, export_days
from audit.analytics.java import require_java
from audit.analytics.location import DatasetLocation
from audit.analytics.options import SourceKind
from audit.analytics.results import AlertRule, Analysis
from audit.analytics.window import ReportWindow


class Progress(Protocol):
    """What the pipeline tells a progress display."""

    def stage(self, name: str, total: int | None = None) -> None:
        """A stage starts (total: units to advance, when known)."""

    def advance(self, name: str, amount: int = 1, note: str = "") -> None:
        """Units of a stage are done."""

    def finish(self, name: str, note: str = "") -> None:
        """A stage ended."""


class NullProgress:
    """Tells nobody."""

    def stage(self, name: str, total: int | None = None) -> None:
        pass

    def advance(self, name: str, amount: int = 1, note: str = "") -> None:
        pass

    def finish(self, name: str, note: str = "") -> None:
        pass


@dataclass(frozen=True)
class ReportRequest:
    """One run of the report."""

    window: ReportWindow
    out: Path
    dataset: DatasetLocation
    database_url: str | None
    master: str | None = None
    source: SourceKind = "parquet"
    export: bool = True
    refresh_baseline: bool = False
    publish_db: bool = True
    rule: AlertRule = AlertRule()
    top_errors: int = 20
    signatures_per_day: int = 50
    jdbc_partitions: int = 4
    spark_conf: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportResult:
    """What a run wrote."""

    out: Path
    summary: Path
    html: Path
    aggregates: tuple[Path, ...]
    analysis: Analysis
    exports: tuple[ExportResult, ...]
    timings: Mapping[str, float]


def _need_url(request: ReportRequest, why: str) -> str:
    if not request.database_url:
        raise AnalyticsError(
            f"a database URL is needed to {why} (--database-url or HORAE_DATABASE_URL)"
        )
    return request.database_url


def run_export(
    request: ReportRequest, progress: Progress, now: Callable[[], datetime]
) -> list[ExportResult]:
    """Export the days the window needs (report days always, baseline days when missing)."""
    url = _need_url(request, "export the audit rows")
    days = days_to_export(request.dataset, request.window, now(), request.refresh_baseline)
    progress.stage("export", None)

    def tick(table: str, rows: int) -> None:
        progress.advance("export", rows, note=table)

    results = asyncio.run(export_days(url, request.dataset, days, tick, now))
    rows = sum(r.rows for r in results)
    progress.finish("export", note=f"{rows:,} rows, {len(days)} UTC days")
    return results


def run_analysis(request: ReportRequest, progress: Progress) -> Analysis:
    """Start (or reuse) Spark and analyze the window."""
    from audit.analytics.analyze import analyze
    from audit.analytics.session import master_of, start_session
    from audit.analytics.sources import ParquetSource, Source

    progress.stage("spark", None)
    spark, created = start_session(request.master, request.spark_conf)
    progress.finish("spark", note=master_of(spark, request.master))
    try:
        source: Source
        if request.source == "jdbc":
            from audit.analytics.jdbc import JdbcSource

            source = JdbcSource(_need_url(request, "read over JDBC"), request.jdbc_partitions)
        else:
            source = ParquetSource(request.dataset)
        steps = ["read", "daily metrics", "window totals", "attempts histogram", "error signatures"]
        progress.stage("analyze", len(steps))
        seen: list[str] = []

        def step(name: str) -> None:
            if seen:
                progress.advance("analyze", 1, note=name)
            seen.append(name)

        analysis = analyze(
            spark,
            source,
            request.window,
            request.rule,
            top_n=request.top_errors,
            signatures_per_day=request.signatures_per_day,
            step=step,
        )
        progress.advance("analyze", 1)
        progress.finish("analyze", note=f"{len(analysis.totals)} topics")
        return analysis
    finally:
        if created:
            spark.stop()


def run_publish(
    request: ReportRequest, analysis: Analysis, progress: Progress, now: Callable[[], datetime]
) -> tuple[Path, Path, list[Path]]:
    """Write summary.json, the Parquet aggregates, report.html; upsert the Postgres tables."""
    from audit.analytics.report.html_report import write_html
    from audit.analytics.report.summary import write_aggregates, write_summary

    progress.stage("publish", 4 if request.publish_db else 3)
    request.out.mkdir(parents=True, exist_ok=True)
    summary = write_summary(analysis, request.out)
    progress.advance("publish", 1, note="summary.json")
    aggregates = write_aggregates(analysis, request.out)
    progress.advance("publish", 1, note="aggregates")
    html = write_html(analysis, request.out, now())
    progress.advance("publish", 1, note="report.html")
    if request.publish_db:
        url = _need_url(request, "publish the Grafana tables")

        async def upsert() -> None:
            conn = await pg.connect(url)
            try:
                await pg.publish(
                    conn,
                    request.window.since,
                    request.window.until,
                    analysis.daily,
                    analysis.signatures,
                )
            finally:
                await conn.close()

        asyncio.run(upsert())
        progress.advance("publish", 1, note="postgres")
    progress.finish("publish", note=str(html))
    return summary, html, aggregates


def run_report(
    request: ReportRequest,
    progress: Progress | None = None,
    now: Callable[[], datetime] | None = None,
) -> ReportResult:
    """Export, analyze and publish one window.

    Raises:
        JavaMissing: before anything runs, when Java 17+ is absent (not needed for a Spark Connect
            master, sc://, whose server runs the JVM).
        AnalyticsError: for a missing database URL, dataset day, or a failing step.
    """
    progress = progress or NullProgress()
    clock = now or (lambda: datetime.now(UTC))
    timings: dict[str, float] = {}
    if not (request.master or "").startswith("sc://"):
        require_java()
    exports: list[ExportResult] = []
    started = time.perf_counter()
    if request.export and request.source == "parquet":
        exports = run_export(request, progress, clock)
    timings["export"] = time.perf_counter() - started
    started = time.perf_counter()
    analysis = run_analysis(request, progress)
    timings["analyze"] = time.perf_counter() - started
    started = time.perf_counter()
    summary, html, aggregates = run_publish(request, analysis, progress, clock)
    timings["publish"] = time.perf_counter() - started
    return ReportResult(
        out=request.out,
        summary=summary,
        html=html,
        aggregates=tuple(aggregates),
        analysis=analysis,
        exports=tuple(exports),
        timings=timings,
    )
