"""PartitionedStore: a namespace split into partitions (README: Scaling out) behind the one
store interface the facade uses. Each partition is a RedisStore of its own hash tag `{ns|p}`
(every script still touches one partition, so each transition stays atomic); this class
places new jobs and schedules, finds a job's partition for operations by id, writes topic
configuration to every partition and aggregates reads. Workers run one loop per partition
(worker_partitioned.py) on the partition stores themselves."""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from scheduler.core.errors import InvalidFlowOption, StorageError
from scheduler.core.job import CronInfo, JobInfo, NewCron, NewJob
from scheduler.core.keys import Keys
from scheduler.store.bulk import Enqueued
from scheduler.store.listing import Cursor, Walk, partition_token
from scheduler.store.partitions import (
    LEGACY_KEYS,
    MIGRATION_FIELDS,
    job_routing,
    layout_error,
    migration_error,
    partition_of,
    topic_home,
    topic_wide_limit,
)
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import DrainCode, ScriptCode, TopicCode
from scheduler.store.wire import Subscription

T = TypeVar("T")

HOME_HINT_S = 10.0
_SEP = "|"  # a listing cursor's set token is "<partition>|<the partition's token>"


class PartitionedStore:
    """The stores of every partition of one namespace, sharing one wire."""

    def __init__(
        self,
        redis: aioredis.Redis,
        namespace: str,
        partitions: int,
        audit: bool = True,
        replicas: int = 0,
        replica_timeout_ms: int = 1000,
    ) -> None:
        first = RedisStore(
            redis,
            namespace,
            audit=audit,
            replicas=replicas,
            replica_timeout_ms=replica_timeout_ms,
            partition=0,
        )
        self.parts: list[RedisStore] = [first] + [
            RedisStore(redis, namespace, audit=audit, wire=first.wire, partition=p)
            for p in range(1, partitions)
        ]
        self.redis, self.wire, self.count = redis, first.wire, partitions
        self.keys = Keys(namespace)  # the namespace's own tag: meta only (each part has its keys)
        # topic -> (home partition, until monotonic s): where enqueue.lua last sent a pinned topic's
        # job. A hint only (the script enforces the home), so a new limit is found by one refusal.
        self._homes: dict[str, tuple[int, float]] = {}

    # ------------------------------------------------------------------ layout
    async def check_layout(self) -> None:
        """Record the partition count on first use; refuse a count other than the stored one, a
        namespace that already holds data in the unpartitioned layout, and one being migrated."""
        meta = self.keys.meta
        try:
            stored, *migration = await self.wire.call(
                "HMGET", meta, "partitions", *MIGRATION_FIELDS
            )
            if migration[1] is not None:
                raise migration_error(self.keys.namespace, migration)
            if stored is None:
                legacy = await self.wire.call_many(
                    [("EXISTS", f"{self.keys.prefix}{k}") for k in LEGACY_KEYS]
                )
                if any(int(x) for x in legacy):
                    raise layout_error(self.keys.namespace, 1, self.count)
                await self.wire.call("HSETNX", meta, "partitions", self.count)
                stored = await self.wire.call("HGET", meta, "partitions")
        except RedisError as exc:
            raise self.storage_error("read of the namespace layout", exc) from exc
        if int(stored) != self.count:
            raise layout_error(self.keys.namespace, int(stored), self.count)

    def storage_error(self, what: str, exc: RedisError | OSError) -> StorageError:
        return self.parts[0].storage_error(what, exc)

    # ------------------------------------------------------------------ placing
    def partition_for(self, job: NewJob) -> int:
        """The partition a new job goes to: its topic's home when the topic has a topic-wide limit
        (as last learnt), else by its key, else dedupe key, else id."""
        home = self._homes.get(job.topic)
        if home is not None and home[1] > time.monotonic():
            return home[0]
        return partition_of(job_routing(job.id, job.key, job.dedupe_key), self.count)

    def part_of_job(self, job: NewJob) -> RedisStore:
        return self.parts[self.partition_for(job)]

    def learn_home(self, topic: str, home: int) -> None:
        """enqueue.lua refused a job of `topic` elsewhere: its jobs go to `home` for a while."""
        self._homes[topic] = (home, time.monotonic() + HOME_HINT_S)

    def part_of_name(self, name: str) -> RedisStore:
        """The partition of a schedule (by its name)."""
        return self.parts[partition_of(name, self.count)]

    async def locate(self, job_id: str) -> RedisStore | None:
        """The partition holding a job: its id's own first (jobs without key or dedupe key),
        then every other one at once; None when no partition has it."""
        home = partition_of(job_id, self.count)
        order = [home] + [p for p in range(self.count) if p != home]
        try:
            if int(await self.wire.call("EXISTS", self.parts[home].keys.job(job_id))):
                return self.parts[home]
            found = await self.wire.call_many(
                [("EXISTS", self.parts[p].keys.job(job_id)) for p in order[1:]]
            )
        except RedisError as exc:
            raise self.storage_error(f"read of job {job_id}", exc) from exc
        return next((self.parts[p] for p, f in zip(order[1:], found) if int(f)), None)

    async def _on_job(
        self, job_id: str, call: Callable[[RedisStore], Awaitable[T]], missing: T
    ) -> T:
        part = await self.locate(job_id)
        return missing if part is None else await call(part)

    # ------------------------------------------------------------------ jobs
    async def enqueue(self, job: NewJob, now_ms: int) -> Enqueued:
        done = await self.part_of_job(job).enqueue(job, now_ms)
        if done.home is not None and 0 <= done.home < self.count:  # its topic lives elsewhere
            self.learn_home(job.topic, done.home)
            done = await self.parts[done.home].enqueue(job, now_ms)
        return done

    async def enqueue_many(self, jobs: Sequence[NewJob], now_ms: int, **kw: Any) -> list[Enqueued]:
        """Each partition's jobs in its own pipelined batches, all partitions at once; replies in
        order. Jobs refused for their topic's home partition are sent there in a second round."""
        out = await self._enqueue_grouped(jobs, [self.partition_for(j) for j in jobs], now_ms, kw)
        moved = [
            i for i, done in enumerate(out) if done.home is not None and 0 <= done.home < self.count
        ]
        for i in moved:
            self.learn_home(jobs[i].topic, out[i].home)  # type: ignore[arg-type]
        if moved:
            again = await self._enqueue_grouped(
                [jobs[i] for i in moved],
                [out[i].home for i in moved],  # type: ignore[misc]
                now_ms,
                kw,
            )
            for i, done in zip(moved, again):
                out[i] = done
        return out

    async def _enqueue_grouped(
        self, jobs: Sequence[NewJob], where: Sequence[int], now_ms: int, kw: dict[str, Any]
    ) -> list[Enqueued]:
        groups: dict[int, list[int]] = {}
        for i, p in enumerate(where):
            groups.setdefault(p, []).append(i)
        done = await asyncio.gather(
            *(
                self.parts[p].enqueue_many([jobs[i] for i in idx], now_ms, **kw)
                for p, idx in groups.items()
            )
        )
        out: list[Enqueued | None] = [None] * len(jobs)
        for idx, replies in zip(groups.values(), done):
            for i, reply in zip(idx, replies):
                out[i] = reply
        return out  # type: ignore[return-value]

    async def get_job(self, job_id: str) -> JobInfo | None:
        return await self._on_job(job_id, lambda s: s.get_job(job_id), None)

    async def get_jobs(self, job_ids: Sequence[str]) -> list[JobInfo | None]:
        return list(await asyncio.gather(*(self.get_job(j) for j in job_ids)))

    async def cancel(self, job_id: str, now_ms: int, actor: str = "") -> int:
        return await self._on_job(
            job_id,
            lambda s: s.cancel(job_id, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def retry_job(self, job_id: str, now_ms: int, actor: str) -> int:
        return await self._on_job(
            job_id,
            lambda s: s.retry_job(job_id, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def delete_job(self, job_id: str, now_ms: int, actor: str) -> int:
        return await self._on_job(
            job_id,
            lambda s: s.delete_job(job_id, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def reschedule_job(
        self, job_id: str, run_at_ms: int, tz: str, now_ms: int, actor: str
    ) -> int:
        return await self._on_job(
            job_id,
            lambda s: s.reschedule_job(job_id, run_at_ms, tz, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def watch_job(self, job_id: str) -> str | None:
        return await self._on_job(job_id, lambda s: s.watch_job(job_id), None)

    async def subscribe_done(
        self, on_message: Callable[[bytes | None, bytes | None], None]
    ) -> Subscription:
        """One subscription to every partition's done channel."""
        channels = [p.keys.done for p in self.parts]
        sub = Subscription(self.wire.pubsub_endpoint, channels, on_message)
        try:
            await sub.start()
        except (RedisError, OSError) as exc:
            raise self.storage_error("subscription to the done channels", exc) from exc
        return sub

    async def stats(self, topic: str | None = None) -> dict[str, int]:
        """Counts per state, summed over the partitions."""
        totals: dict[str, int] = {}
        for counts in await asyncio.gather(*(p.stats(topic) for p in self.parts)):
            for state, n in counts.items():
                totals[state] = totals.get(state, 0) + n
        return totals

    async def stats_by_topic(self) -> dict[str, dict[str, int]]:
        """Counts per topic and state, summed over the partitions."""
        merged: dict[str, dict[str, int]] = {}
        for per_topic in await asyncio.gather(*(p.stats_by_topic() for p in self.parts)):
            for topic, counts in per_topic.items():
                row = merged.setdefault(topic, dict.fromkeys(counts, 0))
                for state, n in counts.items():
                    row[state] = row.get(state, 0) + n
        return dict(sorted(merged.items()))

    async def list_job_ids(
        self, walk: Walk, after: Cursor | None, limit: int, budget: int
    ) -> tuple[list[str], Cursor | None]:
        """One page of a listing: partition after partition (each in its own order)."""
        part, inner = 0, None
        if after is not None:
            at, token = partition_token(after.set)
            part = at if at is not None and at < self.count else 0
            inner = Cursor(token, after.score, after.id) if at is not None and token else None
        ids: list[str] = []
        while part < self.count and len(ids) < limit:
            got, following = await self.parts[part].list_job_ids(
                walk, inner, limit - len(ids), budget
            )
            ids += got
            if following is not None:
                return ids, Cursor(f"{part}{_SEP}{following.set}", following.score, following.id)
            part, inner = part + 1, None
        return ids, (Cursor(f"{part}{_SEP}", "", "") if part < self.count else None)

    # ------------------------------------------------------------------ schedules
    async def _cron_part(self, name: str) -> RedisStore:
        """The partition holding a schedule: its name's, else (a schedule of a pinned topic,
        see upsert_cron) the one that has it."""
        own = self.part_of_name(name)
        try:
            if int(await self.wire.call("EXISTS", own.keys.cron(name))):
                return own
            found = await self.wire.call_many([("EXISTS", p.keys.cron(name)) for p in self.parts])
        except RedisError as exc:
            raise self.storage_error(f"read of schedule {name}", exc) from exc
        return next((p for p, f in zip(self.parts, found) if int(f)), own)

    async def upsert_cron(self, cron: NewCron, now_ms: int) -> int:
        """A schedule lives on its name's partition, or on its topic's home when the topic is pinned
        (a topic-wide limit), so its ticks are counted there; an existing one stays where it is."""
        part = await self._cron_part(cron.name)
        if not int(await self.wire.call("EXISTS", part.keys.cron(cron.name))):
            stored = await self.get_topic(cron.job.topic)
            home = (stored or {}).get("home", "")
            if home.isdigit() and int(home) < self.count:
                part = self.parts[int(home)]
        return await part.upsert_cron(cron, now_ms)

    async def set_cron_paused(self, name: str, paused: bool, next_ms: int, now_ms: int) -> int:
        return await (await self._cron_part(name)).set_cron_paused(name, paused, next_ms, now_ms)

    async def remove_cron(self, name: str, declared_topic: str = "") -> bool:
        return await (await self._cron_part(name)).remove_cron(name, declared_topic)

    async def get_cron(self, name: str) -> CronInfo | None:
        return await (await self._cron_part(name)).get_cron(name)

    async def declared_crons(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for names in await asyncio.gather(*(p.declared_crons() for p in self.parts)):
            merged.update(names)
        return merged

    async def existing_crons(self, names: Sequence[str]) -> set[str]:
        found = await asyncio.gather(*(p.existing_crons(names) for p in self.parts))
        return set().union(*found) if found else set()

    async def list_crons(self) -> list[CronInfo]:
        rows = await asyncio.gather(*(p.list_crons() for p in self.parts))
        return sorted((c for part in rows for c in part), key=lambda c: c.name)

    # ------------------------------------------------------------------ topics
    async def put_topic(self, name: str, fields: dict[str, str]) -> tuple[int, str]:
        """Every partition holds the topic's configuration (its scripts read it there); partition 0
        decides (a locked policy is refused there before any other is written). A topic-wide
        limit (concurrency, a rate limit not per key) pins the topic to its home partition
        (`home`, enforced by enqueue.lua), so one partition counts every running job of it.

        Raises:
            InvalidFlowOption: such a limit while jobs of the topic wait or run on other partitions.
        """
        if topic_wide_limit(fields):
            home = topic_home(name, self.count)
            stored = await self.get_topic(name)
            if stored is None or stored.get("home") != str(home):
                await self._refuse_if_spread(name, home)
            fields = {**fields, "home": str(home)}
            self.learn_home(name, home)
        else:
            self._homes.pop(name, None)
        code, before = await self.parts[0].put_topic(name, fields)
        if code != TopicCode.POLICY_LOCKED:
            await asyncio.gather(*(p.put_topic(name, fields) for p in self.parts[1:]))
        return code, before

    async def _refuse_if_spread(self, name: str, home: int) -> None:
        counts = await asyncio.gather(*(p.stats(name) for p in self.parts))
        elsewhere = sum(
            c.get(s, 0)
            for i, c in enumerate(counts)
            if i != home
            for s in ("scheduled", "running", "retrying")
        )
        if elsewhere:
            raise InvalidFlowOption(
                f"topic {name!r}: a topic-wide limit (concurrency, or a rate limit "
                f"not per key) makes the topic live on one partition ({home} of "
                f"{self.count}), but {elsewhere} of its jobs wait or run on "
                "others; set the limit before scheduling, or "
                "let them finish first (README: Scaling out)",
                field="concurrency",
            )

    async def get_topic(self, name: str) -> dict[str, str] | None:
        return await self.parts[0].get_topic(name)

    async def topic_names(self) -> list[str]:
        return await self.parts[0].topic_names()

    async def remove_topic(self, name: str) -> bool:
        removed = await asyncio.gather(*(p.remove_topic(name) for p in self.parts))
        return removed[0]

    async def blocked_keys(self, topic: str) -> list[str]:
        rows = await asyncio.gather(*(p.blocked_keys(topic) for p in self.parts))
        return sorted({k for part in rows for k in part})

    async def dead_letter_ids(
        self, topic: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        """The oldest `limit` dead letters after (ms, id) over every partition, merged by (ms,
        id)."""
        rows = await asyncio.gather(*(p.dead_letter_ids(topic, after, limit) for p in self.parts))
        merged = heapq.merge(*([(ms, i) for i, ms in part] for part in rows))
        return [(i, ms) for ms, i in list(merged)[:limit]]

    async def dead_letter_topics(self) -> list[str]:
        rows = await asyncio.gather(*(p.dead_letter_topics() for p in self.parts))
        return sorted({t for part in rows for t in part})

    async def dead_letter_count(self, topic: str) -> int:
        return sum(await asyncio.gather(*(p.dead_letter_count(topic) for p in self.parts)))

    async def replay_dead_letter(
        self, dead_letter: JobInfo, job: NewJob, now_ms: int, actor: str
    ) -> int:
        return await self._on_job(
            dead_letter.id,
            lambda s: s.replay_dead_letter(dead_letter, job, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def held_dead_letter_topic(self, job_id: str) -> str | None:
        return await self._on_job(job_id, lambda s: s.held_dead_letter_topic(job_id), None)

    async def delete_dead_letter(self, job_id: str, topic: str, now_ms: int, actor: str) -> int:
        return await self._on_job(
            job_id,
            lambda s: s.delete_dead_letter(job_id, topic, now_ms, actor),
            int(ScriptCode.NOT_FOUND),
        )

    async def worker_entries(self) -> dict[str, str]:
        """Every partition's registry (a worker advertises on each partition it serves)."""
        merged: dict[str, str] = {}
        for entries in await asyncio.gather(*(p.worker_entries() for p in self.parts)):
            merged.update(entries)
        return merged

    async def request_drain(self, worker_id: str, now_ms: int) -> DrainCode:
        """On every partition its entry lives on (each partition's loop sees it;
        worker_partitioned.py stops them all): REQUESTED when any took it, else ALREADY when any had
        it, else NO_WORKER."""
        codes = set(await asyncio.gather(*(p.request_drain(worker_id, now_ms) for p in self.parts)))
        return max(codes, key=[DrainCode.NO_WORKER, DrainCode.ALREADY, DrainCode.REQUESTED].index)

    async def forget_topics(self, topics: Sequence[str], now_ms: int, memory_ms: int = -1) -> int:
        """On every partition (each keeps the topics its workers served); the most any one
        forgot."""
        return max(
            await asyncio.gather(*(p.forget_topics(topics, now_ms, memory_ms) for p in self.parts))
        )

    async def known_topics(self, now_ms: int, memory_ms: int, scan: int) -> list[list[str]]:
        """Every partition's rows (topic_memory.merge_rows merges a topic's)."""
        rows = await asyncio.gather(*(p.known_topics(now_ms, memory_ms, scan) for p in self.parts))
        return [row for part in rows for row in part]

    async def aclose(self) -> None:
        await self.wire.aclose()
