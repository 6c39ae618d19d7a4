"""The report a person reads, from constructed Analysis values (no Spark): a headline
counting the jobs its percentage counts, "No alerts" saying what was not judged, the
hours of a one-day report, charts at page width, and `horae audit show` commands."""

from __future__ import annotations

import io
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from rich.console import Console

from audit.analytics.cli import print_result
from audit.analytics.pipeline import ReportResult
from audit.analytics.report.headline import headline, no_alerts_text
from audit.analytics.report.html_report import render, show_command
from audit.analytics.results import (
    Alert,
    AlertRule,
    Analysis,
    HourRate,
    Stats,
    TopError,
    add_up,
    find_alerts,
)
from audit.analytics.window import ReportWindow

DAY = date(2026, 11, 21)
NOW = datetime(2026, 11, 22, 2, 30, tzinfo=UTC)


def stats(
    topic: str, completed: int, failed: int, cancelled: int = 0, day: date | None = None
) -> Stats:
    total = add_up(
        topic,
        [
            Stats(
                topic,
                None,
                jobs=completed + failed + cancelled,
                completed=completed,
                failed=failed,
                cancelled=cancelled,
                attempts=completed + 2 * failed,
            )
        ],
    )
    return Stats(**{**total.__dict__, "day": day})


def analysis(
    totals: list[Stats],
    baseline: list[Stats],
    *,
    since: date = DAY,
    until: date = DAY,
    daily: tuple[Stats, ...] = (),
    baseline_daily: tuple[Stats, ...] = (),
    hourly: tuple[HourRate, ...] = (),
    alerts: tuple[Alert, ...] = (),
    top: tuple[TopError, ...] = (),
    min_jobs: int = 20,
) -> Analysis:
    return Analysis(
        window=ReportWindow(since, until, "UTC", 7),
        daily=daily,
        baseline_daily=baseline_daily,
        totals=tuple(totals),
        baseline=tuple(baseline),
        histogram=(),
        signatures=(),
        top_errors=top,
        alerts=alerts,
        hourly=hourly,
        rule=AlertRule(margin=0.1, min_jobs=min_jobs),
    )


PAY = stats("pay", 18, 3, cancelled=1)
MAIL = stats("mail", 2, 0)


def test_headline_counts_the_jobs_of_its_percentage() -> None:
    overall = analysis([PAY, MAIL], []).overall
    assert (
        headline(overall)
        == "23 finished: 20 completed, 3 failed (13.0% failed); 1 cancelled not counted"
    )
    assert headline(stats("t", 5, 0)) == "5 finished: 5 completed, 0 failed (0.0% failed)"
    assert (
        headline(stats("t", 0, 0, cancelled=2))
        == "0 finished: 0 completed, 0 failed; 2 cancelled not counted"
    )


def test_no_alerts_says_which_topics_were_too_small_or_had_no_baseline() -> None:
    small = analysis([PAY, MAIL, stats("sms", 19, 0, cancelled=5)], [stats("pay", 30, 1)])
    assert no_alerts_text(small) == "No alerts (2 topics had fewer than 20 finished jobs to judge)"
    assert no_alerts_text(small, names=1) == (
        "No alerts (2 topics (mail and 1 more) had fewer than 20 finished jobs to judge)"
    )
    no_base = analysis([PAY, MAIL], [])
    assert no_alerts_text(no_base, names=5) == (
        "No alerts (1 topic (mail) had fewer than 20 finished jobs to judge; "
        "1 topic (pay) had no baseline to compare with)"
    )
    judged = analysis([PAY], [stats("pay", 30, 1)])
    assert no_alerts_text(judged) == (
        "No alerts: every topic stayed within its baseline "
        "failure rate + 10%, and none stopped running"
    )
    assert no_alerts_text(analysis([], [])) == "No alerts (no job finished in the window)"


def test_the_alert_rule_counts_finished_jobs_as_the_rate_does() -> None:
    window = {"sms": stats("sms", 10, 9, cancelled=5)}  # 24 jobs, 19 finished: not judged at 20
    assert find_alerts(window, {"sms": stats("sms", 100, 0)}, AlertRule(0.1, 20)) == []
    assert len(find_alerts(window, {"sms": stats("sms", 100, 0)}, AlertRule(0.1, 19))) == 1


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg.*?</svg>", page, re.DOTALL)


def test_a_one_day_report_charts_its_hours_against_a_dashed_baseline() -> None:
    hourly = (HourRate("pay", 9, 8, 0), HourRate("pay", 14, 10, 3), HourRate("mail", 23, 2, 0))
    page = render(analysis([PAY, MAIL], [stats("pay", 30, 1)], hourly=hourly), NOW)
    chart = _svgs(page)[0]
    assert 'aria-label="failure rate per topic per hour"' in chart
    ticks = re.findall(r'class="axis">(\d\d:\d\d)<', chart)
    assert ticks == [f"{h:02d}:00" for h in range(0, 24, 2)] and "11-" not in chart
    assert "<title>baseline</title>" not in chart  # no empty band of baseline days
    assert 'stroke-dasharray="5 4"' in chart and "pay baseline: 3.2%" in chart
    assert "pay 14:00: 23.1%" in chart and "pay 10:00" not in chart  # hours without jobs: no point
    assert (
        "per hour of 2026-11-21 (UTC)" in page
        and "dashed: the baseline rate (the 7 days before)" in page
    )


def test_charts_scale_to_the_page_width() -> None:
    page = render(analysis([PAY], [], hourly=(HourRate("pay", 9, 1, 1),)), NOW)
    assert "svg.chart{display:block;width:100%;height:auto}" in page
    for svg in _svgs(page):
        head = svg[: svg.index(">")]
        assert 'width="100%"' in head and 'viewBox="0 0 ' in head and "height=" not in head


def test_a_multi_day_report_shades_the_baseline_only_when_there_is_one() -> None:
    since = DAY - timedelta(days=2)
    daily = tuple(stats("pay", 9, 1, day=since + timedelta(days=i)) for i in range(3))
    without = _svgs(render(analysis([PAY], [], since=since, daily=daily), NOW))[0]
    assert "<title>baseline</title>" not in without
    assert re.findall(r'class="axis">(\d\d-\d\d)<', without) == ["11-19", "11-20", "11-21"]
    before = (stats("pay", 10, 0, day=since - timedelta(days=1)),)
    shaded = _svgs(
        render(
            analysis([PAY], [stats("pay", 10, 0)], since=since, daily=daily, baseline_daily=before),
            NOW,
        )
    )[0]
    assert (
        "<title>baseline</title>" in shaded
        and ">11-12<" in shaded
        and "pay 2026-11-18: 0.0%" in shaded
    )


def test_headline_alerts_note_and_example_commands_in_the_page() -> None:
    top = (TopError("CardDeclined: card <n> declined", 3, ("pay",), "pay-0001"),)
    alert = Alert("pay", "failure_rate_above_baseline", 0.143, 0.03)
    page = render(analysis([PAY, MAIL], [stats("pay", 30, 1)], alerts=(alert,), top=top), NOW)
    assert "23 finished: 20 completed, 3 failed (13.0% failed); 1 cancelled not counted." in page
    assert "Not judged: 1 topic (mail) had fewer than 20 finished jobs to judge." in page
    assert "<code>horae audit show pay-0001</code>" in page
    quiet = render(analysis([PAY, MAIL], [stats("pay", 30, 1)]), NOW)
    assert (
        '<div class="ok">No alerts (1 topic (mail) had fewer than 20 finished jobs to judge).</div>'
        in quiet
    )
    assert (
        show_command("cron:nightly:1700000000000") == "horae audit show cron:nightly:1700000000000"
    )
    assert show_command("a b; rm") == "horae audit show 'a b; rm'"


def test_horae_report_prints_the_same_sentences(tmp_path: Path) -> None:
    result = ReportResult(
        out=tmp_path,
        summary=tmp_path / "summary.json",
        html=tmp_path / "report.html",
        aggregates=(),
        analysis=analysis([PAY, MAIL], [stats("pay", 30, 1)]),
        exports=(),
        timings={},
    )
    buffer = io.StringIO()
    print_result(result, Console(file=buffer, width=200))
    lines = buffer.getvalue().splitlines()
    assert (
        lines[0]
        == "2 topics, 23 finished: 20 completed, 3 failed (13.0% failed); 1 cancelled not counted"
    )
    assert lines[1] == "No alerts (1 topic (mail) had fewer than 20 finished jobs to judge)."
