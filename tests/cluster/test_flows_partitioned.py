"""Flows on a real Redis Cluster with the namespace in 6 partitions (the flows issue's "done
when"): a flow's every node lives on its root's partition (one slot: every script of the tree
is one call there), whatever partition its own id points to; flows whose roots are on each of
the 6 partitions (over the 3 masters) all run with their children's results; get_flow reads
them back; a flow whose root's topic has a topic-wide limit goes to that topic's home."""

from __future__ import annotations

import asyncio
from itertools import count
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncCluster
from redis.crc import key_slot

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Flow, JobState, chain, group
from scheduler.core.keys import Keys
from scheduler.facade.topics import TopicOptions
from scheduler.store.partitions import partition_of, topic_home
from tests.cluster.servers import RedisCluster
from tests.cluster.test_partitions import P, scheduler


def id_on(partition: int, prefix: str) -> str:
    """The first id `prefix`-N whose own partition is `partition`."""
    return next(f"{prefix}-{n}" for n in count() if partition_of(f"{prefix}-{n}", P) == partition)


def tree(name: str) -> Flow:
    """root (1) -> 2 mids (10 each) -> 3 leaves each (100 each): a total of 621."""
    mids = [
        Flow(
            "node",
            10,
            [Flow("node", 100, job_id=f"{name}-m{m}-l{j}") for j in range(3)],
            job_id=f"{name}-m{m}",
        )
        for m in range(2)
    ]
    return Flow("node", 1, mids, job_id=name)


def node_ids(name: str) -> list[str]:
    """tree(name)'s ids, parents before children (get_flow's nodes() order)."""
    out = [name]
    for m in range(2):
        out += [f"{name}-m{m}", *(f"{name}-m{m}-l{j}" for j in range(3))]
    return out


def summing(seen: dict[str, dict[str, Any]]) -> ListenerRegistry:
    """`node` returns its payload plus its children's results, and notes what it was given."""
    reg = ListenerRegistry()

    @reg.on_event("node")
    async def node(event: ScheduleArrivedEvent) -> int:
        kids = dict(event.children_results)
        seen[event.scheduled_job_id] = kids
        return int(event.payload) + sum(kids.values())

    @reg.on_event("limited")
    async def limited(event: ScheduleArrivedEvent) -> int:
        kids = dict(event.children_results)
        seen[event.scheduled_job_id] = kids
        return int(event.payload) + sum(kids.values())

    return reg


async def test_flows_rooted_on_each_of_6_partitions_live_and_run_on_their_roots_partition(
    redis_cluster: RedisCluster, cluster_url: str, namespace: str, cluster_redis: AsyncCluster
) -> None:
    roots = [id_on(p, "flow") for p in range(P)]  # one root on each partition
    members = {root: node_ids(root) for root in roots}
    elsewhere = [n for r, ns in members.items() for n in ns if partition_of(n, P) != roots.index(r)]
    assert len(elsewhere) > 20, "the check below would not show nodes placed by their root"
    masters = {redis_cluster.owner_of(Keys(namespace, p).due).port for p in range(P)}
    assert len(masters) >= 2, f"6 partitions all on one master: {masters}"
    seen: dict[str, dict[str, Any]] = {}
    async with scheduler(cluster_url, namespace, summing(seen)) as s:
        assert [await s.flow(tree(root)) for root in roots] == roots
        for p, root in enumerate(roots):  # every node on its root's partition (slot), only there
            home = Keys(namespace, p)
            for node in members[root]:
                assert key_slot(home.job(node).encode()) == key_slot(home.job(root).encode())
                where = [
                    q for q in range(P) if await cluster_redis.exists(Keys(namespace, q).job(node))
                ]
                assert where == [p], f"{node} of the flow rooted on partition {p} is on {where}"
        before = await s.get_flow(roots[0])
        assert before is not None and [n.id for n in before.nodes()] == members[roots[0]]
        wait, due = JobState.WAITING_FOR_PARENTS, JobState.SCHEDULED
        assert [n.state for n in before.nodes()] == [wait, wait, due, due, due, wait, due, due, due]

        async with s.worker(concurrency=20):
            done = await s.wait_many(roots, timeout=30)
        assert [(d.state, d.result) for d in done] == [(JobState.COMPLETED, 621)] * P
        for root in roots:
            flow = await s.get_flow(root)
            assert flow is not None
            assert [(n.id, n.state) for n in flow.nodes()] == [
                (i, JobState.COMPLETED) for i in members[root]
            ]
            assert [n.result for n in flow.nodes()] == [621, 310, 100, 100, 100, 310, 100, 100, 100]
            assert seen[root] == {f"{root}-m0": 310, f"{root}-m1": 310}
            assert seen[f"{root}-m1"] == {f"{root}-m1-l{j}": 100 for j in range(3)}
            assert seen[f"{root}-m0-l0"] == {}
        assert (await s.stats())["completed"] == 9 * P


async def test_a_flow_of_a_topic_with_a_topic_wide_limit_goes_to_its_home(
    cluster_url: str, namespace: str, cluster_redis: AsyncCluster
) -> None:
    # A topic with a concurrency lives on its home partition only. A flow whose root is of
    # that topic goes there whatever its root's id points to, children of that very topic
    # included: chain(limited, limited) and a group of plain jobs under a limited callback.
    # The producer is not the process that configured the topic (that one knows the home).
    seen: dict[str, dict[str, Any]] = {}
    home = topic_home("limited", P)
    away = [id_on(p, "away") for p in range(P) if p != home][:2]
    async with scheduler(cluster_url, namespace) as admin:
        await admin.configure_topic("limited", TopicOptions(concurrency=2))
    async with scheduler(cluster_url, namespace, summing(seen)) as s:
        chained = await s.flow(
            chain(Flow("limited", 1, job_id="first"), Flow("limited", 2, job_id=away[0]))
        )
        chord = await s.flow(
            group(Flow("node", 3, job_id="x"), Flow("node", 4, job_id="y")).then(
                Flow("limited", 5, job_id=away[1])
            )
        )
        assert (chained, chord) == tuple(away)
        for job in ("first", away[0], "x", "y", away[1]):
            assert await cluster_redis.exists(Keys(namespace, home).job(job)), job
        async with s.worker():
            done = await asyncio.gather(s.wait(chained, timeout=20), s.wait(chord, timeout=20))
        assert [(d.state, d.result) for d in done] == [(JobState.COMPLETED, 3)] + [
            (JobState.COMPLETED, 12)
        ]
        assert seen[chained] == {"first": 1} and seen[chord] == {"x": 3, "y": 4}
