"""The report's sentences, shared by `horae report`'s output and report.html: the
headline counts exactly the jobs its percentage is computed on, and "No alerts"
says which topics the alert rule could not judge. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from audit.analytics.results import Analysis, Stats, Unjudged


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def headline(overall: Stats) -> str:
    """E.g. "23 finished: 20 completed, 3 failed (13.0% failed); 1 cancelled not counted"."""
    finished = overall.completed + overall.failed
    text = f"{finished:,} finished: {overall.completed:,} completed, {overall.failed:,} failed"
    if finished:
        text += f" ({overall.failed / finished:.1%} failed)"
    if overall.cancelled:
        text += f"; {overall.cancelled:,} cancelled not counted"
    return text


def _names(topics: Sequence[str], limit: int) -> str:
    shown = ", ".join(topics[:limit])
    return shown + (f" and {len(topics) - limit} more" if len(topics) > limit else "")


def unjudged_text(unjudged: Unjudged, names: int = 0) -> str:
    """E.g. "2 topics had fewer than 20 finished jobs to judge; 1 topic had no baseline to compare
    with" (with up to `names` topic names each); "" when every topic that ran was judged."""
    parts = []
    if unjudged.too_small:
        listed = f" ({_names(unjudged.too_small, names)})" if names else ""
        parts.append(
            f"{_plural(len(unjudged.too_small), 'topic')}{listed} had fewer than "
            f"{unjudged.min_jobs:,} finished jobs to judge"
        )
    if unjudged.no_baseline:
        listed = f" ({_names(unjudged.no_baseline, names)})" if names else ""
        parts.append(
            f"{_plural(len(unjudged.no_baseline), 'topic')}{listed} had no baseline to compare with"
        )
    return "; ".join(parts)


def no_alerts_text(analysis: Analysis, names: int = 0) -> str:
    """The sentence standing for an empty alert list: what was judged, and what was not."""
    if not any(t.jobs or t.attempts for t in analysis.totals):
        return "No alerts (no job finished in the window)"
    why = unjudged_text(analysis.unjudged(), names)
    if why:
        return f"No alerts ({why})"
    margin = f"{analysis.rule.margin:.0%}"
    return (
        f"No alerts: every topic stayed within its baseline failure rate + {margin}, "
        "and none stopped running"
    )
