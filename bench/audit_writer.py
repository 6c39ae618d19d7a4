"""What the audit costs PostgreSQL per job, statement by statement.

Captures the outbox of a real drain (horae with the audit on and no relay: N jobs through a
worker, every `--fail-every`-th failing its first attempt, so retries are in the mix), then
replays those entries into a fresh audit database through the relay's own writer
(audit/relay/writer.py: BatchWriter) in batches of `--batch`, `--reps` times. Per replay:

- PostgreSQL CPU per job, split by statement: the backend's utime + stime (/proc) read
  around each statement the writer sends (one connection, so one backend);
- the writer's own CPU per job (this process: decoding is not included, folding and
  encoding are);
- bytes per job of the audit tables (heap, indexes, TOAST).

The server's background processes (WAL writer, checkpointer) are not counted: `bench/run.py`
measures the whole server in a real run; this file says where a backend's time goes, so a
change to a statement or an index is measured alone. Medians over the reps.

    .venv/bin/python bench/audit_writer.py --jobs 20000 --reps 3
    .venv/bin/python bench/audit_writer.py --database-url postgresql://postgres@127.0.0.1/test

Uses the machine's servers when given their URLs (a database `horae_audit_writer` is created
and dropped beside the one named), else private ones (bench/servers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import asyncpg  # noqa: E402

from audit.options import RelayOptions  # noqa: E402
from audit.relay.foldcache import FoldCache  # noqa: E402
from audit.relay.streamid import StreamId, parse_id  # noqa: E402
from audit.relay.writer import BatchWriter  # noqa: E402
from audit.settings import AuditSettings  # noqa: E402
from audit.sql import queries  # noqa: E402
from scheduler.core.outbox import OutboxEvent, decode_entry  # noqa: E402

_HZ = os.sysconf("SC_CLK_TCK")
NAMESPACE = "bench-audit-writer"
DATABASE = "horae_audit_writer"
TABLES = ("schedule_job_index", "schedule_audit", "schedule_attempts", "schedule_events")


def backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _HZ


class StatementCpu:
    """Wraps asyncpg's Connection methods: backend CPU seconds by named query."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._names = {sql: name for name, sql in queries().items()}
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> StatementCpu:
        for method in ("fetch", "fetchrow", "fetchval", "execute", "copy_records_to_table"):
            original = getattr(asyncpg.Connection, method)
            self._saved[method] = original
            setattr(asyncpg.Connection, method, self._timed(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for method, original in self._saved.items():
            setattr(asyncpg.Connection, method, original)

    def _timed(self, original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(conn: asyncpg.Connection, sql: str, *args: Any, **kw: Any) -> Any:
            pid = conn.get_server_pid()
            before = backend_cpu(pid)
            try:
                return await original(conn, sql, *args, **kw)
            finally:
                name = (
                    f"copy into {sql}"  # copy_records_to_table: a table name
                    if "copy_records_to_table" in original.__name__
                    else self._names.get(sql, sql.split(None, 1)[0].rstrip(";").lower())
                )
                self.seconds[name] += backend_cpu(pid) - before

        return timed


async def capture(redis_url: str, jobs: int, fail_every: int) -> list[tuple[str, dict[str, str]]]:
    """The outbox entries of a drain of `jobs` jobs (the namespace is emptied before and after)."""
    import redis.asyncio as aioredis

    from horae.settings import load_settings
    from listeners import ListenerRegistry
    from scheduler import Scheduler
    from scheduler.core.keys import Keys
    from scheduler.testing.under_test import delete_namespace

    settings = load_settings(env={}, redis_url=redis_url, namespace=NAMESPACE)
    settings = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    registry = ListenerRegistry()
    finished = 0

    @registry.on_event("bench")
    async def listener(event: Any) -> None:
        nonlocal finished
        if fail_every and event.payload["i"] % fail_every == 0 and event.attempt == 1:
            raise RuntimeError("first attempt fails")
        finished += 1

    retry = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}
    await delete_namespace(redis_url, NAMESPACE)
    async with Scheduler(settings=settings, listeners=registry) as s:
        for start in range(0, jobs, 1_000):
            await s.schedule_many(
                [
                    {"topic": "bench", "payload": {"i": i}, "retry": retry}
                    for i in range(start, min(jobs, start + 1_000))
                ]
            )
        async with s.worker(concurrency=50):
            deadline = time.monotonic() + 300
            while finished < jobs and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
    redis = aioredis.Redis.from_url(redis_url)
    try:
        entries = await redis.xrange(Keys(NAMESPACE).outbox)
    finally:
        await redis.aclose()
    await delete_namespace(redis_url, NAMESPACE)
    return [
        (k.decode(), {a.decode(): b.decode() for a, b in fields.items()}) for k, fields in entries
    ]


async def outbox_entries(
    events: Path | None, redis_url: str, jobs: int, fail_every: int
) -> list[tuple[str, dict[str, str]]]:
    """The capture saved in `events`, else a new one of `jobs` jobs (capture) on `redis_url`,
    or on a private Redis when none is given."""
    if events:
        return cast(list[tuple[str, dict[str, str]]], json.loads(events.read_text()))
    from servers import RedisServer

    server = None if redis_url else RedisServer()
    try:
        return await capture(redis_url if server is None else server.url, jobs, fail_every)
    finally:
        if server is not None:
            server.stop()


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


async def replay(
    pg_url: str, pairs: list[tuple[StreamId, OutboxEvent]], batch: int, try_sql: str = ""
) -> dict[str, Any]:
    """Write `pairs` into a fresh database; CPU and bytes per job."""
    admin = await asyncpg.connect(pg_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {DATABASE}")
    url = with_database(pg_url, DATABASE)
    options = RelayOptions.from_settings(AuditSettings(), pool_max_size=1)
    writer = BatchWriter(url, options, FoldCache(options.fold_cache))
    jobs = len({e.job_id for _, e in pairs})
    try:
        await writer.write(pairs[:1])  # migrates: not measured
        if try_sql:  # a schema change to measure before it becomes a migration
            await writer.close()
            conn = await asyncpg.connect(url)
            await conn.execute(try_sql)
            await conn.close()
        with StatementCpu() as statements:
            cpu0, wall0 = time.process_time(), time.monotonic()
            for i in range(1, len(pairs), batch):
                await writer.write(pairs[i : i + batch])
            cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        await writer.close()
        conn = await asyncpg.connect(url)
        try:
            sizes = {
                t: await conn.fetchval(
                    "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint "
                    "FROM pg_class c WHERE c.relname = $1 OR c.relname LIKE $1 || '\\_p%'",
                    t,
                )
                for t in TABLES
            }
        finally:
            await conn.close()
    finally:
        await writer.close()
        await admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        await admin.close()
    per_job = 1e6 / jobs
    return {
        "jobs": jobs,
        "events": len(pairs),
        "wall_s": wall,
        "writer_us": cpu * per_job,
        "postgres_us": sum(statements.seconds.values()) * per_job,
        "statements_us": {k: v * per_job for k, v in statements.seconds.items()},
        "bytes_per_job": {t: b / jobs for t, b in sizes.items()},
    }


def median_of(runs: list[dict[str, Any]], *path: str) -> float:
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key, 0.0) if isinstance(value, dict) else 0.0
        values.append(float(value))
    return statistics.median(values)


def report(runs: list[dict[str, Any]]) -> str:
    names = sorted({k for r in runs for k in r["statements_us"]})
    lines = [
        f"{runs[0]['jobs']:,} jobs, {runs[0]['events']:,} events, medians of {len(runs)} replays",
        "",
        "| per job | µs |",
        "|---|---|",
        f"| PostgreSQL backend, all statements | {median_of(runs, 'postgres_us'):.1f} |",
    ]
    for name in sorted(names, key=lambda n: -median_of(runs, "statements_us", n)):
        lines.append(f"| · {name} | {median_of(runs, 'statements_us', name):.1f} |")
    lines.append(f"| the writer's own CPU (fold, encode) | {median_of(runs, 'writer_us'):.1f} |")
    lines += ["", "| table | bytes per job |", "|---|---|"]
    for t in TABLES:
        lines.append(f"| {t} | {median_of(runs, 'bytes_per_job', t):,.0f} |")
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--fail-every", type=int, default=10, help="0: no failures")
    parser.add_argument("--batch", type=int, default=AuditSettings().batch_size)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--redis-url", default="")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--try-sql", default="", help="run on the migrated schema first")
    parser.add_argument("--events", type=Path, help="replay this capture instead (JSON)")
    parser.add_argument("--save-events", type=Path, help="write the capture here")
    args = parser.parse_args()

    entries = await outbox_entries(args.events, args.redis_url, args.jobs, args.fail_every)
    if args.save_events and not args.events:
        args.save_events.write_text(json.dumps(entries))
    pg_url = args.database_url
    if not pg_url:
        from servers import start_postgres

        pg_url, _ = start_postgres()
    pairs = [(parse_id(k), decode_entry(k, fields)) for k, fields in entries]
    runs = [await replay(pg_url, pairs, args.batch, args.try_sql) for _ in range(args.reps)]
    print(report(runs))
    print("AUDIT-WRITER " + json.dumps({"runs": runs}))


if __name__ == "__main__":
    asyncio.run(main())
