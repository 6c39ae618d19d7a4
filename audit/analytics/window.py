"""The report window: local days in the report zone, the trailing baseline,
and the UTC days (export partitions) that cover them. Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from audit.analytics.errors import AnalyticsError

MAX_WINDOW_DAYS = 366
MAX_BASELINE_DAYS = 90


def parse_day(text: str) -> date:
    """`YYYY-MM-DD` -> date.

    Raises:
        AnalyticsError: naming the value when it is not a date.
    """
    try:
        return date.fromisoformat(text)
    except ValueError as exc:
        raise AnalyticsError(f"expected a date YYYY-MM-DD; got {text!r}") from exc


def check_zone(name: str) -> ZoneInfo:
    """The IANA zone `name`.

    Raises:
        AnalyticsError: when the zone is unknown.
    """
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise AnalyticsError(
            f"unknown time zone {name!r} (use an IANA name such as 'Europe/Paris')"
        ) from exc


def yesterday(now: datetime, zone: str) -> date:
    """The day before `now`'s date in `zone` (the nightly default)."""
    return now.astimezone(check_zone(zone)).date() - timedelta(days=1)


def days_between(first: date, last: date) -> list[date]:
    """Every day from first to last, both included (empty when last < first)."""
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


@dataclass(frozen=True)
class ReportWindow:
    """Days `since`..`until` (inclusive, local to `zone`) and the `baseline_days` before them.

    A job belongs to the local day of its terminal time; an attempt to the
    local day it finished.
    """

    since: date
    until: date
    zone: str = "UTC"
    baseline_days: int = 7

    def __post_init__(self) -> None:
        if self.until < self.since:
            raise AnalyticsError(f"--until {self.until} is before --since {self.since}")
        if (self.until - self.since).days + 1 > MAX_WINDOW_DAYS:
            raise AnalyticsError(f"a report covers at most {MAX_WINDOW_DAYS} days")
        if not 0 <= self.baseline_days <= MAX_BASELINE_DAYS:
            raise AnalyticsError(
                f"baseline days must be within 0..{MAX_BASELINE_DAYS}; got {self.baseline_days}"
            )
        check_zone(self.zone)

    @property
    def days(self) -> list[date]:
        """The report's days."""
        return days_between(self.since, self.until)

    @property
    def baseline_start(self) -> date:
        """First baseline day (== since when there is no baseline)."""
        return self.since - timedelta(days=self.baseline_days)

    @property
    def baseline(self) -> list[date]:
        """The baseline's days (before since)."""
        return days_between(self.baseline_start, self.since - timedelta(days=1))

    def start_of(self, day: date) -> datetime:
        """The UTC instant at which local `day` begins in the report zone."""
        return datetime.combine(day, time(0), tzinfo=check_zone(self.zone)).astimezone(UTC)

    def instants(self, first: date, last: date) -> tuple[datetime, datetime]:
        """[start, end) in UTC of the local days first..last."""
        return self.start_of(first), self.start_of(last + timedelta(days=1))

    def utc_days(self, first: date, last: date) -> list[date]:
        """The UTC days (export partitions) that overlap the local days first..last."""
        lo, hi = self.instants(first, last)
        return days_between(lo.date(), (hi - timedelta(microseconds=1)).date())

    @property
    def report_utc_days(self) -> list[date]:
        """UTC partitions overlapping the report's days (always re-exported)."""
        return self.utc_days(self.since, self.until)

    @property
    def all_utc_days(self) -> list[date]:
        """UTC partitions overlapping the baseline and the report."""
        return self.utc_days(self.baseline_start, self.until)

    @property
    def label(self) -> str:
        """`2026-11-21` for one day, else `2026-11-01_2026-11-21`."""
        return self.since.isoformat() if self.since == self.until else f"{self.since}_{self.until}"
