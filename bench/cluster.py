"""The `cluster` scenario: horae on a real Redis Cluster (3 masters + 3 replicas on loopback,
tests/cluster/servers.py), 1 partition vs 6, drain and e2e; the cost of durability="replicated";
and the per-job Redis cost that the scale-out projection of bench/README.md rests on:

- Redis CPU per job per master, from each master's INFO cpu (used_cpu_user + used_cpu_sys)
  around the timed window;
- callgrind instructions per job: one cluster-enabled node serving all 16384 slots under
  `valgrind --tool=callgrind`, counters zeroed before and dumped after a drain of N jobs.

On 2 cores the Python worker, not Redis, bounds the measured jobs/s: the projection uses the
Redis cost per job, not the measured rate.

    .venv/bin/python bench/cluster.py [--jobs 5000] [--callgrind-jobs 2000]
        [--out bench/results/cluster.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import redis as sync_redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from horae.settings import load_settings  # noqa: E402
from listeners import ListenerRegistry, ScheduleArrivedEvent  # noqa: E402
from scheduler import Scheduler  # noqa: E402
from tests.cluster.servers import RedisCluster, binaries, free_ports, start_cluster  # noqa: E402

CONCURRENCY = 50
TOPIC = "bench.cluster"


def settings(url: str, namespace: str, partitions: int, durability: str = "async") -> Any:
    """Outbox on (as in production), no relay (its cost is the audit's, measured elsewhere)."""
    s = load_settings(env={}, redis_url=url, namespace=namespace)
    return s.model_copy(
        update={
            "audit": s.audit.model_copy(update={"relay": False}),
            "cluster": s.cluster.model_copy(
                update={"partitions": partitions, "durability": durability}
            ),
            "retention": s.retention.model_copy(update={"completed_count": 10**7}),
        }
    )


def cpu_of(ports: list[int]) -> dict[int, float]:
    """Each node's Redis CPU seconds so far (user + sys)."""
    out = {}
    for port in ports:
        with sync_redis.Redis(port=port) as c:
            info = c.info("cpu")
            out[port] = float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return out


def masters(cluster: RedisCluster) -> list[int]:
    ports = []
    for n in cluster.nodes:
        with n.client() as c:
            if c.info("replication")["role"] == "master":
                ports.append(n.port)
    return ports


async def drain(
    url: str,
    ports: list[int],
    n: int,
    partitions: int,
    durability: str = "async",
    around: Callable[[str], AbstractContextManager[None]] = lambda part: nullcontext(),
) -> dict[str, Any]:
    """N jobs stored first (schedule_many), then one worker runs them all: jobs/s and Redis CPU per
    job. `around(part)` wraps each part, "enqueue" and "run" (bench/redis_instructions.py counts
    instructions there)."""
    ns, reg, done = f"bench-{uuid.uuid4().hex[:8]}", ListenerRegistry(), asyncio.Event()
    count = [0]

    @reg.on_event(TOPIC)
    async def run(event: ScheduleArrivedEvent) -> None:
        count[0] += 1
        if count[0] == n:
            done.set()

    async with Scheduler(settings=settings(url, ns, partitions, durability), listeners=reg) as s:
        t0 = time.perf_counter()
        with around("enqueue"):
            for start in range(0, n, 1000):
                items = [
                    {"topic": TOPIC, "payload": {"i": i}}
                    for i in range(start, min(start + 1000, n))
                ]
                await s.schedule_many(items)
        enqueue_s = time.perf_counter() - t0
        before = cpu_of(ports)
        t0 = time.perf_counter()
        with around("run"):
            async with s.worker(concurrency=CONCURRENCY):
                await asyncio.wait_for(done.wait(), timeout=600)
                while (await s.stats())["completed"] < n:
                    await asyncio.sleep(0.01)
                dt = time.perf_counter() - t0
        after = cpu_of(ports)
    per_node = {p: round((after[p] - before[p]) / n * 1e6, 2) for p in ports}
    return {
        "scenario": "drain",
        "partitions": partitions,
        "durability": durability,
        "jobs": n,
        "jobs_per_s": round(n / dt, 1),
        "enqueue_jobs_per_s": round(n / enqueue_s, 1),
        "redis_cpu_us_per_job_by_master": per_node,
        "redis_cpu_us_per_job": round(sum(per_node.values()), 2),
    }


async def e2e(url: str, ports: list[int], n: int, partitions: int) -> dict[str, Any]:
    """A worker running while a producer schedules N jobs due now: jobs/s and schedule-to-start
    latency."""
    ns, reg, late = f"bench-{uuid.uuid4().hex[:8]}", ListenerRegistry(), []
    done = asyncio.Event()

    @reg.on_event(TOPIC)
    async def run(event: ScheduleArrivedEvent) -> None:
        late.append(time.time() * 1000 - event.payload["t"])
        if len(late) == n:
            done.set()

    async with Scheduler(settings=settings(url, ns, partitions), listeners=reg) as s:
        async with s.worker(concurrency=CONCURRENCY):
            before = cpu_of(ports)
            t0 = time.perf_counter()
            for start in range(0, n, 50):
                await asyncio.gather(
                    *(
                        s.schedule_in(TOPIC, 0, payload={"t": time.time() * 1000})
                        for _ in range(start, min(start + 50, n))
                    )
                )
            await asyncio.wait_for(done.wait(), timeout=600)
            dt = time.perf_counter() - t0
            after = cpu_of(ports)
    q = statistics.quantiles(late, n=100)
    return {
        "scenario": "e2e",
        "partitions": partitions,
        "jobs": n,
        "jobs_per_s": round(n / dt, 1),
        "latency_ms_p50": round(q[49], 2),
        "latency_ms_p99": round(q[98], 2),
        "redis_cpu_us_per_job": round(sum(after[p] - before[p] for p in ports) / n * 1e6, 2),
    }


async def call_latency(url: str, n: int, durability: str) -> dict[str, Any]:
    """One scheduling call at a time: what WAIT adds to a transition's round trip."""
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    took = []
    async with Scheduler(
        settings=settings(url, ns, 6, durability), listeners=ListenerRegistry()
    ) as s:
        for _ in range(50):
            await s.schedule_in(TOPIC, 3600)
        for _ in range(n):
            t0 = time.perf_counter()
            await s.schedule_in(TOPIC, 3600)
            took.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(took, n=100)
    return {
        "scenario": "schedule_call",
        "durability": durability,
        "calls": n,
        "ms_p50": round(q[49], 3),
        "ms_p99": round(q[98], 3),
    }


def callgrind(n: int, partitions: int, work: Path) -> dict[str, Any]:
    """Instructions per job of one cluster-enabled node holding every slot, under callgrind."""
    server, _ = binaries()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        return {"scenario": "callgrind", "status": "valgrind not installed"}
    port = free_ports(1)[0]
    d = work / f"cg-{partitions}"
    d.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={d}/callgrind.out.%p",
            str(server),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--cluster-enabled",
            "yes",
            "--dir",
            str(d),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with sync_redis.Redis(port=port) as c:
                    c.ping()
                    c.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                break
            except sync_redis.RedisError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        while True:
            with sync_redis.Redis(port=port) as c:
                if "cluster_state:ok" in c.execute_command("CLUSTER", "INFO").decode():
                    break
            time.sleep(0.2)
        url = f"redis+cluster://127.0.0.1:{port}"
        asyncio.run(drain(url, [port], 200, partitions))  # warm: scripts loaded, code paths touched
        subprocess.run(
            ["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True
        )
        asyncio.run(drain(url, [port], n, partitions))
        subprocess.run(
            ["callgrind_control", "--dump=measured", str(proc.pid)], check=True, capture_output=True
        )
        instructions = _dumped_instructions(d)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {
        "scenario": "callgrind",
        "partitions": partitions,
        "jobs": n,
        "instructions_per_job": round(instructions / n) if instructions else None,
        "note": (
            "enqueue (schedule_many) + claim + complete of "
            "each job, outbox on; one node, every slot"
        ),
    }


def _dumped_instructions(d: Path) -> int | None:
    for dump in sorted(d.glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime, reverse=True):
        text = dump.read_text(errors="replace")
        if "measured" not in text[:2000]:
            continue
        for line in text.splitlines():
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--callgrind-jobs", type=int, default=2000)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "cluster.json"))
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="horae-bench-cluster-"))
    results: list[dict[str, Any]] = []
    cluster = start_cluster(work / "cluster")
    try:
        ports = masters(cluster)
        for partitions in (1, 6):
            results.append(asyncio.run(drain(cluster.url, ports, args.jobs, partitions)))
            print(json.dumps(results[-1]), flush=True)
            results.append(asyncio.run(e2e(cluster.url, ports, args.jobs, partitions)))
            print(json.dumps(results[-1]), flush=True)
        results.append(asyncio.run(drain(cluster.url, ports, args.jobs, 6, "replicated")))
        print(json.dumps(results[-1]), flush=True)
        for durability in ("async", "replicated"):
            results.append(asyncio.run(call_latency(cluster.url, 1000, durability)))
            print(json.dumps(results[-1]), flush=True)
    finally:
        cluster.stop()
    for partitions in (1, 6):
        results.append(callgrind(args.callgrind_jobs, partitions, work))
        print(json.dumps(results[-1]), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}, indent=2
        )
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
