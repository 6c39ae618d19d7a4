"""A running attempt's progress and log lines (`event.progress()`, `event.log()`): the
bounds, the checks, and the stored text forms that lua/set_progress.lua and
lua/append_log.lua keep with the job. Pure: no I/O."""

from __future__ import annotations

import math
from datetime import datetime
from typing import NamedTuple

from scheduler.core.errors import InvalidProgress
from scheduler.core.timeutil import ms_to_utc

# A job keeps its last LOG_LINES log lines (every attempt's, oldest dropped first).
LOG_LINES = 100
# A log line or progress message longer than this many bytes (UTF-8) is cut to fit,
# ending with TRUNCATED.
TEXT_BYTES = 1024
TRUNCATED = "…[truncated]"
_MARK_BYTES = len(TRUNCATED.encode())


class Progress(NamedTuple):
    """A job's last reported progress: percent in 0..100 and an optional message.

    A tuple, so `info.progress == (40, "rendered 4/10 pages")` reads as it should."""

    percent: float
    message: str | None = None


class LogLine(str):
    """One log line of a job: the text itself (compares as a str), with the attempt that
    wrote it and when (`at`, aware UTC)."""

    attempt: int
    at: datetime

    def __new__(cls, text: str, attempt: int, at: datetime) -> LogLine:
        line = super().__new__(cls, text)
        line.attempt, line.at = attempt, at
        return line


def clip(text: str, field: str) -> str:
    """`text` when it fits TEXT_BYTES; else its longest prefix (whole characters) that fits
    with TRUNCATED appended.

    Raises:
        InvalidProgress: `text` is not a str.
    """
    if not isinstance(text, str):
        raise InvalidProgress(
            f"{field} must be a str, got {type(text).__name__} {text!r:.80}", field=field
        )
    data = text.encode("utf-8", "replace")  # a lone surrogate cannot be sent: it becomes "?"
    if len(data) <= TEXT_BYTES:
        return data.decode()
    return data[: TEXT_BYTES - _MARK_BYTES].decode("utf-8", "ignore") + TRUNCATED


def check_percent(percent: object) -> float:
    """The percent as stored: a finite number in 0..100 (an integral float becomes an int).

    Raises:
        InvalidProgress: not a number (bool included), not finite, or outside 0..100.
    """
    if isinstance(percent, bool) or not isinstance(percent, (int, float)):
        raise InvalidProgress(
            f"percent must be a number from 0 to 100, got {type(percent).__name__} {percent!r:.80}",
            field="percent",
        )
    if not math.isfinite(percent) or not 0 <= percent <= 100:
        raise InvalidProgress(f"percent must be from 0 to 100, got {percent!r}", field="percent")
    return int(percent) if float(percent).is_integer() else float(percent)


def progress_text(attempt: int, percent: object, message: object = None) -> str:
    """The job hash's `pg` field: "<attempt> <percent> <message>" (message "" for none),
    checked and clipped.

    Raises:
        InvalidProgress: see check_percent and clip (field "message").
    """
    value = check_percent(percent)
    text = "" if message is None else clip(message, "message")  # type: ignore[arg-type]
    return f"{attempt} {value!r} {text}"


def log_entry(attempt: int, now_ms: int, line: object) -> str:
    """One entry of a job's log list: "<attempt> <ms> <line>", the line clipped.

    Raises:
        InvalidProgress: `line` is not a str.
    """
    return f"{attempt} {now_ms} {clip(line, 'line')}"  # type: ignore[arg-type]


def _number(text: str) -> float:
    value = float(text)
    return int(value) if value.is_integer() else value


def parse_progress(stored: str | None, attempt: int) -> Progress | None:
    """The progress of the job's attempt `attempt` from its `pg` field (None: that attempt
    reported none; a retry starts without the previous attempt's progress)."""
    if not stored:
        return None
    owner, percent, message = stored.split(" ", 2)
    if int(owner) != attempt:
        return None
    return Progress(_number(percent), message or None)


def parse_log(entry: str) -> LogLine:
    """A LogLine from one entry of the job's log list (log_entry's form)."""
    attempt, ms, text = entry.split(" ", 2)
    return LogLine(text, int(attempt), ms_to_utc(int(ms)))
