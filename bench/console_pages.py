"""Console pages with a large history (issue 18): 1,000,000 jobs in Redis, 10,000,000
attempt rows in PostgreSQL and the rollups the relay would have kept for them (issue 31),
then the median time of the overview (its charts over 1 h and 24 h), a topic page, filtered
job lists and a job detail (pages and their /api/v1 equivalents, the charts' JSON), served by
`horae console` in a process of its own. --plans prints EXPLAIN (ANALYZE, BUFFERS) of every
audit query the pages run.

    .venv/bin/python bench/console_pages.py            # load, measure, drop the data
    .venv/bin/python bench/console_pages.py --keep     # keep the data; then --reuse measures again
    .venv/bin/python bench/console_pages.py --reuse --plans

Not a test: the numbers depend on the machine (its load average is recorded with them)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

BENCH = Path(__file__).resolve().parent
if str(BENCH.parent) not in sys.path:
    sys.path.insert(0, str(BENCH.parent))

import asyncpg  # noqa: E402
import httpx  # noqa: E402

from bench import console_pg, console_plans, console_redis, console_rollups  # noqa: E402
from horae.settings import load_settings  # noqa: E402
from scheduler.api import Scheduler  # noqa: E402

DB = "horae_bench_console"
TARGET_MS = 100.0


def say(msg: str) -> None:
    print(msg, flush=True)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=1_000_000, help="jobs in Redis (default 1,000,000)")
    p.add_argument(
        "--attempts",
        type=int,
        default=10_000_000,
        help="attempt rows in PostgreSQL (default 10,000,000)",
    )
    p.add_argument("--days", type=int, default=30, help="days of history (default 30)")
    p.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/9",
        help="a Redis database nobody else uses: it must be empty unless --reuse (default db 9)",
    )
    p.add_argument("--namespace", default="bench_console")
    p.add_argument(
        "--database-url",
        default=f"postgresql://postgres@127.0.0.1:5432/{DB}",
        help=f"the bench's own database (created, and dropped unless --keep; default {DB})",
    )
    p.add_argument("--requests", type=int, default=20, help="timed requests per URL (default 20)")
    p.add_argument(
        "--warmup", type=int, default=3, help="untimed requests per URL first (default 3)"
    )
    p.add_argument(
        "--plans",
        action="store_true",
        help="print EXPLAIN (ANALYZE, BUFFERS) of the pages' audit queries",
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the loaded data (the next run may --reuse it)"
    )
    p.add_argument(
        "--reuse", action="store_true", help="measure data an earlier --keep run left (no loading)"
    )
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", type=Path, default=BENCH / "results" / "console_pages.json")
    return p.parse_args()


def settings_for(args: argparse.Namespace) -> Any:
    """The bench's settings: its Redis db, namespace and database; retention large enough
    that the month stays in Redis (the defaults keep 7 days / the newest 1,000 completed)."""
    base = load_settings()
    return base.model_copy(
        update={
            "redis_url": args.redis_url,
            "database_url": args.database_url,
            "namespace": args.namespace,
            "retention": base.retention.model_copy(
                update={
                    "completed_age_s": 40 * 86400,
                    "completed_count": 2 * args.jobs,
                    "failed_age_s": 40 * 86400,
                }
            ),
        }
    )


async def redis_size(url: str) -> int:
    import redis.asyncio as aioredis

    client = aioredis.from_url(url)
    try:
        return int(await client.dbsize())
    finally:
        await client.aclose()


async def load(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Fill Redis through the scripts, then PostgreSQL; refuse to touch data not ours."""
    if await redis_size(args.redis_url):
        raise SystemExit(
            f"{args.redis_url} is not empty: the bench loads only an empty Redis database "
            "(choose another with --redis-url, or --reuse a kept load)"
        )
    if not await console_pg.create_database(args.database_url, db_name(args)):
        raise SystemExit(f"database {db_name(args)} exists: drop it, or --reuse a kept load")
    report["owned"] = True  # both were ours from here: cleanup() may drop them
    settings = settings_for(args)
    quiet = settings.model_copy(
        update={"audit": settings.audit.model_copy(update={"relay": False})}
    )
    now_ms, t0 = int(time.time() * 1000), time.perf_counter()
    await console_pg.prepare(args.database_url, args.days, now_ms)
    # The older jobs' rows (2.5 attempts each) fill what the Redis jobs' attempts (about 1.2
    # each, so 1.15 is a safe low guess) leave of --attempts: generated meanwhile.
    older = max(0, int((args.attempts - 1.15 * args.jobs) / 2.5))
    say(
        f"loading {args.jobs:,} jobs into Redis through the "
        f"engine's scripts, and {older:,} older jobs into "
        "PostgreSQL meanwhile ..."
    )
    copies: list[asyncio.Task[tuple[int, int]]] = []

    async def copy(
        after: asyncio.Task[tuple[int, int]] | None, plans: list[console_redis.Plan]
    ) -> tuple[int, int]:
        if after is not None:
            await after  # one COPY at a time, in order
        return await console_pg.copy_played(args.database_url, plans)

    def ended(
        plans: list[console_redis.Plan],
    ) -> None:  # jobs done in Redis: their audit rows go in meanwhile
        copies.append(asyncio.create_task(copy(copies[-1] if copies else None, plans)))

    async with Scheduler(settings=quiet) as s:
        generating = asyncio.create_task(
            console_pg.history(args.database_url, older, args.days, now_ms, say)
        )
        filled = await console_redis.fill(s, args.jobs, args.days, args.seed, say, ended)
        report["redis_load"] = {
            "seconds": round(filled.seconds, 1),
            **console_redis.summary(filled),
        }
        say(f"  redis: done in {filled.seconds:.0f} s: {report['redis_load']}")
        await s.store.wire.call("XGROUP", "CREATE", s.store.keys.outbox, "audit", "$", "MKSTREAM")
        history_s = await generating
        copied = [await c for c in copies]
    say(
        f"  pg: {sum(c[0] for c in copied):,} Redis jobs and {sum(c[1] for c in copied):,} "
        f"attempts copied (meanwhile; all in at {time.perf_counter() - t0:.0f} s)"
    )
    report["pg_load"] = {
        "history_s": history_s,
        **await console_pg.finish(args.database_url, args.days, say),
    }
    report["load_s"] = round(time.perf_counter() - t0, 1)
    say(f"loaded in {report['load_s']} s: {report['pg_load']['rows']}")


async def ensure_rollups(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Fill the rollups of the loaded history unless they are (a load kept by an older bench
    has none)."""
    conn = await asyncpg.connect(args.database_url)
    try:
        found = await conn.fetchval("SELECT count(*) FROM schedule_hour_rollups")
    finally:
        await conn.close()
    if found:
        report["rollups"] = {"rows": "kept"}
        return
    say("filling the rollups the audit relay would have kept for this history ...")
    topics = [name for name, _, _ in console_redis.TOPICS]
    report["rollups"] = await console_rollups.fill(
        args.database_url, topics, args.days, datetime.now(UTC), say
    )


def db_name(args: argparse.Namespace) -> str:
    return str(args.database_url).rsplit("/", 1)[1].split("?")[0]


async def targets(args: argparse.Namespace) -> dict[str, Any]:
    """What the requests ask for, found in the loaded data: a failed job with three or more
    attempts (in Redis and the audit), an older job only the audit has, a key and a time range."""
    async with Scheduler(settings=settings_for(args)) as s:
        counts = await s.stats_by_topic()
        by_failed = sorted(counts, key=lambda t: counts[t]["failed"])
        detail = key_job = None
        cursor = None
        for _ in range(50):
            page = await s.jobs(by_failed[-1], "failed", 200, cursor)
            detail = detail or next((j for j in page.items if j.attempts >= 3), None)
            key_job = key_job or next((j for j in page.items if j.key), None)
            cursor = page.cursor
            if (detail and key_job) or cursor is None:
                break
        assert detail is not None and key_job is not None and key_job.finished_at is not None
        conn = await asyncpg.connect(args.database_url)
        try:
            old_id = await conn.fetchval(
                "SELECT job_id FROM schedule_job_index WHERE job_id = left(md5('h' || 1000), 16)"
            )
            await conn.execute(
                "INSERT INTO schedule_operator_actions (actor, role, action, target, outcome) "
                "SELECT 'ops-bench', 'operator', a, $1, 'done' "
                "FROM unnest(ARRAY['retry', 'cancel']) a",
                detail.id,
            )
        finally:
            await conn.close()
        at = key_job.finished_at
        return {
            "busy_topic": by_failed[-1],
            "rare_topic": by_failed[0],
            "detail_id": detail.id,
            "detail_attempts": detail.attempts,
            "audit_only_id": old_id or detail.id,
            "key": key_job.key,
            "since": (at - timedelta(days=3)).isoformat(),
            "until": (at + timedelta(days=3)).isoformat(),
        }


def urls(t: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(label, path, text the answer must hold) of every timed request."""
    key_range = urlencode({"key": t["key"], "since": t["since"], "until": t["until"]})
    busy = urlencode({"topic": t["busy_topic"], "state": "failed"})
    topic = quote(t["busy_topic"], safe="")
    return [
        ("overview /", "/", "w-bench-0"),  # (a live worker, listed)
        ("overview live part", "/partials/overview", t["busy_topic"]),
        ("overview 24 h", "/?range=24h", 'svg class="chart finished"'),
        ("overview live part 24 h", "/partials/overview?range=24h", 'svg class="chart depth"'),
        ("topic page 1 h", f"/topics/{topic}", 'svg class="chart finished"'),
        ("topic page 24 h", f"/topics/{topic}?range=24h", 'svg class="chart finished"'),
        ("topic live part 24 h", f"/partials/topics/{topic}?range=24h", "HTTPError"),
        ("api charts 1 h", "/api/v1/charts?range=1h", '"total_completed"'),
        ("api charts 24 h", "/api/v1/charts?range=24h", '"total_completed"'),
        ("api charts topic 24 h", f"/api/v1/charts?range=24h&topic={topic}", t["busy_topic"]),
        ("jobs busy topic failed", "/jobs?" + busy, t["busy_topic"]),
        (
            "jobs rare topic failed",
            "/jobs?" + urlencode({"topic": t["rare_topic"], "state": "failed"}),
            t["rare_topic"],
        ),
        ("jobs key + time range", "/jobs?" + key_range, t["key"]),
        (
            "job detail (Redis+audit)",
            f"/jobs/{t['detail_id']}",
            "w-bench-",
        ),  # (its attempts' workers)
        ("job detail (audit only)", f"/jobs/{t['audit_only_id']}", "w-old-"),
        ("topics", "/topics", t["rare_topic"]),
        ("api stats", "/api/v1/stats", t["busy_topic"]),
        ("api jobs busy topic failed", f"/api/v1/jobs?{busy}&limit=50", t["busy_topic"]),
        ("api jobs key + time range", f"/api/v1/jobs?{key_range}&limit=50", '"items"'),
        (
            "api job detail",
            f"/api/v1/jobs/{t['detail_id']}",
            '"attempt":' + str(t["detail_attempts"]),
        ),
        ("api topics", "/api/v1/topics", t["rare_topic"]),
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_console(args: argparse.Namespace, port: int) -> subprocess.Popen[bytes]:
    """`horae console` as its own process on the bench's data (loopback: no token)."""
    env = {
        **os.environ,
        "HORAE_REDIS_URL": args.redis_url,
        "HORAE_DATABASE_URL": args.database_url,
        "HORAE_NAMESPACE": args.namespace,
        "PYTHONPATH": str(BENCH.parent),
    }
    code = "from scheduler.cli.main import main; main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, "console", "--port", str(port)], env=env, cwd=BENCH
    )


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise SystemExit(f"horae console exited with {proc.returncode}")
        try:
            if httpx.get(base + "/api/v1/stats", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit("horae console did not answer within 60 s")


def measure(base: str, label: str, path: str, expect: str, n: int, warmup: int) -> dict[str, Any]:
    """Median, p90 and max of n sequential requests after `warmup` (each must answer 200
    with `expect` in its body)."""
    times = []
    with httpx.Client(base_url=base, timeout=30) as client:
        for i in range(warmup + n):
            t = time.perf_counter()
            r = client.get(path)
            body = r.content
            took = (time.perf_counter() - t) * 1000
            if r.status_code != 200 or expect.encode() not in body:
                raise SystemExit(
                    f"{label}: GET {path} answered {r.status_code} "
                    f"without {expect!r}: {body[:300]!r}"
                )
            if i >= warmup:
                times.append(took)
    times.sort()
    out = {
        "label": label,
        "path": path,
        "median_ms": round(statistics.median(times), 1),
        "p90_ms": round(times[int(0.9 * (len(times) - 1))], 1),
        "max_ms": round(times[-1], 1),
        "bytes": len(body),
        "ok": statistics.median(times) < TARGET_MS,
    }
    if path.startswith("/api/v1/jobs?"):  # a listing page: how full, and whether a cursor goes on
        page = json.loads(body)
        out.update(items=len(page["items"]), cursor=page["cursor"] is not None)
    return out


async def parts(args: argparse.Namespace, t: dict[str, Any], n: int) -> dict[str, float]:
    """The median time of each read a page makes, called in-process (Redis and PostgreSQL apart)."""
    since, until = datetime.fromisoformat(t["since"]), datetime.fromisoformat(t["until"])
    async with Scheduler(settings=settings_for(args)) as s:
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "redis stats_by_topic": lambda: s.stats_by_topic(),
            "redis list_topics": lambda: s.list_topics(),
            "redis workers": lambda: s.workers(),
            "redis audit lag": lambda: s.audit.lag(),
            "redis jobs busy topic failed (50)": lambda: s.jobs(t["busy_topic"], "failed", 50),
            "redis jobs rare topic failed (50)": lambda: s.jobs(t["rare_topic"], "failed", 50),
            "redis jobs key + range (50)": lambda: s.jobs(
                None, None, 50, key=t["key"], since=since, until=until
            ),
            "redis get_job": lambda: s.get_job(t["detail_id"]),
            "pg finished_last_hour": lambda: s.audit.finished_since(
                datetime.now(UTC) - timedelta(hours=1)
            ),
            "pg minute rollups (every topic, 1 h)": lambda: s.audit.rollups(
                datetime.now(UTC) - timedelta(hours=1), False
            ),
            "pg hour rollups (every topic, 24 h)": lambda: s.audit.rollups(
                datetime.now(UTC) - timedelta(hours=24), True
            ),
            "pg hour rollups (one topic, 24 h)": lambda: s.audit.rollups(
                datetime.now(UTC) - timedelta(hours=24), True, t["busy_topic"]
            ),
            "pg failure_errors (one topic, 24 h, 500)": lambda: s.audit.failure_errors(
                t["busy_topic"], datetime.now(UTC) - timedelta(hours=24), 500
            ),
            "pg get_job": lambda: s.audit.get(t["detail_id"]),
            "pg get_attempts": lambda: s.audit.attempts(t["detail_id"]),
            "pg recent_actions (target)": lambda: s.audit.actions(t["detail_id"], 20),
        }
        out: dict[str, Any] = {}
        for name, call in calls.items():
            times = []
            for i in range(n + 2):
                start = time.perf_counter()
                await call()
                if i >= 2:
                    times.append((time.perf_counter() - start) * 1000)
            out[name] = round(statistics.median(times), 2)
        page = await s.jobs(t["rare_topic"], "failed", 50)
        out["rare topic first page: items"] = len(page.items)
        out["rare topic first page: has cursor"] = int(page.cursor is not None)
        out.update(await pages_to_key(s, t, since, until))
        return out


async def pages_to_key(
    s: Scheduler, t: dict[str, Any], since: datetime, until: datetime
) -> dict[str, float]:
    """How many pages of 50 (each at most 500 members examined) a key filter over the time
    range takes to reach the key's job, and how long that walk takes (no key index: the
    listing reads each member's hash)."""
    start, cursor, pages = time.perf_counter(), None, 0
    while pages < 5000:
        page = await s.jobs(None, None, 50, cursor, key=t["key"], since=since, until=until)
        pages += 1
        if page.items or page.cursor is None:
            break
        cursor = page.cursor
    return {
        "key filter: pages to the first match": pages,
        "key filter: seconds to the first match": round(time.perf_counter() - start, 2),
    }


def plan_cases(t: dict[str, Any]) -> list[console_plans.Case]:
    now = datetime.now(UTC)
    lo, hi = console_pg.window_days(now, 7)
    return [
        console_plans.Case("get_job", "get_job", (t["detail_id"],)),
        console_plans.Case("get_attempts", "get_attempts", (t["detail_id"],)),
        console_plans.Case("recent_actions_of (job)", "recent_actions_of", (t["detail_id"], 20)),
        console_plans.Case("recent_actions (all)", "recent_actions", (50,)),
        console_plans.Case("finished_last_hour", "finished_last_hour", (now - timedelta(hours=1),)),
        console_plans.Case("failure_baseline", "failure_baseline", (lo, hi)),
        console_plans.Case("minute_rollups", "minute_rollups", (now - timedelta(hours=1),)),
        console_plans.Case("hour_rollups", "hour_rollups", (now - timedelta(hours=24),)),
        console_plans.Case(
            "topic_hour_rollups", "topic_hour_rollups", (now - timedelta(hours=24), t["busy_topic"])
        ),
        console_plans.Case(
            "recent_failure_errors",
            "recent_failure_errors",
            (t["busy_topic"], now - timedelta(hours=24), 500),
        ),
    ]


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        f"| {'request':<28} | median ms | p90 ms | max ms | < {TARGET_MS:.0f} ms | page |",
        "|---|---:|---:|---:|:---:|---|",
    ]
    for r in rows:
        page = f"{r['items']} items{', cursor' if r['cursor'] else ''}" if "items" in r else ""
        lines.append(
            f"| {r['label']:<28} | {r['median_ms']:>9} | {r['p90_ms']:>6} | {r['max_ms']:>6} | "
            f"{'yes' if r['ok'] else '**no**'} | {page} |"
        )
    return lines


def main() -> None:
    args = parse()
    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "load_before": os.getloadavg(),
    }
    try:
        if not args.reuse:
            asyncio.run(load(args, report))
        asyncio.run(ensure_rollups(args, report))
        t = asyncio.run(targets(args))
        report["targets"] = t
        port = free_port()
        proc = start_console(args, port)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base, proc)
            report["load_at_measure"] = os.getloadavg()
            report["requests"] = [
                measure(base, label, path, expect, args.requests, args.warmup)
                for label, path, expect in urls(t)
            ]
        finally:
            proc.terminate()
            proc.wait(10)
        report["parts_ms"] = asyncio.run(parts(args, t, args.requests))
        if args.plans:
            plans = asyncio.run(console_plans.explain_all(args.database_url, plan_cases(t)))
            for p in plans:
                say(f"\n=== {p.label} ({p.mode} plan) ===\n{p.text}")
            report["plans"] = [vars(p) for p in plans]
            report["plan_cache"] = asyncio.run(
                console_plans.plan_cache(args.database_url, plan_cases(t))
            )
            say(
                "plans PostgreSQL chose for 12 runs of each prepared statement (custom/generic): "
                + json.dumps(report["plan_cache"])
            )
            say("\nplans:\n" + "\n".join(console_plans.summary_lines(plans)))
        report["load_after"] = os.getloadavg()
        say("\n" + "\n".join(table(report["requests"])))
        say("\nreads in-process (median ms): " + json.dumps(report["parts_ms"], indent=1))
        say(
            f"load average before/at/after: {report['load_before']} "
            f"{report.get('load_at_measure')} {report['load_after']}"
        )
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1, default=str))
        say(f"written {args.out}")
    finally:
        if report.get("owned") and not args.keep:
            cleanup(args)


def cleanup(args: argparse.Namespace) -> None:
    """Drop the bench's database and empty its Redis db (it was empty when the run began)."""
    import redis

    say("dropping the bench's data (--keep keeps it)")
    asyncio.run(console_pg.drop_database(args.database_url, db_name(args)))
    redis.Redis.from_url(args.redis_url).flushdb()


if __name__ == "__main__":
    main()
