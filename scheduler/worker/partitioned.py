"""A worker of a partitioned namespace (docs/how-to/scaling-out.md): one Worker per partition it
serves, each with its own claim loop, wake-up channel, heartbeat and settlement on that
partition's store, so every script call stays on one partition (one cluster slot). Each
loop sleeps until its own partition's earliest due job; together they sleep until the
earliest of any. They share the process's concurrency (SharedSlots): a partition whose jobs
run long never holds slots the others could use."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeAlias

from opentelemetry.trace import Tracer

from listeners import ListenerRegistry
from scheduler.core.clock import Clock
from scheduler.core.config import CronSettings, RetentionSettings, WorkerSettings
from scheduler.core.job import NewJob
from scheduler.observe.metrics import Metrics
from scheduler.store.bulk import Enqueued
from scheduler.worker.loop import Worker, new_worker_id
from scheduler.worker.process_pool import ProcessPool


class SharedSlots:
    """The concurrency of one process's partition loops: running attempts, handoffs and claims
    in flight of all of them count against one total; a freed slot wakes every loop."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.workers: list[Worker] = []

    def join(self, worker: Worker) -> None:
        self.workers.append(worker)

    def free(self) -> int:
        return self.total - sum(len(w._running) + w._reserved for w in self.workers)  # noqa: SLF001

    def freed(self) -> None:
        for w in self.workers:
            w._slot_free.set()  # noqa: SLF001


class PartitionedWorker:
    """The Worker interface over one Worker per served partition (same worker id on each)."""

    def __init__(
        self,
        make: Callable[[int, str, SharedSlots], Worker],
        partitions: Sequence[int],
        route: Callable[[NewJob], int],
        concurrency: int,
    ) -> None:
        """`make(partition, worker_id, slots)` builds one partition's Worker; `route(job)` is
        the partition a new job goes to (RedisStore.partition_for)."""
        self.id = new_worker_id()
        self.route = route
        self.concurrency = concurrency
        self.slots = SharedSlots(concurrency)
        self.by_partition: dict[int, Worker] = {p: make(p, self.id, self.slots) for p in partitions}
        self.workers = list(self.by_partition.values())
        for w in self.workers[
            1:
        ]:  # one pool of listener processes per process ([worker] processes)
            w.pool = self.workers[0].pool.shared()
        self.on_declare: Callable[[Sequence[str]], Awaitable[object]] | None = None
        self.on_start: Callable[[], Awaitable[None]] | None = None
        self.on_housekeeping: Callable[[], Awaitable[None]] | None = None
        self.on_drain: Callable[[str], None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        for w in self.workers:  # a drain request seen by any partition's loop stops them all
            w.on_drain = self._drain

    # What is the same on every partition's loop (the first one's, as Worker has them).
    @property
    def registry(self) -> ListenerRegistry:
        return self.workers[0].registry

    @property
    def clock(self) -> Clock:
        return self.workers[0].clock

    @property
    def settings(self) -> WorkerSettings:
        return self.workers[0].settings

    @property
    def retention(self) -> RetentionSettings:
        return self.workers[0].retention

    @property
    def metrics(self) -> Metrics:
        return self.workers[0].metrics

    @property
    def cron(self) -> CronSettings:
        return self.workers[0].cron

    @property
    def tracer(self) -> Tracer:
        return self.workers[0].tracer

    @property
    def topics(self) -> tuple[str, ...]:
        return self.workers[0].topics

    @property
    def all_topics(self) -> bool:
        return self.workers[0].all_topics

    @property
    def grace(self) -> float | None:
        return self.workers[0].grace

    @property
    def pool(self) -> ProcessPool:
        """The listener processes every loop shares ([worker] processes is per process)."""
        return self.workers[0].pool

    async def start(self) -> None:
        """The first partition's worker runs the hooks (declared schedules, audit relay), then all
        start."""
        first = self.workers[0]
        first.on_declare, first.on_start, first.on_housekeeping = (
            self.on_declare,
            self.on_start,
            self.on_housekeeping,
        )
        await first.start()
        try:
            await asyncio.gather(*(w.start() for w in self.workers[1:]))
        except BaseException:
            await self.stop(0)
            raise

    async def stop(self, grace: float | None = None) -> None:
        await asyncio.gather(*(w.stop(grace) for w in self.workers if w._started))  # noqa: SLF001

    def _drain(self, reason: str) -> None:
        if self._stopping is None:
            if self.on_drain is not None:
                self.on_drain(reason)
            self._stopping = asyncio.create_task(self.stop(), name="horae-stop")

    @property
    def draining(self) -> bool:
        return any(w.draining for w in self.workers)

    @property
    def stopped(self) -> bool:
        return all(w.stopped for w in self.workers if w._started)  # noqa: SLF001

    async def wait_stopped(self) -> None:
        await asyncio.gather(*(w.wait_stopped() for w in self.workers if w._started))  # noqa: SLF001

    @property
    def active(self) -> int:
        return sum(w.active for w in self.workers)

    @property
    def next_due_ms(self) -> int | None:
        return min((w.next_due_ms for w in self.workers if w.next_due_ms is not None), default=None)

    async def enqueue_local(self, job: NewJob, now_ms: int) -> Enqueued | None:
        """Hand a job to the worker of its partition (None: this process does not serve it)."""
        worker = self.by_partition.get(self.route(job))
        done = None if worker is None else await worker.enqueue_local(job, now_ms)
        return (
            None if done is not None and done.home is not None else done
        )  # its topic lives elsewhere

    async def recover_expired(self) -> int:
        return sum(await asyncio.gather(*(w.recover_expired() for w in self.workers)))

    async def prune(self) -> int:
        return sum(await asyncio.gather(*(w.prune() for w in self.workers)))


# What Scheduler.make_worker returns: a Worker, or one over each served partition.
AnyWorker: TypeAlias = Worker | PartitionedWorker
