"""RedisStore, the one class that talks to Redis (one async method per Lua script, plus
reads, over scheduler/store/wire.py), for a namespace of any number of partitions, and the job
lifecycle: enqueue, claim, settle, leases, operations, prune. Its other parts: base.py (the
connection and the partitions), crons.py, topics.py, reads.py, bulk.py, progress.py."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from scheduler.core.errors import InvalidDependency, UnknownParent
from scheduler.core.job import ClaimedJob, NewJob, Settlement, dead_letter_args
from scheduler.core.keys import JOB_DEFAULTS, Keys
from scheduler.core.timeutil import ms_to_utc, rfc3339
from scheduler.store.base import StoreBase
from scheduler.store.bulk import Enqueued, enqueued
from scheduler.store.crons import CronStore
from scheduler.store.flows import FlowStore
from scheduler.store.progress import ProgressStore
from scheduler.store.scripts import CLAIM_FIELDS, EnqueueCode, ScriptCode
from scheduler.store.topics import TopicStore

# The fields of a running job that lease recovery (Worker.recover_expired) needs.
LEASE_FIELDS = (
    "topic",
    "token",
    "attempts",
    "worker",
    "meta",
    "max",
    "btype",
    "bdelay",
    "bmax",
    "bjit",
)


class RedisStore(CronStore, TopicStore, FlowStore, ProgressStore, StoreBase):
    """All job state of one namespace in one Redis (or one Cluster slot per partition)."""

    async def enqueue(self, job: NewJob, now_ms: int) -> Enqueued:
        """Store a new job (or not: see ScheduleResult) on its partition; refused there for its
        topic's home partition (a topic-wide limit), it is sent there."""
        if job.after and self.count > 1:
            k = await self._parents_keys(job)
        else:
            k = self.keys if self.count == 1 else self.parts[self.partition_for(job)]
        done = enqueued(job, await self._run("enqueue", *self._enqueue_call(k, job, now_ms, "", 0)))
        home = self._home_of(done.home)
        if home is not None and job.after:
            raise InvalidDependency(
                f"topic {job.topic!r} lives on partition {home} only (a topic-wide limit), "
                f"and the parents of its job on partition {k.partition}: a job waits for "
                "parents of its own partition (docs/how-to/dependencies.md)",
                field="after",
            )
        if home is not None:
            self.learn_home(job.topic, home)
            k = self.parts[home]
            reply = await self._run("enqueue", *self._enqueue_call(k, job, now_ms, "", 0))
            done = enqueued(job, reply)
        return done

    async def _parents_keys(self, job: NewJob) -> Keys:
        """The partition of a new job's parents, where the job must live (each state change of
        a child is one script with its parents').

        Raises:
            UnknownParent: a parent is on no partition.
            InvalidDependency: the parents are on different partitions.
        """
        found = await asyncio.gather(*(self._job_keys(parent) for parent in job.after))
        for parent, keys in zip(job.after, found):
            if keys is None:
                raise UnknownParent(parent)
        homes = {keys.partition for keys in found if keys is not None}
        if len(homes) > 1:
            raise InvalidDependency(
                f"the parents of a job must share one partition; {', '.join(job.after)} are on "
                f"partitions {', '.join(str(h) for h in sorted(h or 0 for h in homes))} "
                "(schedule them with the same key=, or in an unpartitioned namespace: "
                "docs/how-to/dependencies.md)",
                field="after",
            )
        first = found[0]
        assert first is not None
        return first

    async def enqueue_for(
        self, job: NewJob, now_ms: int, worker_id: str, lease_ms: int
    ) -> tuple[Enqueued, ClaimedJob | None]:
        """Store a new job and, when it is due now and no other job is, lease it to
        `worker_id` in the same call (the caller's own worker: no wake-up, no claim).

        Returns what happened, and the leased attempt (None: queued as usual, or not stored).
        """
        k = self.single
        res = await self._run("enqueue", *self._enqueue_call(k, job, now_ms, worker_id, lease_ms))
        done = enqueued(job, res)
        if int(res[0]) != EnqueueCode.LEASED:
            return done, None
        return done, ClaimedJob(
            id=job.id,
            attempt=int(res[1]),
            token=res[2],
            topic=job.topic,
            payload_json=job.payload_json,
            metadata_json=job.metadata_json,
            run_at_ms=job.run_at_ms,
            due_ms=job.due_ms,
            max_attempts=job.max_attempts,
            backoff_type=job.backoff_type,
            backoff_delay_ms=job.backoff_delay_ms,
            backoff_max_delay_ms=job.backoff_max_delay_ms,
            backoff_jitter=job.backoff_jitter,
            timeout_ms=job.timeout_ms,
            trace=job.trace,
            cron=job.cron,
        )

    async def claim(
        self,
        now_ms: int,
        limit: int,
        lease_ms: int,
        worker_id: str,
        topics: Sequence[str] = (),
        unserved: bool = False,
        listened: Sequence[str] = (),
        memory_ms: int = 0,
    ) -> tuple[list[ClaimedJob], int | None, int | None]:
        """Lease up to `limit` due jobs: of `topics` (none and not `unserved`: of every topic),
        and with `unserved` also of topics no live worker serves; but never, unless it is one of
        the `listened` topics (the worker has listeners for them), a topic a worker served less than
        `memory_ms` ago ([worker] topic_memory: its jobs wait for a worker); then dead letters
        waiting on the `listened` topics. Returns the jobs, the next due ms and the next cron tick
        ms (None: nothing waits)."""
        k = self.single
        raw = await self._run(
            "claim",
            [
                k.due,
                k.active,
                k.outbox,
                k.counts,
                k.crons_due,
                k.served,
                k.dead_letter_topics,
                k.lease_seq,
                k.known_topics,
            ],
            [
                now_ms,
                limit,
                lease_ms,
                worker_id,
                k.job_prefix,
                "1" if unserved else "0",
                k.dead_letter_prefix,
                memory_ms,
                len(listened),
                *listened,
                *topics,
            ],
        )
        next_due, next_cron = int(raw[0]), int(raw[1])
        jobs = []
        for i in range(2, len(raw), CLAIM_FIELDS):
            f = raw[i : i + CLAIM_FIELDS]  # str (the wire decodes), numbers as str or int
            jobs.append(
                ClaimedJob(
                    id=f[0],
                    attempt=int(f[1]),
                    token=f[2],
                    topic=f[3],
                    payload_json=f[4],
                    metadata_json=f[5],
                    run_at_ms=int(f[6]),
                    due_ms=int(f[7]),
                    max_attempts=int(f[8]),
                    backoff_type=f[9],
                    backoff_delay_ms=int(f[10]),
                    timeout_ms=int(f[11]),
                    trace=f[12],
                    cron=f[13],
                    backoff_max_delay_ms=int(f[14]),
                    backoff_jitter=f[15],
                    parent_results_json=f[16],
                    flow_root=f[17],
                )
            )
        return jobs, (None if next_due < 0 else next_due), (None if next_cron < 0 else next_cron)

    async def complete(
        self, items: Sequence[Settlement], now_ms: int, keep_completed: int
    ) -> list[int]:
        """Settle successful attempts in one call; one result code per item. `now_ms` is when
        it is written; each attempt's own end (Settlement.ended_ms) is its finished time."""
        if not items:
            return []
        k = self.single
        args: list[Any] = [now_ms, k.job_prefix, keep_completed]
        for s in items:
            args += [s.job_id, s.token, s.outcome, s.detail_json, *s.times]
        return [
            int(c)
            for c in await self._run(
                "complete", [k.active, k.completed, k.cancelled, k.outbox, k.counts, k.done], args
            )
        ]

    async def fail(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        """Settle failed (or lease-expired) attempts in one call; one result code per item."""
        if not items:
            return []
        k = self.single
        args: list[Any] = [
            now_ms,
            k.job_prefix,
            k.topic_prefix,
            k.dead_letter_prefix,
            rfc3339(ms_to_utc(now_ms)),
        ]
        for s in items:
            args += [
                s.job_id,
                s.token,
                "1" if s.require_expired else "0",
                s.outcome,
                s.error_json,
                s.retry_at_ms,
                *dead_letter_args(s),
                *s.times,
            ]
        keys = [
            k.active,
            k.due,
            k.failed,
            k.cancelled,
            k.outbox,
            k.counts,
            k.wake,
            k.dead_letter_topics,
            k.done,
        ]
        return [int(c) for c in await self._run("fail", keys, args)]

    async def cancel(self, job_id: str, now_ms: int, actor: str = "") -> int:
        """Cancel a job; the script's code (1, 2, or scripts.ScriptCode NOT_FOUND/FINISHED).
        `actor` is recorded in the `cancelled` event ("" for none)."""
        k = await self._job_keys(job_id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "cancel",
                [k.job(job_id), k.due, k.cancelled, k.outbox, k.counts, k.done],
                [job_id, now_ms, actor, k.dead_letter_prefix],
            )
        )

    async def retry_job(self, job_id: str, now_ms: int, actor: str) -> int:
        """Run a failed or cancelled job again, due now; OperationCode.RETRIED or a ScriptCode."""
        k = await self._job_keys(job_id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "retry_job",
                [k.job(job_id), k.due, k.failed, k.cancelled, k.outbox, k.counts, k.wake],
                [job_id, now_ms, actor, k.dead_letter_prefix],
            )
        )

    async def delete_job(self, job_id: str, now_ms: int, actor: str) -> int:
        """Remove a job that is not running; OperationCode.DELETED or a ScriptCode."""
        k = await self._job_keys(job_id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "delete_job",
                [
                    k.job(job_id),
                    k.due,
                    k.completed,
                    k.failed,
                    k.cancelled,
                    k.outbox,
                    k.counts,
                    k.done,
                ],
                [job_id, now_ms, actor],
            )
        )

    async def reschedule_job(
        self, job_id: str, run_at_ms: int, tz: str, now_ms: int, actor: str
    ) -> int:
        """Move a waiting job to `run_at_ms` (now when past); OperationCode.RESCHEDULED or a
        ScriptCode."""
        k = await self._job_keys(job_id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "reschedule_job",
                [k.job(job_id), k.due, k.outbox, k.wake],
                [job_id, now_ms, run_at_ms, tz, actor],
            )
        )

    async def extend_leases(
        self, leases: Sequence[tuple[str, str]], now_ms: int, lease_ms: int
    ) -> int:
        """Heartbeat for running attempts; returns how many leases were lost."""
        if not leases:
            return 0
        k = self.single
        args: list[Any] = [now_ms, lease_ms, k.job_prefix]
        for job_id, token in leases:
            args += [job_id, token]
        return int(await self._run("extend_leases", [k.active], args))

    async def release(self, leases: Sequence[tuple[str, str]], now_ms: int) -> int:
        """Give unfinished attempts back on graceful stop; returns how many."""
        if not leases:
            return 0
        k = self.single
        args: list[Any] = [now_ms, k.job_prefix, k.dead_letter_prefix]
        for job_id, token in leases:
            args += [job_id, token]
        return int(
            await self._run(
                "release", [k.active, k.due, k.cancelled, k.outbox, k.counts, k.wake], args
            )
        )

    async def held_by(self, worker_id: str) -> list[tuple[str, str]]:
        """(id, token) of every running job leased to `worker_id`: after a claim whose reply
        was lost, the worker gives back what it holds without knowing (the active set holds
        only running jobs, so this read stays small)."""
        k = self.single
        try:
            ids = await self.wire.call("ZRANGE", k.active, 0, -1)
            rows = await self.wire.call_many([("HMGET", k.job(i), "worker", "token") for i in ids])
        except RedisError as exc:
            raise self.storage_error("read of held leases", exc) from exc
        return [
            (job_id, token)
            for job_id, (worker, token) in zip(ids, rows)
            if worker == worker_id and token
        ]

    async def prune(
        self,
        now_ms: int,
        completed_age_ms: int,
        failed_age_ms: int,
        cancelled_age_ms: int,
        limit: int = 500,
    ) -> int:
        """Delete finished jobs past their retention; returns how many."""
        k = self.single
        return int(
            await self._run(
                "prune",
                [k.completed, k.failed, k.cancelled, k.counts],
                [now_ms, k.job_prefix, completed_age_ms, failed_age_ms, cancelled_age_ms, limit],
            )
        )

    async def expired_leases(self, now_ms: int, limit: int = 100) -> list[dict[str, str]]:
        """Running jobs whose lease passed (their worker is gone), with what recovery needs."""
        k = self.single
        try:
            ids = await self.wire.call("ZRANGEBYSCORE", k.active, "-inf", now_ms, "LIMIT", 0, limit)
            rows = await self.wire.call_many([("HMGET", k.job(i), *LEASE_FIELDS) for i in ids])
        except RedisError as exc:
            raise self.storage_error("read of expired leases", exc) from exc
        out = []
        for job_id, row in zip(ids, rows):
            if row[0] is not None:  # no topic: the job's hash is gone
                stored = {name: v for name, v in zip(LEASE_FIELDS, row) if v is not None}
                out.append(
                    {**JOB_DEFAULTS, **stored, "id": job_id}
                )  # fields left out hold their default
        return out
