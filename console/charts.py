"""The console's charts as inline SVG (no script; every text escaped): the analytics page's
failure rates beside their baselines, and the rollups' charts of the overview and the topic
page (console/trends.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from html import escape

from console.trends import Series


def rate_bars(rows: Sequence[tuple[str, float | None, float | None]], width: int = 860) -> str:
    """One horizontal bar per (topic, failure rate, baseline rate), the baseline a dark tick."""
    shown = [(t, r, b) for t, r, b in rows if r is not None]
    if not shown:
        return '<p class="meta">No finished jobs in the report\'s window.</p>'
    left, right, row_h = 200, 70, 26
    plot_w = width - left - right
    peak = max(max(r or 0, b or 0) for _, r, b in shown) or 1.0
    height = row_h * len(shown) + 24
    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="failure rate per topic against its baseline">'
    ]
    for i, (topic, rate, base) in enumerate(shown):
        y = 8 + i * row_h
        w = plot_w * (rate or 0) / peak
        colour = "#d62728" if base is not None and (rate or 0) > base else "#1f77b4"
        parts.append(
            f'<text x="{left - 8}" y="{y + 14}" text-anchor="end" class="axis">{escape(topic[:32])}'
            f"<title>{escape(topic)}</title></text>"
        )
        parts.append(
            f'<rect x="{left}" y="{y}" width="{w:.1f}" height="18" fill="{colour}">'
            f"<title>{escape(topic)}: {(rate or 0) * 100:.2f}%</title></rect>"
        )
        parts.append(
            f'<text x="{left + w + 6:.1f}" y="{y + 14}" '
            f'class="axis">{(rate or 0) * 100:.1f}%</text>'
        )
        if base is not None:
            bx = left + plot_w * base / peak
            parts.append(
                f'<line x1="{bx:.1f}" x2="{bx:.1f}" y1="{y - 3}" y2="{y + 21}" stroke="#222" '
                f'stroke-width="3"><title>baseline {base * 100:.2f}%</title></line>'
            )
    parts.append("</svg>")
    return "".join(parts)


# ------------------------------------------------------------------ the rollups' charts
# Colours are CSS classes (console.css: bar-ok, bar-bad, line-wait, line-retry, grid), so the
# dark theme applies; sizes are a viewBox, so a chart shrinks with its box (700 px and less).
_LEFT, _RIGHT, _TOP, _BOTTOM = 40, 10, 10, 22


def _axis_top(peak: float) -> int:
    """The y axis's top: the first of 1, 2, 5, 10, 20, 50, ... at or above peak."""
    top = 1
    while top < peak:
        top = top * 5 // 2 if str(top).startswith("2") else top * 2
    return top


def _label(at: datetime, step_s: int) -> str:
    return at.strftime("%H:%M") if step_s < 3600 else at.strftime("%d %H:00")


def _frame(
    parts: list[str], s: Series, size: tuple[int, int], top: int, unit: str
) -> tuple[float, float]:
    """The y grid (0, half, top) and the time labels of a chart of `size` (width, height);
    returns (plot width, plot height)."""
    width, height = size
    pw, ph = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    for frac in (0.0, 0.5, 1.0) if top % 2 == 0 else (0.0, 1.0):  # (counts: whole ticks)
        y = _TOP + ph * (1 - frac)
        value = top * frac
        text = f"{value:g}" if value != int(value) else f"{int(value):,}"
        parts.append(
            f'<line class="grid" x1="{_LEFT}" x2="{width - _RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{text}</text>'
        )
    end = s.at(len(s.completed) - 1) + timedelta(seconds=s.step_s)
    parts.append(
        f'<text class="axis" x="{_LEFT}" y="{height - 6}">{_label(s.start, s.step_s)}</text>'
        f'<text class="axis" x="{width - _RIGHT}" y="{height - 6}" text-anchor="end">'
        f"{_label(end, s.step_s)} UTC</text>"
        f'<text class="axis unit" x="{_LEFT + pw / 2:.1f}" y="{height - 6}" '
        f'text-anchor="middle">{escape(unit)}</text>'
    )
    return pw, ph


def _span(s: Series) -> str:
    return "the last hour" if s.range == "1h" else "the last 24 hours"


def finished_chart(s: Series, width: int = 640, height: int = 150, hint: bool = True) -> str:
    """Jobs finished per bucket, completed with failed stacked on them, as inline SVG; an
    empty state saying what to do when nothing finished (`hint`: with how it fills in)."""
    totals = [c + f for c, f in zip(s.completed, s.failed, strict=True)]
    if not any(totals):
        more = (
            " The chart fills in as jobs complete or fail (the audit relay of a worker records "
            "them)."
            if hint
            else ""
        )
        return (
            f'<p class="empty chart-empty">No job of this topic finished in {_span(s)}.{more}</p>'
        )

    top = _axis_top(max(totals))
    label = (
        f"jobs finished per {'minute' if s.step_s < 3600 else 'hour'} of topic {s.topic} over "
        f"{_span(s)}: {s.total_completed:,} completed, {s.total_failed:,} failed"
    )
    parts = [
        f'<svg class="chart finished" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
    ]
    pw, ph = _frame(parts, s, (width, height), top, f"jobs / {'min' if s.step_s < 3600 else 'h'}")
    slot = pw / len(totals)
    bar = max(slot * 0.8, 1.0)
    for i, (c, f) in enumerate(zip(s.completed, s.failed, strict=True)):
        if not c and not f:
            continue
        x = _LEFT + i * slot + (slot - bar) / 2
        hc = ph * c / top if c else 0.0
        hf = max(ph * f / top, 2.0) if f else 0.0  # a failure is never too thin to see
        when = _label(s.at(i), s.step_s)
        parts.append(f"<g><title>{when} UTC: {c:,} completed, {f:,} failed</title>")
        if c:
            parts.append(
                f'<rect class="bar-ok" x="{x:.1f}" y="{_TOP + ph - hc:.1f}" '
                f'width="{bar:.1f}" height="{hc:.1f}"/>'
            )
        if f:
            parts.append(
                f'<rect class="bar-bad" x="{x:.1f}" y="{_TOP + ph - hc - hf:.1f}" '
                f'width="{bar:.1f}" height="{hf:.1f}"/>'
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def depth_chart(s: Series, width: int = 640, height: int = 150, hint: bool = True) -> str:
    """Queue depth (waiting + retrying, and retrying alone) per bucket as lines; gaps where no
    sample was taken; an empty state (`hint`: with how it fills in) when none was."""
    depth = s.depth
    if all(d is None for d in depth):
        more = (
            ": the audit relay takes one a minute while it runs (a worker with the audit on "
            "runs it)"
            if hint
            else ""
        )
        return f'<p class="empty chart-empty">No queue-depth sample in {_span(s)}{more}.</p>'

    top = _axis_top(max(d or 0 for d in depth))
    label = (
        f"queue depth of topic {s.topic} over {_span(s)}: "
        f"latest {s.latest_depth or 0:,} waiting or retrying"
    )
    parts = [
        f'<svg class="chart depth" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
    ]
    pw, ph = _frame(parts, s, (width, height), top, "jobs waiting")
    slot = pw / len(depth)
    retrying = tuple(
        r if r is not None else (None if d is None else 0)
        for r, d in zip(s.retrying, depth, strict=True)
    )
    for values, cls in ((depth, "line-wait"), (retrying, "line-retry")):
        run: list[str] = []
        for i, v in enumerate([*values, None]):
            if v is not None:
                x = _LEFT + (i + 0.5) * slot
                run.append(f"{x:.1f},{_TOP + ph - ph * v / top:.1f}")
                continue
            if len(run) == 1:
                cx, cy = run[0].split(",")
                parts.append(f'<circle class="{cls}" cx="{cx}" cy="{cy}" r="2.5"/>')
            elif run:
                parts.append(f'<polyline class="{cls}" points="{" ".join(run)}"/>')
            run = []
    for i, (d, r) in enumerate(zip(depth, retrying, strict=True)):
        if d is not None:
            x = _LEFT + i * slot
            parts.append(
                f'<rect class="hit" x="{x:.1f}" y="{_TOP}" width="{slot:.1f}" height="{ph:.1f}">'
                f"<title>{_label(s.at(i), s.step_s)} UTC: {d:,} waiting or retrying "
                f"({r or 0:,} retrying)</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)
