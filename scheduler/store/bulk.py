"""Bulk enqueue: batches of jobs, each one enqueue_many.lua call (enqueue.lua's body once per
job), pipelined (RedisStore.enqueue_many), every partition's at once; and the one place that
builds enqueue.lua's KEYS and ARGV."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from scheduler.core.errors import InvalidDependency, KeyRequired, UnknownParent
from scheduler.core.job import NewJob, ScheduleResult
from scheduler.core.keys import Keys
from scheduler.store.base import StoreBase
from scheduler.store.scripts import EnqueueCode, ScriptCode

# enqueue_many's writes: jobs per enqueue_many.lua call, and calls awaiting their replies at
# once. Big enough that a call costs little per job and Redis never waits for the next one;
# small enough that one call holds Redis for a few ms at most (it is atomic) and other
# callers of the shared connection wait behind at most BATCH * IN_FLIGHT jobs.
ENQUEUE_BATCH = 100
ENQUEUE_IN_FLIGHT = 5


@dataclass(frozen=True)
class Enqueued:
    """enqueue.lua's reply for one job: what happened, and the topic's waiting + retrying
    jobs when that is over its warning_size (else 0)."""

    result: ScheduleResult
    waiting: int = 0
    home: int | None = None  # not stored: the topic lives on this partition (the store re-sends)


def enqueued(job: NewJob, reply: Sequence[Any]) -> Enqueued:
    """Read enqueue.lua's reply for `job`.

    Raises:
        KeyRequired: the topic's policy is key_strict_fifo and the job has no key.
        UnknownParent: a job of its `after=` does not exist (on its partition).
    """
    code = int(reply[0])
    if code in (EnqueueCode.QUEUED, EnqueueCode.LEASED):
        return Enqueued(ScheduleResult(job.id, True), int(reply[3]))
    if code in (EnqueueCode.REFUSED, EnqueueCode.DEBOUNCED):
        return Enqueued(ScheduleResult(str(reply[1]), False, str(reply[2])))
    if code == ScriptCode.WRONG_PARTITION:
        return Enqueued(ScheduleResult(job.id, False, "wrong_partition"), home=int(reply[1]))
    if code == ScriptCode.UNKNOWN_PARENT:
        raise UnknownParent(str(reply[1]))
    if code == ScriptCode.KEY_REQUIRED:
        raise KeyRequired(
            f"topic {job.topic!r} has policy key_strict_fifo: every job needs key=; got none",
            field="key",
        )
    return Enqueued(ScheduleResult(job.id, False, "duplicate_id"))


class BulkStore(StoreBase):
    """enqueue.lua's call shape and enqueue_many's batches."""

    def _enqueue_call(
        self, k: Keys, job: NewJob, now_ms: int, worker_id: str, lease_ms: int
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of enqueue.lua for one job on the partition of `k` (one place for its
        argument order)."""
        return (
            [
                k.job(job.id),
                k.due,
                k.outbox,
                k.counts,
                k.wake,
                k.active,
                k.topic(job.topic),
                k.lease_seq,
            ],
            self._enqueue_args(job, now_ms, worker_id, lease_ms, k.partition),
        )

    def _enqueue_args(
        self, job: NewJob, now_ms: int, worker_id: str, lease_ms: int, partition: int | None
    ) -> list[Any]:
        """enqueue.lua's ARGV for one job (enqueue_many.lua takes them in groups)."""
        return [
            job.id,
            now_ms,
            job.due_ms,
            job.topic,
            job.payload_json,
            job.metadata_json,
            job.tz,
            job.run_at_ms,
            job.max_attempts,
            job.backoff_type,
            job.backoff_delay_ms,
            job.timeout_ms,
            job.trace,
            job.cron,
            worker_id,
            lease_ms,
            job.backoff_max_delay_ms,
            job.backoff_jitter,
            job.dead_letter,
            job.key,
            job.priority,
            job.dedupe_key,
            job.dedupe_window_ms,
            job.dedupe_mode,
            "1" if job.retry_given else "0",
            "1" if job.timeout_given else "0",
            "" if partition is None else str(partition),
            json.dumps(list(job.after), separators=(",", ":")) if job.after else "",
            job.on_parent_failure,
        ]

    async def enqueue_many(
        self,
        jobs: Sequence[NewJob],
        now_ms: int,
        batch: int = ENQUEUE_BATCH,
        in_flight: int = ENQUEUE_IN_FLIGHT,
    ) -> list[Enqueued]:
        """Store new jobs, each through enqueue.lua's body (atomic, audited, wake-ups as
        usual): `batch` jobs per enqueue_many.lua call, up to `in_flight` calls awaiting their
        replies (Redis runs one while the next is packed); each partition's jobs in their own
        batches, all partitions at once. Jobs refused for their topic's home partition are sent
        there in a second round. One reply per job, in order.

        Raises:
            StorageError: Redis failed; batches written before the failure may be stored
                (scheduling the same ids again is a no-op for those).
        """
        where = [self.partition_for(j) for j in jobs]
        if any(j.after for j in jobs):
            await self._place_children(jobs, where)
        out = await self._enqueue_grouped(jobs, where, now_ms, batch, in_flight)
        moved = [
            (i, h) for i, done in enumerate(out) if (h := self._home_of(done.home)) is not None
        ]
        for i, home in moved:
            self.learn_home(jobs[i].topic, home)
        if moved:
            again = await self._enqueue_grouped(
                [jobs[i] for i, _ in moved], [h for _, h in moved], now_ms, batch, in_flight
            )
            for (i, _), done in zip(moved, again):
                out[i] = done
        return out

    async def _place_children(self, jobs: Sequence[NewJob], where: list[int]) -> None:
        """Put each job scheduled `after=` on its parents' partition (`where`, in place): a parent
        scheduled earlier in the same call is where that item goes (it is written first: one
        partition's jobs keep their order), any other must exist already.

        Raises:
            UnknownParent: a parent is neither an earlier item nor a stored job (nothing written).
            InvalidDependency: a job's parents are on different partitions.
        """
        first: dict[str, int] = {}
        for i, job in enumerate(jobs):
            first.setdefault(job.id, i)
        stored = sorted({p for i, j in enumerate(jobs) for p in j.after if first.get(p, i) >= i})
        found = await self._parents_where(stored)
        for i, job in enumerate(jobs):
            if not job.after:
                continue
            homes = {where[first[p]] if first.get(p, i) < i else found[p] for p in job.after}
            if len(homes) > 1:
                raise InvalidDependency(
                    f"items[{i}].after: the parents of a job must share one partition; "
                    f"{', '.join(job.after)} are on partitions "
                    f"{', '.join(str(h) for h in sorted(homes))} (schedule them with the same "
                    "key=: docs/how-to/dependencies.md)",
                    field=f"items[{i}].after",
                )
            where[i] = homes.pop()

    async def _parents_where(self, ids: Sequence[str]) -> dict[str, int]:
        """The partition of each stored job of `ids`.

        Raises:
            UnknownParent: one of them is stored nowhere.
        """
        if self.count == 1:
            try:
                found = await self.wire.call_many([("EXISTS", self.keys.job(i)) for i in ids])
            except RedisError as exc:
                raise self.storage_error("read of the parents", exc) from exc
            for parent, exists in zip(ids, found):
                if not int(exists):
                    raise UnknownParent(parent)
            return dict.fromkeys(ids, 0)
        keys = await asyncio.gather(*(self._job_keys(i) for i in ids))
        out: dict[str, int] = {}
        for parent, k in zip(ids, keys):
            if k is None:
                raise UnknownParent(parent)
            out[parent] = k.partition or 0
        return out

    async def _enqueue_grouped(
        self, jobs: Sequence[NewJob], where: Sequence[int], now_ms: int, batch: int, in_flight: int
    ) -> list[Enqueued]:
        """`jobs[i]` on partition `where[i]`, each partition's in its own batches, all at once."""
        if len(set(where)) <= 1:  # one partition (always, unpartitioned): its batches alone
            k = self.parts[where[0]] if where else self.keys
            return await self._enqueue_on(k, jobs, now_ms, batch, in_flight)
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(where):
            groups.setdefault(p, []).append(i)
        done = await asyncio.gather(
            *(
                self._enqueue_on(self.parts[p], [jobs[i] for i in idx], now_ms, batch, in_flight)
                for p, idx in groups.items()
            )
        )
        replies = {i: r for idx, rs in zip(groups.values(), done) for i, r in zip(idx, rs)}
        return [replies[i] for i in range(len(jobs))]

    async def _enqueue_on(
        self, k: Keys, jobs: Sequence[NewJob], now_ms: int, batch: int, in_flight: int
    ) -> list[Enqueued]:
        """enqueue_many on the partition of `k`."""
        pending: deque[asyncio.Future[list[Enqueued]]] = deque()
        created: list[Enqueued] = []
        try:
            for start in range(0, len(jobs), batch):
                if len(pending) >= in_flight:
                    created += await pending.popleft()
                chunk = jobs[start : start + batch]
                pending.append(asyncio.ensure_future(self._enqueue_batch(k, chunk, now_ms)))
            while pending:
                created += await pending.popleft()
        finally:
            if pending:  # a batch failed: the others' outcomes are awaited, not left unread
                await asyncio.gather(*pending, return_exceptions=True)
        return created

    async def _enqueue_batch(self, k: Keys, jobs: Sequence[NewJob], now_ms: int) -> list[Enqueued]:
        args: list[Any] = [k.job(""), k.topic(""), 0]
        for job in jobs:
            args += self._enqueue_args(job, now_ms, "", 0, k.partition)
        args[2] = (len(args) - 3) // len(jobs)
        keys = [k.due, k.outbox, k.counts, k.wake, k.active, k.lease_seq]
        replies = await self._run("enqueue_many", keys, args)
        return [enqueued(job, r) for job, r in zip(jobs, replies, strict=True)]
