"""Reading jobs: one job's snapshot (payload chunks joined), many at once, a page of
ids of a state walk (lua/list_jobs.lua; partition after partition), and the per-state counts
(summed over the partitions)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from redis.exceptions import RedisError

from scheduler.core.job import JobInfo, JobState
from scheduler.core.keys import JOB_DEFAULTS, Keys
from scheduler.core.progress import parse_log, parse_progress
from scheduler.core.timeutil import ms_to_utc
from scheduler.store.base import StoreBase
from scheduler.store.listing import Cursor, Walk, partition_token, set_order
from scheduler.store.pipe import as_map
from scheduler.store.scripts import PAYLOAD_CHUNK_FIELDS


def _payload(
    fields: dict[str, str], chunks: list[bytes | None], separate: str | None
) -> str | None:
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


_STATES = tuple(s.value for s in JobState)
# Dead letters wait in their queue as "scheduled" jobs; every count shows them apart under this key.
DEAD_LETTER = "dead_letter"
COUNT_KEYS = (*_STATES, DEAD_LETTER)
_SEP = "|"  # a partitioned listing cursor's set token is "<partition>|<the partition's token>"


class ReadStore(StoreBase):
    """Job snapshots, listing pages and counts."""

    async def get_job(self, job_id: str) -> JobInfo | None:
        """A snapshot of the job, or None when unknown (or pruned)."""
        k = await self._job_keys(job_id)
        if k is None:
            return None
        key = k.job(job_id)
        try:
            flat, chunks, separate, logs = await self.wire.call_many(
                [
                    ("HGETALL", key),
                    ("HMGET", key, *PAYLOAD_CHUNK_FIELDS),
                    ("GET", k.payload(job_id)),
                    ("LRANGE", k.logs(job_id), 0, -1),
                ],
                raw=(False, True, False, False),
            )
        except RedisError as exc:
            raise self.storage_error(f"read of job {job_id}", exc) from exc
        if not flat:
            return None
        stored = as_map(flat)
        payload = _payload(stored, chunks, separate)
        f = {**JOB_DEFAULTS, **stored}  # fields left out hold their default
        state = JobState(f["state"])
        waiting = state in (JobState.SCHEDULED, JobState.RETRYING)
        attempts = int(f.get("attempts", 0))
        return JobInfo(
            id=job_id,
            topic=f["topic"],
            state=state,
            attempts=attempts,
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
            key=f.get("key"),
            priority=int(f.get("prio", 0)),
            deduplicated=int(f.get("dups", 0)),
            progress=parse_progress(f.get("pg"), attempts),
            logs=[parse_log(entry) for entry in logs],
            result=json.loads(f["result"]) if f.get("result") else None,
            parents=tuple(json.loads(f["parents"])) if f.get("parents") else (),
            waiting_for=int(f.get("wp", 0)) if state is JobState.WAITING_FOR_PARENTS else 0,
            flow=f.get("froot") or None,
        )

    async def stats(self, topic: str | None = None) -> dict[str, int]:
        """Jobs per state currently held in Redis (all topics, or one), summed over the
        partitions."""
        totals: dict[str, int] = {}
        for counts in await self._each(lambda k: self._stats_in(k, topic)):
            for state, n in counts.items():
                totals[state] = totals.get(state, 0) + n
        return totals

    async def _stats_in(self, k: Keys, topic: str | None) -> dict[str, int]:
        """stats() of one partition. The counts hash keeps <topic>|<state> fields only; the
        totals are their sums."""
        try:
            if topic is not None:
                values = await self.wire.call(
                    "HMGET", k.counts, *(f"{topic}|{s.value}" for s in JobState)
                )
                one = {s.value: int(v or 0) for s, v in zip(JobState, values)}
                return self._apart(one, (await self._held_dead_letters(k, [topic])).get(topic, 0))
            counts = as_map(await self.wire.call("HGETALL", k.counts))
        except RedisError as exc:
            raise self.storage_error("read of counts", exc) from exc
        totals = {s.value: 0 for s in JobState}
        for name, value in counts.items():
            _, sep, state = name.rpartition("|")
            if sep and state in totals:  # (a bare <state> field: an older layout's total)
                totals[state] += int(value)
        held = await self._held_dead_letters(k, None)
        return self._apart(totals, sum(held.values()))

    async def _held_dead_letters(self, k: Keys, topics: list[str] | None) -> dict[str, int]:
        """How many dead letters wait in the queue of each of `topics` (its {ns}:dlq:<topic> set;
        None: every dead-letter topic) on the partition of `k`."""
        try:
            if topics is None:
                topics = sorted(
                    str(t) for t in await self.wire.call("SMEMBERS", k.dead_letter_topics)
                )
            if not topics:
                return {}
            sizes = await self.wire.call_many([("ZCARD", k.dead_letters(t)) for t in topics])
        except RedisError as exc:
            raise self.storage_error("read of dead-letter counts", exc) from exc
        return {t: int(n) for t, n in zip(topics, sizes)}

    @staticmethod
    def _apart(counts: dict[str, int], held: int) -> dict[str, int]:
        """`counts` with the waiting dead letters moved from "scheduled" (where the counts hash
        keeps them) to their own "dead_letter" key."""
        held = min(held, counts.get("scheduled", 0))
        return {**counts, "scheduled": counts.get("scheduled", 0) - held, DEAD_LETTER: held}

    async def stats_by_topic(self) -> dict[str, dict[str, int]]:
        """stats() per topic: every topic with a <topic>|<state> field, sorted; summed over the
        partitions."""
        merged: dict[str, dict[str, int]] = {}
        for per_topic in await self._each(self._stats_by_topic_in):
            for topic, counts in per_topic.items():
                row = merged.setdefault(topic, dict.fromkeys(counts, 0))
                for state, n in counts.items():
                    row[state] = row.get(state, 0) + n
        return dict(sorted(merged.items()))

    async def _stats_by_topic_in(self, k: Keys) -> dict[str, dict[str, int]]:
        try:
            counts = as_map(await self.wire.call("HGETALL", k.counts))
        except RedisError as exc:
            raise self.storage_error("read of counts", exc) from exc
        out: dict[str, dict[str, int]] = {}
        for name, value in counts.items():
            topic, sep, state = name.rpartition("|")
            if sep and state in _STATES:
                out.setdefault(topic, {s: 0 for s in _STATES})[state] += int(value)
        held = await self._held_dead_letters(k, None)
        return {t: self._apart(c, held.get(t, 0)) for t, c in sorted(out.items())}

    async def list_job_ids(
        self, walk: Walk, after: Cursor | None, limit: int, budget: int
    ) -> tuple[list[str], Cursor | None]:
        """One page of job ids of `walk` after `after` (lua/list_jobs.lua: at most `budget`
        members examined per partition), and the next page's cursor (None: the walk is over).
        Partition after partition, each in its own order: a cursor's set token is then
        "<partition>|<the partition's token>"."""
        if self.count == 1:
            return await self._list_ids_in(self.keys, walk, after, limit, budget)
        part, inner = 0, None
        if after is not None:
            at, token = partition_token(after.set)
            part = at if at is not None and at < self.count else 0
            inner = Cursor(token, after.score, after.id) if at is not None and token else None
        ids: list[str] = []
        while part < self.count and len(ids) < limit:
            got, following = await self._list_ids_in(
                self.parts[part], walk, inner, limit - len(ids), budget
            )
            ids += got
            if following is not None:
                return ids, Cursor(f"{part}{_SEP}{following.set}", following.score, following.id)
            part, inner = part + 1, None
        return ids, (Cursor(f"{part}{_SEP}", "", "") if part < self.count else None)

    async def _list_ids_in(
        self, k: Keys, walk: Walk, after: Cursor | None, limit: int, budget: int
    ) -> tuple[list[str], Cursor | None]:
        """list_job_ids on the partition of `k`."""
        levels, parked = [], []
        if "waiting" in walk.groups:
            try:
                levels, parked = await self.wire.call_many(
                    [("ZRANGE", k.due_levels, 0, -1), ("ZRANGE", k.unpark, 0, -1)]
                )
            except RedisError as exc:
                raise self.storage_error("read of the listing's sets", exc) from exc
        tokens = walk.sets([str(p) for p in levels], [str(t) for t in parked])
        start, exact = 0, False
        if after is not None:
            order = set_order(after.set)
            start = next((i for i, t in enumerate(tokens) if set_order(t) >= order), len(tokens))
            exact = start < len(tokens) and tokens[start] == after.set
        tokens = tokens[start:]
        if not tokens:
            return [], None
        res = await self._run(
            "list_jobs",
            [_set_key(k, t) for t in tokens],
            [
                k.job_prefix,
                "1" if exact else "0",
                after.score if exact and after else "",
                after.id if exact and after else "",
                limit,
                budget,
                walk.state,
                walk.topic,
                walk.key,
                walk.lowest,
                walk.highest,
            ],
        )
        following = (
            Cursor(tokens[int(res[0]) - 1], str(res[1]), res[2]) if int(res[0]) > 0 else None
        )
        return list(res[3:]), following

    async def get_jobs(self, job_ids: Sequence[str]) -> list[JobInfo | None]:
        """get_job of each id, all pipelined on the connection at once; in order."""
        return list(await asyncio.gather(*(self.get_job(job_id) for job_id in job_ids)))


def _set_key(k: Keys, token: str) -> str:
    """The Redis key of a listing's set token (scheduler/store/listing.py)."""
    if token == "due" or token.startswith("p:"):
        return k.due if token == "due" else k.due_priority(token[2:])
    if token.startswith("pk:"):
        return k.parked(token[3:])
    return {
        "waiting_for_parents": k.waiting_parents,
        "active": k.active,
        "completed": k.completed,
        "failed": k.failed,
        "cancelled": k.cancelled,
    }[token]
