"""Wall-clock times in IANA zones and duration strings. Pure.

A naive run time is wall-clock time in its zone: a wall time inside a
spring-forward gap runs at the first valid instant after the gap; an
ambiguous one (fall-back overlap) runs at its first occurrence.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler.errors import InvalidDelay, InvalidTimezone, shown

_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")  # "ms" before "m"
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}  # largest first
_RANK = {unit: rank for rank, unit in enumerate(_UNIT_S)}
_EXAMPLES = "'30s', '5m', '1h30m', '2m30s', '1d12h' or '500ms'"


def zone(name: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name (tzdata package as fallback for system files)."""
    if not isinstance(name, str) or not name:
        raise InvalidTimezone(f"tz must be an IANA time zone name such as 'Europe/Berlin'; got {shown(name)}",
                              field="tz")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidTimezone(
            f"tz {shown(name)} is not a known IANA time zone (examples: 'UTC', 'Europe/Berlin')", field="tz"
        ) from exc


def _first_instant_after_gap(wall: datetime, tz: ZoneInfo) -> datetime:
    """The transition instant closing the gap that `wall` falls in (UTC)."""
    lo = wall.replace(tzinfo=tz, fold=1).astimezone(timezone.utc)  # offset before the gap
    hi = wall.replace(tzinfo=tz, fold=0).astimezone(timezone.utc)
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
    as_utc = aware.astimezone(timezone.utc)
    if as_utc.astimezone(tz).replace(tzinfo=None) != wall:  # it does not exist on the wall clock
        return _first_instant_after_gap(wall, tz)
    return as_utc


def resolve_run_at(run_at: datetime, tz: str) -> datetime:
    """An aware datetime is used as is; a naive one is wall time in `tz`. Returns aware UTC."""
    if not isinstance(run_at, datetime):
        raise InvalidDelay(f"run_at must be a datetime; got {shown(run_at)} ({type(run_at).__name__})", field="run_at")
    zinfo = zone(tz)
    try:
        if run_at.tzinfo is not None and run_at.utcoffset() is not None:
            return run_at.astimezone(timezone.utc)
        return wall_to_utc(run_at, zinfo)
    except OverflowError:
        raise InvalidDelay(f"run_at {shown(run_at)} in {tz} falls outside the years 1..9999 in UTC",
                           field="run_at") from None


def _text_seconds(text: str, field: str) -> float:
    """Seconds of "1h30m"-style text: number+unit parts, units d h m s ms, largest first, each once.

    Raises:
        InvalidDelay: naming `field` and, when it can, what is wrong with the text.
    """
    rest, total, last = text.strip(), 0.0, -1
    if not rest:
        raise InvalidDelay(f"{field} must be a duration such as {_EXAMPLES}; got an empty string", field=field)
    while rest:
        m = _PART.match(rest)
        if m is None:
            raise InvalidDelay(_why(text, rest.strip(), field), field=field)
        rank = _RANK[m.group(2)]
        if rank <= last:
            raise InvalidDelay(f"{field} {shown(text)}: give each unit once, largest first (d, h, m, s, ms), "
                               "e.g. '1h30m'", field=field)
        total, last, rest = total + float(m.group(1)) * _UNIT_S[m.group(2)], rank, rest[m.end():].strip()
    return total


def _why(text: str, rest: str, field: str) -> str:
    """The error message for text whose unparsed part is `rest`."""
    if rest.startswith("-"):
        return f"{field} must be a duration >= 0; got {shown(text)}"
    if re.fullmatch(r"\d+(?:\.\d+)?", rest):
        return f"{field} {shown(text)}: the number {shown(rest)} has no unit (d, h, m, s, ms); e.g. '1h30m', not '1h30'"
    if re.match(r"(ms|d|h|m|s)(?![a-z])", rest):
        return f"{field} {shown(text)}: a unit needs a number before it, e.g. '1h'"
    return f"{field} must be a timedelta, seconds, or a string like {_EXAMPLES}; got {shown(text)}"


def parse_duration(value: timedelta | float | int | str, field: str = "delay") -> float:
    """Seconds from a timedelta, a number of seconds, or a string: "500ms", "30s", "5m", "2h",
    "1d", or compound, largest unit first: "1h30m", "2m30s", "1d12h", "1m30s500ms".

    Raises:
        InvalidDelay: naming `field`, for negative, non-finite or unparseable values.
    """
    if isinstance(value, bool):
        seconds = float("nan")
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _text_seconds(value, field)
    else:
        raise InvalidDelay(
            f"{field} must be a timedelta, seconds, or a string like {_EXAMPLES}; got {shown(value)}",
            field=field,
        )
    if not seconds >= 0 or seconds == float("inf"):
        raise InvalidDelay(f"{field} must be a finite duration >= 0; got {shown(value)}", field=field)
    return seconds


_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=timezone.utc)


def ms_to_utc(ms: int) -> datetime:
    """Epoch ms → aware UTC datetime (exact: no float rounding). The one such helper."""
    return _EPOCH_UTC + timedelta(milliseconds=ms)


def utc_to_ms(when: datetime) -> int:
    """Aware datetime → epoch ms."""
    return int(round(when.timestamp() * 1000))
