"""Fan-in (issue 32): N children, then one parent that runs once every child is done and reads
their results; horae two ways: `horae` (`schedule_many` of the children, then
`schedule_in(..., after=ids)`) and `horae-flow` (one `s.flow(Flow(parent, children=[...]))`: the
whole tree in one atomic call) against BullMQ's FlowProducer (one `add` of the parent with N
children), side by side on one private Redis, each system in a fresh process of its own venv,
repetitions interleaved.

    .venv/bin/python bench/fanin.py [--children 10000] [--reps 3]
        [--systems horae,horae-flow,bullmq]

Measured per run, in one process per system (producer and worker share it, as in the `e2e`
scenario of bench/README.md): `create` = from the first call until the whole tree is written;
`total` = from the first call until the parent's listener runs and has seen every child's
result; jobs/s = (N + 1) / total; the driver's CPU and redis-server's CPU per job over `total`.
Both workers run at concurrency 50 with the systems' defaults; the audit is off for horae (the
bench's `horae` system), as the peers have none. Needs `make bench` to have made
bench/.venvs/bullmq.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS, ROOT, log, python_of  # noqa: E402
from measure import redis_cpu  # noqa: E402
from servers import RedisServer, pin  # noqa: E402

CONCURRENCY = 50
CHUNK = 1_000  # children per schedule_many call (bullmq's adapter chunks addBulk the same)
CHILD, PARENT = "fanin.child", "fanin.parent"


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def run_horae(url: str, n: int, flow: bool = False) -> dict[str, float]:
    """horae: the children in chunks of `schedule_many`, the parent `after=` all of them; or
    (`flow`) the parent and its children as one Flow."""
    from horae.settings import load_settings
    from listeners import ListenerRegistry
    from scheduler import Flow, Scheduler

    settings = load_settings(env={}, redis_url=url, namespace="bench-fanin")
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"enabled": False})}
    )
    registry, ended = ListenerRegistry(), asyncio.Event()
    seen: dict[str, Any] = {}

    async def child(event: Any) -> int:
        return int(event.payload["i"])

    async def parent(event: Any) -> None:
        seen.update(event.children_results if flow else event.parent_results)
        ended.set()

    registry.add(CHILD, child)
    registry.add(PARENT, parent)
    s = Scheduler(settings=settings, listeners=registry)
    await s.connect()
    worker = s.make_worker(concurrency=CONCURRENCY)
    await worker.start()
    try:
        c0, r0, t0 = cpu_s(), redis_cpu(url), time.perf_counter()
        if flow:
            await s.flow(Flow(PARENT, children=[Flow(CHILD, {"i": i}) for i in range(n)]))
        else:
            ids: list[str] = []
            for start in range(0, n, CHUNK):
                items = [
                    {"topic": CHILD, "payload": {"i": i}}
                    for i in range(start, min(n, start + CHUNK))
                ]
                ids += await s.schedule_many(items)
            await s.schedule_in(PARENT, 0, after=ids)
        created = time.perf_counter() - t0
        await asyncio.wait_for(ended.wait(), timeout=600)
        total = time.perf_counter() - t0
        c1, r1 = cpu_s(), redis_cpu(url)
    finally:
        await worker.stop(grace=5)
        await s.close()
    if sorted(seen.values()) != list(range(n)):
        raise SystemExit(f"horae: the parent saw {len(seen)} of {n} children's results")
    return result(n, created, total, c1 - c0, r1 - r0)


async def run_bullmq(url: str, n: int) -> dict[str, float]:
    """BullMQ: one FlowProducer.add of the parent with its N children."""
    from bullmq import FlowProducer, Worker

    ended = asyncio.Event()
    seen: dict[str, Any] = {}

    async def process(job: Any, token: str) -> Any:
        if job.name == CHILD:
            return int(job.data["i"])
        seen.update(await job.getChildrenValues())
        ended.set()
        return None

    opts = {"connection": url, "concurrency": CONCURRENCY}
    workers = [Worker(CHILD, process, opts), Worker(PARENT, process, opts)]
    flows = FlowProducer({"connection": url})
    try:
        c0, r0, t0 = cpu_s(), redis_cpu(url), time.perf_counter()
        children = [{"name": CHILD, "queueName": CHILD, "data": {"i": i}} for i in range(n)]
        await flows.add({"name": PARENT, "queueName": PARENT, "data": {}, "children": children})
        created = time.perf_counter() - t0
        await asyncio.wait_for(ended.wait(), timeout=600)
        total = time.perf_counter() - t0
        c1, r1 = cpu_s(), redis_cpu(url)
    finally:
        for w in workers:
            await w.close()
        await flows.close()
    if sorted(seen.values()) != list(range(n)):
        raise SystemExit(f"bullmq: the parent saw {len(seen)} of {n} children's values")
    return result(n, created, total, c1 - c0, r1 - r0)


def result(n: int, created: float, total: float, client: float, redis: float) -> dict[str, float]:
    jobs = n + 1
    return {
        "create_s": round(created, 3),
        "total_s": round(total, 3),
        "jobs_per_s": round(jobs / total, 1),
        "client_us_per_job": round(client * 1e6 / jobs, 1),
        "redis_us_per_job": round(redis * 1e6 / jobs, 1),
    }


def one_run(system: str, server: RedisServer, n: int) -> dict[str, float]:
    """One run of `system` in a fresh process of its own venv, pinned to the client core."""
    server.command("FLUSHALL")
    out = subprocess.run(
        [
            *pin(1),
            str(python_of(system)),
            __file__,
            "--role",
            system,
            "--redis-url",
            server.url,
            "--children",
            str(n),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{system} failed:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--children", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--systems", default="horae,horae-flow,bullmq")
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role:
        if args.role == "bullmq":
            done = asyncio.run(run_bullmq(args.redis_url, args.children))
        else:
            done = asyncio.run(run_horae(args.redis_url, args.children, args.role == "horae-flow"))
        print(json.dumps(done))
        return
    systems = args.systems.split(",")
    server = RedisServer()
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    try:
        log(f"redis-server {server.version} on port {server.port}; {args.children} children")
        for rep in range(args.reps):
            for system in systems:
                runs[system].append(one_run(system, server, args.children))
                log(f"rep {rep} {system}: {runs[system][-1]}")
    finally:
        server.stop()
    medians = {s: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for s, rs in runs.items()}
    log("\n| system | jobs/s | create s | total s | client µs/job | Redis µs/job |")
    log("|---|---:|---:|---:|---:|---:|")
    for s, m in medians.items():
        log(
            f"| {s} | {m['jobs_per_s']:,.0f} | {m['create_s']:.2f} | {m['total_s']:.2f} | "
            f"{m['client_us_per_job']:.0f} | {m['redis_us_per_job']:.0f} |"
        )
    for name in ("horae", "horae-flow"):
        if name in medians and "bullmq" in medians:
            ratio = medians[name]["jobs_per_s"] / medians["bullmq"]["jobs_per_s"]
            log(f"\n{name} ÷ bullmq (jobs/s, medians of {args.reps}): {ratio:.2f}×")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"fanin-{stamp}.json"
    path.write_text(json.dumps({"children": args.children, "runs": runs, "medians": medians}))
    log(f"written {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
