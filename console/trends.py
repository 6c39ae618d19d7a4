"""What the charts show: each topic's finished jobs, retries, queue depth and start lateness
over the last hour (minute rollups) or 24 hours (hour rollups), read from the rollups the
audit relay keeps (migration 0010, audit/rollups.py): at most 60 or 24 rows per topic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast, get_args

from audit.reader import AuditTrail
from audit.rollups import BUCKETS, RollupRow, add_buckets, quantile_ms
from scheduler.core.errors import ScheduleError, StorageError
from scheduler.core.timeutil import ms_to_utc, utc_to_ms

Range = Literal["1h", "24h"]
RANGES: tuple[str, ...] = get_args(Range)
# range -> (buckets, bucket length in ms, read the hour rollups)
_SHAPES: dict[str, tuple[int, int, bool]] = {
    "1h": (60, 60_000, False),
    "24h": (24, 3_600_000, True),
}


def check_range(text: str) -> Range:
    """A chart range from a query parameter.

    Raises:
        ScheduleError: field "range", naming the ranges there are.
    """
    if text not in RANGES:
        raise ScheduleError(
            f"range must be one of {', '.join(RANGES)}; got {text[:40]!r}", field="range"
        )
    return cast(Range, text)


@dataclass(frozen=True)
class Series:
    """One topic over a range: one value per bucket (a minute or an hour), oldest first."""

    topic: str
    range: Range
    start: datetime  # the first bucket's start
    step_s: int
    completed: tuple[int, ...]
    failed: tuple[int, ...]
    retried: tuple[int, ...]
    failed_attempts: tuple[int, ...]
    deduplicated: tuple[int, ...]
    waiting: tuple[int | None, ...]  # None: no sample in that bucket
    retrying: tuple[int | None, ...]
    lateness: tuple[int, ...]  # the range's starts per lateness bucket (audit/rollups.py)

    @property
    def total_completed(self) -> int:
        return sum(self.completed)

    @property
    def total_failed(self) -> int:
        return sum(self.failed)

    @property
    def total_retried(self) -> int:
        return sum(self.retried)

    @property
    def total_deduplicated(self) -> int:
        return sum(self.deduplicated)

    @property
    def starts(self) -> int:
        """Attempt starts with a known due time in the range."""
        return sum(self.lateness)

    @property
    def p50_ms(self) -> int | None:
        return quantile_ms(self.lateness, 0.5)

    @property
    def p99_ms(self) -> int | None:
        return quantile_ms(self.lateness, 0.99)

    @property
    def failure_rate(self) -> float | None:
        """Jobs failed for good / jobs finished (completed or failed); None when none finished."""
        ended = self.total_completed + self.total_failed
        return self.total_failed / ended if ended else None

    @property
    def depth(self) -> tuple[int | None, ...]:
        """Waiting + retrying per bucket (None: no sample)."""
        return tuple(
            None if w is None and r is None else (w or 0) + (r or 0)
            for w, r in zip(self.waiting, self.retrying, strict=True)
        )

    @property
    def latest_depth(self) -> int | None:
        """The newest sample's waiting + retrying."""
        return next((d for d in reversed(self.depth) if d is not None), None)

    @property
    def empty(self) -> bool:
        """Nothing finished, started, retried or was sampled in the range."""
        return not (
            self.total_completed
            or self.total_failed
            or self.total_retried
            or self.starts
            or any(d is not None for d in self.depth)
        )

    def at(self, i: int) -> datetime:
        """The start of bucket i."""
        return self.start + timedelta(seconds=i * self.step_s)


def window(range_: Range, now: datetime) -> tuple[datetime, int, int, bool]:
    """(first bucket's start, buckets, bucket ms, hourly) of `range_` ending with now's bucket."""
    count, step, hourly = _SHAPES[range_]
    now_ms = utc_to_ms(now)
    last = now_ms - now_ms % step
    return ms_to_utc(last - (count - 1) * step), count, step, hourly


def build_series(topic: str, rows: Sequence[RollupRow], range_: Range, now: datetime) -> Series:
    """A topic's Series from its rollup rows (any order; rows outside the window ignored)."""
    start, count, step, _ = window(range_, now)
    first = utc_to_ms(start)
    counts = {name: [0] * count for name in ("c", "f", "r", "fa", "d")}
    waiting: list[int | None] = [None] * count
    retrying: list[int | None] = [None] * count
    lateness: list[int] = [0] * BUCKETS
    for row in rows:
        i = (utc_to_ms(row.at) - first) // step
        if not 0 <= i < count:
            continue
        counts["c"][i] += row.completed
        counts["f"][i] += row.failed
        counts["r"][i] += row.retried
        counts["fa"][i] += row.failed_attempts
        counts["d"][i] += row.deduplicated
        waiting[i], retrying[i] = row.waiting, row.retrying
        lateness = add_buckets(lateness, row.lateness)
    return Series(
        topic=topic,
        range=range_,
        start=start,
        step_s=step // 1000,
        completed=tuple(counts["c"]),
        failed=tuple(counts["f"]),
        retried=tuple(counts["r"]),
        failed_attempts=tuple(counts["fa"]),
        deduplicated=tuple(counts["d"]),
        waiting=tuple(waiting),
        retrying=tuple(retrying),
        lateness=tuple(lateness),
    )


@dataclass(frozen=True)
class Trends:
    """The charts of some topics over one range, as of `at`."""

    range: Range
    at: datetime
    series: dict[str, Series]
    problem: str | None = None  # why the charts are empty when the audit could not say


async def read_trends(
    audit: AuditTrail | None,
    range_: Range,
    now: datetime,
    topics: Sequence[str],
    one: str | None = None,
) -> Trends:
    """Every topic's Series (`topics`, plus any the rollups know), or topic `one`'s alone.

    Args:
        audit: the scheduler's AuditTrail, or None when this process has none.
    """
    if audit is None:
        return Trends(
            range_,
            now,
            {t: build_series(t, [], range_, now) for t in topics},
            "the audit trail is off in this process: the charts need it",
        )
    start, _, _, hourly = window(range_, now)
    problem = None
    rows: list[RollupRow] = []
    try:
        rows = await audit.rollups(start, hourly, one)
    except (StorageError, OSError, TimeoutError) as exc:
        problem = f"audit trail unavailable: {exc}"
    by_topic: dict[str, list[RollupRow]] = {t: [] for t in topics}
    for row in rows:
        by_topic.setdefault(row.topic, []).append(row)
    if one is not None:
        by_topic = {one: by_topic.get(one, [])}
    return Trends(
        range_,
        now,
        {t: build_series(t, r, range_, now) for t, r in sorted(by_topic.items())},
        problem,
    )
