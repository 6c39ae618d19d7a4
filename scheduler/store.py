"""RedisStore: the only module that talks to Redis. One async method per Lua
script (each a single round trip), plus plain reads, all over scheduler/wire.py."""

from __future__ import annotations

import asyncio
import json
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError

from scheduler.errors import StorageError
from scheduler.job import (
    ClaimedJob,
    CronFire,
    CronInfo,
    JobInfo,
    JobState,
    NewCron,
    NewJob,
    Settlement,
    dead_letter_args,
)
from scheduler.keys import Keys
from scheduler.listing import Cursor, Walk
from scheduler.scripts import CLAIM_FIELDS, JOB_DEFAULTS, PAYLOAD_CHUNK_FIELDS, EnqueueCode, Scripts
from scheduler.timeutil import ms_to_utc
from scheduler.wire import Endpoint, Subscription, WireConnection, as_map

# enqueue_many's pipelined writes: enqueue.lua calls per write, and writes awaiting
# their replies at once. Big enough that a write costs little per job and Redis never
# waits for the next one; small enough not to hold up other callers of the shared
# connection for long (at most BATCH * IN_FLIGHT calls ahead of them).
ENQUEUE_BATCH = 200
ENQUEUE_IN_FLIGHT = 5

# The fields of a running job that lease recovery (Worker.recover_expired) needs.
LEASE_FIELDS = ("topic", "token", "attempts", "worker", "meta", "max", "btype", "bdelay", "bmax", "bjit")


def _payload(fields: dict[str, str], chunks: list[bytes | None], separate: str | None) -> str | None:
    """A job's payload JSON: its hash's chunk fields p1..p8 (taken out of `fields`), or,
    when too big to inline, its separate string key (layout and reasons: lua/_lib.lua).

    `chunks` are the chunk fields read as bytes: a chunk boundary may split a UTF-8
    character, so they are joined before decoding."""
    for name in PAYLOAD_CHUNK_FIELDS:
        fields.pop(name, None)
    present = [c for c in chunks if c is not None]
    if present:
        return b"".join(present).decode()
    return separate


class RedisStore:
    """All job state of one namespace in one Redis (or one Cluster slot)."""

    def __init__(self, redis: aioredis.Redis, namespace: str, audit: bool = True,
                 wire: WireConnection | None = None) -> None:
        self.redis = redis  # the owner's client: the wire connects where its URL says
        self.keys = Keys(namespace)
        self._scripts = Scripts(audit)
        # Script calls and reads share one pipelined connection (none of them blocks).
        # Replies come back as str (hiredis decodes them): keys, fields and values are text.
        self.wire = wire if wire is not None else WireConnection(Endpoint.of_pool(redis.connection_pool),
                                                                 decode=True)

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._scripts[name]
        try:
            return await self.wire.evalsha(script.sha, script.source, keys, args)
        except RedisError as exc:
            raise StorageError(f"redis script {name} failed: {exc}") from exc

    async def aclose(self) -> None:
        """Close the script connection (the redis-py client is its owner's to close)."""
        await self.wire.aclose()

    async def subscribe_wake(self, on_wake: Callable[[], None]) -> Subscription:
        """Call `on_wake()` on every wake-up message, and after a lost subscription is back."""
        sub = Subscription(self.wire.endpoint, [self.keys.wake], lambda channel, data: on_wake())
        await sub.start()
        return sub

    async def enqueue(self, job: NewJob, now_ms: int) -> bool:
        """Store a new job; False when a job with this id already exists."""
        created, _ = await self.enqueue_for(job, now_ms, "", 0)
        return created

    async def enqueue_for(self, job: NewJob, now_ms: int, worker_id: str,
                          lease_ms: int) -> tuple[bool, ClaimedJob | None]:
        """Store a new job and, when it is due now and no other job is, lease it to
        `worker_id` in the same call (the caller's own worker: no wake-up, no claim).

        Returns whether it was created, and the leased attempt (None: queued as usual).
        """
        res = await self._run("enqueue", *self._enqueue_call(job, now_ms, worker_id, lease_ms))
        code = int(res[0])
        if code != EnqueueCode.LEASED:
            return code == EnqueueCode.QUEUED, None
        return True, ClaimedJob(
            id=job.id, attempt=int(res[1]), token=res[2], topic=job.topic, payload_json=job.payload_json,
            metadata_json=job.metadata_json, run_at_ms=job.run_at_ms, due_ms=job.due_ms,
            max_attempts=job.max_attempts, backoff_type=job.backoff_type, backoff_delay_ms=job.backoff_delay_ms,
            backoff_max_delay_ms=job.backoff_max_delay_ms, backoff_jitter=job.backoff_jitter,
            timeout_ms=job.timeout_ms, trace=job.trace, cron=job.cron,
        )

    async def claim(
        self, now_ms: int, limit: int, lease_ms: int, worker_id: str, topics: Sequence[str] = (),
        unserved: bool = False,
    ) -> tuple[list[ClaimedJob], int | None, int | None]:
        """Lease up to `limit` due jobs: of `topics` (none and not `unserved`: of every topic),
        and with `unserved` also of topics no live worker serves. Returns them, the next due
        ms and the next cron tick ms (None: nothing waits)."""
        k = self.keys
        raw = await self._run(
            "claim", [k.due, k.active, k.outbox, k.counts, k.crons_due, k.served],
            [now_ms, limit, lease_ms, worker_id, k.job_prefix, "1" if unserved else "0", *topics],
        )
        next_due, next_cron = int(raw[0]), int(raw[1])
        jobs = []
        for i in range(2, len(raw), CLAIM_FIELDS):
            f = raw[i : i + CLAIM_FIELDS]  # str (the wire decodes), numbers as str or int
            jobs.append(
                ClaimedJob(
                    id=f[0], attempt=int(f[1]), token=f[2], topic=f[3], payload_json=f[4], metadata_json=f[5],
                    run_at_ms=int(f[6]), due_ms=int(f[7]), max_attempts=int(f[8]), backoff_type=f[9],
                    backoff_delay_ms=int(f[10]), timeout_ms=int(f[11]), trace=f[12], cron=f[13],
                    backoff_max_delay_ms=int(f[14]), backoff_jitter=f[15],
                )
            )
        return jobs, (None if next_due < 0 else next_due), (None if next_cron < 0 else next_cron)

    async def complete(self, items: Sequence[Settlement], now_ms: int, keep_completed: int) -> list[int]:
        """Settle successful attempts in one call; one result code per item."""
        if not items:
            return []
        k = self.keys
        args: list[Any] = [now_ms, k.job_prefix, keep_completed]
        for s in items:
            args += [s.job_id, s.token, s.outcome, s.rejection_json]
        return [int(c) for c in await self._run("complete", [k.active, k.completed, k.cancelled, k.outbox, k.counts], args)]

    async def fail(self, items: Sequence[Settlement], now_ms: int) -> list[int]:
        """Settle failed (or lease-expired) attempts in one call; one result code per item."""
        if not items:
            return []
        k = self.keys
        args: list[Any] = [now_ms, k.job_prefix, k.topic_prefix, k.dead_letter_prefix, ms_to_utc(now_ms).isoformat()]
        for s in items:
            args += [s.job_id, s.token, "1" if s.require_expired else "0", s.outcome, s.error_json, s.retry_at_ms,
                     *dead_letter_args(s)]
        keys = [k.active, k.due, k.failed, k.cancelled, k.outbox, k.counts, k.wake, k.dead_letter_topics]
        return [int(c) for c in await self._run("fail", keys, args)]

    async def cancel(self, job_id: str, now_ms: int, actor: str = "") -> int:
        """Cancel a job; the script's code (1, 2, or scripts.ScriptCode NOT_FOUND/FINISHED).
        `actor` is recorded in the `cancelled` event ("" for none)."""
        k = self.keys
        return int(await self._run("cancel", [k.job(job_id), k.due, k.cancelled, k.outbox, k.counts],
                                   [job_id, now_ms, actor]))

    async def retry_job(self, job_id: str, now_ms: int, actor: str) -> int:
        """Run a failed or cancelled job again, due now; OperationCode.RETRIED or a ScriptCode."""
        k = self.keys
        return int(await self._run("retry_job", [k.job(job_id), k.due, k.failed, k.cancelled, k.outbox, k.counts,
                                                 k.wake], [job_id, now_ms, actor]))

    async def delete_job(self, job_id: str, now_ms: int, actor: str) -> int:
        """Remove a job that is not running; OperationCode.DELETED or a ScriptCode."""
        k = self.keys
        return int(await self._run("delete_job", [k.job(job_id), k.due, k.completed, k.failed, k.cancelled,
                                                  k.outbox, k.counts], [job_id, now_ms, actor]))

    async def reschedule_job(self, job_id: str, run_at_ms: int, tz: str, now_ms: int, actor: str) -> int:
        """Move a waiting job to `run_at_ms` (now when past); OperationCode.RESCHEDULED or a ScriptCode."""
        k = self.keys
        return int(await self._run("reschedule_job", [k.job(job_id), k.due, k.outbox, k.wake],
                                   [job_id, now_ms, run_at_ms, tz, actor]))

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
            ids = await self.wire.call("ZRANGEBYSCORE", self.keys.active, "-inf", now_ms, "LIMIT", 0, limit)
            rows = await self.wire.call_many([("HMGET", self.keys.job(i), *LEASE_FIELDS) for i in ids])
        except RedisError as exc:
            raise StorageError(f"redis read of expired leases failed: {exc}") from exc
        out = []
        for job_id, row in zip(ids, rows):
            if row[0] is not None:  # no topic: the job's hash is gone
                stored = {name: v for name, v in zip(LEASE_FIELDS, row) if v is not None}
                out.append({**JOB_DEFAULTS, **stored, "id": job_id})  # fields left out hold their default
        return out

    async def get_job(self, job_id: str) -> JobInfo | None:
        """A snapshot of the job, or None when unknown (or pruned)."""
        key = self.keys.job(job_id)
        try:
            flat, chunks, separate = await self.wire.call_many(
                [("HGETALL", key), ("HMGET", key, *PAYLOAD_CHUNK_FIELDS), ("GET", self.keys.payload(job_id))],
                raw=(False, True, False))
        except RedisError as exc:
            raise StorageError(f"redis read of job {job_id} failed: {exc}") from exc
        if not flat:
            return None
        stored = as_map(flat)
        payload = _payload(stored, chunks, separate)
        f = {**JOB_DEFAULTS, **stored}  # fields left out hold their default
        state = JobState(f["state"])
        waiting = state in (JobState.SCHEDULED, JobState.RETRYING)
        return JobInfo(
            id=job_id,
            topic=f["topic"],
            state=state,
            attempts=int(f.get("attempts", 0)),
            max_attempts=int(f["max"]),
            run_at=ms_to_utc(int(f["run_at"])),
            next_attempt_at=ms_to_utc(int(f.get("due", f["run_at"]))) if waiting else None,
            last_error=json.loads(f["last_error"]) if f.get("last_error") else None,
            payload=json.loads(payload) if payload is not None else None,
            metadata=json.loads(f["meta"]),
            tz=f["tz"],
            backoff_type=f["btype"],
            backoff_delay_ms=int(f["bdelay"]),
            timeout_ms=int(f["timeout"]),
            created_at=ms_to_utc(int(f["created"])),
            finished_at=ms_to_utc(int(f["finished"])) if f.get("finished") else None,
            cron=f.get("cron") or None,
            outcome=f.get("outcome") or None,  # stored by complete.lua only when not the default
            backoff_max_delay_ms=int(f["bmax"]),
            backoff_jitter=f["bjit"],
        )

    async def stats(self, topic: str | None = None) -> dict[str, int]:
        """Jobs per state currently held in Redis (all topics, or one). The counts hash
        keeps <topic>|<state> fields only; the totals are their sums."""
        try:
            if topic is not None:
                values = await self.wire.call("HMGET", self.keys.counts, *(f"{topic}|{s.value}" for s in JobState))
                return {s.value: int(v or 0) for s, v in zip(JobState, values)}
            counts = as_map(await self.wire.call("HGETALL", self.keys.counts))
        except RedisError as exc:
            raise StorageError(f"redis read of counts failed: {exc}") from exc
        totals = {s.value: 0 for s in JobState}
        for name, value in counts.items():
            _, sep, state = name.rpartition("|")
            if sep and state in totals:  # (a bare <state> field is an older layout's total: not summed)
                totals[state] += int(value)
        return totals

    # ------------------------------------------------------------------ cron
    async def upsert_cron(self, cron: NewCron, now_ms: int) -> int:
        """Create or update a schedule: 1 created, 2 rescheduled, 0 updated in place."""
        k, job = self.keys, cron.job
        return int(await self._run(
            "upsert_cron", [k.cron(cron.name), k.crons_due, k.cron_names, k.wake],
            [cron.name, now_ms, cron.expr, job.tz, job.topic, job.payload_json, job.metadata_json,
             job.max_attempts, job.backoff_type, job.backoff_delay_ms, job.timeout_ms, cron.misfire, cron.next_ms,
             cron.trace, job.backoff_max_delay_ms, job.backoff_jitter],
        ))

    async def due_crons(self, now_ms: int, limit: int) -> list[dict[str, str]]:
        """Schedules whose next fire is due, with their fields (O(due), not O(all))."""
        try:
            names = await self.wire.call("ZRANGEBYSCORE", self.keys.crons_due, "-inf", now_ms, "LIMIT", 0, limit)
            rows = await self._cron_rows(names)
        except RedisError as exc:
            raise StorageError(f"redis read of due crons failed: {exc}") from exc
        return rows

    async def _cron_rows(self, names: Sequence[str]) -> list[dict[str, str]]:
        out = []
        for name, flat in zip(names, await self.wire.call_many([("HGETALL", self.keys.cron(n)) for n in names])):
            if flat:
                out.append({**as_map(flat), "name": name})
        return out

    async def fire_crons(self, fires: Sequence[CronFire], now_ms: int) -> list[int]:
        """Create the tick jobs and advance the schedules; per schedule: jobs created or STALE."""
        if not fires:
            return []
        k = self.keys
        args: list[Any] = [now_ms, k.cron_prefix, k.job_prefix]
        for f in fires:
            args += [f.name, f.expected_next_ms, f.new_next_ms, len(f.ticks)]
            for tick, job_id, trace in f.ticks:
                args += [tick, job_id, trace]
        return [int(c) for c in await self._run("fire_crons", [k.crons_due, k.due, k.outbox, k.counts, k.wake], args)]

    async def set_cron_paused(self, name: str, paused: bool, next_ms: int, now_ms: int) -> int:
        """Pause or resume; 1 changed, 0 unchanged, ScriptCode.NOT_FOUND."""
        k = self.keys
        return int(await self._run(
            "set_cron_paused", [k.cron(name), k.crons_due, k.wake], [name, "1" if paused else "0", next_ms, now_ms]
        ))

    async def remove_cron(self, name: str) -> bool:
        """Delete a schedule; False when there was none."""
        k = self.keys
        deleted = int(await self._run("remove_cron", [k.cron(name), k.crons_due, k.cron_names], [name]))
        return deleted > 0  # remove_cron.lua replies with the number of schedules deleted

    async def get_cron(self, name: str) -> CronInfo | None:
        """One schedule, or None."""
        rows = await self._cron_rows([name])
        return _cron_info(rows[0]) if rows else None

    async def list_crons(self) -> list[CronInfo]:
        """Every schedule, by name."""
        try:
            names = sorted(await self.wire.call("SMEMBERS", self.keys.cron_names))
            rows = await self._cron_rows(names)
        except RedisError as exc:
            raise StorageError(f"redis read of crons failed: {exc}") from exc
        return [_cron_info(r) for r in rows]

    # ------------------------------------------------------ listing and bulk
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

    async def list_job_ids(self, walk: Walk, after: Cursor | None, limit: int,
                           budget: int) -> tuple[list[str], Cursor | None]:
        """One page of job ids of `walk` after `after` (lua/list_jobs.lua: at most `budget`
        members examined), and the next page's cursor (None: the walk is over)."""
        k = self.keys
        res = await self._run(
            "list_jobs", [k.due, k.active, k.completed, k.failed, k.cancelled],
            [k.job_prefix, walk.first, walk.last, after.set if after else 0, after.score if after else "",
             after.id if after else "", limit, budget, walk.state, walk.topic],
        )
        following = Cursor(int(res[0]), str(res[1]), res[2]) if int(res[0]) > 0 else None
        return list(res[3:]), following

    async def get_jobs(self, job_ids: Sequence[str]) -> list[JobInfo | None]:
        """get_job of each id, all pipelined on the connection at once; in order."""
        return list(await asyncio.gather(*(self.get_job(job_id) for job_id in job_ids)))

    # ------------------------------------------------- topics and dead letters (scheduler/topics.py)
    async def _call(self, what: str, *command: Any) -> Any:
        try:
            return await self.wire.call(*command)
        except RedisError as exc:
            raise StorageError(f"redis {what} failed: {exc}") from exc

    async def put_topic(self, name: str, fields: dict[str, str]) -> None:
        """Store (replace) a topic's configuration hash and list its name."""
        k = self.keys
        try:
            await self.wire.call_many([("DEL", k.topic(name)), ("HSET", k.topic(name), *_flat(fields)),
                                       ("SADD", k.topic_names, name)])
        except RedisError as exc:
            raise StorageError(f"redis write of topic {name} failed: {exc}") from exc

    async def get_topic(self, name: str) -> dict[str, str] | None:
        """A topic's stored configuration fields, or None."""
        return as_map(await self._call(f"read of topic {name}", "HGETALL", self.keys.topic(name))) or None

    async def topic_names(self) -> list[str]:
        """Every configured topic name, sorted."""
        return sorted(await self._call("read of topics", "SMEMBERS", self.keys.topic_names))

    async def remove_topic(self, name: str) -> bool:
        """Delete a topic's configuration; False when there was none."""
        k = self.keys
        try:
            deleted, _ = await self.wire.call_many([("DEL", k.topic(name)), ("SREM", k.topic_names, name)])
        except RedisError as exc:
            raise StorageError(f"redis delete of topic {name} failed: {exc}") from exc
        return int(deleted) > 0

    async def dead_letter_ids(self, topic: str, after: tuple[int, str] | None, limit: int) -> list[tuple[str, int]]:
        """Up to `limit` (id, failed ms) of a dead-letter topic, oldest first, after (ms, id) when given."""
        key = self.keys.dead_letters(topic)
        offset = 0
        if after is not None:
            ms, last = after
            lower = await self._call("read of dead letters", "ZCOUNT", key, "-inf", f"({ms}")
            same = await self._call("read of dead letters", "ZRANGEBYSCORE", key, ms, ms)
            offset = int(lower) + bisect_right(sorted(same), last)  # a zset orders equal scores by member
        flat = await self._call("read of dead letters", "ZRANGE", key, offset, offset + limit - 1, "WITHSCORES")
        return [(str(flat[i]), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]

    async def dead_letter_topics(self) -> list[str]:
        """The dead-letter topics that hold or held dead letters."""
        return sorted(await self._call("read of dead-letter topics", "SMEMBERS", self.keys.dead_letter_topics))

    async def replay_dead_letter(self, dead_letter: JobInfo, job: NewJob, now_ms: int, actor: str) -> int:
        """Schedule a dead letter's payload as `job` (due now) and remove the dead letter; OperationCode.REPLAYED
        or a ScriptCode."""
        k = self.keys
        return int(await self._run(
            "replay_dead_letter",
            [k.job(dead_letter.id), k.dead_letters(dead_letter.topic), k.job(job.id), k.due, k.outbox, k.counts,
             k.wake],
            [dead_letter.id, now_ms, actor, job.id, job.topic, job.metadata_json, job.max_attempts, job.backoff_type,
             job.backoff_delay_ms, job.timeout_ms, job.backoff_max_delay_ms, job.backoff_jitter],
        ))

    async def held_dead_letter_topic(self, job_id: str) -> str | None:
        """The dead-letter topic holding `job_id`, or None when it is not a dead letter."""
        topic = await self._call(f"read of job {job_id}", "HGET", self.keys.job(job_id), "topic")
        if topic is None:
            return None
        held = await self._call("read of dead letters", "ZSCORE", self.keys.dead_letters(topic), job_id)
        return str(topic) if held is not None else None

    async def delete_dead_letter(self, job_id: str, topic: str, now_ms: int, actor: str) -> int:
        """Remove a dead letter of `topic`; OperationCode.DELETED or ScriptCode.NOT_FOUND."""
        k = self.keys
        return int(await self._run("delete_dead_letter", [k.job(job_id), k.dead_letters(topic), k.outbox, k.counts],
                                   [job_id, now_ms, actor]))

    async def prune_dead_letters(self, topic: str, now_ms: int, age_ms: int, cap: int, limit: int = 500) -> int:
        """Drop a dead-letter topic's dead letters past the age, then the oldest beyond `cap`; how many."""
        k = self.keys
        return int(await self._run("prune_dead_letters", [k.dead_letters(topic), k.counts, k.outbox],
                                   [now_ms, k.job_prefix, age_ms, cap, limit]))


    # ------------------------------------------------------------ worker registry
    async def advertise_worker(self, worker_id: str, entry_json: str, topics: Sequence[str], now_ms: int,
                               ttl_ms: int) -> int:
        """Write a worker's registry entry; it serves `topics` until now + ttl. Returns how
        many dead workers' entries were removed."""
        k = self.keys
        return int(await self._run("advertise_worker", [k.workers, k.served],
                                   [now_ms, ttl_ms, worker_id, entry_json, *topics]))

    async def forget_worker(self, worker_id: str, now_ms: int) -> bool:
        """Remove a stopping worker's entry (its topics stay served only by other live workers)."""
        k = self.keys
        return int(await self._run("forget_worker", [k.workers, k.served], [now_ms, worker_id])) > 0

    async def worker_entries(self) -> dict[str, str]:
        """The raw registry: worker id -> entry JSON (dead ones included until cleaned up)."""
        try:
            return as_map(await self.wire.call("HGETALL", self.keys.workers))
        except RedisError as exc:
            raise StorageError(f"redis read of workers failed: {exc}") from exc

def _flat(fields: dict[str, str]) -> list[str]:
    return [x for pair in fields.items() for x in pair]


def _cron_info(f: dict[str, str]) -> CronInfo:
    paused = f.get("paused") == "1"
    return CronInfo(
        name=f["name"], cron=f["expr"], tz=f["tz"], topic=f["topic"],
        next_run_at=None if paused else ms_to_utc(int(f["next"])),
        paused=paused,
        last_run_at=ms_to_utc(int(f["last_run"])) if f.get("last_run") else None,
        misfire=f["misfire"], payload=json.loads(f["payload"]), metadata=json.loads(f["meta"]),
        max_attempts=int(f["max"]),
    )
