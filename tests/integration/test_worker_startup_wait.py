"""`horae worker` waits for Redis at start ([worker] startup_wait_s, --startup-wait;
scheduler/cli/startup.py): a worker process started while its Redis is down keeps trying and
runs jobs once Redis is up, instead of exiting and waiting for its supervisor's back-off; one
whose Redis does not come within the wait exits 1 with the error, as it did at once before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler.ops import servers
from tests.procs import WorkerProcess, WorkerProcesses, producer, stop_redis
from tests.procs.worker_app import COUNT_TOPIC

pytestmark = pytest.mark.slow

RETRY_LINE = "cannot start yet"  # scheduler/cli/startup.py's warning


@pytest.fixture
def workers(tmp_path: Path, namespace: str) -> Iterator[WorkerProcesses]:
    root = tmp_path / "servers"
    url = servers.ensure_redis(root, "everysec")  # (its port, kept in its state file)
    stop_redis(root)
    procs = WorkerProcesses(url, namespace, tmp_path)
    try:
        yield procs
    finally:
        procs.close()
        servers.stop_all(root)


async def _until_logged(text: str, w: WorkerProcess, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in w.log():
        assert time.monotonic() < deadline, w.describe()
        await asyncio.sleep(0.05)


async def test_a_worker_started_before_its_redis_waits_and_then_runs_jobs(
    workers: WorkerProcesses, tmp_path: Path
) -> None:
    w = workers.spawn("early", extra_args=("--startup-wait", "60"))
    await _until_logged(RETRY_LINE, w)
    await asyncio.sleep(1.0)  # a few tries, all refused
    assert w.proc.poll() is None, w.describe()
    assert w.log().count(RETRY_LINE) >= 2, w.describe()

    url = servers.ensure_redis(tmp_path / "servers", "everysec")
    assert url == workers.redis_url  # (the same port again)
    await w.wait_ready(timeout=30)
    async with producer(url, workers.namespace) as s:
        job = await s.schedule_in(COUNT_TOPIC, 0)
        info = await s.wait(job, timeout=30)
    assert info.state == "completed", w.describe()


async def test_a_worker_whose_redis_stays_away_exits_1_after_its_wait(
    workers: WorkerProcesses,
) -> None:
    w = workers.spawn("late", extra_args=("--startup-wait", "1.5"))
    code, waited = await w.wait_exit(timeout=30)
    log = w.log()
    errors = [line for line in log.splitlines() if line.startswith("Error: ")]
    assert code == 1 and waited >= 1.5, (code, waited, log)
    assert errors and errors[0].startswith("Error: cannot reach Redis") and len(errors) == 1, log
    assert log.count(RETRY_LINE) >= 2, log


async def test_without_a_wait_a_worker_exits_at_once(workers: WorkerProcesses) -> None:
    w = workers.spawn("now", env={"HORAE_WORKER__STARTUP_WAIT_S": "0"})
    code, _ = await w.wait_exit(timeout=30)
    log = w.log()
    assert code == 1 and RETRY_LINE not in log, log
    assert "Error: cannot reach Redis" in log, log
