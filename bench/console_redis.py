"""The console bench's Redis side: a month of jobs played through the engine's own scripts
(enqueue, claim, complete, fail, cancel) with a moved clock, so every job hash, state set
and count is what a real month leaves behind (nothing written around the scripts). What
happened to each job is kept for the audit side (console_pg.py)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.api import Scheduler
from scheduler.core.job import ClaimedJob, NewJob, Settlement
from scheduler.core.outbox import error_record
from scheduler.core.request import JobRequest
from scheduler.worker.advertise import entry_json

DAY_MS = 86_400_000
SLICE_JOBS = 1000  # jobs created per simulated slice (one pipelined enqueue_many)
BACKOFF_MS = 30_000
# ~20 topics, Zipf-like volumes, each with its own failure rate (a failed job: all attempts failed).
TOPICS: tuple[tuple[str, float, float], ...] = tuple(
    (name, 1.0 / (rank + 1), fail)
    for rank, (name, fail) in enumerate(
        [
            ("email.send", 0.02),
            ("billing.charge", 0.08),
            ("billing.remind", 0.03),
            ("sms.send", 0.05),
            ("push.notify", 0.04),
            ("report.daily", 0.02),
            ("invoice.render", 0.06),
            ("payments.capture", 0.25),
            ("payments.refund", 0.10),
            ("search.reindex", 0.03),
            ("orders.expire", 0.01),
            ("cart.abandon", 0.02),
            ("webhook.deliver", 0.30),
            ("export.csv", 0.07),
            ("image.resize", 0.04),
            ("user.cleanup", 0.01),
            ("fraud.score", 0.05),
            ("ledger.close", 0.02),
            ("crm.sync", 0.15),
            ("audit.archive", 0.01),
        ]
    )
)
ERRORS = [
    ("TimeoutError", "upstream {host} did not answer in 30s"),
    ("HTTPError", "POST https://{host}/v1/charges returned 502 Bad Gateway"),
    ("ValueError", "invoice {n} has no customer"),
    ("ConnectionResetError", "[Errno 104] Connection reset by peer ({host})"),
]
TRACEBACK = (
    'Traceback (most recent call last):\n  File "/app/listeners.py", line 42, in handle\n'
    '    await client.post(url, json=body)\n  File "/app/http.py", line 88, in post\n'
    "    raise HTTPError(resp.status)\n"
)


@dataclass(slots=True)
class Plan:
    """One job: what it will do (fate, attempts) and what it did (for the audit rows)."""

    id: str
    topic: str
    fate: str  # completed | failed | retrying | running | cancelled | scheduled
    tries: int  # attempts it makes (retrying: failed attempts before the long retry)
    max_attempts: int
    key: str
    created_ms: int
    run_at_ms: int
    payload: str
    attempts: list[tuple[Any, ...]] = field(
        default_factory=list
    )  # (no, worker, start, end, outcome, error|None, due)
    ended_ms: int | None = None


@dataclass
class Filled:
    """What the Redis side holds, for the audit side and for picking request targets."""

    plans: list[Plan]
    seconds: float
    now_ms: int


def _fate(rng: random.Random, fail: float) -> tuple[str, int, int]:
    """(fate, tries, max_attempts) of an ordinary (not recent) job."""
    r = rng.random()
    if r < 0.03:
        return "scheduled", 0, 3
    if r < 0.04:
        return "cancelled", 0, 3
    if rng.random() < fail:
        m = rng.choice((3, 3, 5))
        return "failed", m, m
    return "completed", rng.choices((1, 2, 3), (90, 8, 2))[0], 3


def _job(
    s: Scheduler,
    rng: random.Random,
    topic: str,
    fate: str,
    tries: int,
    max_attempts: int,
    created: int,
    run_at: int,
) -> tuple[NewJob, Plan]:
    n = rng.randrange(10**6)
    payload = {
        "invoiceId": f"inv-{n}",
        "amount": rng.randrange(100, 100_000),
        "currency": "EUR",
        "customer": f"cust-{rng.randrange(100_000)}",
        "note": "x" * rng.randrange(0, 60),
    }
    key = f"cust-{rng.randrange(100_000)}" if rng.random() < 0.4 else None
    request = JobRequest(
        topic=topic, run_at_ms=run_at, payload=payload, retry={"attempts": max_attempts}, key=key
    )
    job = s._scheduling.build_job(request, now_ms=created)
    return job, Plan(
        job.id, topic, fate, tries, max_attempts, key or "", created, job.due_ms, job.payload_json
    )


def _settle(
    c: ClaimedJob, p: Plan, now: int, until_ms: int, rng: random.Random
) -> tuple[str, Settlement] | None:
    """The settlement of a claimed attempt by the job's plan (None: left running)."""
    if p.fate == "running":
        p.attempts.append((c.attempt, c.token.split(":")[0], now, None, None, None, c.due_ms))
        return None
    fails = p.fate in ("failed", "retrying") or c.attempt < p.tries
    worker = c.token.split(":")[0]
    end = now + rng.randrange(20, 3000)
    if not fails:
        p.attempts.append((c.attempt, worker, now, end, "succeeded", None, c.due_ms))
        p.ended_ms = end
        return "complete", Settlement(c.id, c.token, "succeeded")
    etype, text = rng.choice(ERRORS)
    err = error_record(
        etype,
        text.format(host=f"api-{rng.randrange(9)}.internal", n=rng.randrange(10**6)),
        TRACEBACK,
    )
    p.attempts.append((c.attempt, worker, now, end, "failed", err, c.due_ms))
    if p.fate == "retrying" and c.attempt >= p.tries:
        return "fail", Settlement(
            c.id, c.token, "failed", err, until_ms + rng.randrange(60_000, 3_600_000)
        )
    if c.attempt < p.max_attempts and (p.fate != "failed" or c.attempt < p.tries):
        return "fail", Settlement(c.id, c.token, "failed", err, end + BACKOFF_MS)
    p.ended_ms = end
    return "fail", Settlement(c.id, c.token, "failed", err, -1)


async def _play(
    s: Scheduler, plans: dict[str, Plan], start: int, later_ms: int, rng: random.Random, keep: int
) -> None:
    """Claim and settle everything due at `start`, then the retries that follow, with the
    clock moved by hand until nothing is due; a job left retrying is due after `later_ms`."""
    store, now = s.store, start
    while True:
        claimed, _, _ = await store.claim(now, 1000, 30_000, f"w-bench-{rng.randrange(4)}")
        if not claimed:
            break
        done: list[Settlement] = []
        failed: list[Settlement] = []
        for c in claimed:
            out = _settle(c, plans[c.id], now, later_ms, rng)
            if out is not None:
                (done if out[0] == "complete" else failed).append(out[1])
        end = now + 3000
        for i in range(0, len(done), 250):
            await store.complete(done[i : i + 250], end, keep)
        for i in range(0, len(failed), 250):
            await store.fail(failed[i : i + 250], end)
        now = end + BACKOFF_MS


async def fill(
    s: Scheduler,
    jobs: int,
    days: int,
    seed: int,
    say: Any,
    ended: Callable[[list[Plan]], None] = lambda plans: None,
) -> Filled:
    """Play `jobs` jobs over the last `days` days through the scripts; return their plans.
    `ended` gets the plans of jobs that will not change any more every 100 slices (and the
    rest at the end), so their audit rows can be written meanwhile."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    now_ms = s.clock.now_ms()
    start_ms = now_ms - days * DAY_MS
    names, weights = [t[0] for t in TOPICS], [t[1] for t in TOPICS]
    fail_of = {t[0]: t[2] for t in TOPICS}
    keep = jobs * 2  # retention set high enough that the month stays (README: Console pages)
    recent = max(1, jobs // 180)  # retrying and running jobs: due in the last minutes
    ordinary = jobs - recent
    slices = max(1, ordinary // SLICE_JOBS)
    span = (now_ms - 600_000 - start_ms) // slices
    plans: dict[str, Plan] = {}
    handed = 0  # plans passed to `ended` so far (in creation order)
    outbox = s.store.keys.outbox
    for k in range(slices):
        lo = start_ms + k * span
        count = ordinary // slices + (1 if k < ordinary % slices else 0)
        batch, cancel = [], []
        for topic in rng.choices(names, weights, k=count):
            fate, tries, m = _fate(rng, fail_of[topic])
            run_at = (
                now_ms + rng.randrange(3_600_000, 14 * DAY_MS)
                if fate == "scheduled"
                else lo + rng.randrange(span)
            )
            job, plan = _job(s, rng, topic, fate, tries, m, lo, run_at)
            batch.append(job)
            plans[job.id] = plan
            if fate == "cancelled":
                cancel.append(plan)
        await s.store.enqueue_many(batch, lo)
        await asyncio.gather(*(s.store.cancel(p.id, lo + 1000) for p in cancel))
        for p in cancel:
            p.ended_ms = lo + 1000
        await _play(s, plans, lo + span, now_ms, rng, keep)
        await s.store.wire.call(
            "XTRIM", outbox, "MAXLEN", "0"
        )  # (no relay here: the audit side is loaded apart)
        if k % 100 == 99:
            say(f"  redis: {len(plans):,} jobs played ({time.perf_counter() - t0:.0f} s)")
            ended(list(plans.values())[handed:])
            handed = len(plans)
    await _recent(s, plans, rng, recent, now_ms, keep, names, weights)
    ended(list(plans.values())[handed:])
    await s.store.wire.call("XTRIM", outbox, "MAXLEN", "0")
    await _workers(s, names, now_ms)
    return Filled(list(plans.values()), time.perf_counter() - t0, now_ms)


async def _recent(
    s: Scheduler,
    plans: dict[str, Plan],
    rng: random.Random,
    n: int,
    now_ms: int,
    keep: int,
    names: list[str],
    weights: list[float],
) -> None:
    """Jobs of the last ten minutes left retrying (a failed attempt, the next one due
    within the hour) or running (claimed, never settled: no worker runs here)."""
    lo = now_ms - 600_000
    batch = []
    for topic in rng.choices(names, weights, k=n):
        fate = "running" if rng.random() < 0.1 else "retrying"
        job, plan = _job(
            s, rng, topic, fate, rng.choice((1, 2)), 5, lo, lo + rng.randrange(300_000)
        )
        batch.append(job)
        plans[job.id] = plan
    await s.store.enqueue_many(batch, lo)
    await _play(s, plans, lo + 300_000, now_ms, rng, keep)


async def _workers(s: Scheduler, names: list[str], now_ms: int) -> None:
    """Four live workers in the registry, as their heartbeats write them (an hour's TTL,
    so they stay live through the measurements)."""
    ttl = 3_600_000
    for i in range(4):
        topics = names[i * 5 : (i + 1) * 5]
        await s.store.advertise_worker(
            f"w-bench-{i}",
            entry_json(topics, 50, 3, False, 1000 + i, now_ms, ttl, host=f"bench-host-{i % 2}"),
            topics,
            now_ms,
            ttl,
        )


def summary(filled: Filled) -> dict[str, int]:
    """Jobs per fate and attempts played."""
    out: dict[str, int] = {}
    for p in filled.plans:
        out[p.fate] = out.get(p.fate, 0) + 1
    out["attempts"] = sum(len(p.attempts) for p in filled.plans)
    return out
