"""The namespace the partition-migration tests move (tests/cluster/test_migrate.py on a real
Redis Cluster, tests/integration/test_migrate_plain.py on one Redis): jobs due, delayed, with a
priority, keyed, key_strict_fifo, deduplicated, of a topic with a concurrency limit, completed,
failed and dead-lettered; schedules, one paused. `snapshot` reads what must survive a migration;
`run_all` runs every due job with the new count and checks each ran exactly once."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Dedupe, DoNotRetry, Scheduler
from scheduler.core.clock import SystemClock
from scheduler.facade.topics import TopicOptions
from scheduler.ops.migrate_store import MigrationStore
from scheduler.ops.migration import Migration, Summary
from scheduler.store.clients import redis_client
from tests.integration.engine_fixtures import eventually, is_true

GROUP = "audit"


def scheduler(
    url: str,
    namespace: str,
    count: int,
    registry: ListenerRegistry | None = None,
    audit: bool = False,
) -> Scheduler:
    """A Scheduler with `count` partitions; `audit`: the outbox is written (never relayed here)."""
    base = load_settings(env={}, redis_url=url, namespace=namespace)
    return Scheduler(
        settings=base.model_copy(
            update={
                "audit": base.audit.model_copy(update={"enabled": audit, "relay": False}),
                "cluster": base.cluster.model_copy(update={"partitions": count}),
            }
        ),
        listeners=registry or ListenerRegistry(),
    )


async def migrate(
    url: str, namespace: str, to: int, dry_run: bool = False
) -> tuple[Summary, list[str]]:
    """Run the migration in this process (the CLI's code path below click); its summary and
    output."""
    settings = load_settings(env={}, redis_url=url, namespace=namespace)
    redis = redis_client(url, settings)
    store = MigrationStore(redis, namespace)
    said: list[str] = []
    try:
        clock = SystemClock()
        await clock.calibrate(redis)
        summary = await Migration(store, to, "test", clock.now_ms, said.append, GROUP).run(dry_run)
        return summary, said
    finally:
        await store.aclose()
        await redis.aclose()


@dataclass
class Populated:
    """What populate() stored: the ids that must run once after the migration, FIFO orders."""

    due: set[str] = field(default_factory=set)
    fifo: dict[str, list[str]] = field(default_factory=dict)


async def populate(url: str, namespace: str, count: int) -> Populated:
    """Fill a namespace of `count` partitions (every worker stopped at the end)."""
    out = Populated()
    reg = ListenerRegistry()

    @reg.on_event("done")
    async def done(event: ScheduleArrivedEvent) -> None:
        pass

    @reg.on_event("fragile")
    async def fragile(event: ScheduleArrivedEvent) -> None:
        raise DoNotRetry("broken on purpose")

    async with scheduler(url, namespace, count, reg) as s:
        await s.configure_topic("fragile", TopicOptions(dead_letter="fragile-dlq"))
        await s.configure_topic("fifo", TopicOptions(policy="key_strict_fifo"))
        await s.configure_topic("limited", TopicOptions(concurrency=2))
        await s.schedule_many(
            [{"topic": "done"} for _ in range(6)] + [{"topic": "fragile"} for _ in range(4)]
        )
        async with s.worker(topics=["done", "fragile"]):
            await eventually(
                lambda: _stats_are(s, completed=6, failed=4),
                timeout=20,
                what="done and fragile settled",
            )
        dead = (await s.dead_letters("fragile-dlq")).items
        assert len(dead) == 4
        out.due |= {j.id for j in dead}
        out.due |= set(await s.schedule_many([{"topic": "work"} for _ in range(20)]))
        out.due |= set(
            await s.schedule_many([{"topic": "work", "key": "tenant-a"} for _ in range(8)])
        )
        out.due |= set(
            await s.schedule_many([{"topic": "work", "priority": "high"} for _ in range(4)])
        )
        out.due |= set(await s.schedule_many([{"topic": "limited"} for _ in range(6)]))
        for key, n in (("k1", 4), ("k2", 3)):
            out.fifo[key] = [
                await s.schedule_in("fifo", 0, key=key, payload={"n": i}) for i in range(n)
            ]
            out.due |= set(out.fifo[key])
        await s.schedule_many(
            [{"topic": "work", "delay": 3600, "payload": {"big": "x" * 2000}} for _ in range(15)]
        )
        await s.schedule_in("work", 3600, dedupe=Dedupe("d-held"))
        await s.schedule_in("work", 3600, dedupe=Dedupe("d-window", window=3600))
        await s.schedule_cron("yearly", "0 3 1 1 *", topic="work")
        await s.schedule_cron("paused", "0 4 1 1 *", topic="work")
        await s.pause_cron("paused")
        await s.schedule_cron("lim-cron", "0 5 1 1 *", topic="limited")
    return out


async def _stats_are(s: Scheduler, **want: int) -> bool:
    stats = await s.stats()
    return all(stats.get(k, 0) == v for k, v in want.items())


async def snapshot(s: Scheduler) -> dict[str, Any]:
    """What a migration must keep: counts, schedules, topic options, dead letters."""
    crons = [(c.name, c.paused, c.next_run_at) for c in await s.list_crons()]
    by_topic = {
        t: {k: n for k, n in row.items() if n} for t, row in (await s.stats_by_topic()).items()
    }
    return {
        "stats": {k: n for k, n in (await s.stats()).items() if n},
        "crons": crons,
        "by_topic": {t: row for t, row in by_topic.items() if row},
        "topics": {t: await s.get_topic(t) for t in await s.list_topics()},
        "dead": sorted(j.id for j in (await s.dead_letters("fragile-dlq")).items),
        "known": sorted((t.topic, t.last_served, t.app) for t in await s.known_topics()),
    }


async def check_dedupe_kept(s: Scheduler) -> None:
    """Both dedupe keys still refuse a duplicate (they moved to where a duplicate is routed)."""
    for dedupe in (Dedupe("d-held"), Dedupe("d-window", window=3600)):
        result = await s.schedule("work", datetime.now(UTC) + timedelta(hours=1), dedupe=dedupe)
        assert not result.created, f"{dedupe.key}: a duplicate was stored after the migration"


async def run_all(url: str, namespace: str, count: int, populated: Populated) -> None:
    """A worker with the new count runs every due job exactly once; FIFO keys in order; the
    concurrency limit holds."""
    reg, ran, running, peak = ListenerRegistry(), Counter[str](), [0], [0]
    order: dict[str, list[str]] = {}

    async def record(event: ScheduleArrivedEvent) -> None:
        ran[event.scheduled_job_id] += 1

    for topic in ("work", "fragile-dlq", "sentinel"):
        reg.on_event(topic)(record)

    @reg.on_event("fifo")
    async def fifo(event: ScheduleArrivedEvent) -> None:
        job = await s.get_job(event.scheduled_job_id)
        order.setdefault(job.key or "", []).append(event.scheduled_job_id)  # type: ignore[union-attr]
        await record(event)

    @reg.on_event("limited")
    async def limited(event: ScheduleArrivedEvent) -> None:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.02)
        running[0] -= 1
        await record(event)

    async with scheduler(url, namespace, count, reg) as s:
        async with s.worker(concurrency=8):
            await eventually(
                lambda: is_true(populated.due <= set(ran)), timeout=30, what="every due job run"
            )
            sentinel = await s.schedule_in(
                "sentinel", 0
            )  # a later job runs: nothing else is left to come
            await eventually(lambda: is_true(sentinel in ran), timeout=10, what="the sentinel")
        assert set(ran) == populated.due | {sentinel}
        assert [i for i, n in ran.items() if n > 1] == []
        assert order == populated.fifo
        assert peak[0] <= 2
        stats = await s.stats()
        assert stats.get("scheduled", 0) == 17 and stats.get("running", 0) == 0, stats
