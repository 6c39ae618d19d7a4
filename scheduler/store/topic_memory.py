"""Known topics: a topic a worker with listeners for it served stays known until an operator
forgets it or [worker] topic_memory passes; meanwhile its jobs wait for a worker instead of
completing as no_listener (the decision is claim.lua's, from the hash advertise_worker.lua
writes). Here: the report of known topics and their waiting ("unserved") jobs, the operator's
forget, and the watch a worker's housekeeping keeps (gauge horae_jobs_unserved, a WARN per topic
at most once a minute)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.core.timeutil import ms_to_utc
from scheduler.core.validation import check_topic
from scheduler.observe.metrics import Metrics

log = logging.getLogger("horae.worker")

SCAN = 10_000  # due jobs looked at per report: the waiting counts are lower bounds past it
WARN_EVERY_S = 60.0


@dataclass(frozen=True)
class KnownTopic:
    """A topic a worker served within the topic memory. `served`: a live worker serves it now;
    else `waiting` of its jobs are due and wait for a worker, the earliest due at
    `waiting_since`."""

    topic: str
    last_served: datetime
    worker: str
    app: str
    served: bool
    waiting: int
    waiting_since: datetime | None


def merge_rows(rows: Iterable[Sequence[str]]) -> list[KnownTopic]:
    """KnownTopics from lua/known_topics.lua's rows (one per topic per partition: merged), by
    topic."""
    # topic -> last, worker, app, till, count, oldest
    merged: dict[str, tuple[int, str, str, int, int, int]] = {}
    for topic, value, till_s, count_s, oldest_s in rows:
        last_s, _, rest = value.partition("|")
        worker, _, app = rest.partition("|")
        last, till, count, oldest = int(last_s), int(till_s), int(count_s), int(oldest_s)
        cur = merged.get(topic)
        if cur is not None:
            if cur[0] > last:
                last, worker, app = cur[0], cur[1], cur[2]
            till, count = max(cur[3], till), cur[4] + count
            oldest = cur[5] if oldest < 0 or 0 <= cur[5] < oldest else oldest
        merged[topic] = (last, worker, app, till, count, oldest)
    return [
        KnownTopic(
            topic=topic,
            last_served=ms_to_utc(last),
            worker=worker,
            app=app,
            served=till > 0,
            waiting=0 if till > 0 else count,
            waiting_since=None if till > 0 or oldest < 0 else ms_to_utc(oldest),
        )
        for topic, (last, worker, app, till, count, oldest) in sorted(merged.items())
    ]


async def known_topics(store: Any, now_ms: int, memory_ms: int) -> list[KnownTopic]:
    """Every known topic of the store's namespace (every partition of a partitioned one)."""
    return merge_rows(await store.known_topics(now_ms, memory_ms, SCAN))


async def forget_topic(store: Any, topic: str, now_ms: int) -> bool:
    """Forget `topic` (checked: a ScheduleError names it); False when it was not known.

    Raises:
        InvalidTopic: `topic` is not a topic name.
    """
    check_topic(topic)
    return int(await store.forget_topics([topic], now_ms)) > 0


class UnservedWatch:
    """A worker's view of the unserved topics, refreshed by its housekeeping: forgets topics past
    the memory, sets the gauge and warns about each topic waiting for a worker at most once a
    minute."""

    def __init__(self, store: Any, metrics: Metrics, memory_ms: int) -> None:
        self.store, self.metrics, self.memory_ms = store, metrics, memory_ms
        self._warned: dict[str, float] = {}  # topic -> monotonic time of its last WARN

    async def refresh(self, now_ms: int) -> list[KnownTopic]:
        """Prune the memory, then report; returns the topics whose jobs wait for a worker."""
        await self.store.forget_topics([], now_ms, self.memory_ms)
        known = await known_topics(self.store, now_ms, self.memory_ms)
        self.metrics.unserved = {
            t.topic: t.waiting for t in known
        }  # 0 while served: no series goes stale
        waiting = [t for t in known if not t.served]
        now = time.monotonic()
        for t in waiting:
            if t.waiting and now - self._warned.get(t.topic, -WARN_EVERY_S) >= WARN_EVERY_S:
                self._warned[t.topic] = now
                log.warning(
                    "topic %r: %d due jobs wait for a worker since %s; no "
                    "live worker serves it (last served %s by %s, %s); `horae "
                    "topics forget %s` lets them complete as no_listener",
                    t.topic,
                    t.waiting,
                    t.waiting_since.isoformat() if t.waiting_since else "-",
                    t.last_served.isoformat(),
                    t.app or "-",
                    t.worker,
                    t.topic,
                    extra={"event": "topic_unserved", "topic": t.topic},
                )
        return waiting
