"""report.html: one self-contained page (inline CSS and SVG, no scripts, no
external files), alerts first, then the overview, charts and tables."""

from __future__ import annotations

import shlex
from collections import defaultdict
from datetime import date, datetime
from html import escape
from pathlib import Path
from typing import Final

from audit.analytics.report.charts import bar_chart, line_chart
from audit.analytics.report.headline import headline, no_alerts_text, unjudged_text
from audit.analytics.results import Analysis, Stats
from audit.analytics.window import days_between

CHART_TOPICS: Final = 8
KIND_TEXT: Final = {
    "failure_rate_above_baseline": "failure rate above baseline",
    "no_runs": "no runs",
}

CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;\
max-width:1180px;
color:#222;padding:0 16px}h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;
border-bottom:1px solid #ddd;padding-bottom:4px}.muted{color:#777}\
table{border-collapse:collapse;width:100%;
font-size:13px}th,td{text-align:left;padding:4px 8px;border-bottom:1px solid #eee;\
vertical-align:top}
th{background:#fafafa;font-weight:600}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.alerts{border:1px solid #f0b4b4;background:#fff6f6;padding:8px 12px;border-radius:6px}
.ok{border:1px solid #b7e1b7;background:#f5fbf5;padding:8px 12px;border-radius:6px}
.headline{font-size:15px;margin:0 0 10px}.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #e3e3e3;border-radius:6px;padding:8px 14px;min-width:120px}\
.card b{display:block;font-size:20px}
code{font-size:12px;word-break:break-word}
svg.chart{display:block;width:100%;height:auto}.grid{stroke:#ddd;stroke-width:1}.axis{font-size:11px;fill:#555}
.legend{font-size:12px;fill:#333}.wide{overflow-x:auto}
"""


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def _alerts(analysis: Analysis) -> str:
    if not analysis.alerts:
        return f'<div class="ok">{escape(no_alerts_text(analysis, names=8))}.</div>'
    rows = "".join(
        f"<tr><td>{escape(a.topic)}</td><td>{KIND_TEXT[a.kind]}</td>"
        f"<td class=n>{_rate(a.failure_rate)}</td><td class=n>{_rate(a.baseline_rate)}</td></tr>"
        for a in analysis.alerts
    )
    why = unjudged_text(analysis.unjudged(), names=8)
    note = f'<p class="muted">Not judged: {escape(why)}.</p>' if why else ""
    return (
        '<div class="alerts"><table><tr><th>topic</th><th>alert</th><th class=n>failure rate</th>'
        f"<th class=n>baseline rate</th></tr>{rows}</table>{note}</div>"
    )


def _cards(overall: Stats) -> str:
    cards = [
        ("finished (completed + failed)", f"{overall.completed + overall.failed:,}"),
        ("completed", f"{overall.completed:,}"),
        ("failed", f"{overall.failed:,}"),
        ("failure rate", _rate(overall.failure_rate)),
        ("cancelled, not counted", f"{overall.cancelled:,}"),
        ("attempts", f"{overall.attempts:,}"),
        ("attempt failure rate", _rate(overall.attempt_failure_rate)),
        ("retry recovery rate", _rate(overall.retry_recovery_rate)),
    ]
    return (
        f'<p class="headline">{escape(headline(overall))}.</p><div class="cards">'
        + "".join(f'<div class="card"><b>{v}</b>{k}</div>' for k, v in cards)
        + "</div>"
    )


def _chart_topics(analysis: Analysis) -> list[str]:
    chosen = [a.topic for a in analysis.alerts if a.kind == "failure_rate_above_baseline"]
    for t in sorted(analysis.totals, key=lambda s: (-s.failed, -(s.failure_rate or 0), s.topic)):
        if len(chosen) >= CHART_TOPICS:
            break
        if t.topic not in chosen and t.failed > 0:
            chosen.append(t.topic)
    for a in analysis.alerts:  # stopped topics: their baseline line shows what stopped
        if len(chosen) < CHART_TOPICS and a.topic not in chosen:
            chosen.append(a.topic)
    return chosen[:CHART_TOPICS]


def _rate_chart(analysis: Analysis) -> str:
    """Per hour for a one-day report (dashed: each topic's baseline rate), else per day with the
    baseline days shaded (left out when no charted topic has any)."""
    w, topics = analysis.window, _chart_topics(analysis)
    shown = f"showing {{}} of {len(analysis.totals)} topics (alerts and the most failed jobs first)"
    if w.since == w.until:
        hours: dict[str, list[float | None]] = {}
        for h in analysis.hourly:
            if h.topic in topics:
                hours.setdefault(h.topic, [None] * 24)[h.hour] = h.failure_rate
        ordered = {t: hours[t] for t in topics if t in hours}
        base = {
            s.topic: s.failure_rate
            for s in analysis.baseline
            if s.topic in ordered and s.failure_rate is not None
        }
        labels = [f"{h:02d}:00" for h in range(24)]
        dashed = f"; dashed: the baseline rate ({_baseline_text(w.baseline_days)})" if base else ""
        note = (
            f'<p class="muted">Failed / (completed + failed) '
            f"per hour of {w.since} ({escape(w.zone)}); "
            f"{shown.format(len(ordered))}{dashed}.</p>"
        )
        return note + line_chart(
            labels,
            ordered,
            references=base,
            ticks=range(0, 24, 2),
            label="failure rate per topic per hour",
        )
    series: dict[str, dict[date, float | None]] = defaultdict(dict)
    for s in (*analysis.baseline_daily, *analysis.daily):
        if s.topic in topics and s.day is not None:
            series[s.topic][s.day] = s.failure_rate
    has_baseline = any(d < w.since for values in series.values() for d in values)
    days = days_between(w.baseline_start if has_baseline else w.since, w.until)
    ordered_days = {t: [series[t].get(d) for d in days] for t in topics if t in series}
    shade = sum(1 for d in days if d < w.since)
    note = (
        f'<p class="muted">Failed / (completed + failed) per day; {shown.format(len(ordered_days))}'
        f"{'; shaded: baseline' if shade else ''}.</p>"
    )
    return note + line_chart(
        [d.strftime("%m-%d") for d in days],
        ordered_days,
        shaded=shade,
        titles=[d.isoformat() for d in days],
    )


def _histogram(analysis: Analysis) -> str:
    counts: dict[int, int] = defaultdict(int)
    for b in analysis.histogram:
        counts[b.attempts] += b.jobs
    if not counts:
        return bar_chart([])
    top = max(counts)
    bars = [(str(n), counts.get(n, 0)) for n in range(min(1, min(counts)), top + 1)]
    return bar_chart(bars, x_label="attempts per finished job", y_label="jobs")


def _topics(totals: tuple[Stats, ...]) -> str:
    head = (
        "topic",
        "jobs",
        "completed",
        "failed",
        "cancelled",
        "failure rate",
        "attempts",
        "failed attempts",
        "attempt failure rate",
        "retry recovery",
        "p50 ms",
        "p95 ms",
        "p95 lateness ms",
        "timed out",
        "worker lost",
        "no listener",
    )
    rows = []
    for t in sorted(totals, key=lambda s: (-s.failed, -(s.failure_rate or 0), s.topic)):
        cells = [
            f"{t.jobs:,}",
            f"{t.completed:,}",
            f"{t.failed:,}",
            f"{t.cancelled:,}",
            _rate(t.failure_rate),
            f"{t.attempts:,}",
            f"{t.failed_attempts:,}",
            _rate(t.attempt_failure_rate),
            _rate(t.retry_recovery_rate),
            _ms(t.p50_duration_ms),
            _ms(t.p95_duration_ms),
            _ms(t.p95_lateness_ms),
            f"{t.timed_out:,}",
            f"{t.worker_lost:,}",
            f"{t.no_listener:,}",
        ]
        rows.append(
            f"<tr><td>{escape(t.topic)}</td>"
            + "".join(f"<td class=n>{c}</td>" for c in cells)
            + "</tr>"
        )
    header = "<tr><th>topic</th>" + "".join(f"<th class=n>{h}</th>" for h in head[1:]) + "</tr>"
    return (
        f'<div class="wide"><table>{header}{"".join(rows)}</table></div>'
        if rows
        else '<p class="muted">No topic ran.</p>'
    )


def show_command(job_id: str) -> str:
    """The command that shows a job's audit row and attempts."""
    return f"horae audit show {shlex.quote(job_id)}"


def _errors(analysis: Analysis) -> str:
    if not analysis.top_errors:
        return '<p class="muted">No failed attempts.</p>'
    rows = "".join(
        f"<tr><td><code>{escape(e.signature)}</code></td><td class=n>{e.count:,}</td>"
        f"<td>{escape(', '.join(e.topics))}</td>"
        f"<td><code>{escape(show_command(e.example_job_id))}</code></td></tr>"
        for e in analysis.top_errors
    )
    return (
        "<table><tr><th>signature</th><th class=n>count</th>"
        "<th>topics</th><th>example job</th></tr>"
        f"{rows}</table>"
    )


def _baseline_text(days: int) -> str:
    return "none" if days == 0 else "the day before" if days == 1 else f"the {days} days before"


def render(analysis: Analysis, generated_at: datetime) -> str:
    """The whole page."""
    w = analysis.window
    period = w.since.isoformat() if w.since == w.until else f"{w.since} – {w.until}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>horae failure report {escape(period)}</title><style>{CSS}</style></head><body>"
        f"<h1>horae failure report: {escape(period)}</h1>"
        f'<p class="muted">Days in {escape(w.zone)}; baseline: {_baseline_text(w.baseline_days)}; '
        f"generated {generated_at.strftime('%Y-%m-%d %H:%M UTC')}.</p>"
        f"<h2>Alerts</h2>{_alerts(analysis)}"
        f"<h2>Overview</h2>{_cards(analysis.overall)}"
        f"<h2>Failure rate per topic</h2>{_rate_chart(analysis)}"
        f"<h2>Topics</h2>{_topics(analysis.totals)}"
        f"<h2>Attempts per job</h2>{_histogram(analysis)}"
        f"<h2>Top errors</h2>{_errors(analysis)}"
        "</body></html>\n"
    )


def write_html(analysis: Analysis, out: Path, generated_at: datetime) -> Path:
    """Write out/report.html; returns its path."""
    path = out / "report.html"
    path.write_text(render(analysis, generated_at), encoding="utf-8")
    return path
