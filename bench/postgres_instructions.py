"""PostgreSQL's instructions per audited job, under callgrind (issue 34).

Instruction counts do not depend on how loaded the machine is, so one run says what a change
to the audit writer's statements or indexes bought, where backend CPU time on this shared
machine cannot (bench/audit_writer.py splits that time by statement). A PostgreSQL of the
machine's (`pg_config --bindir`, else /usr/lib/postgresql/*/bin) is initialised in a scratch
directory and runs under `valgrind --tool=callgrind`; every backend it forks is counted in a
file of its own, written when the backend exits.

The outbox of a real drain (bench/audit_writer.py: capture; every `--fail-every`-th job fails
its first attempt) is replayed through the relay's writer (audit/relay/writer.py:
BatchWriter, one connection, batches of `--batch`) into a fresh database, once with the
events of the first N jobs and once with those of the first 2N. Each replay's backend
migrates the schema and writes its events, so (instructions of 2N - instructions of N) / N is
what one job costs the backend: connecting and migrating cancel out.

    .venv/bin/python bench/postgres_instructions.py [--jobs 1000] [--events capture.json]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from audit_writer import outbox_entries  # noqa: E402
from common import scratch_dir  # noqa: E402

from audit.options import RelayOptions  # noqa: E402
from audit.relay.foldcache import FoldCache  # noqa: E402
from audit.relay.streamid import StreamId, parse_id  # noqa: E402
from audit.relay.writer import BatchWriter  # noqa: E402
from audit.settings import AuditSettings  # noqa: E402
from scheduler.core.outbox import OutboxEvent, decode_entry  # noqa: E402


def bindir() -> Path:
    """The directory of a PostgreSQL server's binaries (postgres, initdb)."""
    found = shutil.which("pg_config")
    if found:
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True, check=False)
        path = Path(out.stdout.strip())
        if (path / "postgres").exists():
            return path
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "postgres").exists():
            return Path(candidate)
    raise SystemExit("no PostgreSQL server binaries (postgres, initdb) on this machine")


class CallgrindPostgres:
    """A scratch PostgreSQL under callgrind, reached on a Unix socket in its directory."""

    def __init__(self, work: Path) -> None:
        self.dir = work
        self.data = work / "data"
        # PostgreSQL refuses to run as root: then as the system user `postgres`.
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(work, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        subprocess.run(
            [*self.as_user, str(bindir() / "initdb"), "-D", str(self.data), "-U", "postgres"]
            + ["--auth=trust"],
            check=True,
            capture_output=True,
        )
        self.proc = subprocess.Popen(
            [*self.as_user, "valgrind", "--tool=callgrind"]
            + [f"--callgrind-out-file={work}/callgrind.out.%p"]
            + [str(bindir() / "postgres"), "-D", str(self.data), "-k", str(work), "-p", "5499"]
            + ["-c", "listen_addresses=", "-c", "autovacuum=off"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"postgresql://postgres@/postgres?host={work}&port=5499"

    async def ready(self) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                conn = await asyncpg.connect(self.url, timeout=10)
                await conn.close()
                return
            except (TimeoutError, OSError, asyncpg.PostgresError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1)

    def instructions(self, pid: int) -> int:
        """The instructions of a backend that exited (its callgrind file, written at exit)."""
        path = self.dir / f"callgrind.out.{pid}"
        deadline = time.monotonic() + 60
        while True:
            if path.exists():
                for line in path.read_text(errors="replace").splitlines():
                    if line.startswith(("summary:", "totals:")):
                        return int(line.split()[1])
            if time.monotonic() > deadline:
                raise RuntimeError(f"no callgrind totals in {path}")
            time.sleep(0.5)

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, str(bindir() / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w"]
            + ["-t", "120", "stop"],
            capture_output=True,
            check=False,
        )
        self.proc.wait(timeout=120)


async def replay(
    pg: CallgrindPostgres, pairs: list[tuple[StreamId, OutboxEvent]], batch: int, try_sql: str
) -> int:
    """Write `pairs` into a fresh database through one connection; that backend's instructions
    (`try_sql` runs on the migrated schema first, from another connection)."""
    name = "horae_pg_instructions"
    admin = await asyncpg.connect(pg.url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.execute(f"CREATE DATABASE {name}")
        url = pg.url.replace("/postgres?", f"/{name}?", 1)
        options = RelayOptions.from_settings(AuditSettings(), pool_max_size=1)
        writer = BatchWriter(url, options, FoldCache(options.fold_cache))
        try:
            await writer.write(pairs[:1])  # migrates
            if try_sql:
                conn = await asyncpg.connect(url)
                await conn.execute(try_sql)
                await conn.close()
            for i in range(1, len(pairs), batch):
                await writer.write(pairs[i : i + batch])
            pids = [
                r["pid"]
                for r in await admin.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE datname = $1", name
                )
            ]
        finally:
            await writer.close()
        if len(pids) != 1:
            raise RuntimeError(f"expected the writer's one backend, found {pids}")
        return pg.instructions(pids[0])
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        await admin.close()


def first_jobs(pairs: list[tuple[StreamId, OutboxEvent]], n: int) -> list[tuple[StreamId, Any]]:
    """The events of the first n jobs (by first appearance), in stream order."""
    jobs: dict[str, None] = {}
    for _, e in pairs:
        if len(jobs) == n:
            break
        jobs.setdefault(e.job_id)
    return [(sid, e) for sid, e in pairs if e.job_id in jobs]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000, help="N (the replays hold N and 2N)")
    parser.add_argument("--fail-every", type=int, default=10, help="0: no failures")
    parser.add_argument("--batch", type=int, default=AuditSettings().batch_size)
    parser.add_argument("--redis-url", default="", help="capture on this Redis (else a private)")
    parser.add_argument("--events", type=Path, help="replay this capture (audit_writer.py's)")
    parser.add_argument("--try-sql", default="", help="run on the migrated schema first")
    parser.add_argument("--keep", action="store_true", help="keep the callgrind files")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind (callgrind) is not installed")
    n = args.jobs
    entries = await outbox_entries(args.events, args.redis_url, 2 * n, args.fail_every)
    pairs = [(parse_id(k), decode_entry(k, fields)) for k, fields in entries]
    with scratch_dir("horae-bench-pgcg-", args.keep) as work:
        pg = CallgrindPostgres(work)
        try:
            await pg.ready()
            small = first_jobs(pairs, n)
            large = first_jobs(pairs, 2 * n)
            counts = [await replay(pg, part, args.batch, args.try_sql) for part in (small, large)]
        finally:
            pg.stop()
    events = (len(large) - len(small)) / n
    per_job = (counts[1] - counts[0]) / n
    print(f"PostgreSQL backend instructions per audited job ({events:.2f} events per job):")
    print(f"  replay of {n:,} jobs      {counts[0]:>15,}")
    print(f"  replay of {2 * n:,} jobs      {counts[1]:>15,}")
    print(f"  per job (difference / N) {per_job:>15,.0f}")
    print("PG-INSTRUCTIONS " + json.dumps({"jobs": n, "per_job": per_job, "counts": counts}))


if __name__ == "__main__":
    asyncio.run(main())
