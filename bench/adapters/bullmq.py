"""The official Python BullMQ package (its own venv). Defaults except concurrency
(the scenario's) and, for the retry scenario, attempts 2 with a fixed 1 s backoff."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from adapters.base import QUEUE, RETRY_ATTEMPTS, RETRY_DELAY_S, TOPIC, Adapter, Job, pkg_version

BULK_CHUNK = 1_000
PRIORITY_BASE = 2  # bullmq priority = 2 - horae priority, so -1/0/1 map to 3/2/1


class BullmqAdapter(Adapter):
    name = "bullmq"
    supports_bulk = True
    supports_priority = True  # opts.priority: 1 is the highest

    def __init__(self, redis_url: str, on_run: Any, options: dict[str, Any]) -> None:
        super().__init__(redis_url, on_run, options)
        self.queue: Any = None
        self.worker: Any = None
        self.limiter: dict[str, int] | None = None
        self.retry_opts = {
            "attempts": RETRY_ATTEMPTS,
            "backoff": {"type": "fixed", "delay": int(RETRY_DELAY_S * 1000)},
        }

    def versions(self) -> dict[str, str]:
        return {
            "bullmq": pkg_version("bullmq"),
            "redis-py": pkg_version("redis"),
            "hiredis": pkg_version("hiredis"),
        }

    def settings(self) -> dict[str, Any]:
        return {
            "connection": (
                "URL string (bullmq default: single_connection_client "
                "per Queue/Worker + 1 blocking)"
            ),
            "worker opts": (
                "defaults (drainDelay 5, lockDuration 30000, "
                "stalledInterval 30000, maxStalledCount 1) + concurrency"
            ),
            "removeOnComplete": "default (keep)",
            "retry (retry scenario)": self.retry_opts,
            "delayed": "opts.delay = round((due - time.time()) * 1000) ms at add",
            "bulk": f"Queue.addBulk in chunks of {BULK_CHUNK}",
            "priority (drain_priority)": (
                f"opts.priority = {PRIORITY_BASE} - horae priority (1 highest)"
            ),
            "rate limit (rate_limited)": "Worker opts.limiter {max, duration ms}",
        }

    async def connect(self) -> None:
        from bullmq import Queue

        self.queue = Queue(QUEUE, {"connection": self.redis_url})

    def _opts(self, job: Job) -> dict[str, Any]:
        opts: dict[str, Any] = {}
        if job.due is not None:
            opts["delay"] = max(0, round((job.due - time.time()) * 1000))
        if job.retry:
            opts.update(self.retry_opts)
        if (
            job.priority is not None
        ):  # horae's -1/0/1 (higher first) -> bullmq's 3/2/1 (1 is the highest)
            opts["priority"] = PRIORITY_BASE - job.priority
        return opts

    async def set_rate_limit(self, max_jobs: int, per_s: float) -> None:
        self.limiter = {"max": max_jobs, "duration": round(per_s * 1000)}  # Worker opts.limiter

    async def enqueue(self, job: Job) -> None:
        await self.queue.add(TOPIC, job.payload, self._opts(job))

    async def enqueue_bulk(self, jobs: Sequence[Job]) -> None:
        for start in range(0, len(jobs), BULK_CHUNK):
            chunk = jobs[start : start + BULK_CHUNK]
            await self.queue.addBulk(
                [{"name": TOPIC, "data": j.payload, "opts": self._opts(j)} for j in chunk]
            )

    async def start_worker(self, concurrency: int) -> None:
        from bullmq import Worker

        on_run = self.on_run

        async def process(job: Any, token: str) -> None:
            started = time.time()
            if on_run(job.data, started):
                raise RuntimeError("bench: fail the first run")

        opts: dict[str, Any] = {"connection": self.redis_url, "concurrency": concurrency}
        if self.limiter is not None:
            opts["limiter"] = self.limiter
        self.worker = Worker(QUEUE, process, opts)

    async def stop_worker(self) -> None:
        if self.worker is not None:
            await self.worker.close()
            self.worker = None

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.close()
