"""Schedules declared beside their listeners (`@on_event(topic, cron=..., tz=...)` or
`every=...`): the declaration value and its checks, made where the decorator is written.
The cron text rules and misfire modes are defined here once; scheduler.core.cron builds on
them (the zone arithmetic stays there). Uses croniter and zoneinfo, nothing of ours."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from listeners.durations import DurationError, duration_seconds
from listeners.shown import shown

MISFIRE_MODES = ("coalesce", "skip", "all")
MIN_EVERY_MS = 1000  # an interval shorter than a second is a busy loop, not a schedule
# A schedule's name, and a job's id (scheduler.core.validation.MAX_ID_LEN): tick ids are
# cron:{name}:{ms}.
MAX_NAME_LEN = 200
# A cron expression's length: every field written as a list of each value fits
# ("0,1,...,59" is 170 characters, and names are kept with the schedule and its ticks).
MAX_CRON_LEN = 256

_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ALLOWED = {
    "second": "0-59",
    "minute": "0-59",
    "hour": "0-23",
    "day-of-month": "1-31 or L",
    "month": "1-12 or JAN-DEC",
    "day-of-week": "0-7 or SUN-SAT (0 and 7 are Sunday), L, d#n",
}
_SYNTAX = "written as `*`, a value, a range a-b, a list a,b or a step */n, a/n, a-b/n"
_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_RANDOM_OR_HASHED = re.compile(r"(?<![A-Za-z])[HhRr](?![A-Za-z])")
_PROBE_START = datetime(2026, 1, 1)


class InvalidDeclaration(ValueError):
    """A declared schedule refused where it is written; str() names the field, the value
    and what is allowed, `field` the argument of on_event."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Declaration:
    """A schedule declared beside a listener: ticks of `topic` by `cron` in `tz`, or every
    `every_ms` (plus a per-tick offset in [0, jitter_ms)). `name` is the stored schedule's."""

    name: str
    topic: str
    cron: str = ""  # normalised (aliases expanded); "" for an interval
    every_ms: int = 0  # 0 for a cron expression
    jitter_ms: int = 0
    tz: str = "UTC"
    misfire: str | None = None  # None: the worker's settings (cron.misfire)
    payload: Any = field(
        default=None, hash=False
    )  # every tick's (checked by the topic's schema at worker start)


def cron_fields(expr: object) -> tuple[str, bool]:
    """`expr` checked and normalised: (fields single-spaced with aliases expanded, has seconds).

    5 fields (minute hour day-of-month month day-of-week), or 6 with the seconds first;
    croniter's hashed/random `H`/`R` are refused (ticks must be the same on every worker).

    Raises:
        InvalidDeclaration: field "cron", naming the part that is wrong and what is allowed.
    """
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidDeclaration(
            f"cron expression must be a non-empty string; got {shown(expr)}", "cron"
        )
    if len(expr) > MAX_CRON_LEN:
        raise InvalidDeclaration(
            f"cron expression must be at most {MAX_CRON_LEN} characters; got {len(expr):,} "
            f"({shown(expr)})",
            "cron",
        )
    fields = expr.split()
    if len(fields) == 1 and fields[0].lower() in _ALIASES:
        fields = _ALIASES[fields[0].lower()].split()
    if len(fields) not in (5, 6):
        raise InvalidDeclaration(
            f"cron expression {shown(expr)} has {len(fields)} "
            f"fields; expected 5 (minute hour day-of-month "
            "month day-of-week) or 6 with seconds first (second "
            "minute hour day-of-month month day-of-week)",
            "cron",
        )
    has_seconds = len(fields) == 6
    names = ("second", *_FIELDS) if has_seconds else _FIELDS
    for i, (name, value) in enumerate(zip(names, fields)):
        probe = ["*"] * len(fields)
        probe[i] = value
        ok = not _RANDOM_OR_HASHED.search(value)
        if ok:
            try:
                croniter(" ".join(probe), _PROBE_START, second_at_beginning=has_seconds)
            except (ValueError, KeyError, TypeError):  # croniter's errors derive from ValueError
                ok = False
        if not ok:
            raise InvalidDeclaration(
                f"cron expression {shown(expr)}: {name} field {shown(value)} "
                f"is invalid; allowed: {_ALLOWED[name]}, {_SYNTAX}",
                "cron",
            )
    normalized = " ".join(fields)
    try:  # every field is fine alone; the combination may still never occur
        croniter(normalized, _PROBE_START, second_at_beginning=has_seconds).get_next(datetime)
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidDeclaration(
            f"cron expression {shown(expr)} never fires: no date matches its "
            f"day-of-month {shown(fields[-3])} and month {shown(fields[-2])} fields",
            "cron",
        ) from exc
    return normalized, has_seconds


def declaration(
    topic: str,
    *,
    cron: str | None = None,
    every: timedelta | float | str | None = None,
    tz: str | None = None,
    misfire: str | None = None,
    jitter: timedelta | float | str | None = None,
    name: str | None = None,
    payload: Any = None,
) -> Declaration | None:
    """The schedule `on_event`'s trigger arguments declare, checked; None when they declare none.

    Raises:
        InvalidDeclaration: naming the argument, its value and what is allowed.
    """
    if cron is None and every is None:
        for arg, value in (
            ("tz", tz),
            ("misfire", misfire),
            ("jitter", jitter),
            ("name", name),
            ("payload", payload),
        ):
            if value is not None:
                raise InvalidDeclaration(
                    f"{arg}={shown(value)} needs a schedule: give cron= or every= too", arg
                )
        return None
    if cron is not None and every is not None:
        raise InvalidDeclaration(
            f"give cron= or every=, not both (got cron={shown(cron)}, every={shown(every)})",
            "every",
        )
    try:
        json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidDeclaration(f"payload must be JSON-serializable: {exc}", "payload") from None
    if misfire is not None and misfire not in MISFIRE_MODES:
        raise InvalidDeclaration(
            f"misfire must be one of {', '.join(MISFIRE_MODES)}; got {shown(misfire)}", "misfire"
        )
    if cron is not None:
        if jitter is not None:
            raise InvalidDeclaration(
                f"jitter={shown(jitter)} applies to every= schedules only; a cron tick runs at "
                "its time",
                "jitter",
            )
        expr, _ = cron_fields(cron)
        zone = "UTC" if tz is None else check_zone(tz)
        return Declaration(
            _name(name, topic, "cron"), topic, cron=expr, tz=zone, misfire=misfire, payload=payload
        )
    if tz is not None:
        raise InvalidDeclaration(
            f"tz={shown(tz)} applies to cron= schedules only: every= counts elapsed time "
            "(use cron= for wall-clock times in a zone)",
            "tz",
        )
    every_ms = _ms(every, "every")
    if every_ms < MIN_EVERY_MS:
        raise InvalidDeclaration(f"every must be at least 1s; got {shown(every)}", "every")
    jitter_ms = 0 if jitter is None else _ms(jitter, "jitter")
    if jitter_ms > every_ms:
        raise InvalidDeclaration(
            f"jitter must be at most the interval every={shown(every)}; got {shown(jitter)}",
            "jitter",
        )
    return Declaration(
        _name(name, topic, "every"),
        topic,
        every_ms=every_ms,
        jitter_ms=jitter_ms,
        misfire=misfire,
        payload=payload,
    )


def check_zone(tz: object) -> str:
    """An IANA zone name that zoneinfo knows (the tzdata package as fallback).

    Raises:
        InvalidDeclaration: field "tz".
    """
    if not isinstance(tz, str) or not tz:
        raise InvalidDeclaration(
            f"tz must be an IANA time zone name such as 'Europe/Berlin'; got {shown(tz)}", "tz"
        )
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidDeclaration(
            f"tz {shown(tz)} is not a known IANA time zone (examples: 'UTC', 'Europe/Berlin')", "tz"
        ) from exc
    return tz


def _ms(value: object, field: str) -> int:
    """Whole milliseconds of a duration (the project's grammar: "15m", "1h30m", seconds, a
    timedelta)."""
    try:
        seconds = duration_seconds(value, field)  # type: ignore[arg-type]  # checked there
    except DurationError as exc:
        raise InvalidDeclaration(str(exc), field) from None
    return round(seconds * 1000)


def _name(name: object, topic: str, kind: str) -> str:
    """The schedule's name: `name`, else `{topic}:{kind}` (one cron and one every per topic)."""
    if name is None:
        name = f"{topic}:{kind}"
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LEN:
        raise InvalidDeclaration(
            f"name must be a non-empty string of at most {MAX_NAME_LEN} characters; "
            f"got {shown(name)}",
            "name",
        )
    return name
