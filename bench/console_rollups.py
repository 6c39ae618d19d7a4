"""The console bench's rollups (migration 0010): what the audit relay would have kept for the
loaded history, computed in SQL from the audit rows (one pass over the attempts joined to
their jobs), with a queue-depth sample for every topic and minute of the last two days (the
minute rows the relay keeps) and every hour of the history."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import asyncpg

FILL = """
SET TimeZone = 'UTC';
CREATE TEMP TABLE cells ON COMMIT DROP AS
WITH attempts AS (
    SELECT j.topic, date_trunc('minute', a.finished_at) AS minute,
           count(*) FILTER (WHERE a.outcome IN ('failed', 'timed_out', 'worker_lost'))
               AS failed_attempts,
           count(*) FILTER (WHERE a.outcome IN ('failed', 'timed_out', 'worker_lost')
                            AND (j.status <> 'failed' OR a.attempt_no < j.attempts)) AS retried
    FROM schedule_attempts AS a
    JOIN schedule_audit AS j ON j.id = a.job_id AND j.created_at = a.job_created_at
    WHERE a.finished_at IS NOT NULL
    GROUP BY 1, 2
), late AS (
    SELECT topic, minute, audit_sum_buckets(array_fill(0::bigint, ARRAY[bucket]) || n) AS lateness
    FROM (SELECT j.topic, date_trunc('minute', a.started_at) AS minute,
                 CASE WHEN a.lateness_ms < 1 THEN 0
                      ELSE least(floor(log(2, a.lateness_ms::numeric))::int + 1, 27) END AS bucket,
                 count(*) AS n
          FROM schedule_attempts AS a
          JOIN schedule_audit AS j ON j.id = a.job_id AND j.created_at = a.job_created_at
          WHERE a.started_at IS NOT NULL AND a.lateness_ms IS NOT NULL
          GROUP BY 1, 2, 3) AS b
    GROUP BY 1, 2
), ended AS (
    SELECT topic, date_trunc('minute', coalesce(completed_at, failed_at)) AS minute,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM schedule_audit
    WHERE status IN ('completed', 'failed')
    GROUP BY 1, 2
)
SELECT topic, minute, coalesce(e.completed, 0) AS completed, coalesce(e.failed, 0) AS failed,
       coalesce(a.failed_attempts, 0) AS failed_attempts, coalesce(a.retried, 0) AS retried,
       coalesce(l.lateness, '{}') AS lateness
FROM ended AS e
FULL JOIN attempts AS a USING (topic, minute)
FULL JOIN late AS l USING (topic, minute);
INSERT INTO schedule_minute_rollups
    (topic, minute, completed, failed, failed_attempts, retried, lateness)
SELECT topic, minute, completed, failed, failed_attempts, retried, lateness
FROM cells WHERE minute >= $1::timestamptz - interval '2 days';
INSERT INTO schedule_minute_rollups AS r (topic, minute, waiting, retrying)
SELECT t, m, 200 + (hashtext(t || m::text)::bigint + 2147483648) % 800,
       (hashtext(m::text || t)::bigint + 2147483648) % 50
FROM unnest($2::text[]) AS t,
     generate_series(date_trunc('minute', $1::timestamptz - interval '2 days'),
                     date_trunc('minute', $1::timestamptz), interval '1 minute') AS m
ON CONFLICT (topic, minute) DO UPDATE
    SET waiting = EXCLUDED.waiting, retrying = EXCLUDED.retrying;
INSERT INTO schedule_hour_rollups
    (topic, hour, completed, failed, failed_attempts, retried, lateness, waiting, retrying)
SELECT topic, date_trunc('hour', minute), sum(completed), sum(failed), sum(failed_attempts),
       sum(retried), audit_sum_buckets(lateness), 1000, 50
FROM cells
GROUP BY 1, 2;
INSERT INTO schedule_hour_rollups AS r (topic, hour, waiting, retrying)
SELECT t, h, 1000, 50
FROM unnest($2::text[]) AS t,
     generate_series(date_trunc('hour', $1::timestamptz - $3::int * interval '1 day'),
                     date_trunc('hour', $1::timestamptz), interval '1 hour') AS h
ON CONFLICT (topic, hour) DO NOTHING
"""


async def fill(
    url: str, topics: list[str], days: int, now: Any, say: Callable[[str], None]
) -> dict[str, Any]:
    """Fill both rollup tables for the loaded history; returns seconds and row counts."""
    conn = await asyncpg.connect(url, command_timeout=3600)
    t = time.perf_counter()
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL work_mem = '256MB'")
            for statement in [s.strip() for s in FILL.split(";\n") if s.strip()]:
                used = [i for i in (1, 2, 3) if f"${i}" in statement]
                args = (now, topics, days)[: max(used, default=0)]
                await conn.execute(statement, *args)
        for table in ("schedule_minute_rollups", "schedule_hour_rollups"):
            await conn.execute(f"VACUUM ANALYZE {table}")
        rows = {
            table: await conn.fetchval(f"SELECT count(*) FROM {table}")
            for table in ("schedule_minute_rollups", "schedule_hour_rollups")
        }
    finally:
        await conn.close()
    took = round(time.perf_counter() - t, 1)
    say(f"  pg: rollups filled ({took} s): {rows}")
    return {"seconds": took, "rows": rows}
