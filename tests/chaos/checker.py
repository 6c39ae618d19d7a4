"""The chaos run's invariant checker: reads Redis, the PostgreSQL audit, the outbox and
the workers' side files after the run (straight to the servers, not through the
proxies) and says which promise was broken, for which jobs. Nothing here is tolerated
silently: a job lost to `appendfsync everysec` in the last second before a Redis
SIGKILL is counted on a line of its own, and with `appendfsync always` it counts as a
violation too."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import redis.asyncio as aioredis

from audit.relay.stream import GROUP
from scheduler.core.keys import Keys

TERMINAL = {"completed", "failed", "cancelled"}
LOSS_WINDOW_MS = 1_000  # everysec: what a SIGKILL may take, the last second
ACK_SLACK_MS = 250  # the producer notes an acknowledgement a little after Redis wrote it
CLOCK_SLACK_MS = (
    100  # one host; the workers' clocks are calibrated to Redis TIME within a round trip
)


@dataclass
class JobRecord:
    """What the producer did with one job (all times wall-clock ms)."""

    kind: str
    topic: str
    run_at_ms: int
    acked_ms: int = 0  # when schedule returned (0: never acknowledged)
    cancel_ms: int = 0  # when a cancel call returned True (0: not cancelled by us)


@dataclass
class RunFacts:
    """Everything the checker knows about a run besides the servers' contents."""

    namespace: str
    appendfsync: str
    jobs: dict[str, JobRecord]
    crons: dict[str, tuple[int, int]]  # name -> (created ms, paused ms)
    redis_kills_ms: list[int]
    runs_dir: Path
    coalesced: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # misfire="coalesce": name -> (created, paused)


@dataclass
class Verdict:
    """Violations per invariant (must all be empty), the tolerated everysec loss, and the
    figures."""

    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    lost_last_second: list[str] = field(default_factory=list)
    figures: Counter[str] = field(default_factory=Counter)

    def total(self) -> int:
        return sum(len(v) for v in self.violations.values())

    def report(self) -> str:
        lines = ["invariants:"]
        for name in INVARIANTS:
            found = self.violations.get(name, [])
            lines.append(
                f"  {'FAIL' if found else 'ok  '} {name}: {len(found)} violations"
                + (f", e.g. {found[:3]}" if found else "")
            )
        lines.append(
            f"  jobs lost in the last second before a Redis SIGKILL (appendfsync everysec): "
            f"{len(self.lost_last_second)}"
            + (f" {self.lost_last_second[:5]}" if self.lost_last_second else "")
        )
        lines.append("figures: " + ", ".join(f"{k} {v}" for k, v in sorted(self.figures.items())))
        return "\n".join(lines)


INVARIANTS = (
    "every job terminal",
    "every listener run is an attempt row",
    "no job completed twice",
    "cancel wins",
    "each cron tick once",
    "no run before its time",
    "audit equals redis",
    "outbox acknowledged",
    "nothing acknowledged was lost",
    "no known topic completed as no_listener",
    "coalesced ticks as documented",
)
KNOWN_TOPIC_PREFIX = (
    "chaos."  # every topic of the run has a worker with listeners for it (tests/chaos/app.py)
)


def read_runs(runs_dir: Path) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """The side files: (job, attempt) -> its run records (start/end/raise), every process."""
    runs: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(runs_dir.glob("runs-*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                runs[(r["j"], int(r["a"]))].append(r)
    return runs


async def read_redis(redis: aioredis.Redis, keys: Keys) -> dict[str, dict[str, str]]:
    """Every job hash of the namespace: id -> state, attempts, topic, run_at."""
    ids = [
        k.decode()[len(keys.job_prefix) :]
        async for k in redis.scan_iter(match=keys.job_prefix + "*", count=1000)
    ]
    pipe = redis.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(keys.job(job_id), "state", "attempts", "topic", "run_at")
    out = {}
    for job_id, row in zip(ids, await pipe.execute()):
        state, attempts, topic, run_at = (v.decode() if v is not None else None for v in row)
        if state is not None:
            out[job_id] = {
                "state": state,
                "attempts": attempts or "0",
                "topic": topic or "",
                "run_at": run_at or "0",
            }
    return out


async def check(facts: RunFacts, redis: aioredis.Redis, database_url: str) -> Verdict:
    """Read everything and judge it (see INVARIANTS)."""
    v, keys = Verdict(), Keys(facts.namespace)
    jobs = await read_redis(redis, keys)
    runs = read_runs(facts.runs_dir)
    conn = await asyncpg.connect(database_url)
    try:
        audit = {
            r["id"]: r for r in await conn.fetch("SELECT id, status, attempts FROM schedule_audit")
        }
        attempt_rows = {
            (r["job_id"], r["attempt_no"]): r["outcome"]
            for r in await conn.fetch("SELECT job_id, attempt_no, outcome FROM schedule_attempts")
        }
        events = await conn.fetch(
            "SELECT job_id, event_type, attempt_no, (extract(epoch FROM ts) * 1000)::bigint "
            "AS ts_ms FROM schedule_events"
        )
    finally:
        await conn.close()
    by_job: dict[str, list[Any]] = defaultdict(list)
    for e in events:
        by_job[e["job_id"]].append(e)

    _check_loss(v, facts, jobs)
    for job_id, job in jobs.items():
        v.figures[f"jobs {job['state']}"] += 1
        if job["state"] not in TERMINAL:
            v.violations["every job terminal"].append(f"{job_id} {job['state']}")
    for (job_id, attempt), records in runs.items():
        v.figures["listener runs"] += 1
        if (job_id, attempt) not in attempt_rows:
            v.violations["every listener run is an attempt row"].append(f"{job_id}#{attempt}")
        start = (
            min(r["t"] for r in records if r["e"] == "start")
            if any(r["e"] == "start" for r in records)
            else 0
        )
        run_at = int(jobs.get(job_id, {}).get("run_at", 0))
        if start and run_at and start < run_at - CLOCK_SLACK_MS:
            v.violations["no run before its time"].append(
                f"{job_id}#{attempt} {run_at - start} ms early"
            )
    for job_id, evs in by_job.items():
        done = [e for e in evs if e["event_type"] == "completed"]
        if len(done) > 1:
            v.violations["no job completed twice"].append(f"{job_id} x{len(done)}")
        for e in done:
            key = (job_id, e["attempt_no"])
            if jobs.get(job_id, {}).get("topic", "").startswith("chaos.") and not any(
                r["e"] == "end" for r in runs.get(key, [])
            ):
                v.violations["no job completed twice"].append(
                    f"{job_id}#{e['attempt_no']} completed, no run ended"
                )
    _check_cancel(v, facts, jobs, by_job)
    _check_crons(v, facts, jobs, by_job)
    _check_coalesced(v, facts, jobs, runs, by_job)
    for (job_id, attempt), out in attempt_rows.items():
        if out == "no_listener" and jobs.get(job_id, {}).get("topic", "").startswith(
            KNOWN_TOPIC_PREFIX
        ):
            v.violations["no known topic completed as no_listener"].append(
                f"{job_id}#{attempt} ({jobs[job_id]['topic']})"
            )
    v.figures["solo jobs"] = sum(1 for j in jobs.values() if j["topic"] == "chaos.solo")
    for job_id, job in jobs.items():
        row = audit.get(job_id)
        if row is None or (row["status"], row["attempts"]) != (job["state"], int(job["attempts"])):
            got = None if row is None else (row["status"], row["attempts"])
            v.violations["audit equals redis"].append(
                f"{job_id} redis {(job['state'], job['attempts'])} pg {got}"
            )
    for job_id in (
        set(audit) - set(jobs) - set(v.lost_last_second)
    ):  # a counted loss keeps its audit row
        v.violations["audit equals redis"].append(f"{job_id} in the audit only")
    v.figures["audit rows"] = len(audit)
    v.figures["attempt rows"] = len(attempt_rows)
    v.figures["attempts worker_lost"] = sum(1 for o in attempt_rows.values() if o == "worker_lost")
    await _check_outbox(v, redis, keys)
    return v


def _check_loss(v: Verdict, facts: RunFacts, jobs: dict[str, dict[str, str]]) -> None:
    """An acknowledged job missing from Redis: tolerated (counted) only with everysec, and only
    when acknowledged within the last second before a SIGKILL of Redis."""
    for job_id, rec in facts.jobs.items():
        if rec.acked_ms and job_id not in jobs:
            in_window = any(
                k - LOSS_WINDOW_MS - ACK_SLACK_MS <= rec.acked_ms <= k for k in facts.redis_kills_ms
            )
            if facts.appendfsync == "everysec" and in_window:
                v.lost_last_second.append(job_id)
            else:
                v.violations["nothing acknowledged was lost"].append(
                    f"{job_id} acked at {rec.acked_ms}"
                )
    v.figures["jobs scheduled"] = sum(1 for r in facts.jobs.values() if r.acked_ms)


def _check_cancel(
    v: Verdict, facts: RunFacts, jobs: dict[str, dict[str, str]], by_job: dict[str, list[Any]]
) -> None:
    """A job whose cancel returned True ends cancelled, and no attempt of it starts after that."""
    for job_id, rec in facts.jobs.items():
        if not rec.cancel_ms:
            continue
        v.figures["cancelled by the producer"] += 1
        state = jobs.get(job_id, {}).get("state")
        if state is not None and state != "cancelled":
            v.violations["cancel wins"].append(f"{job_id} ended {state}")
        late = [
            e
            for e in by_job.get(job_id, [])
            if e["event_type"] == "attempt_started" and e["ts_ms"] > rec.cancel_ms + CLOCK_SLACK_MS
        ]
        if late:
            v.violations["cancel wins"].append(
                f"{job_id} attempt {late[0]['attempt_no']} started "
                f"{late[0]['ts_ms'] - rec.cancel_ms} ms after the cancel"
            )


def _check_crons(
    v: Verdict, facts: RunFacts, jobs: dict[str, dict[str, str]], by_job: dict[str, list[Any]]
) -> None:
    """Every tick from the first to the pause exists once (ids are cron:<name>:<ms>) and
    completed."""
    for name, (created, paused) in facts.crons.items():
        ticks = sorted(int(j.rsplit(":", 1)[1]) for j in jobs if j.startswith(f"cron:{name}:"))
        v.figures["cron ticks"] += len(ticks)
        for t in ticks:  # how late firing ran: a figure (Producer.crons_fired waits out a stall)
            fired = [
                e["ts_ms"]
                for e in by_job.get(f"cron:{name}:{t}", [])
                if e["event_type"] == "scheduled"
            ]
            if fired and min(fired) - t > v.figures["cron ticks fired late, worst ms"]:
                v.figures["cron ticks fired late, worst ms"] = min(fired) - t
                v.figures["cron ticks fired late, worst at t+ms"] = t - created
        bad = v.violations["each cron tick once"]
        if not ticks:
            bad.append(f"{name}: no tick at all")
            continue
        gaps = [(a, b) for a, b in zip(ticks, ticks[1:]) if b - a != 1000]
        if gaps:
            bad.append(f"{name}: ticks missing between {gaps[:3]}")
        if ticks[0] > created + 2_000 or ticks[-1] < paused - 2_000 or ticks[-1] > paused + 1_000:
            bad.append(f"{name}: ticks {ticks[0]}..{ticks[-1]} do not span {created}..{paused}")
        for t in ticks:
            if jobs[f"cron:{name}:{t}"]["state"] != "completed":
                bad.append(f"cron:{name}:{t} {jobs[f'cron:{name}:{t}']['state']}")


def _check_coalesced(
    v: Verdict,
    facts: RunFacts,
    jobs: dict[str, dict[str, str]],
    runs: dict[tuple[str, int], list[dict[str, Any]]],
    by_job: dict[str, list[Any]],
) -> None:
    """misfire="coalesce" (docs/how-to/cron.md; cron.plan_ticks): when firing resumes after
    a gap, one job stands for all the ticks missed, id'd by the first of them, and the schedule goes
    on from the next tick after now. So ticks are on the schedule's grid; a tick followed by a gap
    was fired (its `scheduled` event) only once the gap's last tick was due (the one run of that
    gap, never none: not fired on time and the ticks after it dropped); and every tick job ran to
    its end."""
    bad = v.violations["coalesced ticks as documented"]
    for name, (created, paused) in facts.coalesced.items():
        ticks = sorted(int(j.rsplit(":", 1)[1]) for j in jobs if j.startswith(f"cron:{name}:"))
        v.figures["coalesced ticks"] += len(ticks)
        if not ticks:
            bad.append(f"{name}: no tick at all")
            continue
        if (
            ticks[0] > created + 2_000
            or ticks[-1] > paused + 1_000
            or [t for t in ticks if t % 1000]
        ):
            bad.append(
                f"{name}: ticks {ticks[0]}..{ticks[-1]} off the grid or outside {created}..{paused}"
            )
        for a, b in zip(ticks, ticks[1:]):
            if b - a == 1000:
                continue
            v.figures["coalesced gaps"] += 1
            fired = [
                e["ts_ms"]
                for e in by_job.get(f"cron:{name}:{a}", [])
                if e["event_type"] == "scheduled"
            ]
            if not fired or min(fired) < b - 1000 - CLOCK_SLACK_MS:
                bad.append(
                    f"{name}: ticks {a + 1000}..{b - 1000} have "
                    f"no run (tick {a} fired at {fired[:1]})"
                )
        for t in ticks:
            job_id = f"cron:{name}:{t}"
            attempts = range(1, int(jobs[job_id]["attempts"]) + 1)
            ended = any(r["e"] == "end" for a in attempts for r in runs.get((job_id, a), []))
            if jobs[job_id]["state"] != "completed" or not ended:
                bad.append(f"{job_id} {jobs[job_id]['state']}, a run ended: {ended}")


async def _check_outbox(v: Verdict, redis: aioredis.Redis, keys: Keys) -> None:
    """The audit group delivered every entry and holds none unacknowledged."""
    pending = await redis.xpending(keys.outbox, GROUP)
    groups = {g["name"].decode(): g for g in await redis.xinfo_groups(keys.outbox)}
    last = await redis.xrevrange(keys.outbox, count=1)
    delivered = groups[GROUP]["last-delivered-id"].decode() if GROUP in groups else "0-0"
    if pending["pending"]:
        v.violations["outbox acknowledged"].append(f"{pending['pending']} entries pending")
    if last and _sid(last[0][0].decode()) > _sid(delivered):
        v.violations["outbox acknowledged"].append(f"entries after {delivered} never delivered")


def _sid(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)
