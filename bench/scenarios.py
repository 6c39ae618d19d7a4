"""The scenarios a driver runs: one coroutine each, timing its own window (window.py).

Every scenario gets the adapter, the handler's recorder, N, the Redis URL and a timeout,
and returns its metrics; the driver adds the CPU per job of the window.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from functools import partial
from typing import Any

from adapters.base import RETRY_DELAY_S, Adapter, Job, NotAvailable
from measure import Recorder, dist_ms, redis_commands, redis_cpu, redis_info
from window import WINDOW

CONCURRENCY = 50
PACED_RATE = 200.0  # jobs/s
BURST_LEAD_S = 3.0  # delayed_burst: every job due at now + 3 s
SPREAD_LEAD_S = 2.0  # delayed_spread: first job due at now + 2 s ...
SPREAD_SPAN_S = 5.0  # ... the last 5 s later
CLAIM_BATCH = 100  # claim: jobs per claim.lua call ...
CLAIM_CONCURRENCY = (
    4  # ... with this many calls in flight (as several workers would), so Redis is never idle
)
MEMORY_DELAY_S = 3600.0  # memory: jobs due in an hour (never run)
MEMORY_PAYLOAD_BYTES = 100  # ~100-byte JSON payload
PRIORITIES = (
    -1,
    0,
    1,
)  # drain_priority: job i gets PRIORITIES[i % 3] (horae's scale, higher first)
RATE_MAX = 2_000  # rate_limited: at most 2,000 starts ...
RATE_PER_S = 1.0  # ... per second, for the bench topic
RATE_STEADY = (
    0.25,
    0.95,
)  # rate_limited: the achieved rate is measured between these fractions of the starts
SPLIT_READY_S = 120.0  # e2e_split: how long the producer process may take to start and connect

ONE_PROCESS = "producer and worker in this one process, one asyncio loop"
PROCESS_MODEL = {
    sc: "worker in this process; the producer in a process of its own (no worker, no relay)"
    for sc in ("e2e_split", "paced_split")
}
PRODUCER_CMD: list[
    str
] = []  # e2e_split: the command that starts this system's producer (set by driver.py)


def payload(i: int, size: int = 0) -> dict[str, Any]:
    if not size:
        return {"i": i}
    base = len(json.dumps({"i": i, "pad": ""}, separators=(",", ":")))
    return {"i": i, "pad": "x" * max(0, size - base)}


# ------------------------------------------------------------------ scenarios
async def sc_enqueue(a: Adapter, rec: Recorder, n: int, url: str, timeout: float) -> dict[str, Any]:
    jobs = [Job(payload(i)) for i in range(n)]
    WINDOW.start()
    t0 = time.perf_counter()
    for j in jobs:
        await a.enqueue(j)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    return {"jobs_per_s": n / dt, "seconds": dt, "mode": "one await at a time"}


async def sc_enqueue_bulk(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    if not a.supports_bulk:
        raise NotAvailable("n/a (no bulk API)")
    jobs = [Job(payload(i)) for i in range(n)]
    WINDOW.start()
    t0 = time.perf_counter()
    await a.enqueue_bulk(jobs)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    return {"jobs_per_s": n / dt, "seconds": dt, "mode": "bulk API"}


async def _pre_enqueue(a: Adapter, jobs: list[Job]) -> None:
    if a.supports_bulk:
        await a.enqueue_bulk(jobs)
    else:
        for j in jobs:
            await a.enqueue(j)
    await a.settle()  # not timed: the pre-enqueue is setup, whatever path it took


async def _drain(
    a: Adapter, rec: Recorder, jobs: list[Job], url: str, timeout: float
) -> dict[str, Any]:
    """Pre-enqueue `jobs` (untimed), then time one worker running them all (drain and
    drain_priority)."""
    n = len(jobs)
    await _pre_enqueue(a, jobs)
    cmds0 = redis_commands(url)
    WINDOW.start()
    t0 = time.perf_counter()
    await a.start_worker(CONCURRENCY)
    await rec.wait(timeout)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    cmds = redis_commands(url) - cmds0
    return {
        "jobs_per_s": n / dt,
        "seconds": dt,
        "redis_cmds": cmds,
        "redis_cmds_per_s": cmds / dt,
        "redis_cmds_per_job": cmds / n,
    }


async def sc_drain(a: Adapter, rec: Recorder, n: int, url: str, timeout: float) -> dict[str, Any]:
    return await _drain(a, rec, [Job(payload(i)) for i in range(n)], url, timeout)


def priority_order(starts: list[float], prio: list[int]) -> dict[str, Any]:
    """How well the start order follows the priorities, from the handlers' start times.

    inversions_pct: among pairs of jobs of different priorities, the % where the lower
    priority job started strictly before the higher one (0 = priority order, ~50 = none).
    mean_rank.<p>: the mean start rank of priority p's jobs as a fraction of N (with three
    equal thirds in priority order: high 0.17, normal 0.5, low 0.83; without any: 0.5 each).
    """
    levels = sorted(set(prio), reverse=True)
    order = sorted(range(len(starts)), key=starts.__getitem__)
    n = len(order)
    started = dict.fromkeys(levels, 0)  # jobs of each priority started at an earlier instant
    inversions = pairs = 0
    i = 0
    while i < n:  # walk groups of equal start times: a tie is neither in order nor inverted
        j = i
        while j < n and starts[order[j]] == starts[order[i]]:
            j += 1
        for k in order[i:j]:
            inversions += sum(c for q, c in started.items() if q < prio[k])
        for k in order[i:j]:
            started[prio[k]] += 1
        i = j
    counts = {q: prio.count(q) for q in levels}
    for a in levels:
        for b in levels:
            if a > b:
                pairs += counts[a] * counts[b]
    rank_sum = dict.fromkeys(levels, 0)
    for rank, k in enumerate(order):
        rank_sum[prio[k]] += rank
    last_rank = {q: max(r for r, k in enumerate(order) if prio[k] == q) / n for q in levels}
    first_rank = {q: min(r for r, k in enumerate(order) if prio[k] == q) / n for q in levels}
    return {
        "inversions_pct": 100 * inversions / pairs if pairs else 0.0,
        "inverted_pairs": inversions,
        "pairs": pairs,
        "mean_rank": {str(q): rank_sum[q] / counts[q] / n for q in levels},
        "first_rank": {str(q): first_rank[q] for q in levels},
        "last_rank": {str(q): last_rank[q] for q in levels},
    }


async def sc_drain_priority(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    """drain with three priorities interleaved (job i: PRIORITIES[i % 3]); same worker as drain."""
    if not a.supports_priority:
        raise NotAvailable("n/a (no priorities)")
    prio = [PRIORITIES[i % len(PRIORITIES)] for i in range(n)]
    result = await _drain(
        a, rec, [Job(payload(i), priority=prio[i]) for i in range(n)], url, timeout
    )
    return {
        **result,
        "priorities": (
            f"{len(PRIORITIES)} interleaved: job i has {list(PRIORITIES)}[i % 3], higher first"
        ),
        "order": priority_order(rec.first_start, prio),
    }


async def sc_rate_limited(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    """A backlog of N jobs on a topic limited to RATE_MAX starts per RATE_PER_S; one worker
    (concurrency 50). The achieved rate is the slope of the handler starts between the RATE_STEADY
    fractions of N (skips a start-up burst the limiter may allow, and the tail)."""
    await a.set_rate_limit(RATE_MAX, RATE_PER_S)
    await _pre_enqueue(a, [Job(payload(i)) for i in range(n)])
    WINDOW.start()
    t0 = time.perf_counter()
    await a.start_worker(CONCURRENCY)
    await rec.wait(timeout)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    starts = sorted(rec.first_start)
    lo, hi = (int(f * (n - 1)) for f in RATE_STEADY)
    target = RATE_MAX / RATE_PER_S
    rate = (hi - lo) / (starts[hi] - starts[lo]) if starts[hi] > starts[lo] else float("inf")
    # the most starts seen in any window of RATE_PER_S (the limit itself, bursts included)
    most = j = 0
    for i in range(n):
        while starts[i] - starts[j] >= RATE_PER_S:
            j += 1
        most = max(most, i - j + 1)
    return {
        "rate_per_s": rate,
        "rate_error_pct": (rate - target) / target * 100,
        "target_per_s": target,
        "overall_per_s": n / dt,
        "seconds": dt,
        "max_starts_in_any_window": most,
        "steady_window": f"starts {RATE_STEADY[0]:.0%}..{RATE_STEADY[1]:.0%} of N, "
        f"{starts[hi] - starts[lo]:.2f} s",
        "limit": f"{RATE_MAX} per {RATE_PER_S:g} s",
    }


def now_job(i: int, at_now: bool) -> Job:
    """Job i for now: schedule_in(0) (due None) or, with at_now, a run_at of time.time() read
    just before the call, the way a user writes schedule_at(topic, datetime.now(tz))."""
    return Job(payload(i), due=time.time() if at_now else None)


async def sc_e2e(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float, at_now: bool = False
) -> dict[str, Any]:
    await a.start_worker(CONCURRENCY)
    enq = [0.0] * n
    cmds0 = redis_commands(url)
    WINDOW.start()
    t0 = time.perf_counter()
    for i in range(n):
        enq[i] = time.time()
        await a.enqueue(now_job(i, at_now))
    await rec.wait(timeout)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    cmds = redis_commands(url) - cmds0
    lat = [rec.first_start[i] - enq[i] for i in range(n)]
    return {
        "jobs_per_s": n / dt,
        "seconds": dt,
        "latency": dist_ms(lat),
        "redis_cmds_per_s": cmds / dt,
        "redis_cmds_per_job": cmds / n,
    }


async def pace(t0: float, i: int) -> bool:
    """Wait for call i's slot at PACED_RATE from perf_counter t0; True when it is > 5 ms late."""
    delay = t0 + i / PACED_RATE - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    return delay < -0.005


async def sc_paced(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float, at_now: bool = False
) -> dict[str, Any]:
    await a.start_worker(CONCURRENCY)
    await asyncio.sleep(0.5)  # let the worker settle into its idle wait
    enq = [0.0] * n
    WINDOW.start()
    t0 = time.perf_counter()
    behind = 0
    for i in range(n):
        behind += await pace(t0, i)
        enq[i] = time.time()
        await a.enqueue(now_job(i, at_now))
    await rec.wait(timeout)
    await a.finish()
    WINDOW.stop()
    lat = [rec.first_start[i] - enq[i] for i in range(n)]
    return {
        "latency": dist_ms(lat),
        "rate_per_s": PACED_RATE,
        "enqueues_more_than_5ms_behind": behind,
    }


async def _split(a: Adapter, rec: Recorder, n: int, timeout: float) -> tuple[float, dict[str, Any]]:
    """This process is one worker at concurrency 50; the producer a process of its own (its
    own client, no worker, no relay; driver.produce) that says READY, schedules on GO and
    reports each call's start time and its CPU. Returns the seconds from GO until the last
    handler ran (and, audit on, its events committed) and the producer's report; the
    producer's CPU inside its loop is added to the client CPU."""
    await a.start_worker(CONCURRENCY)
    await asyncio.sleep(0.5)  # let the worker settle into its idle wait
    proc = await asyncio.create_subprocess_exec(
        *PRODUCER_CMD, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None and proc.stdout is not None
    ready = await asyncio.wait_for(proc.stdout.readline(), SPLIT_READY_S)
    if ready.strip() != b"READY":
        await proc.wait()
        raise RuntimeError(f"the producer process did not start: {ready!r}, exit {proc.returncode}")
    WINDOW.start()
    t0 = time.perf_counter()
    proc.stdin.write(b"GO\n")
    await proc.stdin.drain()
    out = await proc.stdout.read()
    if await proc.wait() != 0:
        raise RuntimeError(f"the producer process failed with exit {proc.returncode}")
    line = next(ln for ln in out.decode().splitlines() if ln.startswith("BENCH-PRODUCER "))
    produced = json.loads(line[len("BENCH-PRODUCER ") :])
    await rec.wait(timeout)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    WINDOW.other_client_s = produced["cpu_s"]
    return dt, produced


async def sc_e2e_split(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    """The deployment users run: N jobs for now scheduled one await at a time by a producer
    process while one worker process runs them. jobs/s from GO until the last handler ran;
    latency = handler start − scheduling call start (one machine's clock)."""
    dt, produced = await _split(a, rec, n, timeout)
    enq = produced["enq"]
    lat = [rec.first_start[i] - enq[i] for i in range(n)]
    return {
        "jobs_per_s": n / dt,
        "seconds": dt,
        "latency": dist_ms(lat),
        "producer_jobs_per_s": n / max(1e-9, enq[-1] - enq[0]),
        "producer_cpu_s": produced["cpu_s"],
    }


async def sc_paced_split(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    """paced_at as users deploy it: the producer process schedules for now through the "at"
    API at 200/s (driver.produce paces it), one worker process runs them; latency p50/p99."""
    _, produced = await _split(a, rec, n, timeout)
    lat = [rec.first_start[i] - produced["enq"][i] for i in range(n)]
    return {
        "latency": dist_ms(lat),
        "rate_per_s": PACED_RATE,
        "enqueues_more_than_5ms_behind": produced["behind"],
    }


async def _delayed(a: Adapter, rec: Recorder, dues: list[float], timeout: float) -> dict[str, Any]:
    await a.start_worker(CONCURRENCY)
    await asyncio.sleep(0.5)
    first_due = min(dues)
    WINDOW.start()
    base = time.time()
    dues = [base + d for d in dues]
    for i, due in enumerate(dues):
        await a.enqueue(Job(payload(i), due=due))
    enqueued_by = time.time()
    await rec.wait(timeout + max(dues) - time.time())
    await a.finish()
    WINDOW.stop()
    late = [rec.first_start[i] - dues[i] for i in range(len(dues))]
    return {
        "lateness": dist_ms(late),
        "early_jobs": sum(1 for x in late if x < 0),
        "enqueue_finished_s_before_first_due": round(base + first_due - enqueued_by, 3),
    }


async def sc_delayed_burst(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    out = await _delayed(a, rec, [BURST_LEAD_S] * n, timeout)
    out["due"] = f"all {n} at the same instant, {BURST_LEAD_S:g} s after the first enqueue"
    return out


async def sc_delayed_spread(
    a: Adapter, rec: Recorder, n: int, url: str, timeout: float
) -> dict[str, Any]:
    dues = [SPREAD_LEAD_S + SPREAD_SPAN_S * i / max(1, n - 1) for i in range(n)]
    out = await _delayed(a, rec, dues, timeout)
    out["due"] = (
        f"{n} evenly over {SPREAD_SPAN_S:g} s, first {SPREAD_LEAD_S:g} s after the first enqueue"
    )
    return out


async def sc_retry(a: Adapter, rec: Recorder, n: int, url: str, timeout: float) -> dict[str, Any]:
    await _pre_enqueue(a, [Job(payload(i), retry=True) for i in range(n)])
    WINDOW.start()
    t0 = time.perf_counter()
    await a.start_worker(CONCURRENCY)
    await rec.wait(timeout)
    await a.finish()
    dt = time.perf_counter() - t0
    WINDOW.stop()
    await asyncio.sleep(RETRY_DELAY_S + 1.0)  # not measured: would a third run come?
    hist: dict[int, int] = {}
    for r in rec.runs:
        hist[r] = hist.get(r, 0) + 1
    return {
        "seconds": dt,
        "exactly_twice": hist == {2: n},
        "runs_histogram": {str(k): v for k, v in sorted(hist.items())},
        "retry_delay_s": RETRY_DELAY_S,
    }


async def sc_memory(a: Adapter, rec: Recorder, n: int, url: str, timeout: float) -> dict[str, Any]:
    sample = json.dumps(payload(n - 1, MEMORY_PAYLOAD_BYTES), separators=(",", ":"))
    await a.enqueue(
        Job(payload(0, MEMORY_PAYLOAD_BYTES), due=time.time() + MEMORY_DELAY_S)
    )  # warm up, not counted
    gc.collect()
    m0 = redis_info(url, "memory")
    due = time.time() + MEMORY_DELAY_S
    WINDOW.start()
    for i in range(1, n + 1):
        await a.enqueue(Job(payload(i, MEMORY_PAYLOAD_BYTES), due=due))
    await a.finish()  # horae+audit: the relay has committed (and may trim) the outbox
    WINDOW.stop()
    m1 = redis_info(url, "memory")
    used = int(m1["used_memory"]) - int(m0["used_memory"])
    dataset = int(m1["used_memory_dataset"]) - int(m0["used_memory_dataset"])
    keys = redis_info(url, "keyspace")
    return {
        "bytes_per_job": used / n,
        "dataset_bytes_per_job": dataset / n,
        "payload_json_bytes": len(sample),
        "used_memory_delta": used,
        "keyspace": keys,
    }


async def sc_claim(a: Adapter, rec: Recorder, n: int, url: str, timeout: float) -> dict[str, Any]:
    """horae's claim path alone: claim.lua in batches of 100 over N due jobs, no handlers, no
    settlement."""
    claim = getattr(a, "claim_batches", None)
    if claim is None:
        raise NotAvailable("n/a (horae only)")
    await _pre_enqueue(a, [Job(payload(i)) for i in range(n)])
    cmds0, cpu0 = redis_commands(url), redis_cpu(url)
    WINDOW.start()
    t0 = time.perf_counter()
    calls, claimed = await claim(CLAIM_BATCH, CLAIM_CONCURRENCY)
    dt = time.perf_counter() - t0
    WINDOW.stop()
    cmds, cpu = redis_commands(url) - cmds0, redis_cpu(url) - cpu0
    if claimed != n:
        raise RuntimeError(f"claimed {claimed} of {n}")
    # redis_busy near 1.0: the server's one thread was saturated, so the rate is Redis's own limit
    # for these commands (not the client's); the INFO calls around the window cost microseconds.
    return {
        "jobs_per_s": n / dt,
        "seconds": dt,
        "script_calls": calls,
        "redis_cmds_per_s": cmds / dt,
        "redis_cmds_per_job": cmds / n,
        "batch": CLAIM_BATCH,
        "concurrency": CLAIM_CONCURRENCY,
        "redis_busy": cpu / dt,
    }


SCENARIOS = {
    "enqueue": sc_enqueue,
    "enqueue_bulk": sc_enqueue_bulk,
    "drain": sc_drain,
    "drain_priority": sc_drain_priority,
    "rate_limited": sc_rate_limited,
    "e2e": sc_e2e,
    "e2e_at": partial(sc_e2e, at_now=True),  # through each system's "at" API with the current time
    "e2e_split": sc_e2e_split,
    "paced_split": sc_paced_split,
    "paced": sc_paced,
    "paced_at": partial(sc_paced, at_now=True),
    "delayed_burst": sc_delayed_burst,
    "delayed_spread": sc_delayed_spread,
    "retry": sc_retry,
    "memory": sc_memory,
    "claim": sc_claim,
}
