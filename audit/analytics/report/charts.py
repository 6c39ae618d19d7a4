"""Inline SVG charts for report.html: no JavaScript, no external files; every
text goes through html.escape. Tooltips are SVG <title> elements."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Final

PALETTE: Final = (
    "#d62728",
    "#1f77b4",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _svg_open(width: int, height: int, label: str) -> str:
    """An <svg> that scales to the page width (viewBox; height follows the aspect ratio)."""
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="100%" '
        f'preserveAspectRatio="xMidYMid meet" role="img" aria-label="{escape(label)}">'
    )


def line_chart(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    *,
    shaded: int = 0,
    references: Mapping[str, float] | None = None,
    titles: Sequence[str] | None = None,
    ticks: Iterable[int] | None = None,
    label: str = "failure rate per topic per day",
    width: int = 860,
    height: int = 300,
) -> str:
    """Rates (0..1) at each x label, one polyline per series (values aligned with `labels`).

    The first `shaded` points are shaded (the baseline); `references` draws a dashed line at a
    series' reference rate (its baseline); `titles` are the tooltips' x texts (default: labels);
    `ticks` the indices of the labels shown (default: about 12, counted back from the last).
    A missing value (None) breaks the line.
    """
    references = references or {}
    if not labels or not series:
        return '<p class="muted">No finished jobs in this period.</p>'
    titles = titles or labels
    left, right, top, bottom = 48, 180, 12, 36
    plot_w, plot_h = width - left - right, height - top - bottom
    values = [v for s in series.values() for v in s if v is not None] + list(references.values())
    peak = max(values, default=0.0)
    y_max = min(1.0, max(0.05, ((peak * 10) // 1 + 1) / 10))
    step = plot_w / max(1, len(labels) - 1)

    def x(i: int) -> float:
        return left + (i * step if len(labels) > 1 else plot_w / 2)

    def y(v: float) -> float:
        return top + plot_h - (v / y_max) * plot_h

    parts = [_svg_open(width, height, label)]
    if 0 < shaded:
        end = x(shaded - 1) + step / 2 if shaded < len(labels) else left + plot_w
        parts.append(
            f'<rect x="{left}" y="{top}" width="{max(0.0, end - left):.1f}" height="{plot_h}" '
            f'fill="#f2f2f2"><title>baseline</title></rect>'
        )
        parts.append(f'<text x="{left + 4}" y="{top + 12}" class="axis">baseline</text>')
    for k in range(5):
        tick = y_max * k / 4
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" '
            f'y1="{y(tick):.1f}" y2="{y(tick):.1f}" class="grid"/>'
        )
        parts.append(
            f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" '
            f'text-anchor="end" class="axis">{_pct(tick)}</text>'
        )
    every = max(1, -(-len(labels) // 12))
    shown = set(range(len(labels) - 1, -1, -every) if ticks is None else ticks)
    for i, text in enumerate(labels):
        if i in shown:
            parts.append(
                f'<text x="{x(i):.1f}" y="{height - bottom + 16}" '
                f'text-anchor="middle" class="axis">'
                f"{escape(text)}</text>"
            )
    for n, (name, points) in enumerate(series.items()):
        color = PALETTE[n % len(PALETTE)]
        if name in references:
            ry = y(references[name])
            parts.append(
                f'<line x1="{left}" x2="{left + plot_w}" y1="{ry:.1f}" y2="{ry:.1f}" '
                f'stroke="{color}" stroke-width="1.2" stroke-dasharray="5 4" opacity="0.7">'
                f"<title>{escape(name)} baseline: {_pct(references[name])}</title></line>"
            )
        segments: list[list[str]] = [[]]
        for i, v in enumerate(points):
            if v is None:
                segments.append([])
                continue
            segments[-1].append(f"{x(i):.1f},{y(v):.1f}")
            parts.append(
                f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="2.5" fill="{color}">'
                f"<title>{escape(name)} {escape(titles[i])}: {_pct(v)}</title></circle>"
            )
        for segment in segments:
            if segment:
                parts.append(
                    f'<polyline fill="none" stroke="{color}" stroke-width="1.8" '
                    f'points="{" ".join(segment)}"/>'
                )
        ly = top + 14 + n * 16
        parts.append(
            f'<rect x="{width - right + 12}" y="{ly - 9}" width="10" height="10" fill="{color}"/>'
        )
        short = name if len(name) <= 24 else name[:23] + "…"
        parts.append(
            f'<text x="{width - right + 27}" y="{ly}" class="legend">{escape(short)}'
            f"<title>{escape(name)}</title></text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(
    bars: Sequence[tuple[str, int]],
    *,
    width: int = 860,
    height: int = 220,
    x_label: str = "",
    y_label: str = "",
) -> str:
    """One bar per (label, value), values labelled above the bars."""
    if not bars:
        return '<p class="muted">Nothing to show.</p>'
    left, right, top, bottom = 48, 12, 18, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max(v for _, v in bars) or 1
    slot = plot_w / len(bars)
    bar_w = max(2.0, min(slot * 0.7, 48.0))
    parts = [
        _svg_open(width, height, f"{y_label} by {x_label}"),
        f'<line x1="{left}" x2="{left + plot_w}" '
        f'y1="{top + plot_h}" y2="{top + plot_h}" class="grid"/>',
    ]
    for i, (label, value) in enumerate(bars):
        h = plot_h * value / peak
        bx = left + i * slot + (slot - bar_w) / 2
        parts.append(
            f'<rect x="{bx:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
            f'fill="#1f77b4"><title>{escape(label)}: {value}</title></rect>'
        )
        parts.append(
            f'<text x="{bx + bar_w / 2:.1f}" y="{top + plot_h - h - 4:.1f}" text-anchor="middle" '
            f'class="axis">{value}</text>'
        )
        parts.append(
            f'<text x="{bx + bar_w / 2:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
            f'class="axis">{escape(label)}</text>'
        )
    if x_label:
        parts.append(
            f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" class="axis">'
            f"{escape(x_label)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
