"""Property tests of the wall-clock rule (scheduler/core/timeutil.py, README "Scheduling"): in
any zone of tzdata, at any instant of 1970..2100, a naive run time that the wall clock
shows once is that instant, one it shows twice (a fall-back fold) is its first
occurrence, and one it never shows (a spring-forward gap) runs at the first valid instant
after the gap. The expected instant comes from the brute-force reference in tzref.py.

Budget: 400 examples in CI (derandomized, a few seconds); HYPOTHESIS_PROFILE=long: 4,000.
"""

from __future__ import annotations

from datetime import UTC, timedelta
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import event, given, settings
from hypothesis import strategies as st

from scheduler.core.timeutil import resolve_run_at, wall_to_utc
from tests.hypothesis_profiles import budget
from tests.property.tzref import (
    EPOCH_NAIVE,
    as_utc,
    gap_end,
    instant_near_a_change,
    occurrences,
    offset,
    segments,
    zones,
)

ZONES = sorted(available_timezones())
HOUR = 3600


@settings(max_examples=budget(400))
@given(data=st.data(), name=zones(), micro=st.sampled_from([0, 0, 1, 999_999]))
def test_a_wall_time_runs_at_its_first_instant_or_at_the_end_of_its_gap(
    data: st.DataObject, name: str, micro: int
) -> None:
    tz = ZoneInfo(name)
    t = data.draw(
        instant_near_a_change(name, 0)
    )  # usually an offset change, where gaps and folds are
    around = sorted((offset(tz, t - 1), offset(tz, t)))
    wall = t + data.draw(
        st.integers(around[0] - HOUR, around[1] + HOUR)
    )  # whole seconds on the wall
    naive = EPOCH_NAIVE + timedelta(seconds=wall, microseconds=micro)
    segs = segments(tz, wall - 30 * HOUR, wall + 30 * HOUR)
    occ = occurrences(segs, wall)
    if occ:
        event("fold" if len(occ) > 1 else "plain")
        expected = as_utc(occ[0]) + timedelta(microseconds=micro)  # the first occurrence
    else:
        event("gap")
        end = gap_end(segs, wall)
        assert end is not None, f"{naive} in {name}: neither on the wall nor in a gap"
        expected = as_utc(end)  # the first valid instant after the gap
    assert wall_to_utc(naive, tz) == expected, (name, naive, occ)
    assert resolve_run_at(naive, name) == expected


@settings(max_examples=budget(100))
@given(name=st.sampled_from(ZONES), t=st.integers(0, 4_102_444_800), micro=st.integers(0, 999_999))
def test_an_aware_time_is_used_as_is(name: str, t: int, micro: int) -> None:
    aware = as_utc(t).astimezone(ZoneInfo(name)) + timedelta(microseconds=micro)
    assert resolve_run_at(aware, "Europe/Berlin") == aware.astimezone(UTC)
