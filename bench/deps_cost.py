"""What dependencies (after=) cost a job that has none: the Redis time of enqueue.lua, claim.lua
and complete.lua per job, measured by the server (INFO commandstats, the EVALSHA line's usec
diffed around each phase), for N jobs without parents; with --after, each job waits for one
parent (completed first), to show what a child pays.

    .venv/bin/python bench/deps_cost.py --redis redis://127.0.0.1:6379/0 [--n 5000] [--reps 5]
        [--after]

Run it on the code before and after a change (PYTHONPATH=<a checkout of the old commit> for
the old one) and compare the medians (bench/README.md keeps the latest numbers). Nothing else
should use the Redis meanwhile: the counters are the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import uuid
from typing import Any

START_MS = 1_800_000_000_000


async def _evalsha(raw: Any) -> tuple[int, int]:
    stats = await raw.info("commandstats")
    row = stats.get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return int(row["calls"]), int(row["usec"])


async def one_run(redis_url: str, n: int, after: bool) -> dict[str, float]:
    import redis.asyncio as aioredis

    from listeners.dispatch import DispatchResult
    from scheduler.core.request import JobRequest
    from scheduler.core.retry import RetryPolicy
    from scheduler.core.validation import build_job
    from scheduler.store.redis import RedisStore
    from scheduler.worker.attempt import settlement

    namespace = f"bench-deps-{uuid.uuid4().hex[:8]}"
    raw = aioredis.from_url(redis_url)
    store = RedisStore(raw, namespace, audit=False)
    out: dict[str, float] = {}
    try:
        parent = ""
        if after:
            pj = build_job(
                JobRequest(topic="bench.parent", run_at_ms=START_MS),
                default_retry=RetryPolicy(),
                default_timeout_ms=60_000,
                now_ms=START_MS,
            )
            await store.enqueue(pj, START_MS)
            [claimed], _, _ = await store.claim(START_MS, 1, 60_000, "w")
            await store.complete([settlement(claimed, DispatchResult(listeners=1), START_MS)],
                                 START_MS, 1_000_000)  # fmt: skip
            parent = pj.id
        extra: dict[str, Any] = {"after": [parent]} if parent else {}  # (old code: no after)
        jobs = [
            build_job(
                JobRequest(topic="bench.deps", run_at_ms=START_MS, payload={"i": i}, **extra),
                default_retry=RetryPolicy(),
                default_timeout_ms=60_000,
                now_ms=START_MS,
            )
            for i in range(n)
        ]
        calls, usec = await _evalsha(raw)
        for j in jobs:
            await store.enqueue(j, START_MS)
        c2, u2 = await _evalsha(raw)
        out["enqueue"] = (u2 - usec) / max(c2 - calls, 1)
        claimed_all = []
        while len(claimed_all) < n:
            got, _, _ = await store.claim(START_MS, 50, 60_000, "w")
            claimed_all += got
        c3, u3 = await _evalsha(raw)
        out["claim"] = (u3 - u2) / n  # per job (batches of 50)
        for start in range(0, n, 50):
            batch = claimed_all[start : start + 50]
            await store.complete(
                [settlement(c, DispatchResult(listeners=1), START_MS) for c in batch],
                START_MS,
                1_000_000,
            )
        c4, u4 = await _evalsha(raw)
        out["complete"] = (u4 - u3) / n
        async for key in raw.scan_iter(match=f"{{{namespace}}}*", count=1000):
            await raw.delete(key)
    finally:
        await store.aclose()
        await raw.aclose()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--after", action="store_true")
    args = parser.parse_args()
    runs = []
    for _ in range(args.reps):
        r = asyncio.run(one_run(args.redis, args.n, args.after))
        runs.append(r)
        print("  " + "  ".join(f"{k} {v:5.2f} µs" for k, v in r.items()), flush=True)
    print(
        f"median of {args.reps} (server µs per job, after={'1 parent' if args.after else 'none'}): "
        + ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f}" for k in runs[0])
    )


if __name__ == "__main__":
    main()
