"""The analytics page's chart: each topic's failure rate beside its baseline, as inline
SVG (no script; every text escaped; colours as attributes, which the page's CSP allows)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape


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
