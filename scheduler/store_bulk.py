"""Bulk enqueue: many enqueue.lua calls in pipelined batches (RedisStore.enqueue_many),
and the one place that builds enqueue.lua's KEYS and ARGV."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError, ResponseError

from scheduler.errors import StorageError
from scheduler.job import NewJob
from scheduler.scripts import EnqueueCode
from scheduler.store_base import StoreBase

# enqueue_many's pipelined writes: enqueue.lua calls per write, and writes awaiting
# their replies at once. Big enough that a write costs little per job and Redis never
# waits for the next one; small enough not to hold up other callers of the shared
# connection for long (at most BATCH * IN_FLIGHT calls ahead of them).
ENQUEUE_BATCH = 200
ENQUEUE_IN_FLIGHT = 5


class BulkStore(StoreBase):
    """enqueue.lua's call shape and the pipelined batches of enqueue_many."""

    def _enqueue_call(self, job: NewJob, now_ms: int, worker_id: str,
                      lease_ms: int) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of enqueue.lua for one job (one place for its argument order)."""
        k = self.keys
        return (
            [k.job(job.id), k.due, k.outbox, k.counts, k.wake, k.active],
            [job.id, now_ms, job.due_ms, job.topic, job.payload_json, job.metadata_json, job.tz,
             job.run_at_ms, job.max_attempts, job.backoff_type, job.backoff_delay_ms, job.timeout_ms,
             job.trace, job.cron, worker_id, lease_ms, job.backoff_max_delay_ms, job.backoff_jitter,
             job.dead_letter],
        )

    async def enqueue_many(self, jobs: Sequence[NewJob], now_ms: int, batch: int = ENQUEUE_BATCH,
                           in_flight: int = ENQUEUE_IN_FLIGHT) -> list[bool]:
        """Store new jobs, each with its own enqueue.lua call (atomic, audited, wake-ups as
        usual): `batch` calls per pipelined write, up to `in_flight` writes awaiting their
        replies (Redis runs one while the next is packed). One created flag per job, in order.

        Raises:
            StorageError: Redis failed; batches written before the failure may be stored
                (scheduling the same ids again is a no-op for those).
        """
        pending: deque[asyncio.Future[list[bool]]] = deque()
        created: list[bool] = []
        try:
            for start in range(0, len(jobs), batch):
                if len(pending) >= in_flight:
                    created += await pending.popleft()
                pending.append(asyncio.ensure_future(self._enqueue_batch(jobs[start:start + batch], now_ms)))
            while pending:
                created += await pending.popleft()
        finally:
            if pending:  # a batch failed: the others' outcomes are awaited, not left unread
                await asyncio.gather(*pending, return_exceptions=True)
        return created

    async def _enqueue_batch(self, jobs: Sequence[NewJob], now_ms: int) -> list[bool]:
        script = self._scripts["enqueue"]
        commands = []
        for job in jobs:
            keys, args = self._enqueue_call(job, now_ms, "", 0)
            commands.append(("EVALSHA", script.sha, len(keys), *keys, *args))
        try:
            try:
                replies = await self.wire.call_many(commands)
            except ResponseError as exc:
                if not str(exc).startswith("NOSCRIPT"):
                    raise
                # Not loaded (a fresh or flushed script cache): load it and send the batch
                # again; any call of it that did run replies DUPLICATE the second time.
                await self.wire.call("SCRIPT", "LOAD", script.source)
                replies = await self.wire.call_many(commands)
        except RedisError as exc:
            raise StorageError(f"redis script enqueue failed: {exc}") from exc
        return [int(r[0]) == EnqueueCode.QUEUED for r in replies]
