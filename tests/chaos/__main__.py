"""`python -m tests.chaos [--seed N] [--seconds S] [--jobs J] [--appendfsync everysec|always]`:
the full chaos run (`make chaos`; CHAOS_SEED, CHAOS_SECONDS, CHAOS_JOBS, CHAOS_APPENDFSYNC
set the defaults). Prints the plan, the faults injected by kind and the invariants;
exits 1 on any violation."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
from typing import Any

from tests.chaos.harness import ChaosRun, RunOptions
from tests.chaos.plan import PlanShape


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # asyncio.run cancels the run: its servers and workers are stopped


def main() -> None:
    signal.signal(signal.SIGTERM, _interrupt)
    env = os.environ
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument(
        "--seed", type=int, default=int(env.get("CHAOS_SEED") or random.randrange(1 << 31))
    )
    parser.add_argument("--seconds", type=float, default=float(env.get("CHAOS_SECONDS") or 180))
    parser.add_argument("--jobs", type=int, default=int(env.get("CHAOS_JOBS") or 10_000))
    parser.add_argument(
        "--appendfsync",
        choices=("always", "everysec"),
        default=env.get("CHAOS_APPENDFSYNC") or "everysec",
    )
    parser.add_argument(
        "--postgres-outage", type=float, default=60.0, help="seconds PostgreSQL is down"
    )
    args = parser.parse_args()
    shape = PlanShape(
        seconds=args.seconds, postgres_outage_s=args.postgres_outage, stops=2, proxy_faults=2
    )
    options = RunOptions(args.seed, shape, args.jobs, args.appendfsync, drain_s=120.0)
    outcome = asyncio.run(ChaosRun(options, say=lambda line: print(line, flush=True)).run())
    print(outcome.report(), flush=True)
    sys.exit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
