"""Wall-clock times in IANA zones and duration strings. Pure.

A naive run time is wall-clock time in its zone: a wall time inside a
spring-forward gap runs at the first valid instant after the gap; an
ambiguous one (fall-back overlap) runs at its first occurrence.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from listeners.durations import DurationError, duration_seconds
from scheduler.core.errors import InvalidDelay, InvalidTimezone, shown


def zone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name (tzdata package as fallback for system files)."""
    if not isinstance(name, str) or not name:
        raise InvalidTimezone(
            f"tz must be an IANA time zone name such as 'Europe/Berlin'; got {shown(name)}",
            field="tz",
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidTimezone(
            f"tz {shown(name)} is not a known IANA time zone (examples: 'UTC', 'Europe/Berlin')",
            field="tz",
        ) from exc


def _first_instant_after_gap(wall: datetime, tz: ZoneInfo) -> datetime:
    """The transition instant closing the gap that `wall` falls in (UTC)."""
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)  # offset before the gap
    hi = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    lo, hi = min(lo, hi), max(lo, hi)
    after = hi.astimezone(tz).utcoffset()
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == after:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0)


def wall_to_utc(wall: datetime, tz: ZoneInfo) -> datetime:
    """Map a naive wall time in `tz` to an aware UTC instant (gap → after it, overlap → first)."""
    aware = wall.replace(tzinfo=tz, fold=0)
    as_utc = aware.astimezone(UTC)
    if as_utc.astimezone(tz).replace(tzinfo=None) != wall:  # it does not exist on the wall clock
        return _first_instant_after_gap(wall, tz)
    return as_utc


def resolve_run_at(run_at: datetime, tz: str) -> datetime:
    """An aware datetime is used as is; a naive one is wall time in `tz`. Returns aware UTC."""
    if not isinstance(run_at, datetime):
        raise InvalidDelay(
            f"run_at must be a datetime; got {shown(run_at)} ({type(run_at).__name__})",
            field="run_at",
        )
    zinfo = zone(tz)
    try:
        if run_at.tzinfo is not None and run_at.utcoffset() is not None:
            return run_at.astimezone(UTC)
        return wall_to_utc(run_at, zinfo)
    except OverflowError:
        raise InvalidDelay(
            f"run_at {run_at.isoformat()} in {tz} falls outside the years 1..9999 in UTC",
            field="run_at",
        ) from None


def parse_duration(value: timedelta | float | int | str, field: str = "delay") -> float:
    """Seconds from a timedelta, a number of seconds, or a string: "500ms", "30s", "5m", "2h",
    "1d", or compound, largest unit first: "1h30m", "2m30s", "1d12h", "1m30s500ms"
    (the grammar is listeners.durations', shared with `@on_event(every=)`).

    Raises:
        InvalidDelay: naming `field`, for negative, non-finite or unparseable values.
    """
    try:
        return duration_seconds(value, field)
    except DurationError as exc:
        raise InvalidDelay(str(exc), field=field) from None


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=4096)
def ms_to_utc(ms: int) -> datetime:
    """Epoch ms → aware UTC datetime (exact: no float rounding). The one such helper.

    Cached: the audit relay converts every event's instants, and the events of a batch share
    few distinct milliseconds (datetimes are immutable, so sharing one is safe)."""
    return _EPOCH_UTC + timedelta(milliseconds=ms)


def rfc3339(value: datetime | None) -> str | None:
    """The one text form of an instant everywhere (CLI text and JSON, HTTP API, console): RFC 3339
    in UTC with milliseconds and "Z", e.g. 2026-11-27T00:45:12.020Z (a naive value is taken as UTC;
    None stays None)."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_to_ms(when: datetime) -> int:
    """Aware datetime → epoch ms."""
    return int(round(when.timestamp() * 1000))
