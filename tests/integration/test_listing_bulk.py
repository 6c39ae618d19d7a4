"""Listing (Scheduler.jobs) and bulk scheduling (Scheduler.schedule_many) on real
Redis (and Postgres for the audit): every job listed once, in a stable order,
while jobs are added and removed between pages; a bulk call stores and audits
every job, or, with one bad item, nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import InvalidPayload, JobInfo, JobState, ScheduleError, Scheduler
from scheduler.store.scripts import Script
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler

TOPICS = ("a", "b", "c")
HOUR_S = 3600


def registry(release: asyncio.Event) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("a")
    async def a(event: ScheduleArrivedEvent) -> None:
        return None

    @reg.on_event("b")
    async def b(event: ScheduleArrivedEvent) -> None:
        raise ConnectionError("gateway down")

    @reg.on_event("c")
    async def c(event: ScheduleArrivedEvent) -> None:
        if isinstance(event.payload, dict) and event.payload.get("hold"):
            await release.wait()

    return reg


@pytest.fixture
async def setup(
    redis_url: str, namespace: str
) -> AsyncIterator[tuple[Scheduler, dict[str, JobInfo]]]:
    """250 jobs over 3 topics in every state (5 held running while the test lists)."""
    release = asyncio.Event()
    async with make_scheduler(redis_url, namespace, registry(release)) as s:
        hour_later = {"a": 0, "b": 0, "c": 0}
        ids: list[str] = []
        for i in range(100):  # all due at the same ms: ties on score
            topic = TOPICS[i % 3]
            hour_later[topic] += 1
            ids.append(await s.schedule_in(topic, HOUR_S, payload={"i": i}))
        for job_id in ids[::10][:10] + ids[1::10][:10] + ids[2::10][:10]:
            assert await s.cancel(job_id)
        once = {"attempts": 1}
        later = {"attempts": 3, "backoff": {"type": "fixed", "delay": HOUR_S * 1000}}
        now = [("a", None, {})] * 20 + [("b", once, {})] * 20 + [("b", later, {})] * 20
        now += [("c", None, {"hold": True})] * 5 + [("c", None, {})] * 85
        for topic, retry, payload in now:
            ids.append(await s.schedule_in(topic, 0, payload=payload, retry=retry))
        assert len(ids) == 250
        async with s.worker(concurrency=20):
            want = {
                "scheduled": 70,
                "cancelled": 30,
                "completed": 105,
                "failed": 20,
                "retrying": 20,
                "running": 5,
            }

            async def settled() -> bool:
                stats = await s.stats()
                return all(stats[k] == v for k, v in want.items())

            await eventually(settled, what=f"jobs settled as {want}")
            infos = {i.id: i for i in await s.store.get_jobs(ids) if i is not None}
            assert len(infos) == 250
            yield s, infos
            release.set()


async def walk(
    s: Scheduler, topic: str | None, state: str | None, limit: int, between: Any = None
) -> list[str]:
    """Every page of a listing, calling `between(page)` after each; the ids in order."""
    listed: list[str] = []
    cursor = None
    for _ in range(1000):
        page = await s.jobs(topic=topic, state=state, limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        listed += [info.id for info in page.items]
        for info in page.items:
            assert topic in (None, info.topic) and state in (None, info.state.value)
        if page.cursor is None:
            return listed
        if between is not None:
            await between(page)
        cursor = page.cursor
    raise AssertionError("the listing never ended")


async def test_every_job_is_listed_once_in_a_stable_order_while_jobs_are_added(
    setup: tuple[Scheduler, dict[str, JobInfo]],
) -> None:
    s, infos = setup
    added = 0

    async def add(page: Any) -> None:
        nonlocal added
        # Due with the 70 waiting ones (same score: ids before and after the cursor's),
        # sooner and later than them, and now (a worker runs them through the sets).
        for delay, topic in ((HOUR_S, "a"), (HOUR_S, "b"), (60, "c"), (2 * HOUR_S, "a"), (0, "a")):
            await s.schedule_in(topic, delay)
            added += 1

    for state in (None, *(st.value for st in JobState)):
        for topic in (None, *TOPICS):
            quiet = [i for i in await walk(s, topic, state, 50) if i in infos]
            busy = [i for i in await walk(s, topic, state, 50, add) if i in infos]
            expected = {
                i
                for i, info in infos.items()
                if topic in (None, info.topic) and state in (None, info.state.value)
            }
            assert len(quiet) == len(expected) and set(quiet) == expected, (topic, state)
            assert busy == quiet, (topic, state)  # each once, in the same order
    assert added > 0
    everything = await walk(s, None, None, 1000)
    assert len(everything) == len(set(everything)) == 250 + added


async def test_the_walk_goes_on_when_the_cursor_job_is_removed(
    setup: tuple[Scheduler, dict[str, JobInfo]],
) -> None:
    s, infos = setup
    waiting = {i for i, info in infos.items() if info.state is JobState.SCHEDULED}

    async def cancel_last(page: Any) -> None:
        assert await s.cancel(page.items[-1].id)  # the cursor's own member leaves the due set

    listed = await walk(s, None, "scheduled", 7, cancel_last)
    assert len(listed) == len(set(listed)) == len(waiting) and set(listed) == waiting


async def test_pages_follow_the_sets_order_and_bound_their_work(
    setup: tuple[Scheduler, dict[str, JobInfo]],
) -> None:
    s, infos = setup
    order = [
        JobState.SCHEDULED,
        JobState.RETRYING,
        JobState.RUNNING,
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
    ]
    place = {
        st: (0 if st in (JobState.SCHEDULED, JobState.RETRYING) else order.index(st) - 1)
        for st in order
    }
    listed = await walk(s, None, None, 13)
    sets = [place[infos[i].state] for i in listed]
    assert sets == sorted(sets)
    # A page of 1 examines at most 10 members: whether one of topic c is among the first
    # 10 of the due set depends on the random ids (ties on score), but the walk goes on.
    page = await s.jobs(topic="c", state=None, limit=1)
    assert len(page.items) <= 1 and page.cursor is not None
    running = await s.jobs(state="running", limit=1, cursor=None)
    assert (
        len(running.items) == 1
        and running.items[0].state is JobState.RUNNING
        and running.cursor is not None
    )
    with pytest.raises(ScheduleError) as info:
        await s.jobs(state="completed", cursor=page.cursor)  # a cursor of the due set
    assert info.value.field == "cursor"
    short = await s.jobs(topic="nobody", limit=2)
    assert short.items == [] and short.cursor is not None  # 20 members examined, none matched


async def _keys(redis: aioredis.Redis, namespace: str) -> list[bytes]:
    return [k async for k in redis.scan_iter(match="{" + namespace + "}:*", count=1000)]


async def test_a_bad_item_stores_nothing(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        items: list[dict[str, Any]] = [{"topic": "a", "payload": {"i": i}} for i in range(2500)]
        items[7] = {"topic": "a", "payload": {"not", "json"}}
        with pytest.raises(InvalidPayload) as info:
            await s.schedule_many(items)
        assert info.value.field == "items[7].payload"
        items[7] = {"topic": "a"}
        items[2400] = {"topic": "a", "job_id": items[5].setdefault("job_id", "dup")}
        with pytest.raises(ScheduleError) as info:
            await s.schedule_many(items)
        assert info.value.field == "items[2400].job_id"
        assert await _keys(redis, namespace) == []
        assert set((await s.stats()).values()) == {0}
        assert await s.schedule_many([]) == []


async def test_schedule_many_stores_and_audits_every_job(
    redis_url: str, database_url: str, namespace: str
) -> None:
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    async with Scheduler(
        settings=settings, listeners=ListenerRegistry(), clock=FakeClock(START_MS)
    ) as s:
        existing = await s.schedule_in("b", "1d", job_id="known", payload="first")
        items: list[dict[str, Any]] = [
            {"topic": TOPICS[i % 3], "delay": 60 + i, "payload": {"i": i}, "metadata": {"n": i}}
            for i in range(2000)
        ]
        items[3] = {"topic": "a", "job_id": "mine", "payload": {"i": 3}}  # due now
        items[1500] = {"topic": "b", "job_id": existing, "payload": "second"}  # changes nothing
        ids = await s.schedule_many(items)
        assert len(ids) == 2000 and len(set(ids)) == 2000
        assert ids[3] == "mine" and ids[1500] == "known"
        infos = await s.store.get_jobs(ids)
        for i, (item, info) in enumerate(zip(items, infos)):
            payload = "first" if i == 1500 else item["payload"]
            assert info is not None and info.topic == item["topic"] and info.payload == payload, i
        assert infos[10] is not None and infos[10].metadata == {"n": 10}
        assert infos[10].run_at.timestamp() * 1000 == START_MS + 70_000
        assert (await s.stats())["scheduled"] == 2000  # 1,999 new and the known one
        await s.start_relay()
        await s.audit.flush(timeout=60)
        for i in (0, 3, 999, 1500, 1999):
            row = await s.audit.get(ids[i])
            assert row is not None and row.topic == items[i]["topic"] and row.status == "active", i
            assert row.payload == ("first" if i == 1500 else items[i]["payload"])


async def test_batches_in_flight_load_a_missing_script_and_store_each_job_once(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry()) as s:
        store = s.store
        # A variant of enqueue_many.lua (schedule_many's script) that this Redis has never
        # seen: every batch in flight replies NOSCRIPT, loads it and is sent again (as on a
        # fresh or flushed Redis).
        enqueue = store._scripts["enqueue_many"]
        store._scripts._scripts["enqueue_many"] = Script.of(f"{enqueue.source}\n-- {namespace}\n")
        ids = await s.schedule_many(
            [{"topic": "a", "delay": 60, "payload": i} for i in range(1_050)]
        )
        assert len(set(ids)) == 1_050
        assert (await s.stats())["scheduled"] == 1_050
        assert await redis.zcard("{" + namespace + "}:due") == 1_050


async def test_a_listing_keeps_one_key_and_a_time_range_across_pages(
    redis_url: str, namespace: str
) -> None:
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), clock=clock) as s:
        start = datetime.fromtimestamp(START_MS / 1000, tz=UTC)
        ids = {
            (h, key): await s.schedule_at("a", start + timedelta(hours=h), key=key, priority=h % 2)
            for h in range(1, 13)
            for key in ("k1", "k2")
        }
        since, until = start + timedelta(hours=3), start + timedelta(hours=8)

        async def every(**filters: Any) -> list[str]:
            listed, cursor = [], None
            while True:
                page = await s.jobs(limit=2, cursor=cursor, **filters)
                listed += [j.id for j in page.items]
                if (cursor := page.cursor) is None:
                    return listed

        # two priority levels (two sets): each set's members in [since, until], by due time
        kept = await every(state="scheduled", key="k1", since=since, until=until)
        want = [ids[(h, "k1")] for h in (3, 5, 7)] + [ids[(h, "k1")] for h in (4, 6, 8)]
        assert kept == want
        assert sorted(await every(since=since, until=until)) == sorted(
            ids[(h, k)] for h in range(3, 9) for k in ("k1", "k2")
        )
        assert await every(key="k2", until=start) == []
        with pytest.raises(ScheduleError) as info:
            await s.jobs(since=until, until=since)
        assert info.value.field == "since"
        with pytest.raises(ScheduleError) as info:
            await s.jobs(since=datetime(2030, 1, 1))  # naive: which zone?
        assert info.value.field == "since"


async def test_a_job_that_leaves_the_asked_state_between_the_two_reads_is_not_listed(
    setup: tuple[Scheduler, dict[str, JobInfo]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page reads its ids (a script), then the jobs: a job cancelled (or claimed) in between
    is not shown under the state it left; a listing of every state shows it as it is now."""
    s, infos = setup
    list_job_ids = s.store.list_job_ids
    moved: list[str] = []

    async def cancel_first_listed(*args: Any) -> Any:
        ids, following = await list_job_ids(*args)
        if not moved:
            assert await s.cancel(ids[0])
            moved.append(ids[0])
        return ids, following

    monkeypatch.setattr(s.store, "list_job_ids", cancel_first_listed)
    page = await s.jobs(state="scheduled", limit=10)
    assert moved and moved[0] not in {i.id for i in page.items}
    assert len(page.items) == 9 and all(i.state is JobState.SCHEDULED for i in page.items)
    moved.clear()
    page = await s.jobs(limit=10)
    assert {i.id: i.state for i in page.items}[moved[0]] is JobState.CANCELLED
