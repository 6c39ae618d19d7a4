"""Soak: 5,000 jobs with mixed outcomes through two real worker processes that
relay the outbox; Postgres must agree with Redis row for row."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from horae.settings import load_settings
from listeners import ListenerRegistry
from scheduler import Scheduler
from tests.procs import WorkerProcesses
from tests.procs.worker_app import COUNT_TOPIC, DOOMED_TOPIC, FAIL_ONCE_TOPIC

pytestmark = pytest.mark.slow

JOBS = 5_000
RETRY = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


async def test_postgres_agrees_with_redis_row_for_row(
    redis_url: str, database_url: str, namespace: str, workers: WorkerProcesses
) -> None:
    env = {
        "HORAE_AUDIT__RELAY": "true",
        "HORAE_DATABASE_URL": database_url,
        "HORAE_RETENTION__COMPLETED_COUNT": str(10 * JOBS),
    }
    procs = [workers.spawn(f"w{i}", concurrency=50, grace=5, env=env) for i in range(2)]
    for p in procs:
        await p.wait_ready()
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    topics = [COUNT_TOPIC] * 7 + [FAIL_ONCE_TOPIC, DOOMED_TOPIC, "mix.nobody"]
    async with Scheduler(settings=settings, listeners=ListenerRegistry()) as s:
        ids: list[str] = []
        for start in range(0, JOBS, 100):
            batch = [
                s.schedule_in(topics[i % len(topics)], 0, retry=RETRY)
                for i in range(start, start + 100)
            ]
            ids += await asyncio.gather(*batch)
        deadline = time.monotonic() + 120
        while True:
            stats = await s.stats()
            if stats["completed"] + stats["failed"] == JOBS or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        assert stats["completed"] + stats["failed"] == JOBS, (stats, workers.logs())
        await s.audit.flush(timeout=60)
        redis_view = {}
        for job_id in ids:
            info = await s.get_job(job_id)
            assert info is not None
            redis_view[job_id] = (info.state.value, info.attempts)
    for p in procs:
        p.signal(signal.SIGTERM)

    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id, status, attempts FROM schedule_audit")
        attempt_rows = await conn.fetch("SELECT job_id, attempt_no, outcome FROM schedule_attempts")
    finally:
        await conn.close()
    pg_view = {r["id"]: (r["status"], r["attempts"]) for r in rows}
    assert len(pg_view) == JOBS
    assert pg_view == redis_view, "every job: the same final status and attempt count"
    per_job = Counter(r["job_id"] for r in attempt_rows)
    assert all(per_job[j] == attempts for j, (_, attempts) in redis_view.items()), (
        "one attempt row per attempt"
    )
    assert len({(r["job_id"], r["attempt_no"]) for r in attempt_rows}) == len(attempt_rows), (
        "no duplicates"
    )
    status = Counter(state for state, _ in redis_view.values())
    tenth = JOBS // 10  # 7 tenths succeed at once, 1 after a retry, 1 never, 1 has no listener
    assert status == {"completed": 9 * tenth, "failed": tenth}
    outcomes = Counter(r["outcome"] for r in attempt_rows)
    assert outcomes == {"succeeded": 8 * tenth, "failed": tenth + 2 * tenth, "no_listener": tenth}
    for p in procs:
        code, _ = await p.wait_exit(15)
        assert code == 0, p.describe()
