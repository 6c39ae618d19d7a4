"""Flows on real worker processes (the flows issue's "done when"): three `horae worker`
processes run a 3-level flow of 50 jobs, some of them retrying; and flows run and are created
while one of the workers is SIGKILLed. The listener (tests/procs/flow_app.py) records each run's
start and end with a sequence number INCR'd in Redis (one order over every process); the checks
read those records, the jobs and the outbox:

- every node completed exactly once (one successful run, or with a killed worker at least one,
  and one `completed` event);
- no attempt of a parent started before each of its children's completing run ended;
- each parent saw exactly its children's results in event.children_results;
- a retried Scheduler.flow call (every node's id given) returns the root's id, creating
  nothing."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from scheduler import Flow, JobState, Scheduler
from tests.integration.engine_fixtures import outbox_events, outboxes
from tests.procs import WorkerProcess, WorkerProcesses, app_key, producer
from tests.procs.flow_app import NODE_TOPIC

pytestmark = pytest.mark.slow

APP = "tests.procs.flow_app:registry"
# A short lease, so a killed worker's attempts are recovered soon; long enough (renewed every
# 0.8 s) that the dead worker surely still holds it while the test creates a flow after the kill.
LEASE = {"HORAE_WORKER__LEASE_MS": "2400", "HORAE_WORKER__RECOVER_INTERVAL_S": "0.2"}
RETRY = {"attempts": 4, "backoff": {"type": "fixed", "delay": 1000}}  # (1 s: the least delay)
DEADLINE_S = 45.0


@dataclass(frozen=True)
class Spec:
    """One node as the test means it: its id (given, so every check knows the tree), its
    number and what its listener does (flow_app's payload)."""

    id: str
    n: int
    children: tuple[Spec, ...] = ()
    fail: int = 0
    sleep: float = 0.0
    hang: float = 0.0

    def flow(self) -> Flow:
        payload = {"n": self.n, "fail": self.fail, "sleep": self.sleep, "hang": self.hang}
        kids = [c.flow() for c in self.children]
        return Flow(NODE_TOPIC, payload, kids, job_id=self.id, retry=RETRY)

    def nodes(self) -> Iterator[Spec]:
        yield self
        for child in self.children:
            yield from child.nodes()

    def total(self) -> int:
        return self.n + sum(c.total() for c in self.children)


def three_level(name: str, mids: int, leaves: int, **leaf: Any) -> Spec:
    """root -> `mids` mids -> `leaves` leaves each, numbered 1.. in creation order; `leaf`:
    every leaf's sleep or hang."""
    numbers = iter(range(1, 1 + 1 + mids + mids * leaves))
    root_n = next(numbers)
    kids = []
    for m in range(mids):
        mid_n = next(numbers)
        kids.append(
            Spec(
                f"{name}-m{m}",
                mid_n,
                tuple(Spec(f"{name}-m{m}-l{j}", next(numbers), **leaf) for j in range(leaves)),
            )
        )
    return Spec(f"{name}-root", root_n, tuple(kids))


def tweak(spec: Spec, **by_id: dict[str, Any]) -> Spec:
    """The tree with the nodes named in `by_id` changed (fail=, hang=...)."""
    kids = tuple(tweak(c, **by_id) for c in spec.children)
    fields = {**spec.__dict__, "children": kids, **by_id.get(spec.id, {})}
    return Spec(**fields)


@dataclass
class Run:
    """One run of flow_app's listener: its start record and, unless killed, its end."""

    job: str
    attempt: int
    pid: int
    start: int
    end: int | None = None
    ok: bool = False
    kids: dict[str, Any] | None = None
    result: Any = None


async def read_runs(redis: aioredis.Redis, namespace: str) -> dict[str, list[Run]]:
    """Every recorded run by job, in start order; a start and its end are one run."""
    rows = [json.loads(r) for r in await redis.lrange(app_key(namespace, "flow_runs"), 0, -1)]
    open_runs: dict[tuple[str, int, int], Run] = {}
    by_job: dict[str, list[Run]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: r["seq"]):
        at = (r["job"], r["attempt"], r["pid"])
        if r["what"] == "start":
            assert at not in open_runs, f"two starts of one attempt in one process: {r}"
            open_runs[at] = run = Run(r["job"], r["attempt"], r["pid"], r["seq"])
            by_job[r["job"]].append(run)
        else:
            run = open_runs.pop(at)
            run.end, run.ok, run.kids, run.result = r["seq"], r["ok"], r["kids"], r["result"]
    return by_job


async def completed_events(redis: aioredis.Redis, namespace: str) -> Counter[str]:
    """How many `completed` outbox events each job has."""
    done: Counter[str] = Counter()
    for stream in await outboxes(redis, namespace):
        for _, fields in await redis.xrange(stream, "-", "+"):
            if fields[b"e"] == b"completed":
                done[fields[b"id"].decode()] += 1
    return done


def completing_run(runs: list[Run]) -> Run:
    """The run whose success completed the job: the last successful one (an earlier one can
    only be a run whose worker was killed before it could report it)."""
    ok = [r for r in runs if r.ok]
    assert ok, f"no successful run: {runs}"
    return ok[-1]


def check_order_and_results(spec: Spec, runs: dict[str, list[Run]]) -> None:
    """Every parent: none of its attempts started before each child's completing run ended,
    and its completing run saw exactly its children's results."""
    for parent in spec.nodes():
        if not parent.children:
            continue
        first_start = min(r.start for r in runs[parent.id])
        for child in parent.children:
            child_end = completing_run(runs[child.id]).end
            assert child_end is not None and first_start > child_end, (
                f"{parent.id} started (seq {first_start}) before its child {child.id} "
                f"completed (seq {child_end})"
            )
        seen = completing_run(runs[parent.id]).kids
        expected = {c.id: {"n": c.n, "total": c.total()} for c in parent.children}
        assert seen == expected, f"{parent.id}'s children_results: {seen} != {expected}"


async def check_tree(s: Scheduler, spec: Spec) -> None:
    """get_flow shows the tree as the test built it, every node completed with its total."""
    tree = await s.get_flow(spec.id)
    assert tree is not None
    got = [(n.id, n.state, n.result) for n in tree.nodes()]
    want = [
        (node.id, JobState.COMPLETED, {"n": node.n, "total": node.total()}) for node in spec.nodes()
    ]
    assert got == want


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(redis_url, namespace, tmp_path)
    yield procs
    procs.close()


async def start_workers(procs: WorkerProcesses, names: list[str]) -> list[WorkerProcess]:
    started = [procs.spawn(name, concurrency=4, env=LEASE, app=APP) for name in names]
    for w in started:
        await w.wait_ready()
    return started


async def stop(procs: list[WorkerProcess]) -> None:
    for p in procs:
        p.signal(signal.SIGTERM)
    for p in procs:
        code, _ = await p.wait_exit(15)
        assert code == 0, p.describe()


async def test_three_processes_run_a_flow_of_50_jobs_each_node_once_after_its_children(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    # root -> 7 mids -> 6 leaves each: 50 jobs. Leaves take 0.1 s (4 at a time per process:
    # one process alone would take over a second, so the others take their share); some fail
    # their first attempt or two and retry after 1 s; one mid fails once (its retry must see
    # its children's results again).
    spec = tweak(
        three_level("big", mids=7, leaves=6, sleep=0.1),
        **{f"big-m{m}-l{j}": {"fail": 1} for m, j in ((0, 0), (1, 3), (3, 5), (6, 2))},
        **{"big-m2-l1": {"fail": 2}, "big-m5-l4": {"fail": 2}, "big-m4": {"fail": 1}},
    )
    nodes = list(spec.nodes())
    assert len(nodes) == 50
    procs = await start_workers(workers, ["w0", "w1", "w2"])
    async with producer(redis_url, namespace) as s:
        assert await s.flow(spec.flow()) == spec.id
        # the producer's retry (a reply it lost): the flow exists, nothing is created twice
        assert await s.flow(spec.flow()) == spec.id
        done = await s.wait(spec.id, timeout=DEADLINE_S)
        assert done.state is JobState.COMPLETED, (done, workers.logs())
        assert done.result == {"n": spec.n, "total": sum(range(1, 51))}
        await check_tree(s, spec)
        infos = await asyncio.gather(*(s.get_job(n.id) for n in nodes))
        assert [(i.id, i.attempts) for i in infos if i] == [(n.id, n.fail + 1) for n in nodes]
        stats = await s.stats()
        assert stats["completed"] == 50 and stats["completed"] == sum(stats.values()), stats

    runs = await read_runs(redis, namespace)
    assert set(runs) == {n.id for n in nodes}, "runs of unknown jobs, or nodes that never ran"
    for node in nodes:  # each failed attempt recorded once, then exactly one success
        got = [(r.attempt, r.ok, r.end is not None) for r in runs[node.id]]
        want = [(a, a > node.fail, True) for a in range(1, node.fail + 2)]
        assert got == want, f"{node.id}: runs {got}, expected {want}"
    check_order_and_results(spec, runs)
    assert await completed_events(redis, namespace) == Counter({n.id: 1 for n in nodes})

    pids = {p.pid for p in procs}
    by_pid = Counter(r.pid for rs in runs.values() for r in rs)
    print(f"\n50-job flow on 3 worker processes: runs by pid {dict(by_pid)}")
    assert set(by_pid) <= pids, f"runs by unknown processes: {by_pid}"
    assert len(by_pid) >= 2, f"one process ran the whole flow: {by_pid}"
    await stop(procs)


async def test_flows_survive_a_worker_sigkilled_mid_run_and_one_created_meanwhile(
    redis_url: str, namespace: str, redis: aioredis.Redis, workers: WorkerProcesses
) -> None:
    # Flow A runs on three processes; its leaf m1-l2 hangs in attempt 1: the process running it
    # is SIGKILLed, with whatever else it ran. Flow B is created right after the kill, while
    # the dead process still holds its leases (2.4 s). The two survivors and a restarted
    # worker recover the lost attempts (WorkerLost, retried after 1 s) and finish both.
    a = tweak(three_level("a", mids=4, leaves=5, sleep=0.3), **{"a-m1-l2": {"hang": 60.0}})
    b = three_level("b", mids=3, leaves=3, sleep=0.1)
    nodes = list(a.nodes()) + list(b.nodes())
    procs = await start_workers(workers, ["w0", "w1", "w2"])
    async with producer(redis_url, namespace) as s:
        await s.flow(a.flow())

        async def hanging_pid() -> int | None:
            runs = (await read_runs(redis, namespace)).get("a-m1-l2", [])
            return runs[0].pid if runs else None

        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while (pid := await hanging_pid()) is None:
            assert asyncio.get_running_loop().time() < deadline, workers.logs()
            await asyncio.sleep(0.02)
        (victim,) = [p for p in procs if p.pid == pid]
        victim.signal(signal.SIGKILL)
        code, _ = await victim.wait_exit(10)
        assert code == -signal.SIGKILL, victim.describe()
        await s.flow(b.flow())
        lost = await s.get_job("a-m1-l2")
        assert lost is not None and lost.state is JobState.RUNNING, lost  # its lease still holds
        procs = [p for p in procs if p is not victim] + await start_workers(workers, ["w3"])

        done = await s.wait_many([a.id, b.id], timeout=DEADLINE_S)
        assert [d.state for d in done] == [JobState.COMPLETED] * 2, (done, workers.logs())
        assert [d.result["total"] for d in done] == [a.total(), b.total()]
        await check_tree(s, a)
        await check_tree(s, b)
        hung = await s.get_job("a-m1-l2")
        assert hung is not None and hung.attempts == 2, hung

    runs = await read_runs(redis, namespace)
    assert set(runs) == {n.id for n in nodes}
    killed = {job for job, rs in runs.items() for r in rs if r.pid == victim.pid and r.end is None}
    assert "a-m1-l2" in killed, runs["a-m1-l2"]
    for node in nodes:
        rs = runs[node.id]
        assert all(r.end is not None for r in rs if r.pid != victim.pid), (node.id, rs)
        ok = [r for r in rs if r.ok]
        assert ok, (node.id, rs)
        # at-least-once: a second successful run only where the killed process ran it first
        assert len(ok) == 1 or all(r.pid == victim.pid for r in ok[:-1]), (node.id, rs)
        if node.id in killed:  # the lost attempt counted, the next one completed
            assert ok[-1].attempt >= 2, (node.id, rs)
    lost_attempts = [
        e for e in await outbox_events(redis, namespace, "a-m1-l2") if e.type == "attempt_failed"
    ]
    assert [(e.attempt, e.get("outcome")) for e in lost_attempts] == [(1, "worker_lost")]
    assert f":{victim.pid}:" in lost_attempts[0].get("worker", ""), lost_attempts
    check_order_and_results(a, runs)
    check_order_and_results(b, runs)
    assert await completed_events(redis, namespace) == Counter({n.id: 1 for n in nodes})
    survivors = {p.pid for p in procs}
    assert {r.pid for rs in runs.values() for r in rs} <= survivors | {victim.pid}
    await stop(procs)
