"""Keys that do not grow with history: once retention has passed, a namespace that ran jobs
of 1,000 topics (completed, failed with dead letters, cancelled) holds the same keys, with the
same sizes, as one that ran a single topic. The counts hash keeps no zero fields."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.api import Scheduler
from scheduler.core.job import JobState
from scheduler.core.keys import Keys
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler

TOPICS = 1_000
DAY_S = 86_400


async def shape(redis: aioredis.Redis, namespace: str) -> dict[str, tuple[str, int]]:
    """Every key of the namespace with its type and size (fields, members, entries; a string: 1)."""
    out: dict[str, tuple[str, int]] = {}
    size = {
        "hash": redis.hlen,
        "zset": redis.zcard,
        "set": redis.scard,
        "list": redis.llen,
        "stream": redis.xlen,
    }
    async for raw in redis.scan_iter(match="{" + namespace + "}:*", count=1000):
        kind = (await redis.type(raw)).decode()
        out[raw.decode()] = (kind, await size[kind](raw) if kind in size else 1)
    return out


def registry(topics: list[str]) -> ListenerRegistry:
    """Listeners of `topics`: a job whose payload says fail raises (its dead letter completes)."""
    reg = ListenerRegistry()

    async def run(event: ScheduleArrivedEvent) -> None:
        if (event.payload or {}).get("fail") and not event.topic.endswith(".dlq"):
            raise RuntimeError("fails on purpose")

    for topic in topics:
        reg.on_event(topic)(run)
    return reg


async def one_round(redis_url: str, namespace: str, clock: FakeClock, topics: list[str]) -> None:
    """Each topic gets a job that completes, one that fails (dead letter on `<topic>.dlq`) and
    one cancelled while it waits; then the clock passes every retention age and prune runs."""
    # No audit: the outbox is a stream trimmed by the relay, not a per-topic structure.
    s: Scheduler = make_scheduler(
        redis_url,
        namespace,
        registry(topics + [f"{t}.dlq" for t in topics]),
        clock,
        audit={"enabled": False},
        worker={"recover_interval_s": 3600},
    )
    async with s:
        later = await s.schedule_many([{"topic": t, "delay": "1h"} for t in topics])
        assert await s.cancel_many(later) == len(topics)
        ids = await s.schedule_many([{"topic": t} for t in topics])
        # (schedule_many takes no dead_letter=: one call each)
        ids += await asyncio.gather(
            *(
                s.schedule_in(
                    t, 0, payload={"fail": True}, retry={"attempts": 1}, dead_letter=f"{t}.dlq"
                )
                for t in topics
            )
        )
        async with s.worker(concurrency=50) as worker:
            await s.wait_many(ids, timeout=120)
            stats = await s.stats()
            # the dead letters of the failing jobs ran too (listeners of <topic>.dlq)
            await eventually(
                lambda: _settled(s, clock), timeout=60, what="every job and dead letter ended"
            )
            assert stats["completed"] >= len(topics) and stats["failed"] >= len(topics)
            clock.advance(31 * DAY_S)
            await worker.prune()
        # The topics stay known while their worker runs, then for [worker] topic_memory (7 days).
        clock.advance(8 * DAY_S)
        await s.make_worker().prune()
        assert await s.known_topics() == []
        assert await s.stats() == {**{st.value: 0 for st in JobState}, "dead_letter": 0}


async def _settled(s: Scheduler, clock: FakeClock) -> bool:
    clock.advance(1)  # a dead letter waits for a claim round, which a frozen clock never starts
    stats = await s.stats()
    return stats["scheduled"] == stats["running"] == stats["retrying"] == 0


async def test_a_thousand_topics_leave_no_key_and_no_count_behind(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock = FakeClock(START_MS)
    await one_round(redis_url, namespace, clock, ["warm/up"])
    baseline = await shape(redis, namespace)
    await one_round(redis_url, namespace, clock, [f"growth/{i}" for i in range(TOPICS)])
    after = await shape(redis, namespace)
    grown = {k: (baseline.get(k), v) for k, v in after.items() if baseline.get(k) != v}
    gone = sorted(set(baseline) - set(after))
    assert (grown, gone) == ({}, []), (
        f"keys that grew or appeared: {dict(list(grown.items())[:20])}; gone: {gone}"
    )
    assert await redis.hlen(Keys(namespace).counts) == 0, "no zero counts are kept"
