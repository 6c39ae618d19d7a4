"""The fault plan is a pure function of the seed and the run's shape (so a printed seed
replays the run), holds every kind of fault the run promises, and refuses a run too
short for its PostgreSQL outage."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.chaos import plan as P


def test_a_seed_gives_the_same_plan_again_and_another_seed_another() -> None:
    shape = P.PlanShape(seconds=180)
    assert P.make_plan(7, shape) == P.make_plan(7, shape)
    assert P.make_plan(7, shape) != P.make_plan(8, shape)
    assert "--seed 7 --seconds 180" in P.describe(7, shape, P.make_plan(7, shape))


def test_the_plan_holds_every_kind_of_fault_in_time() -> None:
    shape = P.PlanShape(seconds=180, stops=2)
    faults = P.make_plan(3, shape)
    kinds = Counter(f.kind for f in faults)
    assert set(kinds) == set(P.KINDS)
    assert kinds[P.REDIS_KILL] == 2 and kinds[P.WORKER_STOP] == 2 and kinds[P.CLOCK_SKEW] == 1
    kills = sorted(f.at_s for f in faults if f.kind == P.WORKER_KILL)
    assert all(2.0 <= b - a <= 5.0 for a, b in zip(kills, kills[1:])), kills  # every 2 to 5 s
    assert all(
        f.duration_s > shape.lease_s for f in faults if f.kind == P.WORKER_STOP
    )  # past the lease
    outage = next(f for f in faults if f.kind == P.POSTGRES_STOP)
    assert outage.duration_s == 60 and outage.at_s + outage.duration_s <= shape.seconds
    assert {f.target for f in faults if f.kind in (P.CUT, P.DELAY, P.RESET)} == {
        "redis",
        "postgres",
    }
    restarts = sorted((f.at_s, f.duration_s) for f in faults if f.kind == P.ROLLING_RESTART)
    assert len(restarts) >= 10 and {f.target for f in faults if f.kind == P.ROLLING_RESTART} == {
        P.SOLO
    }
    assert all(a + gap + 6.0 <= b for (a, gap), (b, _) in zip(restarts, restarts[1:])), (
        "one restart at a time"
    )


def test_a_run_too_short_for_its_outage_is_refused() -> None:
    with pytest.raises(ValueError, match=r"seconds=30: .*postgres_outage_s=60"):
        P.make_plan(1, P.PlanShape(seconds=30))
