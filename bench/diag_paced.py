"""Where does horae's paced latency go? Times each stage of every job (diagnostic, horae only).

    .venv/bin/python bench/diag_paced.py [--n 2000] [--rate 200] [--audit]

Wraps (in this process only, nothing in the engine is changed) RedisStore.enqueue,
Worker._on_wake and RedisStore.claim with timers, runs the paced scenario on a
private Redis, and prints per-stage percentiles plus the slowest jobs' breakdown:
enqueue call -> wake-up message received -> claim call start -> claim returned ->
handler start.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from adapters.base import Job  # noqa: E402
from adapters.horae import HoraeAdapter  # noqa: E402
from run import RedisServer  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))] if s else float("nan")


async def main_async(args: argparse.Namespace, url: str) -> None:
    from scheduler.store import RedisStore
    from scheduler.worker import Worker

    n = args.n
    t_enq0 = [0.0] * n
    t_enq1 = [0.0] * n
    t_claim0 = [0.0] * n
    t_claim1 = [0.0] * n
    t_wake = [0.0] * n
    t_run = [0.0] * n
    wakes: list[float] = []
    gcs: list[tuple[float, float]] = []
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gcs.append((gc_start[0], time.perf_counter() - gc_start[0]))

    gc.callbacks.append(on_gc)

    orig_enqueue, orig_claim, orig_wake = RedisStore.enqueue, RedisStore.claim, Worker._on_wake

    async def enqueue(self: Any, job: Any, now_ms: int) -> Any:
        i = json.loads(job.payload_json)["i"] if hasattr(job, "payload_json") else None
        t0 = time.perf_counter()
        r = await orig_enqueue(self, job, now_ms)
        if i is not None:
            t_enq0[i], t_enq1[i] = t0, time.perf_counter()
        return r

    async def claim(self: Any, *a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        r = await orig_claim(self, *a, **kw)
        t1 = time.perf_counter()
        for job in r[0]:
            i = json.loads(job.payload_json)["i"]
            t_claim0[i], t_claim1[i] = t0, t1
        return r

    async def on_wake(self: Any, message: Any) -> None:
        wakes.append(time.perf_counter())
        await orig_wake(self, message)

    RedisStore.enqueue, RedisStore.claim, Worker._on_wake = enqueue, claim, on_wake  # type: ignore[method-assign]

    def on_run(payload: dict[str, Any], started: float) -> bool:
        t_run[payload["i"]] = time.perf_counter()
        return False

    a = HoraeAdapter(url, on_run, {"audit": args.audit, "database_url": args.database_url})
    await a.connect()
    await a.start_worker(50)
    await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    for i in range(n):
        d = t0 + i / args.rate - time.perf_counter()
        if d > 0:
            await asyncio.sleep(d)
        await a.enqueue(Job({"i": i}))
    await asyncio.sleep(1.0)
    await a.stop_worker()
    await a.close()

    import bisect
    for i in range(n):
        k = bisect.bisect_left(wakes, t_enq0[i])
        t_wake[i] = wakes[k] if k < len(wakes) else float("nan")
    ms = 1000.0
    stages = {
        "total (enqueue start -> handler start)": [(t_run[i] - t_enq0[i]) * ms for i in range(n)],
        "enqueue call (EVALSHA round trip + Python)": [(t_enq1[i] - t_enq0[i]) * ms for i in range(n)],
        "enqueue start -> wake message handled": [(t_wake[i] - t_enq0[i]) * ms for i in range(n)],
        "enqueue start -> claim call start": [(t_claim0[i] - t_enq0[i]) * ms for i in range(n)],
        "claim call (claim.lua round trip + parse)": [(t_claim1[i] - t_claim0[i]) * ms for i in range(n)],
        "claim returned -> handler start": [(t_run[i] - t_claim1[i]) * ms for i in range(n)],
    }
    print(f"paced {n} jobs at {args.rate:g}/s, audit {'on' if args.audit else 'off'}; ms")
    print(f"{'stage':48s} {'p50':>7s} {'p90':>7s} {'p99':>7s} {'max':>7s}")
    for name, xs in stages.items():
        print(f"{name:48s} {pct(xs, 50):7.2f} {pct(xs, 90):7.2f} {pct(xs, 99):7.2f} {max(xs):7.2f}")
    total = stages["total (enqueue start -> handler start)"]
    worst = sorted(range(n), key=lambda i: total[i])[-max(1, n // 100):]
    print(f"\nslowest 1% ({len(worst)} jobs): mean ms per stage")
    for name, xs in list(stages.items())[1:]:
        print(f"  {name:48s} {sum(xs[i] for i in worst) / len(worst):7.2f}")
    in_gc = sum(1 for i in worst if any(s <= t_run[i] and s + d >= t_enq0[i] for s, d in gcs))
    print(f"  slow jobs overlapping a GC pause: {in_gc}/{len(worst)}; GC pauses: {len(gcs)}, "
          f"max {max((d for _, d in gcs), default=0) * 1000:.2f} ms")
    print(f"wake-up messages handled: {len(wakes)} for {n} jobs")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--audit", action="store_true")
    p.add_argument("--database-url", default="")
    args = p.parse_args()
    server = RedisServer()
    try:
        asyncio.run(main_async(args, server.url))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
