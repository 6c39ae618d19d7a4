"""Flows on a real Redis (docs/how-to/dependencies.md): Scheduler.flow creates a tree in one
step, all or nothing; leaves run first, each parent once its children completed, with their
results in event.children_results; a child's failure applies its parent's on_child_failure;
get_flow shows the tree; chain and group are flows; a tree lives on its root's partition."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import (
    DoNotRetry,
    Flow,
    FlowRefused,
    InvalidDependency,
    JobState,
    KeyRequired,
    RetryPolicyInvalid,
    TopicOptions,
    chain,
    group,
)
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, make_scheduler, ns_keys, outbox_events

Seen = list[tuple[str, str, dict[str, Any], dict[str, Any]]]


def _registry(seen: Seen) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("leaf")
    async def leaf(event: ScheduleArrivedEvent) -> Any:
        seen.append(("leaf", event.scheduled_job_id, dict(event.children_results), {}))
        return event.payload

    @reg.on_event("flaky")
    async def flaky(event: ScheduleArrivedEvent) -> Any:
        seen.append(("flaky", event.scheduled_job_id, {}, {}))
        if event.attempt < 2:
            raise RuntimeError("not yet")
        return event.payload

    @reg.on_event("broken")
    async def broken(event: ScheduleArrivedEvent) -> None:
        seen.append(("broken", event.scheduled_job_id, {}, {}))
        raise DoNotRetry("no")

    @reg.on_event("sum")
    async def total(event: ScheduleArrivedEvent) -> Any:
        kids = dict(event.children_results)
        seen.append(("sum", event.scheduled_job_id, kids, dict(event.parent_results)))
        return sum(v for v in kids.values() if isinstance(v, int)) + (event.payload or 0)

    return reg


async def test_a_three_level_flow_runs_leaves_first_with_children_results(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    seen: Seen = []
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, _registry(seen), clock) as s:
        tree = Flow(
            "sum",
            payload=100,
            children=[
                Flow("sum", payload=10, children=[Flow("leaf", payload=1), Flow("flaky", 2)]),
                Flow("leaf", payload=3),
            ],
            retry={"attempts": 3, "backoff": {"type": "fixed", "delay": 1000}},
        )
        root = await s.flow(tree)
        before = await s.get_flow(root)
        assert before is not None and before.state is JobState.WAITING_FOR_PARENTS
        assert [n.topic for n in before.nodes()] == ["sum", "sum", "leaf", "flaky", "leaf"]
        assert [n.state for n in before.nodes()] == [JobState.WAITING_FOR_PARENTS] * 2 + [
            JobState.SCHEDULED
        ] * 3
        assert (await s.stats()).waiting_for_parents == 2
        async with s.worker():
            for _ in range(200):  # the flaky leaf retries after 1 s of the scheduler's clock
                clock.advance(0.5)
                done = await s.get_job(root)
                if done is not None and done.state is JobState.COMPLETED:
                    break
                await asyncio.sleep(0.02)
        assert done is not None and done.state is JobState.COMPLETED and done.result == 116
        after = await s.get_flow(root)
        assert after is not None
        assert [n.state for n in after.nodes()] == [JobState.COMPLETED] * 5
        assert [n.result for n in after.nodes()] == [116, 13, 1, 2, 3]
        mid, last = after.children
        order = [job_id for _, job_id, _, _ in seen]
        for parent in (after, mid):  # a parent ran after each of its children's runs
            assert all(order.index(c.id) < order.index(parent.id) for c in parent.children)
        sums = {job_id: (kids, parents) for kind, job_id, kids, parents in seen if kind == "sum"}
        assert sums[mid.id] == ({mid.children[0].id: 1, mid.children[1].id: 2}, {})
        assert sums[root] == ({mid.id: 13, last.id: 3}, {})
        assert after.as_dict()["children"][0]["result"] == 13
        events = await outbox_events(redis, namespace, root)
        assert events[0].type == "scheduled"
        assert events[0].get("parents") == f'["{mid.id}","{last.id}"]'  # audit lineage


@pytest.mark.parametrize("mode", ["fail", "ignore", "cancel"])
async def test_a_failed_child_applies_its_parents_on_child_failure(
    redis_url: str, namespace: str, mode: str
) -> None:
    seen: Seen = []
    async with make_scheduler(redis_url, namespace, _registry(seen), FakeClock(START_MS)) as s:
        root = await s.flow(
            Flow(
                "sum",
                children=[
                    Flow(
                        "sum",
                        children=[Flow("broken"), Flow("leaf", payload=4)],
                        on_child_failure=mode,
                    ),
                ],
            )
        )
        async with s.worker():
            info = await s.wait(root, timeout=10)
        tree = await s.get_flow(root)
        assert tree is not None
        mid = tree.children[0]
        if mode == "fail":  # the mid node fails with parent_failed, and so does the root
            assert mid.state is JobState.FAILED and mid.job is not None
            assert mid.job.outcome == "parent_failed" and mid.job.attempts == 0
            assert info.state is JobState.FAILED and info.outcome == "parent_failed"
        elif mode == "ignore":  # the mid node runs with the failed child's result None
            assert mid.state is JobState.COMPLETED and mid.result == 4
            kids = next(k for kind, j, k, _ in seen if j == mid.id)
            assert kids == {mid.children[0].id: None, mid.children[1].id: 4}
            assert info.state is JobState.COMPLETED and info.result == 4
        else:
            assert mid.state is JobState.CANCELLED
            assert info.state is JobState.FAILED and info.outcome == "parent_failed"
        ran = {(k, j) for k, j, _, _ in seen}
        assert (("sum", mid.id) in ran) == (mode == "ignore")


async def test_a_flow_is_all_or_nothing(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), FakeClock(START_MS)) as s:
        taken = await s.schedule_in("leaf", 60, job_id="taken")
        with pytest.raises(FlowRefused) as refused:
            await s.flow(Flow("sum", children=[Flow("leaf"), Flow("leaf", job_id=taken)]))
        assert refused.value.field == "children[1].job_id" and "'taken'" in str(refused.value)
        with pytest.raises(RetryPolicyInvalid) as bad:
            await s.flow(Flow("sum", children=[Flow("leaf", retry={"attempts": 0})]))
        assert (bad.value.field or "").startswith("children[0]")
        assert str(bad.value).startswith("children[0]: attempts must be from 1")
        await s.configure_topic("fifo", TopicOptions(policy="key_strict_fifo"))
        await s.configure_topic("one", TopicOptions(policy="short"))
        keys_before = sorted(await ns_keys(redis, namespace))
        with pytest.raises(KeyRequired) as keyless:
            await s.flow(Flow("sum", children=[Flow("leaf"), Flow("fifo")]))
        assert keyless.value.field == "children[1].key"
        with pytest.raises(FlowRefused) as short:  # two waiting jobs of one key: one slot
            await s.flow(Flow("sum", children=[Flow("one", key="k"), Flow("one", key="k")]))
        assert short.value.field == "children[1].key" and "short" in str(short.value)
        assert sorted(await ns_keys(redis, namespace)) == keys_before  # nothing written
        assert (await s.stats()).scheduled == 1
        with pytest.raises(InvalidDependency, match="after="):
            Flow("sum", after=[taken])
        with pytest.raises(InvalidDependency, match="unknown keyword 'colour'"):
            Flow("sum", colour="red")
        with pytest.raises(FlowRefused, match="also children\\[0\\]'s"):
            await s.flow(Flow("sum", children=[Flow("leaf", job_id="x"), Flow("leaf", job_id="x")]))


async def test_a_flow_with_a_given_root_id_is_created_once(redis_url: str, namespace: str) -> None:
    async with make_scheduler(redis_url, namespace, ListenerRegistry(), FakeClock(START_MS)) as s:

        def tree() -> Flow:
            return Flow("sum", children=[Flow("leaf"), Flow("leaf")], job_id="nightly-2026-11-28")

        assert await s.flow(tree()) == "nightly-2026-11-28"
        assert await s.flow(tree()) == "nightly-2026-11-28"  # the retried call stores nothing
        assert (await s.stats()).scheduled == 2 and (await s.stats()).waiting_for_parents == 1


async def test_chain_and_group_are_flows(redis_url: str, namespace: str) -> None:
    seen: Seen = []
    async with make_scheduler(redis_url, namespace, _registry(seen), FakeClock(START_MS)) as s:
        last = await s.flow(chain(Flow("leaf", payload=5), Flow("sum", payload=1), Flow("sum")))
        chord = await s.flow(
            group(Flow("leaf", payload=1), Flow("leaf", payload=2)).then(Flow("sum", payload=0))
        )
        async with s.worker():
            assert (await s.wait(last, timeout=10)).result == 6
            assert (await s.wait(chord, timeout=10)).result == 3
        tree = await s.get_flow(last)
        assert tree is not None and [n.result for n in tree.nodes()] == [6, 6, 5]
        with pytest.raises(InvalidDependency):
            chain()


async def test_a_flow_lives_on_its_roots_partition(redis_url: str, namespace: str) -> None:
    seen: Seen = []
    async with make_scheduler(
        redis_url, namespace, _registry(seen), FakeClock(START_MS), cluster={"partitions": 4}
    ) as s:
        roots = [
            await s.flow(Flow("sum", children=[Flow("leaf", payload=i), Flow("leaf", payload=1)]))
            for i in range(8)
        ]
        async with s.worker():
            results = [(await s.wait(r, timeout=10)).result for r in roots]
        assert results == [i + 1 for i in range(8)]


def _once_broken(runs: dict[str, int], value: int) -> ListenerRegistry:
    """ "once-broken" fails for good on the first run of a job (of the job a dead letter's copy
    came from: its source_job_id), then returns `value`; "sum" adds its children's results."""
    reg = ListenerRegistry()

    @reg.on_event("once-broken")
    async def once_broken(event: ScheduleArrivedEvent) -> int:
        source = str(event.metadata.get("source_job_id", event.scheduled_job_id))
        runs[source] = runs.get(source, 0) + 1
        if runs[source] == 1:
            raise DoNotRetry("first run fails")
        return value

    @reg.on_event("sum")
    async def total(event: ScheduleArrivedEvent) -> int:
        return sum(event.children_results.values())

    return reg


async def test_retrying_a_failed_leaf_re_arms_the_nodes_it_failed(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    runs: dict[str, int] = {}
    reg = _once_broken(runs, 7)
    async with make_scheduler(redis_url, namespace, reg, FakeClock(START_MS)) as s:
        root = await s.flow(Flow("sum", children=[Flow("sum", children=[Flow("once-broken")])]))
        async with s.worker():
            failed = await s.wait(root, timeout=10)
            assert failed.state is JobState.FAILED and failed.outcome == "parent_failed"
            tree = await s.get_flow(root)
            assert tree is not None
            leaf = tree.children[0].children[0]
            assert (await s.stats()).failed == 3
            await s.retry(leaf.id)
            done = await s.wait(root, timeout=10)
        assert done.state is JobState.COMPLETED and done.result == 7
        again = await s.get_flow(root)
        assert again is not None
        assert [n.state for n in again.nodes()] == [JobState.COMPLETED] * 3
        stats = await s.stats()
        assert stats.failed == 0 and stats.completed == 3 and stats.waiting_for_parents == 0
        events = [e.type for e in await outbox_events(redis, namespace, root)]
        assert events == [
            "scheduled",
            "failed",
            "schedule.failed",
            "retried",
            "attempt_started",
            "completed",
        ]


async def test_replaying_a_nodes_dead_letter_runs_it_again_and_re_arms_its_parent(
    redis_url: str, namespace: str
) -> None:
    runs: dict[str, int] = {}
    reg = _once_broken(runs, 5)
    async with make_scheduler(redis_url, namespace, reg, FakeClock(START_MS)) as s:
        root = await s.flow(
            Flow("sum", children=[Flow("once-broken", dead_letter="broken.dlq"), Flow("sum")])
        )
        async with s.worker():
            assert (await s.wait(root, timeout=10)).state is JobState.FAILED
            (letter,) = (await s.dead_letters("broken.dlq")).items
            tree = await s.get_flow(root)
            assert tree is not None
            leaf = tree.children[0]
            assert await s.replay(letter.id) == leaf.id  # the node itself, not a copy
            done = await s.wait(root, timeout=10)
        assert done.state is JobState.COMPLETED and done.result == 5
        assert (await s.dead_letters("broken.dlq")).items == []
        assert runs == {leaf.id: 2}
        # a dead letter of a job nothing waits for is replayed as a copy, as before
        lone = await s.schedule_in("once-broken", 0, dead_letter="broken.dlq")
        async with s.worker():
            await s.wait(lone, timeout=10)
            (letter,) = (await s.dead_letters("broken.dlq")).items
            copy = await s.replay(letter.id)
            assert copy != lone and (await s.wait(copy, timeout=10)).result == 5
        assert runs[lone] == 2


async def test_a_cron_tick_starts_one_flow_per_tick(redis_url: str, namespace: str) -> None:
    """The documented way: a schedule's listener calls s.flow with a root id of its tick, so a
    tick that runs twice (a retry, a redelivery) creates its flow once."""
    reg, roots = ListenerRegistry(), []  # type: ListenerRegistry, list[str]
    holder: list[Any] = []

    @reg.on_event("nightly")
    async def nightly(event: ScheduleArrivedEvent) -> None:
        tick = f"n-{event.run_at:%Y%m%d%H%M}"
        tree = Flow("sum", children=[Flow("leaf", 1), Flow("leaf", 2)], job_id=tick)
        for _ in range(2):  # (the second call stores nothing)
            roots.append(await holder[0].flow(tree))

    reg.add("leaf", lambda event: event.payload)
    reg.add("sum", lambda event: sum(event.children_results.values()))
    clock = FakeClock(START_MS)
    async with make_scheduler(redis_url, namespace, reg, clock) as s:
        holder.append(s)
        await s.schedule_cron("every-minute", "* * * * *", topic="nightly")
        async with s.worker():
            for _ in range(2):
                clock.advance(60)
                await asyncio.sleep(0.3)
            for _ in range(100):
                if len(roots) == 4:
                    break
                await asyncio.sleep(0.05)
            assert len(roots) == 4 and roots[0] == roots[1] and roots[2] == roots[3] != roots[0]
            done = [await s.wait(r, timeout=10) for r in (roots[0], roots[2])]
        assert [d.result for d in done] == [3, 3]
        assert (await s.stats()).completed == 2 + 6  # two ticks, two flows of three


async def test_a_re_armed_node_whose_other_child_was_deleted_fails_again_at_once(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    """A deleted child counts as failed when its parent is re-armed, and no key of it comes back
    (found by the model-based machine: the re-armed parent waited for the deleted child)."""
    runs: dict[str, int] = {}
    async with make_scheduler(
        redis_url, namespace, _once_broken(runs, 1), FakeClock(START_MS)
    ) as s:
        root = await s.flow(Flow("sum", children=[Flow("once-broken"), Flow("sum")]))
        async with s.worker():
            assert (await s.wait(root, timeout=10)).state is JobState.FAILED
            tree = await s.get_flow(root)
            assert tree is not None
            broken, other = tree.children
            assert other.state is JobState.COMPLETED
            await s.delete(other.id)
            await s.retry(broken.id)
            again = await s.get_job(root)
            assert again is not None and again.state is JobState.FAILED
            assert again.outcome == "parent_failed" and other.id in again.last_error["message"]
            await s.wait(broken.id, timeout=10)
        keys = {k.decode() for k in await ns_keys(redis, namespace)}
        assert not [k for k in keys if k.endswith(":" + other.id)], keys
        assert (await s.get_job(root)).state is JobState.FAILED  # type: ignore[union-attr]
