"""Cron schedules in IANA zones: parsing and fire-time arithmetic, and the planning of a
stored schedule's ticks whatever its trigger (intervals: interval.py). Pure (no I/O).

Expressions have 5 fields (minute hour day-of-month month day-of-week; minute
precision) or 6 with the SECONDS FIELD FIRST ("30 30 3 * * *" = 03:30:30), as
cron-parser and pg-boss read them. @hourly/@daily/@midnight/@weekly/@monthly/
@yearly/@annually expand to 5 fields. When both day fields are restricted a day
matching either fires (Vixie cron). croniter only matches fields against NAIVE
wall-clock times; every zone computation is ours (zoneinfo), because croniter's
own DST handling fires a daily job twice in a fall-back overlap and drops an
hourly wall time that falls into Lord Howe's 30-minute gap.

Time is a sequence of segments of constant UTC offset. Inside one, an instant
and its wall reading map one to one; the rules below only concern the edges.

* Gap (spring forward), every expression: wall times inside the gap never
  occur. If the expression matches any of them it fires ONCE at the first
  instant after the gap ("30 2 * * *" America/Chicago 2026-03-08 -> 03:00 CDT).
  All matches inside one gap, and a match exactly at its end, are that one fire:
  a gap never silently swallows a run.
* Overlap (fall back), wall-clock kind (the default): a wall time occurring
  twice fires at its first occurrence only -- each wall-clock time fires at most
  once per day. Hourly "0 * * * *" on Chicago 2026-11-01 fires 01:00 CDT, then
  02:00 CST two real hours later; 01:00 CST repeats a wall time that has fired.
* Overlap, elapsed-time kind: the hour field is every hour (`*`, `0-23`) and the
  minute field is a wildcard or a step (contains `*` or `/`). Such expressions
  mean "every n minutes", so they fire at every real instant whose wall reading
  matches, repeats included: "*/15 * * * *" fires at 01:15 CDT and at 01:15 CST,
  i.e. every 15 real minutes through both changes (a gap removes as many
  quarter hours from the wall as from real time). If the step does not divide
  the shift ("*/45" in Lord Howe, which shifts 30 minutes) fires follow the wall
  reading plus the gap rule, not a fixed real period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

from croniter import croniter

from listeners.triggers import InvalidDeclaration, cron_fields
from scheduler.core.errors import InvalidCron
from scheduler.core.interval import IntervalSpec, parse_interval
from scheduler.core.timeutil import zone

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
_SCAN_S = 6 * 3600  # no zone changes its UTC offset twice within six hours
_PROBE_START = datetime(2026, 1, 1)


@dataclass(frozen=True)
class CronSpec:
    """A validated schedule; build it with `parse_cron`, never by hand."""

    expr: str  # normalized: the fields as given, single-spaced (aliases expanded)
    tz: str  # IANA zone name the wall-clock fields are read in
    has_seconds: bool  # 6 fields, seconds first
    elapsed: bool  # elapsed-time kind: repeated wall times in an overlap fire again


def parse_cron(expr: str, tz: str) -> CronSpec:
    """Validate `expr` in zone `tz`; raise InvalidCron / InvalidTimezone naming what is wrong
    (the text rules are listeners.triggers.cron_fields', shared with @on_event(cron=))."""
    zone(tz)
    try:
        normalized, has_seconds = cron_fields(expr)
    except InvalidDeclaration as exc:
        raise InvalidCron(str(exc), field="cron") from None
    itr = croniter(normalized, _PROBE_START, second_at_beginning=has_seconds)
    fields = normalized.split()
    minute = fields[1] if has_seconds else fields[0]
    every_hour = itr.expanded[1] == ["*"]  # croniter folds "*", "*/1", "0-23" into ["*"]
    elapsed = every_hour and ("*" in minute or "/" in minute)
    return CronSpec(expr=normalized, tz=tz, has_seconds=has_seconds, elapsed=elapsed)


Trigger = CronSpec | IntervalSpec  # what a stored schedule ticks by


def trigger_of(expr: str, tz: str, every_ms: int, jitter_ms: int, name: str) -> Trigger:
    """A stored schedule's trigger: its interval when `every_ms` is set, else its cron expression.

    Raises:
        ScheduleError: InvalidCron / InvalidTimezone naming the field.
    """
    return parse_interval(every_ms, jitter_ms, name) if every_ms else parse_cron(expr, tz)


def next_fire(spec: Trigger, after_ms: int) -> int:
    """The first fire instant strictly after `after_ms` (epoch ms, UTC), as epoch ms."""
    if isinstance(spec, IntervalSpec):
        return spec.next_fire(after_ms)
    # Fires are whole seconds; t * 1000 > after_ms  <=>  t >= after_ms // 1000 + 1.
    return _first_fire_at_or_after(spec, zone(spec.tz), after_ms // 1000 + 1) * 1000


def fires_between(spec: Trigger, after_ms: int, until_ms: int, cap: int) -> list[int]:
    """Fire instants in (after_ms, until_ms], the earliest `cap` of them (misfire mode "all")."""
    out: list[int] = []
    cursor = after_ms
    while len(out) < cap:
        cursor = next_fire(spec, cursor)
        if cursor > until_ms:
            break
        out.append(cursor)
    return out


def cron_job_id(name: str, fire_ms: int) -> str:
    """Job id of one fire: the same schedule and instant always give the same id (dedupe)."""
    return f"cron:{name}:{fire_ms}"


@lru_cache(maxsize=1024)
def _next_fire_cached(spec: Trigger, after_ms: int) -> int:
    """Many schedules share an expression and fire in one batch at one `now`."""
    return next_fire(spec, after_ms)


def plan_ticks(
    spec: Trigger, expected_next_ms: int, now_ms: int, misfire: str, cap: int, grace_ms: int
) -> tuple[list[int], int]:
    """Which due ticks to run now, and the schedule's next fire after now.

    `expected_next_ms` (<= now) is the first tick not yet fired. A tick later
    than `grace_ms` behind now counts as missed (the workers were down):
    coalesce runs one job for all due ticks (the first, so its id is stable);
    skip runs only a tick still within the grace; all runs every due tick, at
    most `cap`.
    """
    new_next = _next_fire_cached(spec, now_ms)
    if misfire == "all":
        return [expected_next_ms, *fires_between(spec, expected_next_ms, now_ms, cap - 1)], new_next
    if misfire == "skip":
        if now_ms - expected_next_ms <= grace_ms:
            return [expected_next_ms], new_next
        recent = next_fire(spec, now_ms - grace_ms - 1)
        return ([recent] if recent <= now_ms else []), new_next
    return [expected_next_ms], new_next


def _first_fire_at_or_after(spec: CronSpec, tzinfo: ZoneInfo, lo: int) -> int:
    """Earliest fire instant >= lo (epoch seconds), walking segments of constant offset."""
    while True:
        off = _offset(tzinfo, lo)
        before = _offset(tzinfo, lo - 1)
        if before < off and _first_match(spec, _wall(lo, before)) < _wall(lo, off):
            return lo  # lo closes a spring-forward gap that swallowed a matching wall time
        wall = _first_match(spec, _wall(lo, off))
        fire = _instant(wall, off)
        change = _transition(tzinfo, lo, fire)
        if change is not None:  # the candidate assumed an offset that no longer holds there
            lo = change
            continue
        if not spec.elapsed:
            first = int(wall.replace(tzinfo=tzinfo, fold=0).timestamp())
            if first < fire:  # second occurrence of an overlap wall time: skip the whole repeat
                back = _transition(tzinfo, first, fire)
                assert back is not None  # first and fire have different offsets
                lo = back + _offset(tzinfo, first) - off  # the instant the wall passes the old peak
                continue
        return fire


def _first_match(spec: CronSpec, wall_from: datetime) -> datetime:
    """The first naive wall time >= wall_from (whole seconds) the fields match."""
    itr = croniter(spec.expr, wall_from - _SECOND, second_at_beginning=spec.has_seconds)
    found: datetime = itr.get_next(datetime)
    return found


def _transition(tzinfo: ZoneInfo, lo: int, hi: int) -> int | None:
    """The first instant in (lo, hi] whose UTC offset differs from lo's, or None."""
    base = _offset(tzinfo, lo)
    left = lo
    while left < hi:
        right = min(left + _SCAN_S, hi)
        if _offset(tzinfo, right) != base:
            while right - left > 1:  # bisect to the second
                mid = (left + right) // 2
                if _offset(tzinfo, mid) == base:
                    left = mid
                else:
                    right = mid
            return right
        left = right
    return None


def _offset(tzinfo: ZoneInfo, instant: int) -> int:
    """UTC offset of `tzinfo` at epoch second `instant`, in seconds."""
    delta = datetime.fromtimestamp(instant, tzinfo).utcoffset()
    assert delta is not None
    return int(delta.total_seconds())


def _wall(instant: int, off: int) -> datetime:
    """Naive wall reading of epoch second `instant` under offset `off`."""
    return _EPOCH + timedelta(seconds=instant + off)


def _instant(wall: datetime, off: int) -> int:
    """Epoch second of naive `wall` read under offset `off`."""
    return (wall - _EPOCH) // _SECOND - off
