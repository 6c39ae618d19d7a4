"""What job results cost a worker: drain N jobs whose one listener returns None (the hot path
that must not pay for results), and, with --returns, jobs whose listener returns a small dict.

    .venv/bin/python bench/result_cost.py --redis redis://127.0.0.1:6379/0 [--n 5000] [--reps 7]
        [--returns]
    .venv/bin/python bench/result_cost.py --micro [--n 200000] [--reps 7] [--returns]

Each repetition uses a namespace of its own (deleted after) on the given Redis, the audit off,
one worker of concurrency 50 in this process; it prints the median jobs/s (wall) and the median
CPU µs per job of this process (the worker's loop and its settlement), and the bytes of one
completed job's hash (MEMORY USAGE). --micro times the Python hot path alone, no Redis: one
attempt (scheduler/worker/attempt.py run_attempt: the event, dispatch to one async listener, the
settlement) and the arguments complete.lua is sent for it, in µs per attempt and bytes. Run it on
the code before and after a change and compare the medians (bench/README.md keeps the latest
numbers)."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any


async def one_run(redis_url: str, n: int, returns: bool) -> tuple[float, float, int]:
    import redis.asyncio as aioredis

    from horae.settings import load_settings
    from listeners import ListenerRegistry
    from scheduler import Scheduler

    namespace = f"bench-result-{uuid.uuid4().hex[:8]}"
    settings = load_settings(env={}, redis_url=redis_url, namespace=namespace)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"enabled": False})}
    )
    registry = ListenerRegistry()
    done = asyncio.Event()
    count = 0

    async def handler(event: Any) -> Any:
        nonlocal count
        count += 1
        if count == n:
            done.set()
        return {"rows": 12, "ok": True} if returns else None

    registry.add("bench.result", handler)
    s = Scheduler(settings=settings, listeners=registry)
    await s.connect()
    raw = aioredis.from_url(redis_url)
    try:
        ids: list[str] = []
        for start in range(0, n, 1000):
            ids += await s.schedule_many(
                [{"topic": "bench.result", "payload": {"i": i}} for i in range(start, start + 1000)]
            )
        worker = s.make_worker(concurrency=50)
        t0, c0 = time.perf_counter(), time.process_time()
        await worker.start()
        await asyncio.wait_for(done.wait(), 300)
        while (await s.get_job(ids[-1])).state.value != "completed":  # type: ignore[union-attr]
            await asyncio.sleep(0.001)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        await worker.stop(grace=5)
        keys = [k async for k in raw.scan_iter(match=f"*{ids[-1]}*", count=1000)]
        size = sum([int(await raw.memory_usage(k) or 0) for k in keys])
        async for key in raw.scan_iter(match=f"{{{namespace}}}*", count=1000):
            await raw.delete(key)
        async for key in raw.scan_iter(match=f"{namespace}*", count=1000):
            await raw.delete(key)
    finally:
        await s.close()
        await raw.aclose()
    return n / wall, cpu / n * 1e6, size


async def micro(n: int, returns: bool) -> tuple[float, int]:
    """µs per run_attempt of a one-listener job, and the bytes of complete.lua's arguments for
    its settlement."""
    from scheduler.core.job import ClaimedJob
    from scheduler.worker.attempt import run_attempt

    job = ClaimedJob(
        id="j" * 16, attempt=1, token="w:1", topic="bench.result", payload_json='{"i":1}',
        metadata_json="{}", run_at_ms=0, due_ms=0, max_attempts=5, backoff_type="exponential",
        backoff_delay_ms=30_000, backoff_max_delay_ms=3_600_000, backoff_jitter="none",
        timeout_ms=60_000, trace="", cron="",
    )  # fmt: skip

    async def handler(event: Any) -> Any:
        return {"rows": 12, "ok": True} if returns else None

    def now_ms() -> int:
        return 1_800_000_000_000

    listeners = [handler]
    t0 = time.perf_counter()
    for _ in range(n):
        settled = await run_attempt(job, listeners, now_ms)
    elapsed = time.perf_counter() - t0
    detail = getattr(settled, "detail_json", None)
    detail = settled.rejection_json if detail is None else detail
    args = [settled.job_id, settled.token, settled.outcome, detail, *settled.times]
    return elapsed / n * 1e6, sum(len(str(a).encode()) for a in args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--returns", action="store_true")
    parser.add_argument("--micro", action="store_true")
    args = parser.parse_args()
    if args.micro:
        runs = [asyncio.run(micro(args.n, args.returns)) for _ in range(args.reps)]
        for us, size in runs:
            print(f"  {us:6.2f} µs/attempt  complete.lua args {size} B", flush=True)
        print(
            f"median of {args.reps}: {statistics.median(u for u, _ in runs):.2f} µs/attempt, "
            f"complete.lua args {runs[0][1]} B (returns={'dict' if args.returns else 'None'})"
        )
        return
    rates, cpus, sizes = [], [], []
    for _ in range(args.reps):
        rate, cpu, size = asyncio.run(one_run(args.redis, args.n, args.returns))
        rates.append(rate)
        cpus.append(cpu)
        sizes.append(size)
        print(f"  {rate:8.0f} jobs/s  {cpu:6.1f} µs CPU/job  job keys {size} B", flush=True)
    print(
        f"median of {args.reps}: {statistics.median(rates):.0f} jobs/s, "
        f"{statistics.median(cpus):.1f} µs CPU/job, a completed job's keys "
        f"{statistics.median(sizes):.0f} B (returns={'dict' if args.returns else 'None'})"
    )


if __name__ == "__main__":
    main()
