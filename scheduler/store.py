"""RedisStore: the only module that talks to Redis. One async method per Lua
script (each a single round trip), plus plain reads."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from scheduler.errors import StorageError
from scheduler.job import ClaimedJob, JobInfo, JobState, NewJob, Settlement
from scheduler.keys import Keys
from scheduler.scripts import CLAIM_FIELDS, Scripts, ScriptCode
from scheduler.timeutil import ms_to_utc

TERMINAL_SETS = ("completed", "failed", "cancelled")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStore:
    """All job state of one namespace in one Redis (or one Cluster slot)."""

    def __init__(self, redis: aioredis.Redis, namespace: str) -> None:
        self.redis = redis
        self.keys = Keys(namespace)
        self._scripts = Scripts(redis)

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._scripts[name](keys=list(keys), args=list(args))
        except RedisError as exc:
            raise StorageError(f"redis script {name} failed: {exc}") from exc

    async def enqueue(self, job: NewJob, now_ms: int) -> bool:
        """Store a new job; False when a job with this id already exists."""
        k = self.keys
        code = await self._run(
            "enqueue",
            [k.job(job.id), k.due, k.outbox, k.counts, k.wake],
            [job.id, now_ms, job.due_ms, job.topic, job.payload_json, job.metadata_json, job.tz,
             job.run_at_ms, job.max_attempts, job.backoff_type, job.backoff_delay_ms, job.timeout_ms,
             job.trace, job.cron],
        )
        return int(code) == 1

    async def claim(
        self, now_ms: int, limit: int, lease_ms: int, worker_id: str, topics: Sequence[str] = ()
    ) -> tuple[list[ClaimedJob], int | None]:
        """Lease up to `limit` due jobs. Returns them and the next due ms (None: nothing waits)."""
        k = self.keys
        raw = await self._run(
            "claim", [k.due, k.active, k.outbox, k.counts], [now_ms, limit, lease_ms, worker_id, k.job_prefix, *topics]
        )
        next_due = int(raw[0])
        jobs = []
        for i in range(1, len(raw), CLAIM_FIELDS):
            f = [_s(v) for v in raw[i : i + CLAIM_FIELDS]]
            jobs.append(
                ClaimedJob(
                    id=f[0], attempt=int(f[1]), token=f[2], topic=f[3], payload_json=f[4], metadata_json=f[5],
                    run_at_ms=int(f[6]), due_ms=int(f[7]), max_attempts=int(f[8]), backoff_type=f[9],
                    backoff_delay_ms=int(f[10]), timeout_ms=int(f[11]), trace=f[12], cron=f[13],
                )
            )
        return jobs, (None if next_due < 0 else next_due)

    async def complete(self, items: Sequence[Settlement], now_ms: int, keep_completed: int) -> list[int]:
        """Settle successful attempts in one call; one result code per item."""
        if not items:
            return []
        k = self.keys
        args: list[Any] = [now_ms, k.job_prefix, keep_completed]
        for s in items:
            args += [s.job_id, s.token, s.outcome]
        return [int(c) for c in await self._run("complete", [k.active, k.completed, k.cancelled, k.outbox, k.counts], args)]

    async def fail(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        """Settle failed (or lease-expired) attempts in one call; one result code per item."""
        if not items:
            return []
        k = self.keys
        args: list[Any] = [now_ms, k.job_prefix]
        for s in items:
            args += [s.job_id, s.token, "1" if s.require_expired else "0", s.outcome, s.error_json, s.retry_at_ms]
        keys = [k.active, k.due, k.failed, k.cancelled, k.outbox, k.counts, k.wake]
        return [int(c) for c in await self._run("fail", keys, args)]

    async def cancel(self, job_id: str, now_ms: int) -> int:
        """Cancel a job; the script's code (1, 2, or ScriptCode.NOT_FOUND/FINISHED)."""
        k = self.keys
        return int(await self._run("cancel", [k.job(job_id), k.due, k.cancelled, k.outbox, k.counts], [job_id, now_ms]))

    async def extend_leases(self, leases: Sequence[tuple[str, str]], now_ms: int, lease_ms: int) -> int:
        """Heartbeat for running attempts; returns how many leases were lost."""
        if not leases:
            return 0
        args: list[Any] = [now_ms, lease_ms, self.keys.job_prefix]
        for job_id, token in leases:
            args += [job_id, token]
        return int(await self._run("extend_leases", [self.keys.active], args))

    async def release(self, leases: Sequence[tuple[str, str]], now_ms: int) -> int:
        """Give unfinished attempts back on graceful stop; returns how many."""
        if not leases:
            return 0
        k = self.keys
        args: list[Any] = [now_ms, k.job_prefix]
        for job_id, token in leases:
            args += [job_id, token]
        return int(await self._run("release", [k.active, k.due, k.cancelled, k.outbox, k.counts, k.wake], args))

    async def prune(self, now_ms: int, completed_age_ms: int, failed_age_ms: int, cancelled_age_ms: int,
                    limit: int = 500) -> int:
        """Delete finished jobs past their retention; returns how many."""
        k = self.keys
        return int(await self._run(
            "prune", [k.completed, k.failed, k.cancelled, k.counts],
            [now_ms, k.job_prefix, completed_age_ms, failed_age_ms, cancelled_age_ms, limit],
        ))

    async def expired_leases(self, now_ms: int, limit: int = 100) -> list[dict[str, str]]:
        """Running jobs whose lease passed (their worker is gone), with what recovery needs."""
        try:
            ids = await self.redis.zrangebyscore(self.keys.active, "-inf", now_ms, start=0, num=limit)
            if not ids:
                return []
            pipe = self.redis.pipeline(transaction=False)
            for raw_id in ids:
                pipe.hgetall(self.keys.job(_s(raw_id)))
            rows = await pipe.execute()
        except RedisError as exc:
            raise StorageError(f"redis read of expired leases failed: {exc}") from exc
        out = []
        for raw_id, row in zip(ids, rows):
            if row:
                fields = {_s(a): _s(b) for a, b in row.items()}
                fields["id"] = _s(raw_id)
                out.append(fields)
        return out

    async def get_job(self, job_id: str) -> JobInfo | None:
        """A snapshot of the job, or None when unknown (or pruned)."""
        try:
            raw = await self.redis.hgetall(self.keys.job(job_id))
        except RedisError as exc:
            raise StorageError(f"redis read of job {job_id} failed: {exc}") from exc
        if not raw:
            return None
        f = {_s(a): _s(b) for a, b in raw.items()}
        state = JobState(f["state"])
        waiting = state in (JobState.SCHEDULED, JobState.RETRYING)
        return JobInfo(
            id=job_id,
            topic=f["topic"],
            state=state,
            attempts=int(f.get("attempts", 0)),
            max_attempts=int(f["max"]),
            run_at=ms_to_utc(int(f["run_at"])),
            next_attempt_at=ms_to_utc(int(f["due"])) if waiting else None,
            last_error=json.loads(f["last_error"]) if f.get("last_error") else None,
            payload=json.loads(f["payload"]),
            metadata=json.loads(f["meta"]),
            tz=f["tz"],
            backoff_type=f["btype"],
            backoff_delay_ms=int(f["bdelay"]),
            timeout_ms=int(f["timeout"]),
            created_at=ms_to_utc(int(f["created"])),
            finished_at=ms_to_utc(int(f["finished"])) if f.get("finished") else None,
            cron=f.get("cron") or None,
        )

    async def stats(self, topic: str | None = None) -> dict[str, int]:
        """Jobs per state currently held in Redis (all topics, or one)."""
        fields = [s.value if topic is None else f"{topic}|{s.value}" for s in JobState]
        try:
            values = await self.redis.hmget(self.keys.counts, fields)
        except RedisError as exc:
            raise StorageError(f"redis read of counts failed: {exc}") from exc
        return {s.value: int(v or 0) for s, v in zip(JobState, values)}
