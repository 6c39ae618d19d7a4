"""Topics' stored configuration (on every partition: its scripts read it there), dead letters
(listing, replay, delete, prune) and the worker registry (which live worker serves which topics;
a worker advertises on each partition it serves)."""

from __future__ import annotations

import asyncio
import heapq
from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from redis.exceptions import RedisError

from scheduler.core.errors import InvalidFlowOption
from scheduler.core.job import JobInfo, NewJob
from scheduler.core.keys import Keys
from scheduler.store.partitions import topic_home, topic_wide_limit
from scheduler.store.pipe import as_map
from scheduler.store.reads import ReadStore
from scheduler.store.scripts import DrainCode, ScriptCode, TopicCode


class Advertised(NamedTuple):
    """advertise_worker's reply: dead entries removed, and the ms of this worker's drain request."""

    removed: int
    drain_ms: int | None


class TopicStore(ReadStore):
    """Topic configuration, dead letters and worker entries (scheduler/facade/topics.py,
    advertise.py)."""

    async def put_topic(self, name: str, fields: dict[str, str]) -> tuple[int, str]:
        """Store (replace) a topic's configuration hash (`fields` holds `policy`) and list its
        name, unless the stored policy differs: (TopicCode, the policy stored before or "").
        Every partition holds it; partition 0 decides (a locked policy is refused there before
        any other is written). A topic-wide limit (concurrency, a rate limit not per key) pins
        the topic to its home partition (`home`, enforced by enqueue.lua), so one partition
        counts every running job of it.

        Raises:
            InvalidFlowOption: such a limit while jobs of the topic wait or run on other
                partitions.
        """
        if self.count > 1 and topic_wide_limit(fields):
            home = topic_home(name, self.count)
            stored = await self.get_topic(name)
            if stored is None or stored.get("home") != str(home):
                await self._refuse_if_spread(name, home)
            fields = {**fields, "home": str(home)}
            self.learn_home(name, home)
        else:
            self._homes.pop(name, None)
        code, before = await self._put_topic_in(self.parts[0], name, fields)
        if code != TopicCode.POLICY_LOCKED and self.count > 1:
            await asyncio.gather(*(self._put_topic_in(k, name, fields) for k in self.parts[1:]))
        return code, before

    async def _put_topic_in(self, k: Keys, name: str, fields: dict[str, str]) -> tuple[int, str]:
        rest = [x for pair in fields.items() if pair[0] != "policy" for x in pair]
        code, before = await self._run(
            "put_topic", [k.topic(name), k.topic_names], [name, fields["policy"], *rest]
        )
        return int(code), str(before)

    async def _refuse_if_spread(self, name: str, home: int) -> None:
        counts = await self._each(lambda k: self._stats_in(k, name))
        elsewhere = sum(
            c.get(s, 0)
            for i, c in enumerate(counts)
            if i != home
            for s in ("scheduled", "running", "retrying")
        )
        if elsewhere:
            raise InvalidFlowOption(
                f"topic {name!r}: a topic-wide limit (concurrency, or a rate limit not per key) "
                f"makes the topic live on one partition ({home} of {self.count}), but {elsewhere} "
                "of its jobs wait or run on others; set the limit before scheduling, or let them "
                "finish first (docs/how-to/scaling-out.md)",
                field="concurrency",
            )

    async def get_topic(self, name: str) -> dict[str, str] | None:
        """A topic's stored configuration fields, or None (partition 0's: every one holds it)."""
        topic = self.parts[0].topic(name)
        return as_map(await self._call(f"read of topic {name}", "HGETALL", topic)) or None

    async def topic_names(self) -> list[str]:
        """Every configured topic name, sorted."""
        names = self.parts[0].topic_names
        return sorted(await self._call("read of topics", "SMEMBERS", names))

    async def remove_topic(self, name: str) -> bool:
        """Delete a topic's configuration (on every partition); False when there was none."""
        return (await self._each(lambda k: self._remove_topic_in(k, name)))[0]

    async def _remove_topic_in(self, k: Keys, name: str) -> bool:
        try:
            deleted, _ = await self.wire.call_many(
                [("DEL", k.topic(name)), ("SREM", k.topic_names, name)]
            )
        except RedisError as exc:
            raise self.storage_error(f"delete of topic {name}", exc) from exc
        return int(deleted) > 0

    async def blocked_keys(self, topic: str) -> list[str]:
        """The blocked keys of a key_strict_fifo topic (the engine's sets), sorted."""
        what = f"read of blocked keys of {topic}"
        rows = await self._each(lambda k: self._call(what, "SMEMBERS", k.fifo_blocked(topic)))
        return sorted({key for part in rows for key in part})

    async def parked(self, topic: str) -> tuple[int, int | None]:
        """How many of `topic`'s due jobs claim parked (a limit or the key policy held them:
        lua/claim.lua), and the earliest ms claim looks at them again (None: none planned),
        over the partitions: two O(1) reads each."""
        what = f"read of parked jobs of {topic}"

        async def one(k: Keys) -> tuple[int, int | None]:
            try:
                n, at = await self.wire.call_many(
                    [("ZCARD", k.parked(topic)), ("ZSCORE", k.unpark, topic)]
                )
            except RedisError as exc:
                raise self.storage_error(what, exc) from exc
            return int(n), None if at is None else int(float(at))

        rows = await self._each(one)
        looks = [at for n, at in rows if n and at is not None]
        return sum(n for n, _ in rows), min(looks) if looks else None

    async def dead_letter_ids(
        self, topic: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        """Up to `limit` (id, failed ms) of a dead-letter topic, oldest first, after (ms, id)
        when given; merged by (ms, id) over the partitions."""
        rows = await self._each(lambda k: self._dead_letter_ids_in(k, topic, after, limit))
        if len(rows) == 1:
            return rows[0]
        merged = heapq.merge(*([(ms, i) for i, ms in part] for part in rows))
        return [(i, ms) for ms, i in list(merged)[:limit]]

    async def _dead_letter_ids_in(
        self, k: Keys, topic: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        key = k.dead_letters(topic)
        offset = 0
        if after is not None:
            ms, last = after
            lower = await self._call("read of dead letters", "ZCOUNT", key, "-inf", f"({ms}")
            same = await self._call("read of dead letters", "ZRANGEBYSCORE", key, ms, ms)
            offset = int(lower) + bisect_right(
                sorted(same), last
            )  # a zset orders equal scores by member
        flat = await self._call(
            "read of dead letters", "ZRANGE", key, offset, offset + limit - 1, "WITHSCORES"
        )
        return [(str(flat[i]), int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]

    async def dead_letter_topics(self) -> list[str]:
        """The dead-letter topics that hold or held dead letters."""
        what = "read of dead-letter topics"
        rows = await self._each(lambda k: self._call(what, "SMEMBERS", k.dead_letter_topics))
        return sorted({t for part in rows for t in part})

    async def dead_letter_count(self, topic: str) -> int:
        """How many dead letters `topic` holds."""
        what = "read of dead letters"
        return sum(
            int(n)
            for n in await self._each(lambda k: self._call(what, "ZCARD", k.dead_letters(topic)))
        )

    async def replay_dead_letter(
        self, dead_letter: JobInfo, job: NewJob, now_ms: int, actor: str, source_id: str = ""
    ) -> int:
        """Schedule a dead letter's payload as `job` (due now, on the dead letter's partition)
        and remove the dead letter; OperationCode.REPLAYED, or RETRIED when the source job
        `source_id` ran again instead (children wait for it: replay_dead_letter.lua), or a
        ScriptCode."""
        k = await self._job_keys(dead_letter.id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "replay_dead_letter",
                [
                    k.job(dead_letter.id),
                    k.dead_letters(dead_letter.topic),
                    k.job(job.id),
                    k.due,
                    k.outbox,
                    k.counts,
                    k.wake,
                    k.done,
                ],
                [
                    dead_letter.id,
                    now_ms,
                    actor,
                    job.id,
                    job.topic,
                    job.metadata_json,
                    job.max_attempts,
                    job.backoff_type,
                    job.backoff_delay_ms,
                    job.timeout_ms,
                    job.backoff_max_delay_ms,
                    job.backoff_jitter,
                    source_id,
                    k.dead_letter_prefix,
                ],
            )
        )

    async def held_dead_letter_topic(self, job_id: str) -> str | None:
        """The dead-letter topic holding `job_id`, or None when it is not a dead letter."""
        k = await self._job_keys(job_id)
        if k is None:
            return None
        topic = await self._call(f"read of job {job_id}", "HGET", k.job(job_id), "topic")
        if topic is None:
            return None
        held = await self._call("read of dead letters", "ZSCORE", k.dead_letters(topic), job_id)
        return str(topic) if held is not None else None

    async def delete_dead_letter(self, job_id: str, topic: str, now_ms: int, actor: str) -> int:
        """Remove a dead letter of `topic`; OperationCode.DELETED or ScriptCode.NOT_FOUND."""
        k = await self._job_keys(job_id)
        if k is None:
            return int(ScriptCode.NOT_FOUND)
        return int(
            await self._run(
                "delete_dead_letter",
                [k.job(job_id), k.dead_letters(topic), k.outbox, k.counts, k.done],
                [job_id, now_ms, actor],
            )
        )

    async def prune_dead_letters(
        self, topic: str, now_ms: int, age_ms: int, cap: int, limit: int = 500
    ) -> int:
        """Drop a dead-letter topic's dead letters past the age, then the oldest beyond `cap`; how
        many (a topic left with none leaves the set of dead-letter topics). Of one partition (a
        worker's loop)."""
        k = self.single
        return int(
            await self._run(
                "prune_dead_letters",
                [k.dead_letters(topic), k.counts, k.outbox, k.done, k.dead_letter_topics],
                [now_ms, k.job_prefix, age_ms, cap, limit, topic],
            )
        )

    # ------------------------------------------------------------ worker registry
    async def advertise_worker(
        self,
        worker_id: str,
        entry_json: str,
        topics: Sequence[str],
        now_ms: int,
        ttl_ms: int,
        known: Sequence[tuple[str, str]] = (),
    ) -> Advertised:
        """Write a worker's registry entry; it serves `topics` until now + ttl, and the topics of
        `known` ((topic, app) pairs: those it has listeners for) are known as served now by it.
        Returns how many dead workers' entries were removed and whether an operator asked it to
        drain. On one partition (each loop of a worker advertises on its own)."""
        k = self.single
        pairs = [x for pair in known for x in pair]
        removed, drain = await self._run(
            "advertise_worker",
            [k.workers, k.served, k.known_topics],
            [now_ms, ttl_ms, worker_id, entry_json, len(known), *pairs, *topics],
        )
        return Advertised(int(removed), int(drain) or None)

    async def forget_worker(self, worker_id: str, now_ms: int, stopping_entry: str = "") -> bool:
        """Remove a stopping worker's entry (its topics stay served only by other live workers);
        with `stopping_entry` it stays listed as that entry (draining, serving nothing) until
        removed. On one partition (each loop of a worker leaves its own)."""
        k = self.single
        return (
            int(
                await self._run(
                    "forget_worker", [k.workers, k.served], [now_ms, worker_id, stopping_entry]
                )
            )
            > 0
        )

    async def request_drain(self, worker_id: str, now_ms: int) -> DrainCode:
        """Ask the live worker `worker_id` to drain and exit (lua/request_drain.lua), on every
        partition its entry lives on (each loop of it sees it; worker/partitioned.py stops them
        all): REQUESTED when any took it, else ALREADY when any had it, else NO_WORKER."""
        codes = await self._each(
            lambda k: self._run("request_drain", [k.workers], [now_ms, worker_id])
        )
        order = [DrainCode.NO_WORKER, DrainCode.ALREADY, DrainCode.REQUESTED]
        return max((DrainCode(int(c)) for c in codes), key=order.index)

    async def worker_entries(self) -> dict[str, str]:
        """The raw registry: worker id -> entry JSON (dead ones included until cleaned up);
        every partition's (a worker advertises on each partition it serves)."""
        merged: dict[str, str] = {}
        for entries in await self._each(self._worker_entries_in):
            merged.update(entries)
        return merged

    async def _worker_entries_in(self, k: Keys) -> dict[str, str]:
        try:
            return as_map(await self.wire.call("HGETALL", k.workers))
        except RedisError as exc:
            raise self.storage_error("read of workers", exc) from exc

    async def forget_topics(self, topics: Sequence[str], now_ms: int, memory_ms: int = -1) -> int:
        """Forget `topics`, and with `memory_ms` >= 0 every topic last served that long ago or
        more (lua/forget_topic.lua), on every partition (each keeps the topics its workers
        served); how many were forgotten (the most any one partition forgot)."""
        forgot = await self._each(
            lambda k: self._run("forget_topic", [k.known_topics], [now_ms, memory_ms, *topics])
        )
        return max(int(n) for n in forgot)

    async def known_topics(self, now_ms: int, memory_ms: int, scan: int) -> list[list[str]]:
        """The raw rows of lua/known_topics.lua: [topic, "<ms>|<worker>|<app>", served-until or
        0, due jobs waiting, earliest due or -1] per known topic; at most `scan` due jobs looked
        at. Every partition's rows (topic_memory.merge_rows merges a topic's)."""
        rows = await self._each(lambda k: self._known_topics_in(k, now_ms, memory_ms, scan))
        return [row for part in rows for row in part]

    async def _known_topics_in(
        self, k: Keys, now_ms: int, memory_ms: int, scan: int
    ) -> list[list[str]]:
        raw = await self._run(
            "known_topics",
            [k.known_topics, k.served, k.due],
            [now_ms, memory_ms, k.job_prefix, scan],
        )
        return [[str(x) for x in raw[i : i + 5]] for i in range(1, len(raw), 5)]
