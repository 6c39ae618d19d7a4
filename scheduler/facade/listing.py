"""Listing for the facade: one page of jobs (`Scheduler.jobs`) over the store's walk of its state
sets (scheduler/store/listing.py holds the cursor and the walk), and every topic the CLI and the
console show."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Protocol

from scheduler.core.job import JobPage, JobState
from scheduler.store.listing import WORK_PER_ITEM, Walk, check_limit, check_state
from scheduler.store.redis import RedisStore
from scheduler.store.topic_memory import KnownTopic


async def list_jobs(
    store: RedisStore,
    topic: str | None,
    state: JobState | str | None,
    limit: int,
    cursor: str | None,
    key: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> JobPage:
    """One page of jobs (Scheduler.jobs): state sets in a fixed order, each by time then id.

    Checks first, then one script call for the ids and one pipelined read of the jobs.
    A page examines at most limit * 10 jobs, so a rare state or topic can give a short
    (even empty) page whose cursor goes on.

    Args:
        store: the Redis store.
        topic: only this topic's jobs (None: all).
        state: a JobState, its value or its name (None: all).
        limit: page size, 1..1000.
        cursor: the previous page's cursor (None: the first page).
        key: only jobs of this key (None: all).
        since, until: only jobs whose set time lies in [since, until]: the due time of a
            waiting job, the lease deadline of a running one, the end of an ended one.

    Returns:
        The page; its cursor is None on the last one.

    Raises:
        ScheduleError: naming topic, state, limit or cursor.
    """
    walk = Walk.of(topic, state, key, since, until)
    size = check_limit(limit)
    after = walk.start(cursor)
    ids, following = await store.list_job_ids(walk, after, size, size * WORK_PER_ITEM)
    infos = await store.get_jobs(ids)
    # A job pruned between the two reads is left out (it is past retention), and so is one
    # that left the asked state meanwhile (a worker claimed it, it was cancelled): a page of
    # "scheduled" jobs holds scheduled jobs only. A listing of every state shows it as it is.
    wanted = check_state(state)
    return JobPage(
        [info for info in infos if info is not None and wanted in (None, info.state)],
        following.encode() if following is not None else None,
    )


class _TopicSource(Protocol):
    async def list_topics(self) -> list[str]: ...
    async def stats_by_topic(self) -> dict[str, dict[str, int]]: ...
    async def known_topics(self) -> list[KnownTopic]: ...


async def every_topic(s: _TopicSource) -> list[str]:
    """Every topic that has jobs, a configuration or memory (a worker served it within [worker]
    topic_memory), sorted: the one list `horae topics list` and the console show."""
    configured, counts, known = await asyncio.gather(
        s.list_topics(), s.stats_by_topic(), s.known_topics()
    )
    return sorted(set(configured) | set(counts) | {t.topic for t in known})
