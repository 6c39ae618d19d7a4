"""All of the pipeline's PostgreSQL I/O: COPY of the export queries to a CSV
file, and the publish step's transaction (replace the window's rows). Named
queries with bound parameters only (sql/queries.sql)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Final

import asyncpg

from audit.analytics.errors import AnalyticsError
from audit.analytics.results import Signature, Stats
from audit.analytics.sql import query
from audit.migrate import migrate

STATS_COLUMNS: Final = (
    "topic",
    "day",
    "jobs",
    "completed",
    "failed",
    "cancelled",
    "failure_rate",
    "attempts",
    "failed_attempts",
    "attempt_failure_rate",
    "retry_recovery_rate",
    "p50_duration_ms",
    "p95_duration_ms",
    "p99_duration_ms",
    "p50_lateness_ms",
    "p95_lateness_ms",
    "p99_lateness_ms",
    "timed_out",
    "worker_lost",
    "no_listener",
)


async def connect(database_url: str) -> asyncpg.Connection:
    """A connection with a UTC session.

    Raises:
        AnalyticsError: when PostgreSQL cannot be reached.
    """
    try:
        conn = await asyncpg.connect(database_url, server_settings={"TimeZone": "UTC"})
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise AnalyticsError(f"cannot connect to PostgreSQL: {exc}") from exc
    return conn


async def lock_exports(conn: asyncpg.Connection) -> None:
    """Wait for other exports of this database (session advisory lock)."""
    await conn.execute(query("export_lock"))


async def unlock_exports(conn: asyncpg.Connection) -> None:
    """Let the next export of this database run."""
    await conn.execute(query("export_unlock"))


async def copy_to_csv(
    conn: asyncpg.Connection, name: str, start: datetime, end: datetime, out: Path
) -> None:
    """COPY (the named export query with $1 = start, $2 = end) TO a CSV file.

    Raises:
        AnalyticsError: when the query fails.
    """
    try:
        await conn.copy_from_query(query(name), start, end, output=str(out), format="csv")
    except asyncpg.PostgresError as exc:
        raise AnalyticsError(f"export query failed: {exc}") from exc


def _column(rows: Sequence[Stats], name: str) -> list[object]:
    return [getattr(r, name) for r in rows]


async def publish(
    conn: asyncpg.Connection,
    first: date,
    last: date,
    daily: Sequence[Stats],
    signatures: Sequence[Signature],
) -> None:
    """Replace the rows of days first..last, in one transaction (after applying any
    migration the database lacks: the tables are audit migration 0003).

    Raises:
        AnalyticsError: when a statement fails.
    """
    try:
        await migrate(conn)
        async with conn.transaction():
            await conn.execute(query("publish_lock"))
            await conn.execute(query("delete_failure_stats"), first, last)
            await conn.execute(query("delete_error_signatures"), first, last)
            if daily:
                await conn.execute(
                    query("upsert_failure_stats"), *[_column(daily, c) for c in STATS_COLUMNS]
                )
            if signatures:
                await conn.execute(
                    query("upsert_error_signatures"),
                    [s.day for s in signatures],
                    [s.topic for s in signatures],
                    [s.signature for s in signatures],
                    [s.count for s in signatures],
                    [s.example_job_id for s in signatures],
                )
    except asyncpg.PostgresError as exc:
        raise AnalyticsError(f"publishing to PostgreSQL failed: {exc}") from exc
