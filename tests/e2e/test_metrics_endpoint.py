"""`horae worker --metrics-port` serves Prometheus metrics that a scrape can read."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

from scheduler.ops.servers import free_port
from tests.procs import WorkerProcesses, producer
from tests.procs.worker_app import COUNT_TOPIC


def check(body: str) -> None:
    lines = [line for line in body.splitlines() if not line.startswith("#")]

    def value(prefix: str, *parts: str) -> float:
        match = [ln for ln in lines if ln.startswith(prefix + "{") and all(p in ln for p in parts)]
        assert len(match) == 1, (prefix, parts, match)
        return float(match[0].rsplit(" ", 1)[1])

    assert value("horae_attempts_total", 'outcome="succeeded"', f'topic="{COUNT_TOPIC}"') == 3
    assert value("horae_jobs_completed_total", f'topic="{COUNT_TOPIC}"') == 3
    assert value("app_schedule_job_no_listener_total", 'topic="metrics.nobody"') == 1
    assert value("horae_job_lateness_seconds_count", f'topic="{COUNT_TOPIC}"') == 3
    assert value("horae_worker_active_attempts") == 0


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


async def test_worker_serves_prometheus_metrics(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    port = free_port()
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    try:
        worker = procs.spawn("metrics", extra_args=("--metrics-port", str(port)))
        await worker.wait_ready()
        async with producer(redis_url, namespace) as s:
            for _ in range(3):
                await s.schedule_in(COUNT_TOPIC, 0)
            await s.schedule_in("metrics.nobody", 0)
        deadline = time.monotonic() + 20
        while True:  # counters move at settle time, one after another: poll until all agree
            body = await asyncio.to_thread(scrape, port)
            try:
                check(body)
                break
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        procs.close()
