"""Duration values: a timedelta, a number of seconds, or text such as "15m" or "1h30m".
The one grammar of the project (scheduler.core.timeutil.parse_duration wraps it); here so
that `@on_event(every=...)` is checked where it is written. Pure, stdlib only."""

from __future__ import annotations

import re
from datetime import timedelta

from listeners.shown import shown

_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")  # "ms" before "m"
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}  # largest first
_RANK = {unit: rank for rank, unit in enumerate(_UNIT_S)}
EXAMPLES = "'30s', '5m', '1h30m', '2m30s', '1d12h' or '500ms'"


class DurationError(ValueError):
    """A value that is not a duration; str() names the field, the value and what is allowed."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def duration_seconds(value: timedelta | float | int | str, field: str = "delay") -> float:
    """Seconds from a timedelta, a number of seconds, or a string: "500ms", "30s", "5m", "2h",
    "1d", or compound, largest unit first: "1h30m", "2m30s", "1d12h", "1m30s500ms".

    Raises:
        DurationError: naming `field`, for negative, non-finite or unparseable values.
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
        raise DurationError(
            f"{field} must be a timedelta, seconds, or a "
            f"string like {EXAMPLES}; got {shown(value)}",
            field,
        )
    if not seconds >= 0 or seconds == float("inf"):
        raise DurationError(f"{field} must be a finite duration >= 0; got {shown(value)}", field)
    return seconds


def _text_seconds(text: str, field: str) -> float:
    """Seconds of "1h30m"-style text: number+unit parts, units d h m s ms, largest first, each
    once."""
    rest, total, last = text.strip(), 0.0, -1
    if not rest:
        raise DurationError(
            f"{field} must be a duration such as {EXAMPLES}; got an empty string", field
        )
    while rest:
        m = _PART.match(rest)
        if m is None:
            raise DurationError(_why(text, rest.strip(), field), field)
        rank = _RANK[m.group(2)]
        if rank <= last:
            raise DurationError(
                f"{field} {shown(text)}: give each unit once, largest first (d, h, m, s, ms), "
                "e.g. '1h30m'",
                field,
            )
        total, last, rest = (
            total + float(m.group(1)) * _UNIT_S[m.group(2)],
            rank,
            rest[m.end() :].strip(),
        )
    return total


def _why(text: str, rest: str, field: str) -> str:
    """The error message for text whose unparsed part is `rest`."""
    if rest.startswith("-"):
        return f"{field} must be a duration >= 0; got {shown(text)}"
    if re.fullmatch(r"\d+(?:\.\d+)?", rest):
        return (
            f"{field} {shown(text)}: the number {shown(rest)} has "
            f"no unit (d, h, m, s, ms); e.g. '1h30m', not '1h30'"
        )
    if re.match(r"(ms|d|h|m|s)(?![a-z])", rest):
        return f"{field} {shown(text)}: a unit needs a number before it, e.g. '1h'"
    return f"{field} must be a timedelta, seconds, or a string like {EXAMPLES}; got {shown(text)}"


def format_duration(ms: int) -> str:
    """The shortest text of a whole number of milliseconds in the grammar above ("1h30m", "0s")."""
    parts, rest = [], ms
    for unit, unit_ms in (
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ):
        if rest >= unit_ms:
            parts.append(f"{rest // unit_ms}{unit}")
            rest %= unit_ms
    return "".join(parts) or "0s"
