"""Topics' stored configuration, dead letters (listing, replay, delete, prune) and the
worker registry (which live worker serves which topics)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from redis.exceptions import RedisError

from scheduler.core.job import JobInfo, NewJob
from scheduler.store.base import StoreBase
from scheduler.store.scripts import DrainCode
from scheduler.store.wire import as_map


class Advertised(NamedTuple):
    """advertise_worker's reply: dead entries removed, and the ms of this worker's drain request."""

    removed: int
    drain_ms: int | None


class TopicStore(StoreBase):
    """Topic configuration, dead letters and worker entries (scheduler/facade/topics.py,
    advertise.py)."""

    async def put_topic(self, name: str, fields: dict[str, str]) -> tuple[int, str]:
        """Store (replace) a topic's configuration hash (`fields` holds `policy`) and list its name,
        unless the stored policy differs: (TopicCode, the policy stored before or "")."""
        k = self.keys
        rest = [x for pair in fields.items() if pair[0] != "policy" for x in pair]
        code, before = await self._run(
            "put_topic", [k.topic(name), k.topic_names], [name, fields["policy"], *rest]
        )
        return int(code), str(before)

    async def get_topic(self, name: str) -> dict[str, str] | None:
        """A topic's stored configuration fields, or None."""
        return (
            as_map(await self._call(f"read of topic {name}", "HGETALL", self.keys.topic(name)))
            or None
        )

    async def topic_names(self) -> list[str]:
        """Every configured topic name, sorted."""
        return sorted(await self._call("read of topics", "SMEMBERS", self.keys.topic_names))

    async def remove_topic(self, name: str) -> bool:
        """Delete a topic's configuration; False when there was none."""
        k = self.keys
        try:
            deleted, _ = await self.wire.call_many(
                [("DEL", k.topic(name)), ("SREM", k.topic_names, name)]
            )
        except RedisError as exc:
            raise self.storage_error(f"delete of topic {name}", exc) from exc
        return int(deleted) > 0

    async def blocked_keys(self, topic: str) -> list[str]:
        """The blocked keys of a key_strict_fifo topic (the engine's set), sorted."""
        return sorted(
            await self._call(
                f"read of blocked keys of {topic}", "SMEMBERS", self.keys.fifo_blocked(topic)
            )
        )

    async def dead_letter_ids(
        self, topic: str, after: tuple[int, str] | None, limit: int
    ) -> list[tuple[str, int]]:
        """Up to `limit` (id, failed ms) of a dead-letter topic, oldest first, after (ms, id) when
        given."""
        key = self.keys.dead_letters(topic)
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
        return sorted(
            await self._call("read of dead-letter topics", "SMEMBERS", self.keys.dead_letter_topics)
        )

    async def dead_letter_count(self, topic: str) -> int:
        """How many dead letters `topic` holds."""
        return int(await self._call("read of dead letters", "ZCARD", self.keys.dead_letters(topic)))

    async def replay_dead_letter(
        self, dead_letter: JobInfo, job: NewJob, now_ms: int, actor: str
    ) -> int:
        """Schedule a dead letter's payload as `job` (due now) and remove the dead letter;
        OperationCode.REPLAYED or a ScriptCode."""
        k = self.keys
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
                ],
            )
        )

    async def held_dead_letter_topic(self, job_id: str) -> str | None:
        """The dead-letter topic holding `job_id`, or None when it is not a dead letter."""
        topic = await self._call(f"read of job {job_id}", "HGET", self.keys.job(job_id), "topic")
        if topic is None:
            return None
        held = await self._call(
            "read of dead letters", "ZSCORE", self.keys.dead_letters(topic), job_id
        )
        return str(topic) if held is not None else None

    async def delete_dead_letter(self, job_id: str, topic: str, now_ms: int, actor: str) -> int:
        """Remove a dead letter of `topic`; OperationCode.DELETED or ScriptCode.NOT_FOUND."""
        k = self.keys
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
        many (a topic left with none leaves the set of dead-letter topics)."""
        k = self.keys
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
        drain."""
        k = self.keys
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
        removed."""
        k = self.keys
        return (
            int(
                await self._run(
                    "forget_worker", [k.workers, k.served], [now_ms, worker_id, stopping_entry]
                )
            )
            > 0
        )

    async def request_drain(self, worker_id: str, now_ms: int) -> DrainCode:
        """Ask the live worker `worker_id` to drain and exit (lua/request_drain.lua)."""
        return DrainCode(
            int(await self._run("request_drain", [self.keys.workers], [now_ms, worker_id]))
        )

    async def worker_entries(self) -> dict[str, str]:
        """The raw registry: worker id -> entry JSON (dead ones included until cleaned up)."""
        try:
            return as_map(await self.wire.call("HGETALL", self.keys.workers))
        except RedisError as exc:
            raise self.storage_error("read of workers", exc) from exc

    async def forget_topics(self, topics: Sequence[str], now_ms: int, memory_ms: int = -1) -> int:
        """Forget `topics`, and with `memory_ms` >= 0 every topic last served that long ago or
        more (lua/forget_topic.lua); how many were forgotten."""
        return int(
            await self._run("forget_topic", [self.keys.known_topics], [now_ms, memory_ms, *topics])
        )

    async def known_topics(self, now_ms: int, memory_ms: int, scan: int) -> list[list[str]]:
        """The raw rows of lua/known_topics.lua: [topic, "<ms>|<worker>|<app>", served-until or 0,
        due jobs waiting, earliest due or -1] per known topic; at most `scan` due jobs looked at."""
        k = self.keys
        raw = await self._run(
            "known_topics",
            [k.known_topics, k.served, k.due],
            [now_ms, memory_ms, k.job_prefix, scan],
        )
        return [[str(x) for x in raw[i : i + 5]] for i in range(1, len(raw), 5)]
