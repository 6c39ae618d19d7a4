"""The console bench's PostgreSQL side: a database of its own, the real migrations, the
Redis jobs' rows (what the relay would have written for them: COPY), older jobs Redis no
longer holds (generated in SQL: one INSERT ... SELECT per table), the operator action log
and the nightly report's table, then VACUUM ANALYZE."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg

from audit.migrate import add_months, ensure_partitions, migrate, month_start
from bench.console_redis import DAY_MS, TOPICS, Plan

STATUS = {"completed": "completed", "failed": "failed", "cancelled": "cancelled"}
AUDIT_COLUMNS = (
    "id",
    "topic",
    "status",
    "attempts",
    "max_attempts",
    "backoff_type",
    "backoff_delay_ms",
    "last_error",
    "run_at",
    "tz",
    "payload",
    "metadata",
    "created_at",
    "updated_at",
    "completed_at",
    "failed_at",
    "cancelled_at",
    "applied_ms",
    "applied_seq",
)
ATTEMPT_COLUMNS = (
    "job_id",
    "attempt_no",
    "worker_id",
    "started_at",
    "finished_at",
    "outcome",
    "error_type",
    "error_message",
    "duration_ms",
    "lateness_ms",
    "job_created_at",
)

# Older jobs: job i of n is created at start + i * span / n, of the topic in slot hash(i) % 1000
# (slots weighted like TOPICS), failed when hash(i + 7919) % 1000 is under its topic's rate,
# with 1 + i % 4 attempts 30 s apart (the last succeeds unless the job failed).
HISTORY = """
CREATE TEMP TABLE hist (i int, id text, created_ms bigint, created_at timestamptz, topic text,
                        n int, status text) ON COMMIT DROP;
INSERT INTO hist
SELECT i, left(md5('h' || i), 16) AS id, created_ms,
       to_timestamp(created_ms / 1000.0) AS created_at, topic, 1 + i % 4 AS n,
       CASE WHEN (hashint4(i + 7919)::bigint + 2147483648) % 1000 < fail THEN 'failed'
            ELSE 'completed' END AS status
FROM (SELECT i, $1::bigint + (i::bigint * $2::bigint) / $3 AS created_ms,
             ($4::text[])[1 + ((hashint4(i)::bigint + 2147483648) % 1000)::int] AS topic,
             ($5::int[])[1 + ((hashint4(i)::bigint + 2147483648) % 1000)::int] AS fail
      FROM generate_series(1, $3::int) AS i) AS g;
INSERT INTO schedule_job_index (job_id, created_at, sched_ms, sched_seq)
SELECT id, created_at, created_ms, 0 FROM hist;
INSERT INTO schedule_attempts (job_id, attempt_no, worker_id, started_at, finished_at, outcome,
                               error_type, error_message, duration_ms, lateness_ms, job_created_at)
SELECT h.id, a, 'w-old-' || (h.i % 8), h.created_at + ((a - 1) * 30 + 1) * interval '1 s',
       h.created_at + ((a - 1) * 30 + 1) * interval '1 s'
         + ((hashint4(h.i * 31 + a)::bigint + 2147483648) % 3000) * interval '1 ms',
       CASE WHEN a < h.n OR h.status = 'failed' THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN a < h.n OR h.status = 'failed' THEN 'HTTPError' END,
       CASE WHEN a < h.n OR h.status = 'failed'
            THEN 'POST https://api-' || (h.i % 9) || '.internal/v1 returned 502' END,
       (hashint4(h.i * 31 + a)::bigint + 2147483648) % 3000, 1000 + h.i % 500, h.created_at
FROM hist AS h, generate_series(1, h.n) AS a;
INSERT INTO schedule_audit (id, topic, status, attempts, max_attempts, backoff_type,
                            backoff_delay_ms, last_error, run_at, tz, payload, metadata,
                            created_at, updated_at, completed_at, failed_at,
                            applied_ms, applied_seq)
SELECT id, topic, status, n, greatest(n, 3), 'exponential', 30000,
       CASE WHEN status = 'failed' OR n > 1
            THEN jsonb_build_object('type', 'HTTPError', 'message',
                 'POST https://api-' || (i % 9) || '.internal/v1 returned 502', 'traceback', '')
            END,
       created_at, 'UTC',
       jsonb_build_object('invoiceId', 'inv-' || i, 'amount', i % 100000, 'currency', 'EUR'),
       '{}'::jsonb, created_at, created_at + ((n - 1) * 30 + 4) * interval '1 s',
       CASE WHEN status = 'completed' THEN created_at + ((n - 1) * 30 + 4) * interval '1 s' END,
       CASE WHEN status = 'failed' THEN created_at + ((n - 1) * 30 + 4) * interval '1 s' END,
       created_ms, 0
FROM hist;
"""

ACTIONS = """
INSERT INTO schedule_operator_actions (at, actor, role, action, target, outcome, detail)
SELECT now() - ((hashint4(g::int)::bigint + 2147483648) % ($2::int * 86400)) * interval '1 s',
       'ops-' || (g % 7), 'operator',
       (ARRAY['cancel', 'retry', 'reschedule', 'delete', 'replay'])[1 + g % 5], job_id, 'done', NULL
FROM (SELECT job_id, row_number() OVER () AS g
      FROM schedule_job_index TABLESAMPLE SYSTEM (5) LIMIT $1) AS j;
"""

FAILURE_STATS = """
INSERT INTO schedule_failure_stats (topic, day, jobs, completed, failed, cancelled, failure_rate,
                                    attempts, failed_attempts, timed_out, worker_lost, no_listener)
SELECT t, d::date, 1000, 950, 50, 0,
       0.05 + ((hashtext(t || d)::bigint + 2147483648) % 100) / 1000.0, 1100, 100, 0, 0, 0
FROM unnest($1::text[]) AS t,
     generate_series(current_date - $2::int, current_date - 1, interval '1 day') AS d
ON CONFLICT DO NOTHING;
"""


def admin_url(url: str) -> str:
    """The same server's `postgres` database (to create and drop ours)."""
    return url.rsplit("/", 1)[0] + "/postgres"


async def create_database(url: str, name: str) -> bool:
    """Create `name`; False when it exists already (then it is left as it is)."""
    conn = await asyncpg.connect(admin_url(url))
    try:
        if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return False
        await conn.execute(f'CREATE DATABASE "{name}"')
        return True
    finally:
        await conn.close()


async def drop_database(url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url(url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _ts(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)


def _rows(p: Plan) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The audit row and attempt rows of one played job (as the relay folds them)."""
    created = _ts(p.created_ms)
    status = STATUS.get(p.fate, "active")
    last = p.attempts[-1] if p.attempts else None
    err = last[5] if last is not None else None
    ended = _ts(p.ended_ms)
    updated = ended or (_ts(last[3] or last[2]) if last else created)
    row = (
        p.id,
        p.topic,
        status,
        len(p.attempts),
        p.max_attempts,
        "exponential",
        30000,
        json.dumps(err) if err else None,
        _ts(p.run_at_ms),
        "UTC",
        p.payload,
        "{}",
        created,
        updated,
        ended if status == "completed" else None,
        ended if status == "failed" else None,
        ended if status == "cancelled" else None,
        p.created_ms,
        0,
    )
    attempts = [
        (
            p.id,
            no,
            worker,
            _ts(start),
            _ts(end),
            outcome,
            e["type"] if e else None,
            e["message"] if e else None,
            None if end is None else end - start,
            start - due,
            created,
        )
        for no, worker, start, end, outcome, e, due in p.attempts
    ]
    return row, attempts


def topic_slots() -> tuple[list[str], list[int]]:
    """1000 slots shared out by topic weight, and each slot's failure rate in permille."""
    total = sum(w for _, w, _ in TOPICS)
    names: list[str] = []
    rates: list[int] = []
    for name, w, fail in TOPICS:
        k = round(1000 * w / total)
        names += [name] * k
        rates += [int(fail * 1000)] * k
    names, rates = (names + names[:1000])[:1000], (rates + rates[:1000])[:1000]
    return names, rates


async def prepare(url: str, days: int, now_ms: int) -> None:
    """Apply the real migrations and create the partitions of every month of the history."""
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
        months, m = [], month_start(_ts(now_ms - days * DAY_MS))  # type: ignore[arg-type]
        while m <= add_months(month_start(datetime.now(UTC)), 1):
            months.append(m)
            m = add_months(m, 1)
        await ensure_partitions(conn, months)
    finally:
        await conn.close()


async def history(url: str, jobs: int, days: int, now_ms: int, say: Callable[[str], None]) -> float:
    """Generate `jobs` older jobs (2.5 attempts each) in one transaction; returns seconds.
    Independent of Redis, so it runs while the Redis side plays its month."""
    conn = await asyncpg.connect(url, command_timeout=3600)
    t = time.perf_counter()
    try:
        names, rates = topic_slots()
        args = (now_ms - days * DAY_MS, days * DAY_MS - 600_000, jobs, names, rates)
        async with conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            for statement in _statements(HISTORY):
                used = _params(statement)
                await conn.execute(statement, *args[:used])
    finally:
        await conn.close()
    took = round(time.perf_counter() - t, 1)
    say(f"  pg: {jobs:,} older jobs generated ({took} s)")
    return took


async def copy_played(url: str, plans: list[Plan]) -> tuple[int, int]:
    """COPY these Redis jobs' audit rows and attempt rows; returns (jobs, attempts)."""
    conn = await asyncpg.connect(url, command_timeout=3600)
    try:
        await conn.execute("SET synchronous_commit = off")
        rows = [_rows(p) for p in plans]
        await conn.copy_records_to_table(
            "schedule_job_index",
            records=[(r[0][0], r[0][12], r[0][17], 0) for r in rows],
            columns=("job_id", "created_at", "sched_ms", "sched_seq"),
        )
        await conn.copy_records_to_table(
            "schedule_audit", records=[r[0] for r in rows], columns=AUDIT_COLUMNS
        )
        played = [a for r in rows for a in r[1]]
        await conn.copy_records_to_table(
            "schedule_attempts", records=played, columns=ATTEMPT_COLUMNS
        )
    finally:
        await conn.close()
    return len(rows), len(played)


async def finish(url: str, days: int, say: Callable[[str], None]) -> dict[str, Any]:
    """The action log and the nightly table, then VACUUM ANALYZE; returns seconds and row counts."""
    conn = await asyncpg.connect(url, command_timeout=3600)
    t = time.perf_counter()
    try:
        await conn.execute("SET maintenance_work_mem = '256MB'")
        await conn.execute(ACTIONS, 100_000, days)
        await conn.execute(FAILURE_STATS, [name for name, _, _ in TOPICS], 400)
        for table in (
            "schedule_job_index",
            "schedule_audit",
            "schedule_attempts",
            "schedule_operator_actions",
            "schedule_failure_stats",
        ):
            await conn.execute(f"VACUUM ANALYZE {table}")
        took = round(time.perf_counter() - t, 1)
        say(f"  pg: actions, failure stats, VACUUM ANALYZE ({took} s)")
        return {"finish_s": took, "rows": await counts(conn)}
    finally:
        await conn.close()


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";\n") if s.strip()]


def _params(statement: str) -> int:
    """How many of the history's parameters ($1..$5) a statement uses."""
    return max((i for i in range(1, 6) if f"${i}" in statement), default=0)


async def counts(conn: asyncpg.Connection) -> dict[str, int]:
    """Rows per audit table (exact counts)."""
    out = {}
    for table in (
        "schedule_job_index",
        "schedule_audit",
        "schedule_attempts",
        "schedule_operator_actions",
        "schedule_failure_stats",
    ):
        out[table] = await conn.fetchval(f"SELECT count(*) FROM {table}")
    return out


def window_days(now: datetime, days: int) -> tuple[date, date]:
    """The baseline window the analytics page asks for: `days` days before yesterday."""
    end = (now - timedelta(days=1)).date()
    return end - timedelta(days=days), end
