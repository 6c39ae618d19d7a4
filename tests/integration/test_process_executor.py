"""Listeners of executor="process" on a real Redis, in real child processes
(scheduler/worker/process_pool.py): a CPU-bound listener leaves the worker's loop, its other jobs
and its heartbeat on time; a child killed mid-listener fails only its attempt (worker_lost,
retried); the job's timeout kills the child; children are replaced after max_jobs_per_child jobs or
above max_memory_mb_per_child; progress and log lines from the child reach the job. Listeners:
tests/integration/process_app.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState
from scheduler.cli.main import cli
from scheduler.core.clock import SystemClock
from scheduler.core.config import WorkerSettings
from scheduler.core.keys import Keys
from scheduler.testing.clocks import FakeClock
from scheduler.testing.under_test import delete_namespace
from scheduler.worker.process_pool import ProcessPool
from tests.integration import process_app as app
from tests.integration.engine_fixtures import (
    START_MS,
    eventually,
    in_state,
    make_scheduler,
    outbox_events,
)
from tests.procs import WorkerProcesses, producer

RETRY_3 = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}
QUICK_JOBS = 6


def alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:  # gone: no file, or ESRCH while the kernel tears the process down
        return False


async def logged_pid(s: Any, job_id: str) -> int:
    info = await s.wait(job_id, timeout=30)
    assert info.state is JobState.COMPLETED, info
    (line,) = info.logs
    return int(line.split()[1])


async def quick_lateness_ms(
    registry: ListenerRegistry, redis_url: str, namespace: str
) -> list[float]:
    """With a 2 s CPU-bound `crunch` running, schedule 10 ms `quick` jobs through those 2 s: how
    late each started and ended (ms against its due time, and its due time + 10 ms)."""
    app.QUICK.clear()
    async with make_scheduler(
        redis_url, namespace, registry, SystemClock(), worker={"processes": 1}
    ) as s:
        async with s.worker(concurrency=4) as w:
            if registry is app.registry:
                await logged_pid(
                    s, await s.schedule_in("whoami", 0)
                )  # the child is up, its imports done
            crunch = await s.schedule_in("crunch", 0, payload={"seconds": 2.0})
            await eventually(lambda: in_state(s, crunch, JobState.RUNNING), what="crunch running")
            await asyncio.sleep(0.2)
            due = {}
            for n in range(QUICK_JOBS):
                job_id = await s.schedule_in("quick", 0.1 + 0.2 * n)
                info = await s.get_job(job_id)
                due[job_id] = info.run_at.timestamp()
            await asyncio.gather(*(s.wait(j, timeout=30) for j in due))
            if registry is app.registry:  # the quick jobs ran while the child was busy
                assert (await s.get_job(crunch)).state is JobState.RUNNING and w.pool.pid_of(crunch)
            assert (await s.wait(crunch, timeout=30)).state is JobState.COMPLETED
    late = []
    for job_id, started, ended in app.QUICK:
        late += [(started - due[job_id]) * 1000, (ended - due[job_id] - 0.01) * 1000]
    assert len(late) == 2 * QUICK_JOBS
    return late


@pytest.mark.serial  # a lateness bound: measured with no other test loading the machine
async def test_a_cpu_bound_listener_in_a_process_does_not_delay_the_workers_other_jobs(
    redis_url: str, namespace: str
) -> None:
    late = await quick_lateness_ms(app.registry, redis_url, namespace)
    assert max(late) < 50, late


@pytest.mark.serial
async def test_the_same_listener_in_the_thread_pool_delays_them(
    redis_url: str, namespace: str
) -> None:
    """What executor="process" changes: in the worker's thread pool the busy loop holds the GIL and
    the quick jobs start and end late (the measure above can fail)."""
    late = await quick_lateness_ms(app.in_thread, redis_url, namespace)
    assert max(late) >= 50, late


async def test_a_killed_child_fails_only_its_attempt_which_is_retried(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(
        redis_url, namespace, app.registry, clock, worker={"processes": 2}
    ) as s:
        victim = await s.schedule_in("hangs_first", 0, retry=RETRY_3)
        other = await s.schedule_in("sleeps", 0, payload={"seconds": 1.0}, retry=RETRY_3)
        async with s.worker() as w:
            await eventually(
                lambda: _is(w.pool.pid_of(victim) and w.pool.pid_of(other)), 30, "both running"
            )
            pid, other_pid = w.pool.pid_of(victim), w.pool.pid_of(other)
            assert pid != other_pid
            await eventually(lambda: has_logs(s, victim), 30, "the listener runs")
            os.kill(pid, signal.SIGKILL)
            await eventually(
                lambda: in_state(s, victim, JobState.RETRYING, attempts=1), 10, "attempt 1 failed"
            )
            info = await s.get_job(victim)
            assert info.last_error["type"] == "ListenerProcessLost"
            assert (
                f"(pid {pid}) died before it finished: killed by SIGKILL"
                in info.last_error["message"]
            )
            assert info.last_error["listener"] == "tests.integration.process_app.hangs_first"
            assert (
                await s.wait(other, timeout=30)
            ).attempts == 1  # the other child's attempt went on
            clock.advance(2)  # the retry's backoff
            done = await s.wait(victim, timeout=30)
            assert done.state is JobState.COMPLETED and done.attempts == 2
            assert pid not in w.pool.pids() and other_pid in w.pool.pids()
    events = [
        (e.type, e.attempt, e.get("outcome")) for e in await outbox_events(redis, namespace, victim)
    ]
    assert ("attempt_failed", 1, "worker_lost") in events and (
        "completed",
        2,
        "succeeded",
    ) in events, events
    events = [(e.type, e.get("outcome")) for e in await outbox_events(redis, namespace, other)]
    assert ("attempt_failed", "worker_lost") not in events, events


async def _is(value: object) -> bool:
    return bool(value)


async def test_the_jobs_timeout_kills_its_child(redis_url: str, namespace: str) -> None:
    async with make_scheduler(
        redis_url, namespace, app.registry, FakeClock(START_MS), worker={"processes": 1}
    ) as s:
        job_id = await s.schedule_in(
            "sleeps", 0, payload={"seconds": 60}, timeout=1, retry={"attempts": 1}
        )
        async with s.worker() as w:
            await eventually(lambda: _is(w.pool.pid_of(job_id)), 30, "the child runs it")
            pid = w.pool.pid_of(job_id)
            started = time.monotonic()
            info = await s.wait(job_id, timeout=30)
            assert time.monotonic() - started < 5
            assert info.state is JobState.FAILED and info.last_error["type"] == "TimeoutError"
            await eventually(lambda: _is(not alive(pid)), 5, "the child killed")
            assert w.pool.pids() == []
            # the next job gets a new child
            assert await logged_pid(s, await s.schedule_in("whoami", 0)) not in (pid, os.getpid())


async def test_children_are_replaced_after_max_jobs_and_above_max_memory(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(
        redis_url,
        namespace,
        app.registry,
        FakeClock(START_MS),
        worker={"processes": 1, "max_jobs_per_child": 2, "max_memory_mb_per_child": 150},
    ) as s:
        async with s.worker() as w:
            pids = [await logged_pid(s, await s.schedule_in("whoami", 0)) for _ in range(5)]
            assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4], pids
            assert not alive(pids[0]) and not alive(pids[2])
            assert os.getpid() not in pids
            # above 150 MB after a job: replaced after that job, whatever its count
            grown = await logged_pid(s, await s.schedule_in("whoami", 0, payload={"grow_mb": 200}))
            assert grown == pids[4]
            assert await logged_pid(s, await s.schedule_in("whoami", 0)) != grown
            assert w.pool.recycled == 3


async def test_progress_and_log_lines_from_the_child_reach_the_job(
    redis_url: str, database_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, app.registry, FakeClock(START_MS)) as s:
        job_id = await s.schedule_in("reporting", 0)
        async with s.worker() as w:
            info = await s.wait(job_id, timeout=30)
            pids = w.pool.pids()
    assert info.state is JobState.COMPLETED and info.progress == (100, "done")
    assert len(pids) == 1 and pids[0] != os.getpid()
    assert info.logs == [
        f"rendering in pid {pids[0]}",
        "refused percent: percent must be from 0 to 100, got 101",
    ]
    result = await asyncio.to_thread(
        CliRunner().invoke,
        cli,
        [
            "--redis-url",
            redis_url,
            "--database-url",
            database_url,
            "--namespace",
            namespace,
            "jobs",
            "show",
            job_id,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["progress"] == {"percent": 100, "message": "done"}
    assert [line["line"] for line in doc["logs"]] == info.logs


async def test_a_listeners_exception_comes_back_with_its_child_traceback(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(redis_url, namespace, app.registry, FakeClock(START_MS)) as s:
        job_id = await s.schedule_in("fails", 0, payload={"page": 3}, retry={"attempts": 1})
        async with s.worker():
            info = await s.wait(job_id, timeout=30)
    error = info.last_error
    assert info.state is JobState.FAILED and error["type"] == "PageError"
    assert error["message"] == "page 3 does not render"
    assert error["listener"] == "tests.integration.process_app.fails"
    assert "in _render\n    raise PageError(page)" in error["traceback"], error["traceback"]


async def test_the_heartbeat_keeps_leases_during_a_busy_listener(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    """lease_ms 600: the heartbeat extends the lease every 200 ms while the child spins for 2 s; the
    attempt keeps its lease (no recovery as worker_lost) and succeeds."""
    async with make_scheduler(
        redis_url,
        namespace,
        app.registry,
        SystemClock(),
        worker={"lease_ms": 600, "registry_ttl_ms": 600, "recover_interval_s": 0.1},
    ) as s:
        job_id = await s.schedule_in("crunch", 0, payload={"seconds": 2.0})
        async with s.worker() as w:
            await eventually(lambda: _is(w.pool.pid_of(job_id)), 30, "the child runs it")
            deadlines = []
            while (score := await redis.zscore(Keys(namespace).active, job_id)) is not None:
                deadlines.append(score)
                await asyncio.sleep(0.1)
            info = await s.wait(job_id, timeout=30)
    assert info.state is JobState.COMPLETED and info.attempts == 1
    assert len(set(deadlines)) >= 5, deadlines  # extended again and again while it spun


async def test_the_pool_bounds_its_children_and_closes_with_the_last_worker_sharing_it() -> None:
    """A PartitionedWorker's loops share one pool ([worker] processes per process): the first loop's
    stop leaves the children to the others; calls beyond `processes` wait for a free child."""
    pool = ProcessPool(app.registry, WorkerSettings(processes=1))
    other = pool.shared()
    events = [
        ScheduleArrivedEvent(f"j{n}", "sleeps", {"seconds": 0.3}, 1, 1, datetime.now(UTC))
        for n in range(3)
    ]
    seen: set[int] = set()

    async def run(event: ScheduleArrivedEvent) -> None:
        task = asyncio.ensure_future(pool.call_listener(app.sleeps, event))
        await eventually(
            lambda: _is(task.done() or pool.pid_of(event.scheduled_job_id)), 30, "started"
        )
        seen.update(pool.pids())
        await task

    await asyncio.gather(*(run(e) for e in events))
    assert len(seen) == 1 and pool.pids() == sorted(
        seen
    )  # one child ran all three, one after another
    (pid,) = seen
    await pool.close()
    assert alive(pid)
    await other.close()
    await eventually(lambda: _is(not alive(pid)), 10, "the child stopped")


async def has_logs(s: Any, job_id: str) -> bool:
    return bool((await s.get_job(job_id)).logs)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
async def test_children_die_with_their_worker_process(
    sig: signal.Signals, redis_url: str, namespace: str, tmp_path: Any
) -> None:
    """`horae worker` SIGKILLed mid-listener: its child goes too (PR_SET_PDEATHSIG), no orphan left.
    SIGTERM: the worker's grace ends, the attempt is released and its child killed; the worker exits
    0."""
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    try:
        worker = procs.spawn(
            "w",
            grace=0.5,
            env={"HORAE_WORKER__PROCESSES": "1"},
            app="tests.integration.process_app:registry",
        )
        await worker.wait_ready()
        async with producer(redis_url, namespace) as s:
            job_id = await s.schedule_in("hangs_first", 0, retry=RETRY_3)
            await eventually(lambda: has_logs(s, job_id), 30, "the listener runs in its child")
            (line,) = (await s.get_job(job_id)).logs
            child = int(line.split()[1])
            assert alive(child) and child != worker.pid
            worker.signal(sig)
            code, _ = await worker.wait_exit(15)
            assert code == (-signal.SIGKILL if sig is signal.SIGKILL else 0), procs.logs()
            await eventually(
                lambda: _is(not alive(child)), 5, f"child {child} gone with its worker"
            )
            if sig is signal.SIGTERM:  # released, uncounted: the next worker runs attempt 1 again
                info = await s.get_job(job_id)
                assert info.state is JobState.SCHEDULED and info.attempts == 0, info
    finally:
        procs.close()


async def test_a_partitioned_worker_has_one_pool_for_its_loops(
    redis_url: str, namespace: str
) -> None:
    """[worker] processes is per process: the loops of a namespace with 3 partitions share one
    pool."""
    try:
        async with make_scheduler(
            redis_url,
            namespace,
            app.registry,
            FakeClock(START_MS),
            worker={"processes": 1},
            cluster={"partitions": 3},
        ) as s:
            ids = [await s.schedule_in("whoami", 0, job_id=f"job-{n}") for n in range(6)]
            async with s.worker() as w:
                assert len(w.workers) == 3 and len({id(loop.pool) for loop in w.workers}) == 1
                pids = {await logged_pid(s, job_id) for job_id in ids}
            assert len(pids) == 1 and not alive(
                pids.pop()
            )  # one child ran them all; gone with the worker
    finally:
        await delete_namespace(redis_url, namespace)


async def test_a_child_killed_while_idle_is_replaced_without_failing_an_attempt(
    redis_url: str, namespace: str
) -> None:
    async with make_scheduler(
        redis_url, namespace, app.registry, FakeClock(START_MS), worker={"processes": 1}
    ) as s:
        async with s.worker() as w:
            first = await logged_pid(s, await s.schedule_in("whoami", 0))
            os.kill(first, signal.SIGKILL)
            await eventually(lambda: _is(not alive(first)), 5, "the idle child killed")
            await asyncio.sleep(0.2)  # the worker's loop sees it exit
            job_id = await s.schedule_in("whoami", 0, retry={"attempts": 1})
            assert await logged_pid(s, job_id) not in (
                first,
                os.getpid(),
            )  # attempt 1 ran, in a new child
            assert w.pool.pids() != [first]


async def test_schedule_failed_listeners_of_executor_process_run_in_a_child(
    redis_url: str, namespace: str, tmp_path: Any
) -> None:
    pid_file = tmp_path / "pid"
    async with make_scheduler(redis_url, namespace, app.with_failed, FakeClock(START_MS)) as s:
        job_id = await s.schedule_in(
            "fails",
            0,
            payload={"page": 1},
            retry={"attempts": 1},
            metadata={"pid_file": str(pid_file)},
        )
        async with s.worker() as w:
            assert (await s.wait(job_id, timeout=30)).state is JobState.FAILED
            await eventually(
                lambda: _is(pid_file.exists() and pid_file.read_text()), 30, "schedule.failed ran"
            )
            assert int(pid_file.read_text()) in w.pool.pids()
    assert int(pid_file.read_text()) != os.getpid()


async def test_a_result_comes_back_from_the_child(redis_url: str, namespace: str) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, app.registry, clock) as s:
        job_id = await s.schedule_in("returns", 0, payload=[1, 2])
        retry = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}
        locked = await s.schedule_in("returns", 0, payload="lock", retry=retry)
        async with s.worker() as w:
            info = await s.wait(job_id, timeout=30)
            pids = w.pool.pids()
            # a result the child cannot send back fails the attempt, naming the listener
            await eventually(lambda: in_state(s, locked, JobState.RETRYING, 1), timeout=30)
            clock.advance(1)
            second = await s.wait(locked, timeout=30)
    assert info.result == {"pid": info.result["pid"], "payload": [1, 2]}
    assert info.result["pid"] in pids and os.getpid() not in pids
    assert second.attempts == 2 and second.result == {
        "pid": second.result["pid"],
        "payload": "lock",
    }
    assert second.last_error is not None
    assert "tests.integration.process_app.returns" in second.last_error["message"]
    assert "not JSON-serialisable" in second.last_error["message"]
