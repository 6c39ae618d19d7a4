"""A brute-force reference for wall-clock time in a zone, independent of scheduler/core/timeutil.py
and scheduler/core/cron.py: a zone's offsets over a window as segments found by sampling every
ten minutes and bisecting to the second, and the real instants a naive wall time has in
them. Slow and simple on purpose; the property tests compare the project's rules with it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import strategies as st

EPOCH_NAIVE = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)
FIRST, LAST = 0, 4_102_444_800  # 1970-01-01 .. 2100-01-01 UTC, epoch seconds
WEEK = 7 * 86_400
STEP = 600  # no zone changes its offset twice within ten minutes (so sampling finds every change)


# Zones whose rules are unusual (30-minute DST, negative DST, day-long gaps, changes at
# midnight, offsets of seconds, DST that stops for Ramadan), drawn as often as all the others.
ODD_ZONES = (
    "Australia/Lord_Howe",
    "Europe/Dublin",
    "Pacific/Apia",
    "Pacific/Kiritimati",
    "Pacific/Kwajalein",
    "America/Havana",
    "America/Santiago",
    "Africa/Casablanca",
    "Asia/Gaza",
    "Asia/Tehran",
    "Pacific/Chatham",
    "America/St_Johns",
    "Antarctica/Troll",
    "Africa/Monrovia",
    "America/Caracas",
    "Asia/Pyongyang",
    "Europe/Moscow",
    "America/Chicago",
    "Europe/Berlin",
    "Australia/Adelaide",
)


def zones() -> st.SearchStrategy[str]:
    """Any zone of tzdata, one of ODD_ZONES half the time."""
    return st.one_of(st.sampled_from(ODD_ZONES), st.sampled_from(sorted(available_timezones())))


def offset(tz: ZoneInfo, t: int) -> int:
    """The zone's UTC offset (seconds) at epoch second t."""
    delta = datetime.fromtimestamp(t, tz).utcoffset()
    assert delta is not None
    return int(delta.total_seconds())


def first_change(tz: ZoneInfo, lo: int, hi: int) -> int:
    """The first second in (lo, hi] whose offset differs from lo's (the offset at hi differs)."""
    base = offset(tz, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset(tz, mid) == base:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class Segment:
    """[start, end) epoch seconds of constant offset `off`."""

    start: int
    end: int
    off: int


def segments(tz: ZoneInfo, lo: int, hi: int) -> list[Segment]:
    """The zone's constant-offset segments covering [lo, hi]."""
    out: list[Segment] = []
    start, off, t = lo, offset(tz, lo), lo
    while t < hi:
        nxt = min(t + STEP, hi)
        if offset(tz, nxt) != off:
            change = first_change(tz, t, nxt)
            out.append(Segment(start, change, off))
            start, off = change, offset(tz, change)
        t = nxt
    out.append(Segment(start, hi + 1, off))
    return out


def occurrences(segs: list[Segment], wall: int) -> list[int]:
    """Every epoch second whose wall reading is `wall` (wall seconds since 1970, naive)."""
    return sorted(wall - s.off for s in segs if s.start <= wall - s.off < s.end)


def gap_end(segs: list[Segment], wall: int) -> int | None:
    """The instant a spring-forward gap holding `wall` closes (None: `wall` is in no gap)."""
    for before, after in zip(segs, segs[1:]):
        if before.end + before.off <= wall < after.start + after.off:
            return after.start
    return None


def wall_seconds(naive: datetime) -> int:
    """A naive wall time as whole seconds since 1970-01-01T00:00 on the wall."""
    return (naive - EPOCH_NAIVE) // _SECOND


def as_utc(t: int) -> datetime:
    return datetime.fromtimestamp(t, UTC)


@cache
def changes(name: str) -> tuple[int, ...]:
    """The zone's offset changes in 1970..2100 (weekly samples, then bisection to the second;
    two changes within one week that cancel out are not found, which only makes them
    less likely to be drawn)."""
    tz, out = ZoneInfo(name), []
    t, base = FIRST, offset(ZoneInfo(name), FIRST)
    while t < LAST:
        nxt = min(t + WEEK, LAST)
        off = offset(tz, nxt)
        if off != base:
            out.append(first_change(tz, t, nxt))
            base = off
        t = nxt
    return tuple(out)


@st.composite
def instant_near_a_change(draw: st.DrawFn, name: str, spread: int) -> int:
    """An epoch second in 1970..2100, usually within `spread` seconds of one of the zone's
    offset changes (where gaps and folds are), else anywhere."""
    found = changes(name)
    if not found or draw(st.integers(0, 4)) == 0:
        return draw(st.integers(FIRST + 2 * 86_400, LAST - 2 * 86_400))
    return min(
        max(draw(st.sampled_from(found)) + draw(st.integers(-spread, spread)), FIRST + 2 * 86_400),
        LAST - 2 * 86_400,
    )
