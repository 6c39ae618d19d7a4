"""The seeded fault plan of a chaos run: pure (no I/O), so a seed and the run's length
give the same plan again and any run can be replayed (`--seed`). The harness prints it
before it starts and carries it out on the wall clock; how the faults land among the
jobs still depends on timing, which is the point of a chaos run."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

WORKER_KILL = "worker_kill"  # SIGKILL, then start it again at once
WORKER_STOP = "worker_stop"  # SIGSTOP past its lease, then SIGCONT
REDIS_KILL = "redis_kill"  # SIGKILL redis-server, start it again on the same AOF
POSTGRES_STOP = "postgres_stop"  # pg_ctl stop -m immediate for `duration_s`, then start
CUT = "cut"  # the proxy drops every connection and refuses new ones for `duration_s`
DELAY = "delay"  # the proxy delivers every chunk 200 ms late for `duration_s`
RESET = "reset"  # the proxy resets connections in the middle of a reply for `duration_s`
CLOCK_SKEW = "clock_skew"  # a worker runs with its clock `SKEW_S` ahead, the whole run
ROLLING_RESTART = (
    "rolling_restart"  # SIGTERM the only worker of a topic, start it again `duration_s` later
)
KINDS = (
    WORKER_KILL,
    WORKER_STOP,
    REDIS_KILL,
    POSTGRES_STOP,
    CUT,
    DELAY,
    RESET,
    CLOCK_SKEW,
    ROLLING_RESTART,
)
SOLO = "solo"  # the worker with the only listener of its topic (tests/chaos/app.py solo_registry)
SKEW_S = 30.0
DELAY_S = 0.2


@dataclass(frozen=True)
class Fault:
    """One fault: `at_s` seconds into the run, on `target` (a worker name, "redis" or
    "postgres")."""

    at_s: float
    kind: str
    target: str
    duration_s: float = 0.0

    def describe(self) -> str:
        lasting = f" for {self.duration_s:.1f} s" if self.duration_s else ""
        return f"t+{self.at_s:6.2f}s {self.kind:<14} {self.target}{lasting}"


@dataclass(frozen=True)
class PlanShape:
    """What a run's plan must contain; the 60 s test and `make chaos` differ only in these."""

    seconds: float
    workers: int = 3
    lease_s: float = 3.0
    postgres_outage_s: float = 60.0
    redis_kills: int = 2
    stops: int = 1
    proxy_faults: int = 2  # of each kind (cut, delay, reset) on each path (redis, postgres)


def make_plan(seed: int, shape: PlanShape) -> list[Fault]:
    """The faults of one run, in time order.

    Raises:
        ValueError: the run is too short for the faults its shape asks for.
    """
    if shape.seconds < shape.postgres_outage_s + 10 or shape.seconds < 20:
        raise ValueError(
            f"seconds={shape.seconds}: a run needs at least max(20, postgres_outage_s + 10) s "
            f"(postgres_outage_s={shape.postgres_outage_s})"
        )
    rng = random.Random(seed)
    names = [f"w{i}" for i in range(shape.workers)]
    end = shape.seconds - 2.0  # the last second of the run is left quiet
    faults = [Fault(0.0, CLOCK_SKEW, rng.choice(names), shape.seconds)]
    t = 2.0 + rng.uniform(0, 1)
    while t < end:  # a random worker every 2 to 5 s
        faults.append(Fault(round(t, 2), WORKER_KILL, rng.choice(names)))
        t += rng.uniform(2.0, 5.0)
    for i in range(shape.stops):
        at = rng.uniform(0.1, 0.8) * end
        faults.append(
            Fault(round(at, 2), WORKER_STOP, rng.choice(names), round(shape.lease_s + 2.0, 2))
        )
    for i in range(shape.redis_kills):  # spread over the run: one in each part of it
        part = end / shape.redis_kills
        faults.append(
            Fault(round(part * i + rng.uniform(0.25, 0.75) * part, 2), REDIS_KILL, "redis")
        )
    pg_at = rng.uniform(2.0, end - shape.postgres_outage_s)
    faults.append(Fault(round(pg_at, 2), POSTGRES_STOP, "postgres", shape.postgres_outage_s))
    for target in ("redis", "postgres"):
        for kind, (lo, hi) in ((CUT, (0.5, 2.0)), (DELAY, (2.0, 4.0)), (RESET, (1.0, 2.0))):
            for _ in range(shape.proxy_faults):
                faults.append(
                    Fault(
                        round(rng.uniform(1.0, end - hi), 2),
                        kind,
                        target,
                        round(rng.uniform(lo, hi), 2),
                    )
                )
    t = 3.0 + rng.uniform(0, 2)
    while t < end - 4.0:  # the only worker of a topic redeployed every 6 to 12 s, down 0.5 to 3 s
        gap = round(rng.uniform(0.5, 3.0), 2)
        faults.append(Fault(round(t, 2), ROLLING_RESTART, SOLO, gap))
        t += gap + rng.uniform(6.0, 12.0)
    return sorted(faults, key=lambda f: (f.at_s, f.kind, f.target))


def describe(seed: int, shape: PlanShape, faults: list[Fault]) -> str:
    """The printed plan: how to replay it, then one line per fault and the totals by kind."""
    counts = Counter(
        f.kind
        if f.target not in ("redis", "postgres") or f.kind in (REDIS_KILL, POSTGRES_STOP)
        else f"{f.kind}_{f.target}"
        for f in faults
    )
    head = (
        f"chaos plan: seed {seed}, {shape.seconds:.0f} s, {shape.workers} workers "
        f"(replay: --seed {seed} --seconds {shape.seconds:.0f})"
    )
    return "\n".join(
        [
            head,
            *(f"  {f.describe()}" for f in faults),
            "  totals: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())),
        ]
    )
