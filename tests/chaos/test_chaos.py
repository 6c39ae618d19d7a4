"""The 60-second chaos run inside `make test`: the full plan's kinds of faults at once
(worker SIGKILLs every 2-5 s, a SIGSTOP past the lease, two Redis SIGKILLs, a PostgreSQL
outage, a worker 30 s ahead, cut/delayed/reset paths to both servers) under a mixed
load, with `appendfsync always`, so the checker tolerates no loss at all. The seed is
printed (replay: CHAOS_SEED=<seed> or python -m tests.chaos --seed <seed>)."""

from __future__ import annotations

import os
import random

import pytest

from tests.chaos.harness import ChaosRun, RunOptions
from tests.chaos.plan import PlanShape

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

SECONDS = 45.0  # of load and faults; with start-up, drain and the checks about 60-70 s


async def test_chaos_60s_no_invariant_is_broken() -> None:
    seed = int(os.environ.get("CHAOS_SEED") or random.randrange(1 << 31))
    shape = PlanShape(seconds=SECONDS, postgres_outage_s=8.0, stops=1, proxy_faults=1)
    outcome = await ChaosRun(
        RunOptions(seed, shape, jobs=1_500, appendfsync="always", drain_s=40.0)
    ).run()
    print(outcome.report())
    assert not outcome.producer_errors and not outcome.fault_errors, outcome.report()
    assert outcome.verdict.total() == 0, outcome.report()
    assert outcome.verdict.lost_last_second == [], "appendfsync always: nothing may be lost"
    for kind in (
        "worker_kill",
        "worker_stop",
        "redis_kill",
        "postgres_stop",
        "clock_skew",
        "cut_redis",
        "delay_redis",
        "reset_redis",
        "cut_postgres",
        "delay_postgres",
        "reset_postgres",
        "rolling_restart",
    ):
        assert outcome.faults[kind] >= 1, f"no {kind} fault was injected: {outcome.report()}"
    assert outcome.verdict.figures["listener runs"] >= 1_000, outcome.report()
    assert (
        outcome.verdict.figures["solo jobs"] >= 1
        and outcome.verdict.figures["coalesced ticks"] >= 1
    ), outcome.report()
