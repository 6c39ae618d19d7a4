"""Crash and stop of real worker processes.

- SIGKILL mid-attempt: the lease expires, another worker process recovers the
  job as a failed attempt ("WorkerLost", outbox outcome worker_lost) and
  retries it or fails it by its retry policy.
- SIGTERM: a graceful stop lets short attempts finish and releases long ones
  back to the due set without counting them.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[2]

from scheduler import JobInfo, Scheduler  # noqa: E402
from scheduler.core.keys import Keys  # noqa: E402
from tests.integration.engine_fixtures import job_keys  # noqa: E402
from tests.procs import WorkerProcess, WorkerProcesses, app_key, producer  # noqa: E402
from tests.procs.worker_app import BLOCK_TOPIC  # noqa: E402

pytestmark = pytest.mark.slow

LEASE_MS = 1500
RETRY_DELAY_MS = 1000
DEADLINE_S = 30.0
SHORT_LEASE = {"HORAE_WORKER__LEASE_MS": str(LEASE_MS), "HORAE_WORKER__RECOVER_INTERVAL_S": "0.2"}

T = TypeVar("T")


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


@pytest.fixture
async def sched(redis_url: str, namespace: str) -> Any:
    """The test's own facade: schedules and inspects; runs no worker."""
    async with producer(redis_url, namespace) as s:
        yield s


async def wait_for(
    check: Callable[[], Awaitable[T]],
    what: str,
    timeout: float = DEADLINE_S,
    interval: float = 0.02,
    context: Callable[[], str] = lambda: "",
) -> T:
    """Poll `check` until it returns a truthy value and return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}\n{context()}")
        await asyncio.sleep(interval)


async def listener_events(
    redis: aioredis.Redis, namespace: str, job_id: str
) -> list[tuple[int, int, str]]:
    """(attempt, pid, start|finish) recorded by worker_app's listener for this job, in order."""
    raw = await redis.lrange(app_key(namespace, "events"), 0, -1)
    rows = [json.loads(r) for r in raw]
    return [(r["attempt"], r["pid"], r["what"]) for r in rows if r["job"] == job_id]


async def job_outbox(redis: aioredis.Redis, namespace: str, job_id: str) -> list[dict[str, str]]:
    """This job's outbox entries, in stream order, decoded."""
    entries = await redis.xrange((await job_keys(redis, namespace, job_id)).outbox, "-", "+")
    decoded = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]
    return [e for e in decoded if e["id"] == job_id]


async def job_in_state(s: Scheduler, job_id: str, *states: str) -> JobInfo | None:
    info = await s.get_job(job_id)
    return info if info is not None and info.state.value in states else None


async def job_past_attempt_1(s: Scheduler, job_id: str) -> JobInfo | None:
    """The job once it is no longer in its first running attempt."""
    info = await s.get_job(job_id)
    return (
        info if info is not None and (info.state.value != "running" or info.attempts != 1) else None
    )


async def start_blocking_attempt(
    s: Scheduler,
    redis: aioredis.Redis,
    namespace: str,
    worker: WorkerProcess,
    workers: WorkerProcesses,
    retry: dict[str, Any],
    sleep: float = 60,
) -> str:
    """Schedule a job whose attempt 1 blocks, and wait until `worker` runs its listener."""
    job_id = await s.schedule_in(
        BLOCK_TOPIC, 0, payload={"block": [1], "sleep": sleep}, retry=retry
    )

    async def listener_started() -> bool:
        return (1, worker.pid, "start") in await listener_events(redis, namespace, job_id)

    await wait_for(listener_started, "the listener to start in the worker", context=workers.logs)
    info = await s.get_job(job_id)
    assert info is not None and info.state.value == "running" and info.attempts == 1, info
    return job_id


async def kill_mid_attempt(
    s: Scheduler,
    redis: aioredis.Redis,
    namespace: str,
    workers: WorkerProcesses,
    retry: dict[str, Any],
) -> tuple[str, WorkerProcess, int]:
    """Run attempt 1 of a blocking job in worker A, SIGKILL A; returns (job id, A, A's lease
    deadline)."""
    a = workers.spawn("A", env=SHORT_LEASE)
    await a.wait_ready()
    job_id = await start_blocking_attempt(s, redis, namespace, a, workers, retry)

    a.signal(signal.SIGKILL)
    code, _ = await a.wait_exit(10)
    assert code == -signal.SIGKILL, a.describe()

    # A is dead, so nothing extends its lease any more; the job still looks running
    deadline = await redis.zscore((await job_keys(redis, namespace, job_id)).active, job_id)
    assert deadline is not None, (
        "a killed worker's job left the active set before its lease expired"
    )
    info = await s.get_job(job_id)
    assert info is not None and info.state.value == "running" and info.attempts == 1, info
    assert info.last_error is None
    return job_id, a, int(deadline)


def assert_worker_lost(
    event: dict[str, str], attempt: int, dead: WorkerProcess, lease_deadline: int
) -> None:
    assert event["e"] == "attempt_failed"
    assert int(event["a"]) == attempt
    assert event["outcome"] == "worker_lost"
    assert f":{dead.pid}:" in event["worker"], event  # the attempt belonged to the killed process
    assert json.loads(event["error"])["type"] == "WorkerLost"
    # recovered only after the dead worker's lease expired, never while it could still be alive
    assert int(event["ts"]) >= lease_deadline, (event["ts"], lease_deadline)


async def test_sigkill_mid_attempt_is_recovered_as_worker_lost_and_retried(
    sched: Scheduler, redis: aioredis.Redis, namespace: str, workers: WorkerProcesses
) -> None:
    s = sched
    retry = {"attempts": 2, "backoff": {"type": "fixed", "delay": RETRY_DELAY_MS}}
    job_id, a, lease_deadline = await kill_mid_attempt(s, redis, namespace, workers, retry)

    b = workers.spawn("B", env=SHORT_LEASE)
    await b.wait_ready()

    # B's recovery counts attempt 1 as failed (WorkerLost) and schedules attempt 2 after the backoff
    retrying = await wait_for(
        lambda: job_past_attempt_1(s, job_id), "recovery of the lost attempt", context=workers.logs
    )
    assert retrying.state.value == "retrying", f"retrying state not observed: {retrying}"
    assert retrying.attempts == 1
    assert retrying.last_error is not None and retrying.last_error["type"] == "WorkerLost", (
        retrying.last_error
    )
    assert str(a.pid) in retrying.last_error["message"]

    done = await wait_for(
        lambda: job_in_state(s, job_id, "completed", "failed"),
        "attempt 2 to finish",
        context=workers.logs,
    )
    assert done.state.value == "completed", done
    assert done.attempts == 2

    # attempt 1 started in A and never finished; attempt 2 ran to its end in B
    assert await listener_events(redis, namespace, job_id) == [
        (1, a.pid, "start"),
        (2, b.pid, "start"),
        (2, b.pid, "finish"),
    ]

    events = await job_outbox(redis, namespace, job_id)
    assert [(e["e"], int(e["a"])) for e in events] == [
        ("scheduled", 0),
        ("attempt_started", 1),
        ("attempt_failed", 1),
        ("retry_scheduled", 1),
        ("attempt_started", 2),
        ("completed", 2),
    ]
    lost, retry_event, second = events[2], events[3], events[4]
    assert_worker_lost(lost, 1, a, lease_deadline)
    assert int(retry_event["next_at"]) - int(retry_event["ts"]) == RETRY_DELAY_MS
    assert f":{b.pid}:" in second["worker"]
    assert int(second["ts"]) >= int(retry_event["next_at"]), (
        "attempt 2 started before its backoff elapsed"
    )
    assert events[5]["outcome"] == "succeeded"

    b.signal(signal.SIGTERM)
    code, _ = await b.wait_exit(10)
    assert code == 0, b.describe()


async def test_sigkill_on_the_last_attempt_fails_the_job_with_worker_lost(
    sched: Scheduler, redis: aioredis.Redis, namespace: str, workers: WorkerProcesses
) -> None:
    s = sched
    retry = {"attempts": 1, "backoff": {"type": "fixed", "delay": RETRY_DELAY_MS}}
    job_id, a, lease_deadline = await kill_mid_attempt(s, redis, namespace, workers, retry)

    b = workers.spawn("B", env=SHORT_LEASE)
    await b.wait_ready()

    done = await wait_for(
        lambda: job_past_attempt_1(s, job_id), "recovery of the lost attempt", context=workers.logs
    )
    assert done.state.value == "failed", done
    assert done.attempts == 1
    assert done.last_error is not None and done.last_error["type"] == "WorkerLost", done.last_error
    assert await s.stats() == {
        "scheduled": 0,
        "waiting_for_parents": 0,
        "running": 0,
        "retrying": 0,
        "completed": 0,
        "failed": 1,
        "cancelled": 0,
        "dead_letter": 0,
    }

    # nothing ran it again: a job scheduled after the failure runs in B, and the failed one did not
    later = await s.schedule_in(BLOCK_TOPIC, 0, payload={"block": []})
    await wait_for(
        lambda: _has(listener_events(redis, namespace, later), (1, b.pid, "finish")),
        "a later job to run in B",
        context=workers.logs,
    )
    assert await listener_events(redis, namespace, job_id) == [(1, a.pid, "start")]

    events = await job_outbox(redis, namespace, job_id)
    assert [(e["e"], int(e["a"])) for e in events] == [
        ("scheduled", 0),
        ("attempt_started", 1),
        ("attempt_failed", 1),
        ("failed", 1),
        ("schedule.failed", 1),
    ]
    assert_worker_lost(events[2], 1, a, lease_deadline)
    assert json.loads(events[3]["error"])["type"] == "WorkerLost"
    assert set(events[4]) == {"e", "id", "ts", "a"}, "schedule.failed has no fields of its own"

    b.signal(signal.SIGTERM)
    code, _ = await b.wait_exit(10)
    assert code == 0, b.describe()


async def test_sigterm_releases_an_unfinished_attempt_without_counting_it(
    sched: Scheduler, redis: aioredis.Redis, namespace: str, workers: WorkerProcesses
) -> None:
    s = sched
    grace = 0.5
    w = workers.spawn("W", grace=grace, env=SHORT_LEASE)
    await w.wait_ready()
    retry = {"attempts": 3, "backoff": {"type": "fixed", "delay": RETRY_DELAY_MS}}
    job_id = await start_blocking_attempt(s, redis, namespace, w, workers, retry, sleep=30)

    w.signal(signal.SIGTERM)
    code, waited = await w.wait_exit(grace + 10)
    assert code == 0, w.describe()
    # One-sided on purpose: a slow machine only makes the stop later, so this cannot
    # pass by luck; it proves the worker gave the attempt its grace before releasing it.
    assert waited >= grace * 0.8, (
        f"the worker exited after {waited:.2f} s, before its grace of {grace} s"
    )

    info = await s.get_job(job_id)
    assert info is not None
    assert info.state.value == "scheduled", info
    assert info.attempts == 0
    assert info.last_error is None
    assert info.next_attempt_at is not None
    assert await redis.zscore(Keys(namespace).active, job_id) is None
    assert await redis.zscore(Keys(namespace).due, job_id) is not None
    assert await s.stats() == {
        "scheduled": 1,
        "waiting_for_parents": 0,
        "running": 0,
        "retrying": 0,
        "completed": 0,
        "failed": 0,
        "cancelled": 0,
        "dead_letter": 0,
    }

    assert await listener_events(redis, namespace, job_id) == [(1, w.pid, "start")]
    events = await job_outbox(redis, namespace, job_id)
    assert [(e["e"], int(e["a"])) for e in events] == [
        ("scheduled", 0),
        ("attempt_started", 1),
        ("attempt_released", 1),
    ]
    assert f":{w.pid}:" in events[2]["worker"]

    # the released attempt runs again as attempt 1 in the next worker
    w2 = workers.spawn("W2", env=SHORT_LEASE)
    await w2.wait_ready()
    # attempt 1 blocks again by design: wait until it starts, then check it counts as attempt 1
    await wait_for(
        lambda: _has(listener_events(redis, namespace, job_id), (1, w2.pid, "start")),
        "the released job to run again",
        context=workers.logs,
    )
    info = await s.get_job(job_id)
    assert info is not None and info.state.value == "running" and info.attempts == 1, info


async def test_sigterm_lets_a_short_attempt_finish_within_the_grace(
    sched: Scheduler, redis: aioredis.Redis, namespace: str, workers: WorkerProcesses
) -> None:
    s = sched
    grace = 10.0
    w = workers.spawn("W", grace=grace, env=SHORT_LEASE)
    await w.wait_ready()
    retry = {"attempts": 3, "backoff": {"type": "fixed", "delay": RETRY_DELAY_MS}}
    job_id = await start_blocking_attempt(s, redis, namespace, w, workers, retry, sleep=1.0)

    w.signal(signal.SIGTERM)
    code, _ = await w.wait_exit(grace + 10)
    assert code == 0, w.describe()

    info = await s.get_job(job_id)
    assert info is not None and info.state.value == "completed" and info.attempts == 1, info
    assert await listener_events(redis, namespace, job_id) == [
        (1, w.pid, "start"),
        (1, w.pid, "finish"),
    ]
    events = await job_outbox(redis, namespace, job_id)
    assert [(e["e"], int(e["a"])) for e in events] == [
        ("scheduled", 0),
        ("attempt_started", 1),
        ("completed", 1),
    ]


async def _has(rows: Awaitable[list[T]], row: T) -> bool:
    return row in await rows


async def test_sigusr1_prints_what_every_task_waits_on_and_the_worker_goes_on(
    workers: WorkerProcesses,
) -> None:
    w = workers.spawn("W", env=SHORT_LEASE)
    await w.wait_ready()
    w.signal(signal.SIGUSR1)

    async def dumped() -> bool:
        return "Current thread" in w.log()

    await wait_for(dumped, "the stack dump", context=workers.logs)
    log = w.log()
    assert "asyncio tasks" in log and "horae-claim" in log and "horae-heartbeat" in log, log
    assert w.proc.poll() is None, w.describe()  # a diagnostic, not a stop
    w.signal(signal.SIGTERM)
    code, _ = await w.wait_exit(20)
    assert code == 0, w.describe()
