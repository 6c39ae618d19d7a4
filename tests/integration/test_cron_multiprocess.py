"""Exactly one run per cron tick with three real worker processes racing to
fire the same schedules, while the schedules are re-upserted (as every
process does at startup)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from tests.integration.engine_fixtures import eventually
from tests.procs import WorkerProcesses, app_key, producer
from tests.procs.worker_app import COUNT_TOPIC

pytestmark = pytest.mark.slow

RUN_S = 4.0


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


async def test_each_tick_runs_exactly_once_across_three_processes(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    procs = [workers.spawn(f"w{i}") for i in range(3)]
    for p in procs:
        await p.wait_ready()
    names = {"every-second": "* * * * * *", "every-2s": "*/2 * * * * *"}
    async with producer(redis_url, namespace) as s:
        started = time.time()
        while time.time() - started < RUN_S:
            for name, expr in names.items():  # unchanged upserts must never double-fire
                await s.schedule_cron(name, expr, topic=COUNT_TOPIC)
            await asyncio.sleep(0.2)
        paused_at = time.time()
        for name in names:
            await s.pause_cron(name)

        async def ticks_settled() -> bool:  # every tick job fired so far has finished
            counts = await s.stats()
            return counts["scheduled"] + counts["running"] + counts["retrying"] == 0

        await eventually(
            ticks_settled, timeout=20, what=f"the last ticks' jobs to finish\n{workers.logs()}"
        )
        stopped_at = time.time()
        for p in procs:
            p.signal(signal.SIGTERM)
        runs = {
            k.decode(): int(v) for k, v in (await redis.hgetall(app_key(namespace, "runs"))).items()
        }
        by_pid = {
            k.decode(): int(v)
            for k, v in (await redis.hgetall(app_key(namespace, "by_pid"))).items()
        }
        for name, step in (("every-second", 1000), ("every-2s", 2000)):
            ticks = sorted(int(j.rsplit(":", 1)[1]) for j in runs if j.startswith(f"cron:{name}:"))
            assert len(ticks) >= int(RUN_S * 1000 / step) - 1, (
                f"{name}: too few ticks {ticks}\n{workers.logs()}"
            )
            assert all(b - a == step for a, b in zip(ticks, ticks[1:])), (
                f"{name}: a tick was skipped: {ticks}"
            )
            assert ticks[-1] <= stopped_at * 1000
            assert all(runs[f"cron:{name}:{t}"] == 1 for t in ticks), (
                f"{name}: a tick ran twice: {runs}"
            )
            info = await s.get_cron(name)
            assert info is not None and info.last_run_at is not None
            last = int(info.last_run_at.timestamp() * 1000)
            assert last == ticks[-1], (
                paused_at,
                stopped_at,
                await s.get_job(f"cron:{name}:{last}"),
            )
        print(f"runs per worker process: {by_pid}")
    for p in procs:
        code, _ = await p.wait_exit(10)
        assert code == 0, p.describe()
