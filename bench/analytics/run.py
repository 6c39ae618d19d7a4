"""Benchmark of the nightly analytics (not a test): synthetic history of
`--attempts` attempt rows over `--days` days and `--topics` topics.

    .venv/bin/python bench/analytics/run.py --attempts 10000000      # full scale
    .venv/bin/python bench/analytics/run.py --attempts 1000000       # a smaller first run

Steps: (1) generate the days as Parquet with pyarrow (the exported layout);
(2) load the last `--pg-days` days into a scratch PostgreSQL database and time
the export of those days (rows/s); (3) the whole nightly run over the last day
(export that day, analyze it with its 7-day baseline, publish files and the
Postgres tables) in a child process; (4) the 30-day analysis (no export) in a
child process. Child runs are timed wall-clock, JVM start included, and their
memory is the peak of the summed RSS of the child and its JVM (sampled from
/proc every 0.2 s). Results: bench/analytics/results/<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from generate import generate_day  # noqa: E402
from pgload import load  # noqa: E402

from audit.analytics.export import export_days, write_partition  # noqa: E402
from audit.analytics.location import DatasetLocation  # noqa: E402
from audit.migrate import migrate_url  # noqa: E402


def _children(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    parents[int(entry)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = [pid], [pid]
    while frontier:
        frontier = [p for p, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measured(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any], float, float]:
    """Run a child; (its JSON line, wall seconds, peak MiB of child + descendants)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], sum(_rss_kib(p) for p in _children(proc.pid)))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{err[-4000:]}")
    return json.loads(out.strip().splitlines()[-1]), wall, peak[0] / 1024


def child(spec: dict[str, Any]) -> tuple[dict[str, Any], float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HORAE_")}
    return measured([sys.executable, str(HERE / "child.py"), json.dumps(spec)], env)


async def scratch_database(server_dsn: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    name = f"horae_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    parts = urlsplit(server_dsn)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def drop_database(server_dsn: str, url: str) -> None:
    name = url.split("?")[0].rsplit("/", 1)[1]
    admin = await asyncpg.connect(server_dsn)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--attempts", type=int, default=10_000_000, help="attempt rows in the whole history"
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--topics", type=int, default=200)
    parser.add_argument(
        "--pg-days", type=int, default=1, help="last days also loaded into PostgreSQL"
    )
    parser.add_argument(
        "--work", type=Path, default=HERE / ".work", help="dataset and reports go here"
    )
    parser.add_argument(
        "--server-dsn",
        default=os.environ.get("HORAE_DATABASE_URL"),
        help="PostgreSQL server (default: the embedded one under .horae)",
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep the dataset of a previous run of this scale"
    )
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    last = datetime.now(UTC).date() - timedelta(days=1)  # the nightly's day: yesterday
    first = last - timedelta(days=args.days - 1)
    per_day = args.attempts // args.days
    dataset = DatasetLocation.parse(str(args.work / f"dataset-{args.attempts}"))
    results: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "scale": {
            "attempts": args.attempts,
            "days": args.days,
            "topics": args.topics,
            "pg_days": args.pg_days,
            "first": str(first),
            "last": str(last),
        },
    }

    marker = args.work / f"dataset-{args.attempts}" / "complete.json"
    settled = datetime.now(UTC)
    if not (args.reuse and marker.exists()):
        started, rows = time.perf_counter(), 0
        for i in range(args.days):
            day = first + timedelta(days=i)
            jobs, attempts = generate_day(day, per_day, args.topics, args.seed, spike=day == last)
            write_partition(dataset, "jobs", day, jobs, settled)
            write_partition(dataset, "attempts", day, attempts, settled)
            rows += attempts.num_rows
            print(
                f"generated {day}: {jobs.num_rows:,} jobs, {attempts.num_rows:,} attempts",
                flush=True,
            )
        marker.write_text(json.dumps({"attempts": rows}))
        results["generate"] = {
            "attempt_rows": rows,
            "seconds": round(time.perf_counter() - started, 1),
        }

    server = args.server_dsn
    if not server:
        from scheduler.ops.servers import ensure_postgres

        server = ensure_postgres(ROOT / ".horae")
    url = asyncio.run(scratch_database(server))
    try:
        asyncio.run(migrate_url(url))
        pg_days = [last - timedelta(days=i) for i in reversed(range(args.pg_days))]

        async def fill() -> int:
            conn = await asyncpg.connect(url)
            try:
                total = 0
                for day in pg_days:
                    jobs, attempts = generate_day(
                        day, per_day, args.topics, args.seed, spike=day == last
                    )
                    total += await load(conn, jobs, attempts)
                await conn.execute("ANALYZE")
                return total
            finally:
                await conn.close()

        started = time.perf_counter()
        loaded = asyncio.run(fill())
        results["pg_load"] = {"rows": loaded, "seconds": round(time.perf_counter() - started, 1)}
        print(f"loaded {loaded:,} rows into PostgreSQL for {len(pg_days)} day(s)", flush=True)

        exports = asyncio.run(export_days(url, dataset, pg_days))
        results["export"] = {
            e.table: {
                "rows": e.rows,
                "seconds": round(e.seconds, 2),
                "rows_per_s": round(e.rows / e.seconds),
            }
            for e in exports
        }
        total_rows, total_s = sum(e.rows for e in exports), sum(e.seconds for e in exports)
        results["export"]["total"] = {
            "rows": total_rows,
            "seconds": round(total_s, 2),
            "rows_per_s": round(total_rows / total_s),
        }
        print(
            f"export: {total_rows:,} rows in {total_s:.1f} s = {total_rows / total_s:,.0f} rows/s",
            flush=True,
        )

        base = {"dataset": dataset.uri, "database_url": url, "master": args.master}
        runs = {
            "nightly_1_day": {
                **base,
                "since": str(last),
                "until": str(last),
                "export": True,
                "publish_db": True,
                "out": str(args.work / "report-1-day"),
            },
            f"analysis_{args.days}_days": {
                **base,
                "since": str(first),
                "until": str(last),
                "export": False,
                "publish_db": True,
                "out": str(args.work / f"report-{args.days}-days"),
            },
        }
        for name, spec in runs.items():
            report, wall, peak = child(spec)
            results[name] = {
                **report,
                "child_wall_s": report["wall_s"],
                "wall_s": round(wall, 1),
                "peak_rss_mib": round(peak),
            }
            print(
                f"{name}: {wall:.1f} s wall, peak RSS {peak:,.0f} MiB; steps {report['timings']}",
                flush=True,
            )
    finally:
        asyncio.run(drop_database(server, url))

    out = HERE / "results"
    out.mkdir(exist_ok=True)
    path = out / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{args.attempts}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"results: {path}")


if __name__ == "__main__":
    main()
