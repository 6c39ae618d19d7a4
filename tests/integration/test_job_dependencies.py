"""Dependencies between jobs on a real Redis (docs/how-to/dependencies.md): a job scheduled
`after=` its parents waits in state waiting_for_parents, runs once every parent completed (at
its own run_at when later) and reads their results; a parent's failure, cancel or delete applies
the child's on_parent_failure; an unknown parent is refused with nothing written; children live
on their parents' partition."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from rich.console import Console

from audit.cli import _job_table
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import DoNotRetry, InvalidDependency, JobState, UnknownParent
from scheduler.core.dependencies import MAX_PARENTS
from scheduler.core.keys import Keys
from scheduler.core.timeutil import ms_to_utc
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import (
    START_MS,
    audited_scheduler,
    job_keys,
    make_scheduler,
    ns_keys,
    outbox_events,
)


def _registry(seen: list[tuple[str, dict[str, Any], int]], clock: FakeClock) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("export")
    async def export(event: ScheduleArrivedEvent) -> Any:
        seen.append((event.scheduled_job_id, dict(event.parent_results), clock.now_ms()))
        return event.payload

    @reg.on_event("quiet")
    async def quiet(event: ScheduleArrivedEvent) -> None:
        seen.append((event.scheduled_job_id, dict(event.parent_results), clock.now_ms()))

    @reg.on_event("broken")
    async def broken(event: ScheduleArrivedEvent) -> None:
        seen.append((event.scheduled_job_id, {}, clock.now_ms()))
        raise DoNotRetry("no")

    @reg.on_event("report")
    async def report(event: ScheduleArrivedEvent) -> Any:
        seen.append((event.scheduled_job_id, dict(event.parent_results), clock.now_ms()))
        return "done"

    return reg


async def test_a_child_runs_after_both_parents_with_their_results(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 10, payload={"rows": 3})
        b = await s.schedule_in("quiet", 20)
        child = await s.schedule_in("report", 0, after=[a, b, a])
        info = await s.get_job(child)
        assert info is not None and info.state is JobState.WAITING_FOR_PARENTS
        assert info.parents == (a, b) and info.waiting_for == 2
        assert (await s.stats()).waiting_for_parents == 1
        async with s.worker():
            clock.advance(10)
            await s.wait(a, timeout=10)
            waiting = await s.get_job(child)
            assert waiting is not None and waiting.state is JobState.WAITING_FOR_PARENTS
            assert waiting.waiting_for == 1
            clock.advance(10)
            done = await s.wait(child, timeout=10)
        assert done.state is JobState.COMPLETED and done.result == "done"
        assert [j for j, _, _ in seen] == [a, b, child]
        assert seen[2][1] == {a: {"rows": 3}, b: None}
        assert seen[2][2] >= START_MS + 20_000  # not before its last parent completed
        assert (await s.stats()).waiting_for_parents == 0
        events = await outbox_events(redis, namespace, child)
        assert events[0].type == "scheduled" and events[0].get("parents") == f'["{a}","{b}"]'


async def test_a_later_run_at_of_the_child_is_kept(redis_url: str, namespace: str) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 0, payload=1)
        child = await s.schedule_in("report", 3600, after=[a])
        async with s.worker():
            await s.wait(a, timeout=10)
            info = await s.get_job(child)
            assert info is not None and info.state is JobState.SCHEDULED
            assert info.next_attempt_at == ms_to_utc(START_MS + 3_600_000)
            clock.advance(3600)
            await s.wait(child, timeout=10)
        assert seen[-1][0] == child and seen[-1][2] >= START_MS + 3_600_000


@pytest.mark.parametrize("mode", ["fail", "ignore", "cancel"])
async def test_a_failed_parent_applies_on_parent_failure(
    redis_url: str, namespace: str, redis: aioredis.Redis, mode: str
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        ok = await s.schedule_in("export", 0, payload="fine")
        bad = await s.schedule_in("broken", 0)
        child = await s.schedule_in("report", 0, after=[ok, bad], on_parent_failure=mode)  # type: ignore[arg-type]
        grandchild = await s.schedule_in("report", 0, after=[child])
        async with s.worker():
            info = await s.wait(child, timeout=10)
            last = await s.wait(grandchild, timeout=10)
        events = [e.type for e in await outbox_events(redis, namespace, child)]
        if mode == "fail":
            assert info.state is JobState.FAILED and info.outcome == "parent_failed"
            assert info.attempts == 0 and info.last_error is not None
            assert bad in info.last_error["message"]
            assert events == ["scheduled", "failed", "schedule.failed"]
            assert last.state is JobState.FAILED and last.outcome == "parent_failed"
            assert child not in [j for j, _, _ in seen]
        elif mode == "ignore":
            assert info.state is JobState.COMPLETED
            assert [r for j, r, _ in seen if j == child] == [{ok: "fine", bad: None}]
            assert last.state is JobState.COMPLETED
        else:
            assert info.state is JobState.CANCELLED and info.attempts == 0
            assert events == ["scheduled", "cancelled"]
            assert last.state is JobState.FAILED  # a cancelled parent counts as failed
        assert (await s.stats()).waiting_for_parents == 0


@pytest.mark.parametrize("how", ["cancel", "delete"])
async def test_a_cancelled_or_deleted_parent_counts_as_failed(
    redis_url: str, namespace: str, redis: aioredis.Redis, how: str
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        parent = await s.schedule_in("export", 3600)
        failing = await s.schedule_in("report", 0, after=[parent])
        ignoring = await s.schedule_in("report", 0, after=[parent], on_parent_failure="ignore")
        cancelled = await s.schedule_in("report", 0, after=[parent], on_parent_failure="cancel")
        if how == "cancel":
            assert await s.cancel(parent)
        else:
            assert await s.delete(parent)
        got = {j: (await s.get_job(j)) for j in (failing, ignoring, cancelled)}
        assert got[failing] is not None and got[failing].state is JobState.FAILED
        assert got[failing].outcome == "parent_failed"
        assert got[cancelled] is not None and got[cancelled].state is JobState.CANCELLED
        assert got[ignoring] is not None and got[ignoring].state is JobState.SCHEDULED
        async with s.worker():
            await s.wait(ignoring, timeout=10)
        assert seen == [(ignoring, {parent: None}, START_MS)]
        if how == "delete":
            keys = Keys(namespace)
            assert not await redis.exists(keys.children(parent))


async def test_an_unknown_parent_is_refused_and_nothing_is_written(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 60)
        before = sorted(await ns_keys(redis, namespace))
        stream = await redis.xlen(Keys(namespace).outbox)
        with pytest.raises(UnknownParent, match="nope") as caught:
            await s.schedule_in("report", 0, after=[a, "nope"], job_id="child")
        assert caught.value.parent_id == "nope" and caught.value.field == "after"
        assert sorted(await ns_keys(redis, namespace)) == before
        assert await redis.xlen(Keys(namespace).outbox) == stream
        assert await s.get_job("child") is None
        assert not await redis.hexists(Keys(namespace).job(a), "hc")
        with pytest.raises(InvalidDependency, match="on_parent_failure"):
            await s.schedule_in("report", 0, after=[a], on_parent_failure="retry")  # type: ignore[arg-type]
        with pytest.raises(InvalidDependency, match="after"):
            await s.schedule_in("report", 0, after=a)  # type: ignore[arg-type]
        with pytest.raises(InvalidDependency, match=f"at most {MAX_PARENTS}"):
            await s.schedule_in("report", 0, after=[str(i) for i in range(MAX_PARENTS + 1)])


async def test_a_parent_already_completed_counts_at_once(redis_url: str, namespace: str) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 0, payload=[1, 2])
        bad = await s.schedule_in("broken", 0)
        async with s.worker():
            await s.wait(a, timeout=10)
            await s.wait(bad, timeout=10)
            child = await s.schedule_in("report", 0, after=[a])
            info = await s.get_job(child)
            assert info is not None and info.state in (
                JobState.SCHEDULED,
                JobState.RUNNING,
                JobState.COMPLETED,
            )
            await s.wait(child, timeout=10)
            failed = await s.schedule_in("report", 0, after=[a, bad])
            failed_info = await s.get_job(failed)
        assert seen[-1] == (child, {a: [1, 2]}, START_MS)
        assert failed_info is not None and failed_info.state is JobState.FAILED
        assert failed_info.outcome == "parent_failed"


async def test_listing_shows_waiting_children(redis_url: str, namespace: str) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 60)
        kids = [await s.schedule_in("report", 0, after=[a]) for _ in range(3)]
        page = await s.jobs(state="waiting_for_parents")
        assert sorted(j.id for j in page.items) == sorted(kids)
        everything = await s.jobs()
        assert {j.id for j in everything.items} == {a, *kids}
        by_topic = await s.stats_by_topic()
        assert by_topic["report"]["waiting_for_parents"] == 3


async def test_children_land_on_their_parents_partition(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(
        redis_url, namespace, _registry(seen, clock), clock, cluster={"partitions": 4}
    ) as s:
        keyed = [await s.schedule_in("export", 0, payload=i, key="shard") for i in range(3)]
        homes = {(await job_keys(redis, namespace, j)).partition for j in keyed}
        assert len(homes) == 1
        children = [await s.schedule_in("report", 0, after=keyed) for _ in range(8)]
        for c in children:
            assert (await job_keys(redis, namespace, c)).partition in homes
        spread = [await s.schedule_in("export", 0, payload=i) for i in range(12)]
        places = {j: (await job_keys(redis, namespace, j)).partition for j in spread}
        one, other = next((x, y) for x in spread for y in spread if places[x] != places[y])
        with pytest.raises(InvalidDependency, match="share one partition"):
            await s.schedule_in("report", 0, after=[one, other])
        async with s.worker():
            for c in children:
                info = await s.wait(c, timeout=20)
                assert info.state is JobState.COMPLETED
        for c in children:
            [results] = [r for j, r, _ in seen if j == c]
            assert results == {k: i for i, k in enumerate(keyed)}


async def test_retention_drops_the_dependency_keys(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        a = await s.schedule_in("export", 0, payload=1)
        child = await s.schedule_in("report", 0, after=[a])
        keys = Keys(namespace)
        assert await redis.exists(keys.children(a))
        async with s.worker():
            await s.wait(child, timeout=10)
        assert not await redis.exists(keys.children(a))
        assert await redis.exists(keys.parent_results(child))
        assert await s.delete(child)
        assert not await redis.exists(keys.parent_results(child))


async def test_the_audit_keeps_parents_and_the_parent_failed_child(
    redis_url: str, database_url: str, namespace: str
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    reg = _registry(seen, clock)
    async with audited_scheduler(redis_url, database_url, namespace, reg, clock) as s:
        ok = await s.schedule_in("export", 0, payload=1)
        bad = await s.schedule_in("broken", 0)
        child = await s.schedule_in("report", 0, after=[ok, bad])
        async with s.worker():
            await s.wait(child, timeout=10)
        await s.audit.flush(timeout=10)
        row = await s.audit.get(child)
        assert row is not None and row.status == "failed" and row.parents == (ok, bad)
        assert row.attempts == 0 and row.last_error is not None
        assert row.last_error["type"] == "ParentFailed"
        assert await s.audit.attempts(child) == []
        kinds = [e[1] for e in await s.audit.events(child)]
        assert kinds == ["scheduled", "failed", "schedule.failed"]
        parent_row = await s.audit.get(ok)
        assert parent_row is not None and parent_row.parents == ()
    shown = Console(width=200, record=True)
    shown.print(_job_table(row))  # `horae audit show` names the parents
    assert f"{ok}, {bad}" in shown.export_text()


@pytest.mark.parametrize("partitions", [1, 4])
async def test_schedule_many_takes_after_of_stored_jobs_and_earlier_items(
    redis_url: str, namespace: str, redis: aioredis.Redis, partitions: int
) -> None:
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(
        redis_url, namespace, _registry(seen, clock), clock, cluster={"partitions": partitions}
    ) as s:
        stored = await s.schedule_in("export", 0, payload="stored", key="grp")  # (a partition)
        before = sorted(await ns_keys(redis, namespace))
        with pytest.raises(UnknownParent) as unknown:
            await s.schedule_many(
                [{"topic": "export", "payload": 1}, {"topic": "report", "after": ["ghost"]}]
            )
        assert unknown.value.parent_id == "ghost"
        assert sorted(await ns_keys(redis, namespace)) == before  # nothing written
        ids = await s.schedule_many(
            [
                {"topic": "export", "payload": "first", "job_id": "first", "key": "grp"},
                {"topic": "report", "after": ["first", stored], "on_parent_failure": "ignore"},
                {"topic": "report", "after": [stored]},
            ]
        )
        both, one = ids[1], ids[2]
        info = await s.get_job(both)
        assert info is not None and info.parents == ("first", stored)
        async with s.worker():
            done = await s.wait(both, timeout=10)
            await s.wait(one, timeout=10)
        assert done.result == "done"
        runs = {job: parents for job, parents, _ in seen}
        assert runs[both] == {"first": "first", stored: "stored"} and runs[one] == {
            stored: "stored"
        }


async def test_retrying_a_failed_parent_re_arms_a_child_scheduled_after_it_failed(
    redis_url: str, namespace: str
) -> None:
    """The child failed at once (its parent had failed already); the parent's retry brings it
    back to wait (found by the model-based machine: such a parent was never marked as having
    children, and its retry re-armed nothing)."""
    clock, seen = FakeClock(START_MS), []  # type: list[tuple[str, dict[str, Any], int]]
    async with make_scheduler(redis_url, namespace, _registry(seen, clock), clock) as s:
        bad = await s.schedule_in("broken", 0)
        async with s.worker():
            await s.wait(bad, timeout=10)
            child = await s.schedule_in("report", 0, after=[bad])
            failed = await s.get_job(child)
            assert failed is not None and failed.outcome == "parent_failed"
            await s.retry(bad)
            waiting = await s.get_job(child)
            assert waiting is not None and waiting.state is JobState.WAITING_FOR_PARENTS
            await s.wait(bad, timeout=10)  # broken fails again: the child fails again
            again = await s.wait(child, timeout=10)
        assert again.state is JobState.FAILED and again.outcome == "parent_failed"
        assert [job for job, _, _ in seen] == [bad, bad]
