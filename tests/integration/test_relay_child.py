"""`[audit] relay_process` (the default): the worker's audit relay in a child process of its own
(audit/relay/child.py), on the real Redis and PostgreSQL: it audits, is replaced when it
dies, stops with the worker, and dies with a SIGKILLed `horae worker`."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Scheduler
from tests.integration.engine_fixtures import eventually
from tests.procs import WorkerProcesses, producer

pytestmark = pytest.mark.slow

TOPIC = "child.relay"


@pytest.fixture
async def sched(
    redis_url: str, database_url: str, namespace: str
) -> AsyncIterator[tuple[Scheduler, list[int]]]:
    """An audited Scheduler with the default settings, whose relay runs as a child process
    (`[audit] relay_process` is on unless turned off), and the payloads its listener ran."""
    ran: list[int] = []
    registry = ListenerRegistry()

    async def listener(event: ScheduleArrivedEvent) -> None:
        ran.append(event.payload["i"])

    registry.add(TOPIC, listener)
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    s = Scheduler(settings=settings, listeners=registry)
    await s.connect()
    yield s, ran
    await s.close()


def _relay_child(pid: int | None) -> psutil.Process:
    assert pid is not None and pid != os.getpid(), pid
    child = psutil.Process(pid)
    assert child.ppid() == os.getpid() and "audit.relay.child" in child.cmdline(), child.cmdline()
    return child


async def _run_and_audit(s: Scheduler, ran: list[int], first: int, n: int) -> None:
    ids = [await s.schedule_in(TOPIC, 0, payload={"i": i}) for i in range(first, first + n)]
    await eventually(lambda: _true(len(ran) >= first + n), what=f"{first + n} runs")
    await s.audit.flush(timeout=20)
    for job_id in ids:
        row = await s.audit.get(job_id)
        assert row is not None and row.status == "completed" and row.attempts == 1, (job_id, row)


async def _true(value: bool) -> bool:
    return value


async def test_the_child_relays_is_replaced_when_killed_and_stops_with_the_scheduler(
    sched: tuple[Scheduler, list[int]], database_url: str
) -> None:
    s, ran = sched
    worker = s.make_worker(concurrency=10)
    await worker.start()
    relay = s._relay
    child = _relay_child(relay.pid)  # type: ignore[union-attr]
    assert database_url not in " ".join(child.cmdline())  # the settings went over its stdin
    await _run_and_audit(s, ran, 0, 50)
    child.send_signal(signal.SIGINT)  # a terminal's Ctrl-C: the worker, not the child, decides
    await asyncio.sleep(1.5)
    assert child.is_running() and relay.restarts == 0  # type: ignore[union-attr]

    child.send_signal(signal.SIGKILL)
    await eventually(
        lambda: _true(relay.restarts == 1 and relay.running),
        timeout=15,  # type: ignore[union-attr]
        what="a new relay process",
    )
    replacement = _relay_child(relay.pid)  # type: ignore[union-attr]
    assert replacement.pid != child.pid
    await _run_and_audit(s, ran, 50, 50)  # audited by the replacement (and what the dead one held)
    pending, _ = await relay.lag()  # type: ignore[union-attr]
    assert pending == 0

    await worker.stop(grace=5)
    started = time.monotonic()
    await s.close()
    assert time.monotonic() - started < 10
    assert not replacement.is_running() or replacement.status() == psutil.STATUS_ZOMBIE


async def test_the_child_dies_with_a_sigkilled_worker(
    redis_url: str, database_url: str, namespace: str, tmp_path: Path
) -> None:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    try:
        worker = procs.spawn(
            "w",
            env={
                "HORAE_AUDIT__RELAY": "true",
                "HORAE_AUDIT__RELAY_PROCESS": "true",
                "HORAE_DATABASE_URL": database_url,
            },
        )

        await worker.wait_ready(timeout=60)

        async def child_up() -> bool:
            return any(
                "audit.relay.child" in c.cmdline() for c in psutil.Process(worker.pid).children()
            )

        await eventually(child_up, timeout=30, what="the relay process of the worker")
        child = next(
            c for c in psutil.Process(worker.pid).children() if "audit.relay.child" in c.cmdline()
        )
        async with producer(redis_url, namespace) as s:
            job_id = await s.schedule_in("mp.count", 0)
            await eventually(lambda: _job_done(s, job_id), timeout=30, what="the job")
        os.kill(worker.pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        await eventually(
            lambda: _true(not child.is_running() or child.status() == psutil.STATUS_ZOMBIE),
            timeout=10,
            what="the orphaned relay to exit",
        )
    finally:
        procs.close()


async def _job_done(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state.value == "completed"
