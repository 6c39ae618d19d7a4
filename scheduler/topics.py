"""Topic configuration (TopicOptions, stored per topic in Redis) and the dead letters
a topic's failed jobs leave on its dead-letter topic: listing, replay, delete, purge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import timedelta
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol

from scheduler.clock import Clock
from scheduler.errors import DeadLetterNotFound, ScheduleError, TopicInUse, UnsupportedTopicOption
from scheduler.job import JobInfo, JobPage, NewJob
from scheduler.retry import RetryPolicy
from scheduler.scripts import OperationCode, ScriptCode
from scheduler.store import RedisStore
from scheduler.validation import check_dead_letter, check_topic

MAX_PAGE = 1_000


@dataclass(frozen=True)
class TopicOptions:
    """A topic's configuration (`Scheduler.configure_topic`).

    This release implements `dead_letter`: the topic a job of this topic is copied to when
    its last attempt fails (a job's own `dead_letter=` wins). The other fields are part of
    the type for flow control; any value but the default is refused by configure_topic
    (UnsupportedTopicOption naming the field), never stored and ignored.
    """

    policy: Literal["standard"] = "standard"
    retry: RetryPolicy | Mapping[str, Any] | None = None
    timeout: timedelta | float | str | None = None
    rate_limit: str | None = None
    concurrency: int | None = None
    priority_default: int = 0
    warning_size: int | None = None
    dead_letter: str | None = None


# The default of each field that is not implemented yet (any other value is refused).
_UNSUPPORTED = {f.name: f.default for f in fields(TopicOptions) if f.name != "dead_letter"}


def check_topic_options(name: str, options: TopicOptions) -> dict[str, str]:
    """The hash fields to store for `options` of topic `name`.

    Raises:
        InvalidTopic: the name or the dead-letter topic is not a usable topic, or they are equal.
        UnsupportedTopicOption: a field that is not supported yet holds a non-default value.
    """
    check_topic(name)
    if not isinstance(options, TopicOptions):
        raise ScheduleError(f"options must be TopicOptions; got {type(options).__name__}", field="options")
    for field, default in _UNSUPPORTED.items():
        value = getattr(options, field)
        if value != default:
            raise UnsupportedTopicOption(
                f"TopicOptions.{field}={value!r} is not supported yet (flow control lands later); "
                f"leave it at {default!r}", field=field)
    stored: dict[str, str] = {"policy": options.policy}
    if options.dead_letter is not None:
        stored["dead_letter"] = check_dead_letter(name, options.dead_letter)
    return stored


def topic_options(stored: dict[str, str]) -> TopicOptions:
    """The TopicOptions of a stored configuration hash."""
    return TopicOptions(dead_letter=stored.get("dead_letter") or None)


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


BuildReplay = Callable[[str, int, Any, Any], NewJob]  # (source topic, now ms, payload, metadata) -> the new job


class Topics:
    """Topic configuration and dead-letter operations of one Scheduler."""

    def __init__(self, host: Host, actor: Callable[[str | None], str]) -> None:
        self._host = host
        self._actor = actor

    async def configure(self, name: str, options: TopicOptions) -> None:
        """Create or replace a topic's configuration (see TopicOptions)."""
        await self._host.store.put_topic(name, check_topic_options(name, options))

    async def get(self, name: str) -> TopicOptions | None:
        """The stored options of a topic, or None."""
        stored = await self._host.store.get_topic(name)
        return topic_options(stored) if stored is not None else None

    async def names(self) -> list[str]:
        return await self._host.store.topic_names()

    async def delete(self, name: str, force: bool = False) -> bool:
        """Delete a topic's configuration; refused while it has jobs unless `force` (the jobs stay)."""
        if not force:
            counts = await self._host.store.stats(name)
            if any(counts.values()):
                raise TopicInUse(f"topic {name!r} still has jobs ({counts}); pass force=True to delete it anyway",
                                 field="name")
        return await self._host.store.remove_topic(name)

    async def dead_letters(self, topic: str, limit: int = 100, cursor: str | None = None) -> JobPage:
        """A page of the dead letters held on `topic`, oldest first."""
        check_topic(topic)
        if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ScheduleError(f"limit must be 1..{MAX_PAGE}; got {limit!r}", field="limit")
        after = _decode_cursor(cursor) if cursor is not None else None
        store = self._host.store
        ids = await store.dead_letter_ids(topic, after, limit + 1)
        page = ids[:limit]
        infos = await asyncio.gather(*(store.get_job(i) for i, _ in page))
        next_cursor = _encode_cursor(page[-1][1], page[-1][0]) if len(ids) > limit else None
        return JobPage([i for i in infos if i is not None], next_cursor)

    async def _dead_letter(self, job_id: str) -> JobInfo:
        info = await self._host.store.get_job(job_id)
        if info is None or "source_job_id" not in info.metadata or "source_topic" not in info.metadata:
            raise DeadLetterNotFound(f"no dead letter {job_id!r}", field="job_id")
        return info

    async def replay(self, job_id: str, build: BuildReplay, actor: str | None = None) -> str:
        """Schedule a dead letter's original payload again on its source topic (a new job, due now,
        linked by metadata replayed_from/source_job_id) and remove the dead letter; the new id.

        Raises:
            DeadLetterNotFound: no such dead letter (or it was replayed or deleted meanwhile).
        """
        dl = await self._dead_letter(job_id)
        h = self._host
        now = h.clock.now_ms()
        meta = {"replayed_from": dl.id, "source_job_id": dl.metadata["source_job_id"]}
        job = build(str(dl.metadata["source_topic"]), now, dl.payload, meta)
        code = await h.store.replay_dead_letter(dl, job, now, self._actor(actor))
        if code != OperationCode.REPLAYED:
            raise DeadLetterNotFound(f"dead letter {job_id!r} cannot be replayed ({ScriptCode(code).name})",
                                     field="job_id")
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
            codes = await asyncio.gather(*(h.store.delete_dead_letter(i, topic, now, who) for i, _ in ids))
            removed += sum(1 for c in codes if c == OperationCode.DELETED)

