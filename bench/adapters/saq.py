"""saq[redis] (own venv). Defaults except concurrency (the scenario's).
Retry scenario: retries=2 (saq counts attempts, first included), retry_delay 1 s.
Delayed jobs: `scheduled` = due epoch seconds (saq documents int seconds; the
float due is passed as is and saq stores it as the sorted-set score)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from adapters.base import QUEUE, RETRY_ATTEMPTS, RETRY_DELAY_S, TOPIC, Adapter, Job, pkg_version

FUNC = TOPIC.replace(".", "_")


class SaqAdapter(Adapter):
    name = "saq"
    supports_bulk = False  # saq has no bulk enqueue API

    def __init__(self, redis_url: str, on_run: Any, options: dict[str, Any]) -> None:
        super().__init__(redis_url, on_run, options)
        self.queue: Any = None
        self.worker: Any = None
        self.task: asyncio.Task[None] | None = None

    def versions(self) -> dict[str, str]:
        return {
            "saq": pkg_version("saq"),
            "redis-py": pkg_version("redis"),
            "hiredis": pkg_version("hiredis"),
        }

    def settings(self) -> dict[str, Any]:
        return {
            "queue": f"Queue.from_url(url, name={QUEUE!r})",
            "worker": "defaults (timers schedule 1 s / sweep 60 s / abort 1 s / worker_info 10 s,"
            " dequeue_timeout 0 = blocking BLMOVE per slot) + concurrency",
            "job": "defaults (timeout 10 s, ttl 600 s, retries 1)",
            "retry (retry scenario)": (
                f"retries={RETRY_ATTEMPTS}, retry_delay={RETRY_DELAY_S:g}, retry_backoff False"
            ),
            "delayed": "scheduled=due epoch seconds (float)",
            "serializer": "default (json)",
        }

    async def connect(self) -> None:
        from saq import Queue

        self.queue = Queue.from_url(self.redis_url, name=QUEUE)
        await self.queue.connect()

    async def enqueue(self, job: Job) -> None:
        kw: dict[str, Any] = {"payload": job.payload}
        if job.due is not None:
            kw["scheduled"] = job.due
        if job.retry:
            kw["retries"] = RETRY_ATTEMPTS
            kw["retry_delay"] = RETRY_DELAY_S
        await self.queue.enqueue(FUNC, **kw)

    async def enqueue_bulk(self, jobs: Sequence[Job]) -> None:
        raise NotImplementedError

    async def start_worker(self, concurrency: int) -> None:
        from saq import Worker

        on_run = self.on_run

        async def bench_job(ctx: dict[str, Any], *, payload: dict[str, Any]) -> None:
            started = time.time()
            if on_run(payload, started):
                raise RuntimeError("bench: fail the first run")

        self.worker = Worker(self.queue, functions=[(FUNC, bench_job)], concurrency=concurrency)
        self.task = asyncio.create_task(self.worker.start())

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await self.worker.stop()
            if self.task is not None:
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
            self.worker = None

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()
