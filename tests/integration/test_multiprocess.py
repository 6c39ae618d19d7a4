"""Many worker processes on one Redis namespace: every attempt is claimed by
exactly one worker. Three real `horae worker` processes, 2,000 jobs."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]

from tests.integration.engine_fixtures import outboxes  # noqa: E402
from tests.procs import WorkerProcesses, app_key, producer  # noqa: E402
from tests.procs.worker_app import COUNT_TOPIC  # noqa: E402

pytestmark = pytest.mark.slow

JOBS = 2_000
WORKERS = 3
SPREAD_S = 1.0
GRACE_S = 5.0
WORKER_ENV = {
    # keep all 2,000 finished jobs readable (the default keeps the newest 1,000)
    "HORAE_RETENTION__COMPLETED_COUNT": str(10 * JOBS),
}


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


async def wait_for(check, timeout: float, interval: float = 0.05):  # type: ignore[no-untyped-def]
    """Poll the async `check` until it returns a truthy value; return the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(interval)


async def test_three_processes_run_each_of_2000_jobs_exactly_once(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    procs = [
        workers.spawn(f"w{i}", concurrency=10, grace=GRACE_S, env=WORKER_ENV)
        for i in range(WORKERS)
    ]
    for p in procs:
        await p.wait_ready()

    async with producer(redis_url, namespace) as s:
        # 2,000 jobs due over the next ~1 s, scheduled through the facade
        started = time.monotonic()
        step = timedelta(seconds=SPREAD_S / JOBS)
        base = datetime.fromtimestamp(s.clock.now_ms() / 1000, UTC)
        job_ids: list[str] = []
        for chunk in range(0, JOBS, 50):
            job_ids += await asyncio.gather(
                *(
                    s.schedule_at(COUNT_TOPIC, base + step * i, payload={"i": i})
                    for i in range(chunk, min(chunk + 50, JOBS))
                )
            )
        scheduled_s = time.monotonic() - started
        assert len(set(job_ids)) == JOBS

        async def all_settled() -> dict[str, int] | None:
            counts = await s.stats()
            return counts if counts["completed"] + counts["failed"] >= JOBS else None

        counts = await wait_for(all_settled, timeout=60)
        drained_s = time.monotonic() - started
        assert counts, f"jobs did not settle in 60 s: {await s.stats()}\n{workers.logs()}"
        assert counts == {
            "scheduled": 0,
            "waiting_for_parents": 0,
            "running": 0,
            "retrying": 0,
            "completed": JOBS,
            "failed": 0,
            "cancelled": 0,
            "dead_letter": 0,
        }, workers.logs()

        # every job ran exactly once: no job missing, none twice
        raw_runs = await redis.hgetall(app_key(namespace, "runs"))
        runs = {k.decode(): int(v) for k, v in raw_runs.items()}
        missing = [j for j in job_ids if j not in runs]
        twice = {j: n for j, n in runs.items() if n != 1}
        unknown = set(runs) - set(job_ids)
        assert not missing, f"{len(missing)} jobs never ran, e.g. {missing[:5]}"
        assert not twice, f"{len(twice)} jobs ran more than once, e.g. {list(twice.items())[:5]}"
        assert not unknown
        assert sum(runs.values()) == JOBS

        # every job ended completed after exactly one attempt
        infos = []
        for chunk in range(0, JOBS, 50):
            infos += await asyncio.gather(*(s.get_job(j) for j in job_ids[chunk : chunk + 50]))
        assert all(i is not None for i in infos), "completed jobs were dropped from Redis"
        not_done = [
            (i.id, i.state.value, i.attempts)
            for i in infos
            if i.state.value != "completed" or i.attempts != 1
        ]
        assert not not_done, (
            f"{len(not_done)} jobs not completed in one attempt, e.g. {not_done[:5]}"
        )
        assert all(i.last_error is None for i in infos)

        # the outbox agrees: one attempt_started and one completed per job, no failures
        started_by_job: dict[str, int] = {}
        completed_by_job: dict[str, int] = {}
        other: list[str] = []
        entries = [
            e
            for stream in await outboxes(redis, namespace)
            for e in await redis.xrange(stream, "-", "+")
        ]
        for _, fields in entries:
            kind, jid = fields[b"e"].decode(), fields[b"id"].decode()
            if kind == "attempt_started":
                started_by_job[jid] = started_by_job.get(jid, 0) + 1
            elif kind == "completed":
                completed_by_job[jid] = completed_by_job.get(jid, 0) + 1
            elif kind != "scheduled":
                other.append(kind)
        assert started_by_job == dict.fromkeys(job_ids, 1)
        assert completed_by_job == dict.fromkeys(job_ids, 1)
        assert other == []

    # each process did a share of the work
    raw_split = await redis.hgetall(app_key(namespace, "by_pid"))
    split = {int(k): int(v) for k, v in raw_split.items()}
    by_worker = {p.name: split.get(p.pid, 0) for p in procs}
    print(
        f"\n{JOBS} jobs on {WORKERS} worker processes ({redis_url}): split {by_worker}; "
        f"scheduled in {scheduled_s:.2f} s, all settled "
        f"{drained_s:.2f} s after the first was scheduled"
    )
    assert set(split) == {p.pid for p in procs}, f"runs by unknown processes: {split}"
    assert sum(split.values()) == JOBS
    assert all(n > 0 for n in by_worker.values()), f"a worker process ran nothing: {by_worker}"

    # graceful stop: SIGTERM, every process exits 0 within the grace period
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        code, waited = await p.wait_exit(GRACE_S + 5)
        assert code == 0, f"exit {code} after {waited:.1f} s\n{p.describe()}"
        assert waited < GRACE_S, (
            f"nothing was running, yet the stop took {waited:.1f} s\n{p.describe()}"
        )
