"""Flow control across real worker processes (issue 14, "Must hold"): three `horae worker`
processes on one namespace, several producers, real Redis. The listener
(tests/procs/worker_app.py, flow_run) records each run's start and end (wall-clock ms: one
host) in {ns}:test:flow; the checks read those intervals and the outbox.

Real time is needed only for the rate limit (a rate is measured); elsewhere the waits
are for the workers to get through a small backlog."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from scheduler import Backoff, Dedupe, JobState, RateLimit, RetryPolicy, TopicOptions
from scheduler.core.keys import Keys
from tests.procs import WorkerProcesses, app_key, producer
from tests.procs.worker_app import FLOW_TOPICS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
T = FLOW_TOPICS


@pytest.fixture
def procs(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[WorkerProcesses]:
    p = WorkerProcesses(redis_url, namespace, tmp_path)
    yield p
    p.close()


async def start_workers(procs: WorkerProcesses, n: int = 3, concurrency: int = 10) -> None:
    started = [procs.spawn(f"w{i}", concurrency=concurrency) for i in range(n)]
    for w in started:
        await w.wait_ready()


@pytest.fixture
async def s(redis_url: str, namespace: str) -> AsyncIterator[Any]:
    async with producer(redis_url, namespace) as sched:
        yield sched


async def runs(redis: aioredis.Redis, namespace: str) -> list[dict[str, Any]]:
    """Every run recorded so far; the workers ran this checkout's engine, not another's."""
    out = [json.loads(raw) for raw in await redis.lrange(app_key(namespace, "flow"), 0, -1)]
    wrong = {r["src"] for r in out if not r["src"].startswith(str(ROOT))}
    assert not wrong, f"worker processes imported scheduler from {wrong}, not {ROOT} (PYTHONPATH)"
    return out


async def wait_runs(
    redis: aioredis.Redis,
    namespace: str,
    n: int,
    timeout: float,
    procs: WorkerProcesses | None = None,
    **match: Any,
) -> list[dict[str, Any]]:
    """Until at least `n` runs matching `match` (field=value) are recorded; those runs."""
    deadline = time.monotonic() + timeout
    while True:
        got = [
            r for r in await runs(redis, namespace) if all(r.get(k) == v for k, v in match.items())
        ]
        if len(got) >= n:
            return got
        if time.monotonic() > deadline:
            logs = procs.logs() if procs else ""
            raise AssertionError(f"{len(got)} of {n} runs {match} after {timeout} s: {got}\n{logs}")
        await asyncio.sleep(0.05)


async def wait_state(s: Any, job_id: str, state: JobState, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while (info := await s.get_job(job_id)) is None or info.state is not state:
        assert time.monotonic() < deadline, f"{job_id} is {info and info.state}, not {state}"
        await asyncio.sleep(0.02)


def now_dt(s: Any, ms: int = 0) -> datetime:
    return datetime.fromtimestamp((s.clock.now_ms() + ms) / 1000, UTC)


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals [start, end) open at one instant."""
    points = sorted(
        [(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda p: (p[0], p[1])
    )
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


# ------------------------------------------------------------------ 1. policies


async def test_singleton_never_overlaps_a_key_while_keys_run_in_parallel(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """singleton: at most one running job per key across the three processes; the jobs of
    other keys run meanwhile (a topic-wide lock would pass the first check, not the second)."""
    await s.configure_topic(T["singleton"], TopicOptions(policy="singleton"))
    await start_workers(procs)
    keys, per_key = ["a", "b", "c", "d"], 4
    ids = await asyncio.gather(
        *(
            s.schedule_in(T["singleton"], 0, key=k, payload={"key": k, "n": i, "sleep": 0.25})
            for i in range(per_key)
            for k in keys
        )
    )
    assert len(set(ids)) == len(keys) * per_key, "singleton never refuses a waiting job"
    got = await wait_runs(redis, namespace, len(ids), 60, procs)
    assert sorted(r["job"] for r in got) == sorted(ids), "each job ran exactly once"
    for k in keys:
        spans = sorted((r["start"], r["end"]) for r in got if r["key"] == k)
        overlaps = [(a, b) for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1]]
        assert not overlaps, f"key {k}: overlapping runs {overlaps}"
    assert max_overlap([(r["start"], r["end"]) for r in got]) >= 2, (
        "different keys never ran at once"
    )


async def test_enqueue_policies_refuse_with_the_holder_id_across_producers(
    redis_url: str, redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """exclusive (one waiting-or-running per key), short (one waiting) and stately (one per
    state): 15 concurrent calls from 3 producers create one job and the 14 refused ones
    return its id; while the holder runs, exclusive still refuses, short and stately take a
    new waiting job and refuse a third naming that one; stately runs the waiting one only
    after the running one ended."""
    for name in ("exclusive", "short", "stately"):
        await s.configure_topic(T[name], TopicOptions(policy=name))
    await start_workers(procs)
    async with producer(redis_url, namespace) as p2, producer(redis_url, namespace) as p3:
        producers = [s, p2, p3]
        holders: dict[str, str] = {}
        for name in ("exclusive", "short", "stately"):
            results = await asyncio.gather(
                *(
                    p.schedule(
                        T[name], now_dt(s, 600), key="k", payload={"key": "k", "n": 1, "sleep": 1.0}
                    )
                    for _ in range(5)
                    for p in producers
                )
            )
            created = [r for r in results if r.created]
            assert len(created) == 1, f"{name}: {len(created)} of 15 calls created a job"
            holder = created[0].job_id
            refused = [r for r in results if not r.created]
            assert {(r.job_id, r.reason) for r in refused} == {(holder, name)}, f"{name}: {refused}"
            holders[name] = holder
        for name, holder in holders.items():
            await wait_state(s, holder, JobState.RUNNING)
            second = await p2.schedule(
                T[name], now_dt(s), key="k", payload={"key": "k", "n": 2, "sleep": 0.1}
            )
            if name == "exclusive":
                assert (second.job_id, second.created, second.reason) == (
                    holder,
                    False,
                    "exclusive",
                )
                continue
            assert second.created, f"{name}: the running holder does not hold the waiting slot"
            if name == "short":
                continue  # short limits waiting jobs only: the second may already run
            third = await p3.schedule(T[name], now_dt(s), key="k", payload={"key": "k", "n": 3})
            assert (third.job_id, third.created, third.reason) == (second.job_id, False, name)
        got = await wait_runs(redis, namespace, 5, 30, procs)
        by_topic = {
            name: sorted((r["n"], r["start"], r["end"]) for r in got if r["topic"] == T[name])
            for name in holders
        }
        assert [n for n, _, _ in by_topic["exclusive"]] == [1]
        assert [n for n, _, _ in by_topic["short"]] == [1, 2]
        (_, _, end1), (_, start2, _) = by_topic["stately"]
        assert start2 >= end1, "stately: the second job ran while the first still ran"
        after = await s.schedule(T["exclusive"], now_dt(s), key="k")
        assert after.created and after.job_id != holders["exclusive"], (
            "a finished holder frees the key"
        )


async def test_stately_second_job_of_a_key_cannot_enter_retry(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """stately: while one job of a key waits to retry, a second job of that key whose attempt
    fails fails for good (the retrying slot is taken); the first then retries and completes."""
    retry = RetryPolicy(attempts=3, backoff=Backoff(type="fixed", delay_ms=2_500))
    await s.configure_topic(T["stately"], TopicOptions(policy="stately", retry=retry))
    await start_workers(procs)
    first = await s.schedule_in(T["stately"], 0, key="k", payload={"key": "k", "n": 1, "fail": [1]})
    await wait_state(s, first, JobState.RETRYING)
    second = await s.schedule_in(
        T["stately"], 0, key="k", payload={"key": "k", "n": 2, "fail": [1]}
    )
    await wait_state(s, second, JobState.FAILED)
    info = await s.get_job(second)
    assert info is not None and info.attempts == 1, "the second job failed after its first attempt"
    await wait_state(s, first, JobState.COMPLETED)
    got = await runs(redis, namespace)
    assert sorted((r["n"], r["attempt"], r["ok"]) for r in got) == [
        (1, 1, False),
        (1, 2, True),
        (2, 1, False),
    ]


async def test_key_strict_fifo_runs_each_key_in_creation_order_and_a_failure_blocks_it(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """key_strict_fifo across three processes: each key's jobs run one at a time in creation
    order, even though later-created jobs are due earlier (due order would reverse them);
    keys run in parallel. A job failing for good blocks its key (blocked_keys) until it is
    retried (it runs again, then the rest in order) or deleted (the rest run)."""
    await s.configure_topic(
        T["fifo"], TopicOptions(policy="key_strict_fifo", retry=RetryPolicy(attempts=1))
    )
    await start_workers(procs)
    base = s.clock.now_ms() + 300
    order: dict[str, list[str]] = {}
    for i in range(4):
        for k in ("p", "q", "r", "retried", "deleted"):
            payload = {
                "key": k,
                "n": i,
                "sleep": 0.1,
                "fail_runs": int(i == 0 and k in ("retried", "deleted")),
            }
            when = datetime.fromtimestamp((base - 50 * i) / 1000, UTC)  # created later, due earlier
            order.setdefault(k, []).append(
                (await s.schedule(T["fifo"], when, key=k, payload=payload)).job_id
            )
    got = await wait_runs(redis, namespace, 12, 40, procs, ok=True)
    failed = await wait_runs(redis, namespace, 2, 10, procs, ok=False)
    assert await s.blocked_keys(T["fifo"]) == ["deleted", "retried"]
    await asyncio.sleep(1.5)  # a blocked key's jobs stay put (claim looks again every RECHECK_MS)
    assert {r["key"] for r in await runs(redis, namespace)} == {"p", "q", "r", "retried", "deleted"}
    assert len(await runs(redis, namespace)) == 14, "a blocked key ran a later job"
    assert await s.retry(order["retried"][0])
    assert await s.delete(order["deleted"][0])
    assert await s.blocked_keys(T["fifo"]) == []
    got = await wait_runs(redis, namespace, 12 + 4 + 3, 40, procs, ok=True)
    for k, ids in order.items():
        mine = sorted((r for r in got if r["key"] == k), key=lambda r: r["start"])
        expected = ids[1:] if k == "deleted" else ids
        assert [r["job"] for r in mine] == expected, f"key {k} ran out of creation order"
        spans = [(r["start"], r["end"]) for r in mine]
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:], strict=False)), (
            f"key {k}: runs overlap"
        )
    first_runs = [r for r in got if r["key"] in ("p", "q", "r")]
    assert max_overlap([(r["start"], r["end"]) for r in first_runs]) >= 2, (
        "keys never ran in parallel"
    )
    assert [r["n"] for r in failed] == [0, 0]


# ------------------------------------------------------------------ 2. dedupe


async def test_dedupe_throttle_and_debounce_across_producers(
    redis_url: str, redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """throttle: 3 producers calling at once create one job; calls inside its window (also
    after it ran) return its id; after the window one new job. debounce: 3 producers calling
    every 40 ms for ~1 s create one job, which runs once, after the last call's run_at, with
    the last call's payload."""
    await start_workers(procs)
    async with producer(redis_url, namespace) as p2, producer(redis_url, namespace) as p3:
        producers = [s, p2, p3]
        throttle = Dedupe("welcome", window="2s")
        t0 = time.monotonic()
        results = await asyncio.gather(
            *(
                p.schedule(
                    T["dedupe"], now_dt(s), payload={"key": "throttle", "n": i}, dedupe=throttle
                )
                for i, p in enumerate(producers * 5)
            )
        )
        first = {r.job_id for r in results}
        assert len(first) == 1 and sum(r.created for r in results) == 1, results
        (holder,) = first
        await wait_runs(redis, namespace, 1, 10, procs, key="throttle")
        again = await p3.schedule(
            T["dedupe"], now_dt(s), payload={"key": "throttle"}, dedupe=throttle
        )
        assert time.monotonic() - t0 < 1.8, "too slow to test inside the window"
        assert (again.job_id, again.created, again.reason) == (holder, False, "throttle")
        await asyncio.sleep(max(0.0, 2.2 - (time.monotonic() - t0)))
        later = await p2.schedule(
            T["dedupe"], now_dt(s), payload={"key": "throttle"}, dedupe=throttle
        )
        assert later.created and later.job_id != holder, "the window ended: a new job"

        debounce = Dedupe("search", window="1s", mode="debounce")
        calls: list[tuple[int, int, Any, int]] = []  # (sent ms, replied ms, result, n)
        seq = 0

        async def call(p: Any) -> None:
            nonlocal seq
            for _ in range(8):
                seq += 1
                n, sent = seq, s.clock.now_ms()
                r = await p.schedule(
                    T["dedupe"],
                    now_dt(s, 500),
                    payload={"key": "debounce", "n": n},
                    dedupe=debounce,
                )
                calls.append((sent, s.clock.now_ms(), r, n))
                await asyncio.sleep(0.04 + random.random() * 0.04)

        await asyncio.gather(*(call(p) for p in producers))
        assert sum(r.created for _, _, r, _ in calls) == 1
        assert {r.job_id for _, _, r, _ in calls} == {calls[0][2].job_id}
        assert {r.reason for _, _, r, _ in calls if not r.created} == {"debounce"}
        # Concurrent producers: the call Redis applied last is one that replied after every
        # other call was sent (its script ran after theirs could have).
        last = [c for c in calls if c[1] >= max(d[0] for d in calls if d is not c)]
        (ran,) = await wait_runs(redis, namespace, 1, 10, procs, key="debounce")
        assert ran["job"] == calls[0][2].job_id and ran["n"] in {c[3] for c in last}, (
            "it ran with the last payload"
        )
        assert ran["start"] >= min(c[0] for c in last) + 500 - 5, (
            "it ran before the last call's run_at"
        )
        await asyncio.sleep(0.5)
        assert len([r for r in await runs(redis, namespace) if r["key"] == "debounce"]) == 1


# ------------------------------------------------------------------ 3. priority


async def test_priority_orders_a_backlog_higher_first_then_by_due_time(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """One worker at concurrency 1 (it claims one job at a time) and a backlog of 40 due jobs
    of priorities -1..5 in shuffled due order: they start by priority, highest first, and by
    due time within a priority.

    Strict priority starves: a job waits while any job of a higher priority is due, however
    long it has waited (here the low jobs, due first, run last); nothing ages a priority up."""
    await start_workers(procs, n=1, concurrency=1)
    gate = await s.schedule_in(T["prio"], 0, payload={"n": -1, "sleep": 1.5}, priority=1000)
    await wait_state(s, gate, JobState.RUNNING)
    # due in the next 0.3-0.7 s (a past run_at means now: creation order), all before the gate ends
    base = s.clock.now_ms() + 300
    rng = random.Random(14)
    prios = [rng.choice([-1, 0, 0, 1, 2, 5]) for _ in range(40)]
    dues = rng.sample(range(0, 400, 5), 40)
    expected: list[str] = []
    jobs = []
    for n, (prio, due) in enumerate(zip(prios, dues, strict=True)):
        when = datetime.fromtimestamp((base + due) / 1000, UTC)
        jid = (await s.schedule(T["prio"], when, payload={"n": n}, priority=prio)).job_id
        jobs.append((-prio, due, jid))
    expected = [jid for _, _, jid in sorted(jobs)]
    assert (await s.get_job(gate)).state is JobState.RUNNING, (
        "the backlog was not in place before the gate ended"
    )
    got = await wait_runs(redis, namespace, 41, 30, procs)
    (gate_run,) = [r for r in got if r["job"] == gate]
    assert gate_run["end"] > base + max(dues), "the gate ended before the whole backlog was due"
    started = [r["job"] for r in sorted(got, key=lambda r: r["start"]) if r["job"] != gate]
    what = {jid: (-neg, due) for neg, due, jid in jobs}
    assert [what[j] for j in started] == [what[j] for j in expected], (
        f"(priority, due) in start order: {[what[j] for j in started]}"
    )
    assert [r["job"] for r in sorted(got, key=lambda r: r["start"])][0] == gate


# ------------------------------------------------------------------ 4. rate limit

RATE, MEASURE_S, BURST = 50, 10.0, 2  # burst: max/20 starts at once


async def test_global_rate_limit_holds_across_three_processes(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """RateLimit(50, "1s") on a topic, three processes at concurrency 10 and a backlog of
    more than 10 s: the starts the engine made (attempt_started, stamped with the claim's
    time) number 50/s within 5 % over the first 10 s, and no 1 s window holds more than
    50 + the burst (max/20 = 2). No limit would start the backlog in well under a second;
    a limiter that only looks again every RECHECK_MS would fall far short of 50/s."""
    await s.configure_topic(T["rate"], TopicOptions(rate_limit=RateLimit(max=RATE, per="1s")))
    await start_workers(procs)
    total = int(RATE * (MEASURE_S + 1.5))
    for chunk in range(0, total, 100):
        await s.schedule_many(
            [
                {"topic": T["rate"], "payload": {"n": i}}
                for i in range(chunk, min(chunk + 100, total))
            ]
        )
    await wait_runs(redis, namespace, total, MEASURE_S + 15, procs)
    starts = sorted(
        int(f[b"ts"])
        for _, f in await redis.xrange(Keys(namespace).outbox, "-", "+")
        if f[b"e"] == b"attempt_started"
    )
    assert len(starts) == total
    t0 = starts[0]
    in_window = sum(1 for t in starts if t < t0 + MEASURE_S * 1000)
    rate = in_window / MEASURE_S
    worst = max(
        sum(1 for u in starts[i : i + RATE + BURST + 5] if u < t + 1000)
        for i, t in enumerate(starts)
    )
    spread = {r["pid"] for r in await runs(redis, namespace)}
    print(
        f"\nrate limit {RATE}/s on 3 processes: {in_window} starts in the first {MEASURE_S:.0f} s "
        f"= {rate:.2f}/s; busiest 1 s window {worst}; {len(spread)} processes ran jobs"
    )
    assert abs(rate - RATE) <= 0.05 * RATE, f"{rate:.2f} starts/s, not {RATE} ± 5 %"
    assert worst <= RATE + BURST, f"{worst} starts in one 1 s window"
    assert len(spread) == 3


# ------------------------------------------------------------------ 5. concurrency

CONCURRENCY = 3


async def test_topic_concurrency_caps_running_attempts_across_processes(
    redis: aioredis.Redis, namespace: str, procs: WorkerProcesses, s: Any
) -> None:
    """concurrency=3 on a topic, three processes at concurrency 10 each (30 slots): sampled
    every few ms, stats' running never exceeds 3, nor do the recorded run intervals; and it
    reaches 3 (a cap of 1 would pass the first checks), with the next job starting as soon
    as one finishes."""
    await s.configure_topic(T["conc"], TopicOptions(concurrency=CONCURRENCY))
    await start_workers(procs)
    jobs = 24
    await s.schedule_many(
        [{"topic": T["conc"], "payload": {"n": i, "sleep": 0.2}} for i in range(jobs)]
    )
    samples: list[int] = []
    started = time.monotonic()
    deadline = started + 40
    while (st := await s.stats(T["conc"]))["completed"] < jobs:
        samples.append(st["running"])
        assert time.monotonic() < deadline, f"{st}\n{procs.logs()}"
        await asyncio.sleep(0.005)
    took = time.monotonic() - started
    got = await wait_runs(redis, namespace, jobs, 5, procs)
    overlap = max_overlap([(r["start"], r["end"]) for r in got])
    print(
        f"\nconcurrency {CONCURRENCY}: {len(samples)} samples, max running {max(samples)}, "
        f"max overlapping runs {overlap}, pids "
        f"{len({r['pid'] for r in got})}, {jobs} jobs in {took:.2f} s"
    )
    assert max(samples) <= CONCURRENCY, f"{max(samples)} running at once"
    assert overlap <= CONCURRENCY, f"{overlap} runs overlapped"
    assert max(samples) == CONCURRENCY and overlap == CONCURRENCY
    # 8 rounds of 0.2 s: a finished job lets the next one start at once, not when a
    # worker next happens to claim (the held jobs' RECHECK_MS, 1 s: ~8 s)
    assert took < 4.0, f"{jobs} jobs of 0.2 s at concurrency {CONCURRENCY} took {took:.1f} s"
