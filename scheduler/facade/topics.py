"""Topic configuration (TopicOptions, checked and encoded by topic_options.py, stored
per topic in Redis) and the dead letters a topic's failed jobs leave on its dead-letter
topic: listing, replay, delete, purge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from scheduler.core.clock import Clock
from scheduler.core.errors import (
    DeadLetterNotFound,
    ScheduleError,
    TopicInUse,
    TopicPolicyLocked,
    shown,
)
from scheduler.core.job import JobInfo, JobPage, NewJob
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.topic_options import (
    TopicOptions,
    check_topic_options,
    topic_fields,
    topic_options,
)
from scheduler.core.validation import check_job_ref, check_topic
from scheduler.store.redis import RedisStore
from scheduler.store.scripts import OperationCode, ScriptCode, TopicCode

__all__ = ["TopicOptions", "Topics"]

MAX_PAGE = 1_000


def _encode_cursor(ms: int, job_id: str) -> str:
    return f"{ms}.{job_id}"


def _decode_cursor(cursor: str) -> tuple[int, str]:
    ms, sep, job_id = cursor.partition(".")
    if not sep or not ms.isdigit() or not job_id:
        raise ScheduleError(f"not a dead-letter cursor: {cursor!r}", field="cursor")
    return int(ms), job_id


class Host(Protocol):
    """What the topic operations use of their Scheduler."""

    @property
    def store(self) -> RedisStore: ...

    @property
    def clock(self) -> Clock: ...

    default_retry: RetryPolicy  # what a retry mapping's omitted keys mean


class BuildReplay(Protocol):
    """A replay's request -> its checked job, due at `now_ms` (Scheduling.build_job)."""

    def __call__(self, request: JobRequest, *, now_ms: int) -> NewJob: ...


class Topics:
    """Topic configuration and dead-letter operations of one Scheduler."""

    def __init__(self, host: Host, actor: Callable[[str | None], str]) -> None:
        self._host = host
        self._actor = actor

    async def configure(self, name: str, options: TopicOptions) -> None:
        """Create or replace a topic's configuration (see TopicOptions); its policy never changes.

        Raises:
            ScheduleError: a subclass naming the invalid field; TopicPolicyLocked when the stored
                policy differs. Nothing is stored.
        """
        checked = check_topic_options(check_topic(name, "name"), options, self._host.default_retry)
        code, before = await self._host.store.put_topic(name, topic_fields(checked))
        if code == TopicCode.POLICY_LOCKED:
            raise TopicPolicyLocked(
                f"topic {name!r} has policy {before!r}; a topic's policy cannot "
                f"change (got {checked.policy!r}): delete the topic to choose another",
                old=before,
                new=checked.policy,
            )

    async def get(self, name: str) -> TopicOptions | None:
        """The stored options of a topic, or None."""
        stored = await self._host.store.get_topic(check_topic(name, "name"))
        return topic_options(stored) if stored is not None else None

    async def names(self) -> list[str]:
        """Every configured topic's name, sorted."""
        return await self._host.store.topic_names()

    async def blocked_keys(self, topic: str) -> list[str]:
        """The keys of a key_strict_fifo topic whose queue the engine has blocked, sorted."""
        return await self._host.store.blocked_keys(check_topic(topic))

    async def delete(self, name: str, force: bool = False) -> bool:
        """Delete a topic's configuration; refused while it has jobs unless `force` (the jobs
        stay)."""
        check_topic(name, "name")
        if not isinstance(force, bool):
            raise ScheduleError(f"force must be True or False; got {shown(force)}", field="force")
        if not force:
            counts = await self._host.store.stats(name)
            if any(counts.values()):
                raise TopicInUse(
                    f"topic {name!r} still has jobs ({counts}); "
                    f"pass force=True to delete it anyway",
                    field="name",
                )
        return await self._host.store.remove_topic(name)

    async def dead_letters(
        self, topic: str, limit: int = 100, cursor: str | None = None
    ) -> JobPage:
        """A page of the dead letters held on `topic`, oldest first."""
        check_topic(topic)
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE:
            raise ScheduleError(f"limit must be 1..{MAX_PAGE}; got {limit!r}", field="limit")
        if cursor is not None and not isinstance(cursor, str):
            raise ScheduleError(
                f"cursor must be a string from an earlier page; got {shown(cursor)}", field="cursor"
            )
        after = _decode_cursor(cursor) if cursor is not None else None
        store = self._host.store
        ids = await store.dead_letter_ids(topic, after, limit + 1)
        page = ids[:limit]
        infos = await asyncio.gather(*(store.get_job(i) for i, _ in page))
        next_cursor = _encode_cursor(page[-1][1], page[-1][0]) if len(ids) > limit else None
        return JobPage([i for i in infos if i is not None], next_cursor)

    async def _dead_letter(self, job_id: str) -> JobInfo:
        info = await self._host.store.get_job(job_id)
        if (
            info is None
            or "source_job_id" not in info.metadata
            or "source_topic" not in info.metadata
        ):
            raise DeadLetterNotFound(f"no dead letter {job_id!r}", field="job_id")
        return info

    async def replay(self, job_id: str, build: BuildReplay, actor: str | None = None) -> str:
        """Schedule a dead letter's original payload again on its source topic (a new job, due now,
        linked by metadata replayed_from/source_job_id) and remove the dead letter; the new id.
        When jobs wait for the source job (after=, a flow) and Redis still holds it, failed, the
        source job itself runs again instead (its id is returned) and its waiting children with
        it (docs/how-to/dependencies.md).

        Raises:
            DeadLetterNotFound: no such dead letter (or it was replayed or deleted meanwhile).
        """
        job_id, actor = check_job_ref(job_id), self._actor(actor)
        dl = await self._dead_letter(job_id)
        h = self._host
        now = h.clock.now_ms()
        meta = {"replayed_from": dl.id, "source_job_id": dl.metadata["source_job_id"]}
        request = JobRequest(
            topic=str(dl.metadata["source_topic"]), run_at_ms=now, payload=dl.payload, metadata=meta
        )
        job = build(request, now_ms=now)
        source = str(dl.metadata["source_job_id"])
        code = await h.store.replay_dead_letter(dl, job, now, self._actor(actor), source)
        if code == OperationCode.RETRIED:
            return source
        if code != OperationCode.REPLAYED:
            raise DeadLetterNotFound(
                f"dead letter {job_id!r} cannot be replayed ({ScriptCode(code).name})",
                field="job_id",
            )
        return job.id

    async def purge(self, topic: str, actor: str | None = None) -> int:
        """Remove every dead letter held on `topic`; how many."""
        check_topic(topic)
        h, who, removed = self._host, self._actor(actor), 0
        while True:
            ids = await h.store.dead_letter_ids(topic, None, 500)
            if not ids:
                return removed
            now = h.clock.now_ms()
            codes = await asyncio.gather(
                *(h.store.delete_dead_letter(i, topic, now, who) for i, _ in ids)
            )
            removed += sum(1 for c in codes if c == OperationCode.DELETED)
