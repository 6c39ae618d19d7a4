"""Property tests of cron fire times (scheduler/core/cron.py) against a brute-force walk: in any
zone of tzdata, around any instant of 1970..2100 (usually an offset change), every wall
time in the window that the expression matches is turned into fires by the rules of
cron.py's docstring (a wall time shown once fires then; shown twice, at its first
occurrence, or at both for the elapsed kind "every n minutes"; never shown, once at the
end of its gap), and next_fire must walk exactly those fires: strictly increasing,
none skipped, none added.

Budget: 300 examples in CI (derandomized, about 10 s); HYPOTHESIS_PROFILE=long: 3,000.
"""

from __future__ import annotations

from datetime import timedelta
from zoneinfo import ZoneInfo

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.core.cron import next_fire, parse_cron
from tests.hypothesis_profiles import budget
from tests.property.tzref import (
    EPOCH_NAIVE,
    gap_end,
    instant_near_a_change,
    occurrences,
    segments,
    zones,
)

HOUR, DAY = 3600, 86_400
CHAIN = 90  # consecutive fires checked from just before the offset change

SECONDS = st.sampled_from(["0", "30", "*/20", "15,45"])
MINUTES = st.sampled_from(["*", "*/5", "*/15", "*/45", "0", "30", "59", "0,30", "10-20", "0-59/20"])
HOURS = st.sampled_from(["*", "*", "0-23", "0", "1", "2", "3", "23", "1-3", "*/2", "2,14"])
# Day and month fields are mostly "*": a restricted one leaves most windows without a fire.
DAYS = st.sampled_from(["*"] * 8 + ["1", "15", "1-10", "31"])
MONTHS = st.sampled_from(["*"] * 10 + ["3-11", "10,11"])
WEEKDAYS = st.sampled_from(["*"] * 6 + ["0", "1-5", "6", "7"])


def values(text: str, low: int, high: int) -> set[int]:
    """The numbers a field (*, n, a-b, a,b, */k, a-b/k) stands for."""
    out: set[int] = set()
    for part in text.split(","):
        rng, _, step = part.partition("/")
        if rng == "*":
            a, b = low, high
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = b = int(rng)
            if step:
                b = high
        out.update(range(a, b + 1, int(step or 1)))
    return out


def matcher(fields: list[str]):  # type: ignore[no-untyped-def]
    """A test of naive wall datetimes against 6 fields (seconds first), Vixie day rule."""
    sec, minute, hour, dom, month, dow = fields
    S, M, H = values(sec, 0, 59), values(minute, 0, 59), values(hour, 0, 23)
    D, MO = values(dom, 1, 31), values(month, 1, 12)
    W = {w % 7 for w in values(dow, 0, 7)}
    either = dom != "*" and dow != "*"

    def day_ok(d) -> bool:  # type: ignore[no-untyped-def]
        if d.month not in MO:
            return False
        by_dom, by_dow = d.day in D, (d.weekday() + 1) % 7 in W
        return (by_dom or by_dow) if either else (by_dom and by_dow)

    return S, M, H, day_ok


def brute_fires(name: str, fields: list[str], elapsed: bool, lo: int, hi: int) -> list[int]:
    """Every fire instant (epoch s) in (lo, hi], from a minute-by-minute walk of the wall clock."""
    tz = ZoneInfo(name)
    segs = segments(tz, lo - 2 * DAY, hi + 2 * DAY)
    S, M, H, day_ok = matcher(fields)
    fires: set[int] = set()
    wall = (lo - DAY) // 60 * 60
    while wall <= hi + DAY:
        naive = EPOCH_NAIVE + timedelta(seconds=wall)
        if not day_ok(naive):
            wall += DAY - wall % DAY  # the next wall midnight
            continue
        if naive.hour in H and naive.minute in M:
            for s in sorted(S):
                occ = occurrences(segs, wall + s)
                if occ:
                    fires.update(occ if elapsed else occ[:1])
                else:
                    end = gap_end(segs, wall + s)
                    assert end is not None
                    fires.add(end)
        wall += 60
    return sorted(f for f in fires if lo < f <= hi)


@settings(max_examples=budget(300))
@given(
    data=st.data(),
    name=zones(),
    seconds=st.one_of(st.none(), SECONDS),
    minute=MINUTES,
    hour=HOURS,
    dom=DAYS,
    month=MONTHS,
    dow=WEEKDAYS,
)
def test_next_fire_walks_every_real_tick_in_order(
    data: st.DataObject,
    name: str,
    seconds: str | None,
    minute: str,
    hour: str,
    dom: str,
    month: str,
    dow: str,
) -> None:
    fields = (
        [minute, hour, dom, month, dow]
        if seconds is None
        else [seconds, minute, hour, dom, month, dow]
    )
    spec = parse_cron(" ".join(fields), name)
    # The elapsed kind, read from cron.py's docstring, not from its code
    elapsed = hour in ("*", "0-23") and ("*" in minute or "/" in minute)
    assert spec.elapsed == elapsed
    change = data.draw(instant_near_a_change(name, 0))
    lo = change - data.draw(st.integers(0, 20 * HOUR))
    hi = lo + 26 * HOUR
    expected = brute_fires(
        name, ["0" if seconds is None else seconds, *fields[-5:]], elapsed, lo, hi
    )
    event(f"{len(expected) > 0 and 'fires' or 'none'} in window")
    # From the window's start, and along a chain of consecutive fires from near the change.
    start = next((i for i, f in enumerate(expected) if f >= change - 600), len(expected))
    chain = expected[start : start + CHAIN]
    got = next_fire(spec, lo * 1000)
    assert got == (expected[0] * 1000 if expected else got), (name, spec.expr, lo)
    if not expected:
        assert got > hi * 1000, (name, spec.expr, lo, got)
        return
    after = (chain[0] - 1) * 1000 if start == 0 else expected[start - 1] * 1000
    walked = []
    for _ in chain:
        after = next_fire(spec, after)
        walked.append(after // 1000)
    assert walked == chain, (name, spec.expr, lo)
    if start + CHAIN >= len(
        expected
    ):  # the chain reached the window's last fire: nothing more in it
        assert next_fire(spec, expected[-1] * 1000) > hi * 1000
    near = data.draw(st.booleans())  # a probe near the change, or anywhere in the window
    probe = data.draw(
        st.integers(
            max(lo, change - 2 * HOUR) * 1000 if near else lo * 1000,
            max(lo, min(expected[-1], change + 2 * HOUR)) * 1000 - 1
            if near
            else expected[-1] * 1000 - 1,
        )
    )
    assert next_fire(spec, probe) == min(f for f in expected if f * 1000 > probe) * 1000, (
        name,
        spec.expr,
        probe,
    )
