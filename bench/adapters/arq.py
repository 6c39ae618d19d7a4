"""arq (latest, own venv: it pins an older redis-py). Defaults except max_jobs
(the scenario's concurrency) and handle_signals=False (it runs inside our loop).
Retry: arq retries only on `Retry`, so the handler raises Retry(defer=1 s)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from adapters.base import QUEUE, RETRY_ATTEMPTS, RETRY_DELAY_S, TOPIC, Adapter, Job, pkg_version

FUNC = TOPIC.replace(".", "_")


class ArqAdapter(Adapter):
    name = "arq"
    supports_bulk = False  # arq has no bulk enqueue API

    def __init__(self, redis_url: str, on_run: Any, options: dict[str, Any]) -> None:
        super().__init__(redis_url, on_run, options)
        self.pool: Any = None
        self.worker: Any = None
        self.task: asyncio.Task[None] | None = None

    def versions(self) -> dict[str, str]:
        return {
            "arq": pkg_version("arq"),
            "redis-py": pkg_version("redis"),
            "hiredis": pkg_version("hiredis"),
        }

    def settings(self) -> dict[str, Any]:
        return {
            "queue_name": QUEUE,
            "worker": (
                "defaults (poll_delay 0.5 s, queue_read_limit "
                "max(max_jobs*5,100), keep_result 3600 s, max_tries 5, "
                "job_timeout 300 s) + max_jobs=concurrency, handle_signals=False"
            ),
            "retry (retry scenario)": f"handler raises arq.worker.Retry(defer={RETRY_DELAY_S:g}); "
            f"{RETRY_ATTEMPTS} runs expected (max_tries default 5)",
            "delayed": "_defer_until=aware UTC datetime",
            "serializer": "default (pickle)",
        }

    async def connect(self) -> None:
        from arq import create_pool
        from arq.connections import RedisSettings

        self.pool = await create_pool(
            RedisSettings.from_dsn(self.redis_url), default_queue_name=QUEUE
        )

    async def enqueue(self, job: Job) -> None:
        if job.due is None:
            await self.pool.enqueue_job(FUNC, job.payload)
        else:
            await self.pool.enqueue_job(
                FUNC, job.payload, _defer_until=datetime.fromtimestamp(job.due, tz=UTC)
            )

    async def enqueue_bulk(self, jobs: Sequence[Job]) -> None:
        raise NotImplementedError

    async def start_worker(self, concurrency: int) -> None:
        from arq.worker import Retry, Worker, func

        on_run = self.on_run

        async def bench_job(ctx: dict[str, Any], payload: dict[str, Any]) -> None:
            started = time.time()
            if on_run(payload, started):
                raise Retry(defer=RETRY_DELAY_S)

        bench_job.__qualname__ = FUNC
        self.worker = Worker(
            functions=[func(bench_job, name=FUNC)],
            redis_pool=self.pool,
            queue_name=QUEUE,
            max_jobs=concurrency,
            handle_signals=False,
        )
        self.task = asyncio.create_task(self.worker.async_run())

    async def stop_worker(self) -> None:
        if self.worker is not None:
            self.worker.handle_sig(
                2
            )  # what close() does without signal handlers: cancel tasks, stop main
            if self.task is not None:
                await asyncio.gather(self.task, return_exceptions=True)
            await asyncio.gather(*self.worker.tasks.values(), return_exceptions=True)
            self.worker = None

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close(close_connection_pool=True)
