"""Flow-control values: RateLimit, Dedupe and priorities. Pure.

Like RetryPolicy and Backoff (retry.py) they validate in __post_init__, so an
invalid one never exists: InvalidFlowOption names the field, the value and what is
allowed. Durations (timedelta, seconds, or "500ms"/"30s"/"5m"/"2h"/"1d") are kept
normalised: a timedelta of whole milliseconds, the unit Redis stores.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from scheduler.core.errors import InvalidDelay, InvalidFlowOption, shown
from scheduler.core.timeutil import parse_duration

MIN_PRIORITY, MAX_PRIORITY = -1_000, 1_000
# The one table of priority names; anything else must be an integer in range.
PRIORITY_ALIASES: dict[str, int] = {"low": -1, "normal": 0, "high": 1}

MAX_RATE = 1_000_000
MIN_RATE_PER_MS, MAX_RATE_PER_MS = 1, 86_400_000  # 1 ms .. 1 day
MAX_KEY_LEN = 512  # a job's key and a dedupe key, in characters
MAX_DEDUPE_WINDOW_MS = 30 * 86_400_000  # 30 days
DEDUPE_MODES = ("throttle", "debounce")

Duration = timedelta | float | str


def _ms_text(ms: int) -> str:
    return f"{ms:,} ms"


def check_int(field: str, value: object, low: int, high: int) -> int:
    """`value` when it is an int (not a bool) in low..high.

    Raises:
        InvalidFlowOption: naming `field`, the value and the range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidFlowOption(
            f"{field} must be an integer from {low:,} to {high:,}; "
            f"got {shown(value)} ({type(value).__name__})",
            field=field,
        )
    if not low <= value <= high:
        raise InvalidFlowOption(
            f"{field} must be from {low:,} to {high:,}; got {value:,}", field=field
        )
    return value


def duration_ms(value: object, field: str, low_ms: int, high_ms: int) -> int:
    """Whole milliseconds (rounded) of a duration, when in low_ms..high_ms.

    Raises:
        InvalidFlowOption: naming `field`, for an unparseable, negative or out-of-range duration.
    """
    try:
        seconds = parse_duration(value, field)  # type: ignore[arg-type]  # checked there
    except InvalidDelay as exc:
        raise InvalidFlowOption(str(exc), field=field) from exc
    ms = round(seconds * 1000)
    if not low_ms <= ms <= high_ms:
        raise InvalidFlowOption(
            f"{field} must be from {_ms_text(low_ms)} to {_ms_text(high_ms)}; got {shown(value)}",
            field=field,
        )
    return ms


def parse_priority(value: object, field: str = "priority") -> int:
    """A priority: an int from MIN_PRIORITY to MAX_PRIORITY, an integer string, or a name of
    PRIORITY_ALIASES ("low" = -1, "normal" = 0, "high" = 1). Higher runs first.

    Raises:
        InvalidFlowOption: naming `field`, the value and what is allowed.
    """
    if isinstance(value, str):
        alias = PRIORITY_ALIASES.get(value.strip().lower())
        if alias is not None:
            return alias
        try:
            value = int(value.strip())
        except ValueError:
            names = ", ".join(f"{k} ({v})" for k, v in PRIORITY_ALIASES.items())
            raise InvalidFlowOption(
                f"{field} must be an integer from {MIN_PRIORITY:,} to {MAX_PRIORITY:,} "
                f"or one of {names}; got {shown(value)}",
                field=field,
            ) from None
    return check_int(field, value, MIN_PRIORITY, MAX_PRIORITY)


@dataclass(frozen=True)
class RateLimit:
    """At most `max` jobs started per `per` (1 ms .. 1 day) for a topic; with `per_key`,
    per key instead of per topic. `per` is kept as a timedelta of whole milliseconds."""

    max: int
    per: Duration
    per_key: bool = False

    def __post_init__(self) -> None:
        check_int("rate_limit.max", self.max, 1, MAX_RATE)
        ms = duration_ms(self.per, "rate_limit.per", MIN_RATE_PER_MS, MAX_RATE_PER_MS)
        object.__setattr__(self, "per", timedelta(milliseconds=ms))
        if not isinstance(self.per_key, bool):
            raise InvalidFlowOption(
                f"rate_limit.per_key must be True or False; got {shown(self.per_key)}",
                field="rate_limit.per_key",
            )

    def per_ms(self) -> int:
        """The window in milliseconds (as stored: `rl_per`)."""
        return _whole_ms(self.per)


@dataclass(frozen=True)
class Dedupe:
    """Jobs of a topic with the same `key` collapse: "throttle" keeps the first within
    `window` (None: while it is unfinished); "debounce" keeps one waiting job that takes
    the payload and run_at of each later call within `window` of the previous one (the
    window restarts with each; so it needs one). `window` (≤ 30 days) is kept as a
    timedelta of whole ms."""

    key: str
    window: Duration | None = None
    mode: Literal["throttle", "debounce"] = "throttle"

    def __post_init__(self) -> None:
        key = self.key
        if not isinstance(key, str) or not key or len(key) > MAX_KEY_LEN or "\x00" in key:
            text = (
                shown(key)
                if not isinstance(key, str) or len(key) <= 60
                else f"{key[:60]!r}... ({len(key):,} chars)"
            )
            raise InvalidFlowOption(
                f"dedupe.key must be a non-empty string of at most {MAX_KEY_LEN} characters "
                f"without NUL; got {text}",
                field="dedupe.key",
            )
        if self.mode not in DEDUPE_MODES:
            raise InvalidFlowOption(
                f"dedupe.mode must be one of {', '.join(DEDUPE_MODES)}; got {shown(self.mode)}",
                field="dedupe.mode",
            )
        if self.window is None:
            if self.mode == "debounce":
                raise InvalidFlowOption(
                    "dedupe.window is required with mode 'debounce' (how long to wait for a "
                    "later job); got None",
                    field="dedupe.window",
                )
            return
        ms = duration_ms(self.window, "dedupe.window", 1, MAX_DEDUPE_WINDOW_MS)
        object.__setattr__(self, "window", timedelta(milliseconds=ms))

    def window_ms(self) -> int | None:
        """The window in milliseconds, or None when there is none."""
        return None if self.window is None else _whole_ms(self.window)


def _whole_ms(value: Duration) -> int:
    assert isinstance(value, timedelta), "normalised in __post_init__"
    return value // timedelta(milliseconds=1)
