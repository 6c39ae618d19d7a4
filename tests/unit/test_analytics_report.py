"""analyze + publish on a hand-made Parquet dataset (no PostgreSQL): window vs
baseline, alerts, summary.json's contract, the aggregates and report.html."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from audit.analytics.errors import DatasetMissing
from audit.analytics.location import DatasetLocation
from audit.analytics.pipeline import ReportRequest, ReportResult, run_report
from audit.analytics.results import AlertRule
from audit.analytics.window import ReportWindow, days_between
from tests.analytics_helpers import History, spark_session

pytestmark = pytest.mark.spark

DAY = date(2026, 11, 21)
BASELINE = days_between(date(2026, 11, 18), date(2026, 11, 20))
XSS = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DatasetLocation]:
    h = History()
    for day in BASELINE:
        for _ in range(9):
            h.job("pay", day, ["succeeded"], "completed")
        h.job("pay", day, ["failed", "succeeded"], "completed")  # recovered
        h.job("gone", day, ["succeeded"], "completed")
    for _ in range(6):
        h.job("pay", DAY, ["succeeded"], "completed")
    for _ in range(3):
        h.job(
            "pay",
            DAY,
            ["failed", "timed_out", "failed"],
            "failed",
            message=f"{XSS} card 42 declined",
        )
    h.job("pay", DAY, ["failed", "failed", "worker_lost"], "failed")
    h.job("pay", DAY, ["failed"], "cancelled")
    for _ in range(3):
        h.job("mail", DAY, ["no_listener"], "completed")
    h.job("mail", DAY, ["succeeded"], "completed", hour=23)  # finishes 23:01 UTC
    location = DatasetLocation.parse(str(tmp_path_factory.mktemp("ds")))
    h.write(location, [*BASELINE, DAY])
    yield location


def report(dataset: DatasetLocation, out: Path, zone: str = "UTC") -> ReportResult:
    spark_session()  # the shared session is active: the pipeline reuses it and leaves it running
    request = ReportRequest(
        window=ReportWindow(DAY, DAY, zone, 3),
        out=out,
        dataset=dataset,
        database_url=None,
        export=False,
        publish_db=False,
        rule=AlertRule(margin=0.1, min_jobs=5),
    )
    return run_report(request)


@pytest.fixture(scope="module")
def result(dataset: DatasetLocation, tmp_path_factory: pytest.TempPathFactory) -> ReportResult:
    return report(dataset, tmp_path_factory.mktemp("out"))


def test_summary_follows_the_contract(result: ReportResult) -> None:
    summary = json.loads(result.summary.read_text())
    assert list(summary) == ["window", "topics", "top_errors", "alerts"]
    assert summary["window"] == {"since": "2026-11-21", "until": "2026-11-21", "zone": "UTC"}
    topics = {t["topic"]: t for t in summary["topics"]}
    assert set(topics) == {"pay", "mail"}
    assert list(topics["pay"]) == [
        "topic",
        "jobs",
        "completed",
        "failed",
        "cancelled",
        "failure_rate",
        "attempts",
        "failed_attempts",
        "attempt_failure_rate",
        "retry_recovery_rate",
        "p50_duration_ms",
        "p95_duration_ms",
        "p95_lateness_ms",
    ]
    pay = topics["pay"]
    assert (pay["jobs"], pay["completed"], pay["failed"], pay["cancelled"]) == (11, 6, 4, 1)
    assert pay["failure_rate"] == 4 / 10
    assert (pay["attempts"], pay["failed_attempts"]) == (6 + 12 + 1, 13)
    assert pay["attempt_failure_rate"] == 13 / 19
    assert pay["retry_recovery_rate"] == 0.0  # 5 finished with a failure, none completed
    mail = topics["mail"]
    assert (mail["failure_rate"], mail["attempt_failure_rate"], mail["retry_recovery_rate"]) == (
        0.0,
        0.0,
        None,
    )
    durations = sorted([10] * 6 + [10, 20, 30] * 4 + [10])
    assert pay["p50_duration_ms"] == float(durations[len(durations) // 2])


def test_alerts_compare_with_the_baseline(result: ReportResult) -> None:
    alerts = json.loads(result.summary.read_text())["alerts"]
    assert alerts == [
        {
            "topic": "pay",
            "kind": "failure_rate_above_baseline",
            "failure_rate": 0.4,
            "baseline_rate": 0.0,
        },
        {"topic": "gone", "kind": "no_runs", "failure_rate": None, "baseline_rate": 0.0},
    ]
    baseline = {s.topic: s for s in result.analysis.baseline}
    assert (baseline["pay"].jobs, baseline["pay"].retry_recovery_rate) == (30, 1.0)


def test_top_errors_normalize_and_count(result: ReportResult) -> None:
    top = json.loads(result.summary.read_text())["top_errors"]
    assert top[0]["signature"] == "CardDeclined: <script>alert(<n>)</script> card <n> declined #<n>"
    assert (top[0]["count"], top[0]["topics"]) == (9, ["pay"])
    assert top[1]["signature"] == "CardDeclined: card <n> declined #<n>" and top[1]["count"] == 4
    assert top[0]["example_job_id"].startswith("pay-")


def test_aggregates_and_daily_rows(result: ReportResult) -> None:
    names = sorted(p.name for p in result.aggregates)
    assert names == [
        "alerts.parquet",
        "attempts_histogram.parquet",
        "daily_stats.parquet",
        "error_signatures.parquet",
        "top_errors.parquet",
        "topic_totals.parquet",
    ]
    daily = pq.read_table(result.out / "aggregates" / "daily_stats.parquet").to_pylist()
    assert {(r["period"], r["topic"]) for r in daily if r["day"] == DAY} == {
        ("window", "pay"),
        ("window", "mail"),
    }
    assert sum(1 for r in daily if r["period"] == "baseline") == 6
    hist = {(b.topic, b.attempts): b.jobs for b in result.analysis.histogram}
    assert hist == {("pay", 1): 7, ("pay", 3): 4, ("mail", 1): 4}


def test_html_is_self_contained_escaped_and_alerts_first(result: ReportResult) -> None:
    page = result.html.read_text()
    assert page.startswith("<!DOCTYPE html>")
    for banned in ("<script", "<link", "src=", "http://", "https://", "@import"):
        assert banned not in page
    assert "&lt;script&gt;alert(&lt;n&gt;)&lt;/script&gt;" in page
    assert page.index("<h2>Alerts</h2>") < page.index("<h2>Overview</h2>") < page.index("<svg")
    assert page.count("<svg") == 2 and "failure rate above baseline" in page and "no runs" in page


def test_report_zone_moves_late_jobs_and_needs_the_next_utc_day(
    dataset: DatasetLocation, tmp_path: Path
) -> None:
    tokyo = report(
        dataset, tmp_path / "tokyo", zone="Asia/Tokyo"
    )  # local 11-21 = UTC 11-20 15:00 .. 11-21 15:00
    topics = {s.topic: s for s in tokyo.analysis.totals}
    assert topics["mail"].jobs == 3  # the 23:01 UTC job is on 11-22 in Tokyo
    assert (
        topics["pay"].jobs == 11 and "gone" not in topics
    )  # 12:00 UTC is 21:00 the same day in Tokyo
    with pytest.raises(DatasetMissing, match="2026-11-22"):
        report(dataset, tmp_path / "ny", zone="America/New_York")


def test_a_one_day_report_counts_jobs_per_local_hour(result: ReportResult) -> None:
    hourly = {(h.topic, h.hour): (h.completed, h.failed) for h in result.analysis.hourly}
    assert hourly == {("mail", 12): (3, 0), ("mail", 23): (1, 0), ("pay", 12): (6, 4)}
    assert result.analysis.rule == AlertRule(margin=0.1, min_jobs=5)
    page = result.html.read_text()
    assert (
        'aria-label="failure rate per topic per hour"' in page and "horae audit show pay-" in page
    )
