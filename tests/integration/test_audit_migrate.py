"""Migrations on an empty database: the exact schema, partitions, idempotence
(twice, and three at once), the append-only check, and pruning by partition."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from audit.migrate import add_months, load_migrations, migrate, migrate_url, month_start, prune
from audit.relay.consumer import AuditRelay
from scheduler.core.errors import StorageError

EXPECTED_COLUMNS = {
    "schedule_audit": [
        ("id", "text", "NO"),
        ("topic", "text", "NO"),
        ("status", "text", "NO"),
        ("attempts", "integer", "NO"),
        ("max_attempts", "integer", "YES"),
        ("backoff_type", "text", "YES"),
        ("backoff_delay_ms", "bigint", "YES"),
        ("last_error", "jsonb", "YES"),
        ("run_at", "timestamp with time zone", "YES"),
        ("tz", "text", "YES"),
        ("payload", "jsonb", "YES"),
        ("metadata", "jsonb", "YES"),
        ("trace_id", "text", "YES"),
        ("cron_name", "text", "YES"),
        ("created_at", "timestamp with time zone", "NO"),
        ("updated_at", "timestamp with time zone", "NO"),
        ("completed_at", "timestamp with time zone", "YES"),
        ("failed_at", "timestamp with time zone", "YES"),
        ("cancelled_at", "timestamp with time zone", "YES"),
        ("applied_ms", "bigint", "YES"),
        ("applied_seq", "bigint", "YES"),
        ("deduplicated", "integer", "NO"),
        ("parents", "ARRAY", "YES"),
    ],
    "schedule_attempts": [
        ("job_id", "text", "NO"),
        ("attempt_no", "integer", "NO"),
        ("worker_id", "text", "YES"),
        ("started_at", "timestamp with time zone", "YES"),
        ("finished_at", "timestamp with time zone", "YES"),
        ("outcome", "text", "YES"),
        ("error_type", "text", "YES"),
        ("error_message", "text", "YES"),
        ("duration_ms", "bigint", "YES"),
        ("lateness_ms", "bigint", "YES"),
        ("job_created_at", "timestamp with time zone", "NO"),
        ("progress_percent", "double precision", "YES"),
        ("progress_message", "text", "YES"),
        ("logs", "jsonb", "YES"),
        ("result", "jsonb", "YES"),
    ],
    "schedule_events": [
        ("stream_ms", "bigint", "NO"),
        ("stream_seq", "bigint", "NO"),
        ("job_id", "text", "NO"),
        ("event_type", "text", "NO"),
        ("attempt_no", "integer", "NO"),
        ("ts", "timestamp with time zone", "NO"),
        ("fields", "jsonb", "NO"),
        ("received_at", "timestamp with time zone", "NO"),
        ("job_created_at", "timestamp with time zone", "NO"),
    ],
    "schedule_job_index": [
        ("job_id", "text", "NO"),
        ("created_at", "timestamp with time zone", "NO"),
        ("sched_ms", "bigint", "YES"),
        ("sched_seq", "bigint", "YES"),
    ],
    "schedule_error_signatures": [
        ("day", "date", "NO"),
        ("topic", "text", "NO"),
        ("signature", "text", "NO"),
        ("count", "bigint", "NO"),
        ("example_job_id", "text", "NO"),
    ],
    "schedule_failure_stats": [
        ("topic", "text", "NO"),
        ("day", "date", "NO"),
        ("jobs", "bigint", "NO"),
        ("completed", "bigint", "NO"),
        ("failed", "bigint", "NO"),
        ("cancelled", "bigint", "NO"),
        ("failure_rate", "double precision", "YES"),
        ("attempts", "bigint", "NO"),
        ("failed_attempts", "bigint", "NO"),
        ("attempt_failure_rate", "double precision", "YES"),
        ("retry_recovery_rate", "double precision", "YES"),
        ("p50_duration_ms", "double precision", "YES"),
        ("p95_duration_ms", "double precision", "YES"),
        ("p99_duration_ms", "double precision", "YES"),
        ("p50_lateness_ms", "double precision", "YES"),
        ("p95_lateness_ms", "double precision", "YES"),
        ("p99_lateness_ms", "double precision", "YES"),
        ("timed_out", "bigint", "NO"),
        ("worker_lost", "bigint", "NO"),
        ("no_listener", "bigint", "NO"),
    ],
    "schedule_hour_rollups": [
        ("topic", "text", "NO"),
        ("hour", "timestamp with time zone", "NO"),
        ("completed", "bigint", "NO"),
        ("failed", "bigint", "NO"),
        ("failed_attempts", "bigint", "NO"),
        ("retried", "bigint", "NO"),
        ("deduplicated", "bigint", "NO"),
        ("lateness", "ARRAY", "NO"),
        ("waiting", "bigint", "YES"),
        ("retrying", "bigint", "YES"),
    ],
    "schedule_minute_rollups": [
        ("topic", "text", "NO"),
        ("minute", "timestamp with time zone", "NO"),
        ("completed", "bigint", "NO"),
        ("failed", "bigint", "NO"),
        ("failed_attempts", "bigint", "NO"),
        ("retried", "bigint", "NO"),
        ("deduplicated", "bigint", "NO"),
        ("lateness", "ARRAY", "NO"),
        ("waiting", "bigint", "YES"),
        ("retrying", "bigint", "YES"),
    ],
    "schedule_operator_actions": [
        ("at", "timestamp with time zone", "NO"),
        ("actor", "text", "NO"),
        ("role", "text", "NO"),
        ("action", "text", "NO"),
        ("target", "text", "NO"),
        ("outcome", "text", "NO"),
        ("detail", "jsonb", "YES"),
    ],
    "schema_version": [
        ("version", "integer", "NO"),
        ("name", "text", "NO"),
        ("checksum", "text", "NO"),
        ("applied_at", "timestamp with time zone", "NO"),
    ],
}
EXPECTED_KEYS = {
    "schedule_audit": ["id", "created_at"],
    "schedule_attempts": ["job_id", "attempt_no", "job_created_at"],
    "schedule_events": ["stream_ms", "stream_seq", "job_created_at"],
    "schedule_job_index": ["job_id"],
    "schedule_error_signatures": ["day", "topic", "signature"],
    "schedule_failure_stats": ["topic", "day"],
    "schedule_hour_rollups": ["topic", "hour"],
    "schedule_minute_rollups": ["topic", "minute"],
    "schema_version": ["version"],
}
PARTITIONED = {
    "schedule_audit": "created_at",
    "schedule_attempts": "job_created_at",
    "schedule_events": "job_created_at",
}


async def schema(conn: asyncpg.Connection) -> dict[str, Any]:
    """Tables (not partitions), columns, primary keys and partition keys of the public schema."""
    columns: dict[str, list[tuple[str, str, str]]] = {}
    for r in await conn.fetch(
        """SELECT c.table_name, c.column_name, c.data_type, c.is_nullable
           FROM information_schema.columns c JOIN pg_class k ON k.relname = c.table_name
           WHERE c.table_schema = current_schema() AND NOT k.relispartition
           ORDER BY c.table_name, c.ordinal_position"""
    ):
        columns.setdefault(r["table_name"], []).append(
            (r["column_name"], r["data_type"], r["is_nullable"])
        )
    keys = {
        r["t"]: list(r["cols"])
        for r in await conn.fetch(
            """SELECT c.conrelid::regclass::text AS t,
                  array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, o)
                        JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n
                        ORDER BY k.o) AS cols
           FROM pg_constraint c JOIN pg_class k ON k.oid = c.conrelid
           WHERE c.contype = 'p' AND NOT k.relispartition
             AND k.relnamespace = current_schema()::regnamespace"""
        )
    }
    partition_keys = {
        r["t"]: r["key"]
        for r in await conn.fetch(
            """SELECT p.partrelid::regclass::text AS t, a.attname AS key
           FROM pg_partitioned_table p
           JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
           WHERE p.partstrat = 'r'"""
        )
    }
    partitions = sorted(
        r["name"]
        for r in await conn.fetch(
            "SELECT c.relname AS name FROM pg_inherits i JOIN "
            "pg_class c ON c.oid = i.inhrelid WHERE c.relkind = 'r'"
        )
    )
    return {
        "columns": columns,
        "keys": keys,
        "partition_keys": partition_keys,
        "partitions": partitions,
    }


def month_names(*months: datetime) -> list[str]:
    return sorted(f"{t}_p{m:%Y%m}" for t in PARTITIONED for m in months)


async def test_empty_database_gets_the_expected_schema(database_url: str) -> None:
    now = datetime.now(UTC)
    assert (
        await migrate_url(database_url)
        == [m.version for m in load_migrations()]
        == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    )
    conn = await asyncpg.connect(database_url)
    try:
        got = await schema(conn)
        assert got["columns"] == {t: cols for t, cols in EXPECTED_COLUMNS.items()}
        assert got["keys"] == EXPECTED_KEYS
        assert got["partition_keys"] == PARTITIONED
        this = month_start(now)
        nxt = add_months(this, 1)
        assert got["partitions"] == month_names(
            datetime(this.year, this.month, 1), datetime(nxt.year, nxt.month, 1)
        )
        versions = await conn.fetch("SELECT version, name FROM schema_version")
        assert [(r["version"], r["name"]) for r in versions] == [
            (1, "audit_schema"),
            (2, "audit_applied"),
            (3, "analytics_tables"),
            (4, "invalid_payload_outcome"),
            (5, "deduplicated"),
            (6, "attempt_progress"),
            (7, "least_privilege"),
            (8, "operator_actions"),
            (9, "console_indexes"),
            (10, "console_rollups"),
            (11, "attempt_result"),
            (12, "job_parents"),
            (13, "export_by_terminal_time"),
        ]
        # 0009: the console's overview and analytics page read these (bench/console_pages.py)
        indexes = {
            r["indexname"]: r["indexdef"]
            for r in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname IN "
                "('schedule_audit_completed', 'schedule_failure_stats_day', "
                "'schedule_audit_cancelled', 'schedule_audit_updated')"
            )
        }
        # 0013: the export reads the terminal states' partial indexes; updated_at has none
        assert indexes == {
            "schedule_audit_cancelled": (
                "CREATE INDEX schedule_audit_cancelled ON ONLY public.schedule_audit "
                "USING btree (cancelled_at) WHERE (status = 'cancelled'::text)"
            ),
            "schedule_audit_completed": (
                "CREATE INDEX schedule_audit_completed ON ONLY public.schedule_audit "
                "USING btree (completed_at) INCLUDE (topic) WHERE (status = 'completed'::text)"
            ),
            "schedule_failure_stats_day": (
                "CREATE INDEX schedule_failure_stats_day ON public.schedule_failure_stats "
                "USING btree (day)"
            ),
        }
        # no DEFAULT partition: a row for a month without a partition is refused, not parked
        with pytest.raises(asyncpg.CheckViolationError, match="no partition"):
            await conn.execute(
                "INSERT INTO schedule_job_index VALUES ('x', '1999-01-01Z')"
            )  # (index: fine)
            await conn.execute(
                "INSERT INTO schedule_audit (id, created_at, updated_at) "
                "VALUES ('x', '1999-01-01Z', '1999-01-01Z')"
            )
    finally:
        await conn.close()


async def test_migrating_twice_changes_nothing(database_url: str) -> None:
    await migrate_url(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        before = await schema(conn)
        assert await migrate(conn) == []
        assert await schema(conn) == before
        assert await conn.fetchval("SELECT count(*) FROM schema_version") == 13
    finally:
        await conn.close()


async def test_three_migrators_at_once(database_url: str) -> None:
    results = await asyncio.gather(*(migrate_url(database_url) for _ in range(3)))
    assert sorted(results) == [[], [], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]]
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM schema_version") == 13
        assert (await schema(conn))["columns"] == EXPECTED_COLUMNS
    finally:
        await conn.close()


async def test_an_edited_migration_is_refused(database_url: str) -> None:
    await migrate_url(database_url)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE schema_version SET checksum = 'edited' WHERE version = 1")
        with pytest.raises(StorageError, match="append-only"):
            await migrate(conn)
    finally:
        await conn.close()


async def test_partitions_are_created_for_any_month_an_event_lands_in(
    outbox: Any, relay: AuditRelay, database_url: str, drain: Callable[[AuditRelay], Awaitable[int]]
) -> None:
    far = int(datetime(2031, 3, 15, tzinfo=UTC).timestamp() * 1000)
    outbox.now = far
    await outbox.scheduled("future-job")
    await drain(relay)
    conn = await asyncpg.connect(database_url)
    try:
        assert (
            await conn.fetchval("SELECT tableoid::regclass::text FROM schedule_audit")
            == "schedule_audit_p203103"
        )
        assert await conn.fetchval("SELECT count(*) FROM schedule_events_p203103") == 1
    finally:
        await conn.close()


async def test_prune_drops_whole_old_partitions(
    outbox: Any, relay: AuditRelay, database_url: str, drain: Callable[[AuditRelay], Awaitable[int]]
) -> None:
    months = [datetime(2026, m, 10, tzinfo=UTC) for m in (5, 6, 7, 8, 9)]
    for i, when in enumerate(months):
        outbox.now = int(when.timestamp() * 1000)
        await outbox.scheduled(f"job-{i}")
        outbox.tick(10)
        await outbox.started(f"job-{i}", 1, due=outbox.now)
        outbox.tick(10)
        await outbox.completed(f"job-{i}", 1)
    await drain(relay)
    conn = await asyncpg.connect(database_url)
    try:
        # keep 2 full months before September 2026: July, August (and September itself)
        dropped = await prune(conn, 2, now=datetime(2026, 9, 20, tzinfo=UTC))
        assert dropped == sorted(month_names(datetime(2026, 5, 1), datetime(2026, 6, 1)))
        assert sorted(r["id"] for r in await conn.fetch("SELECT id FROM schedule_audit")) == [
            "job-2",
            "job-3",
            "job-4",
        ]
        assert await conn.fetchval("SELECT count(*) FROM schedule_attempts") == 3
        assert await conn.fetchval("SELECT count(DISTINCT job_id) FROM schedule_events") == 3
        assert sorted(
            r["job_id"] for r in await conn.fetch("SELECT job_id FROM schedule_job_index")
        ) == ["job-2", "job-3", "job-4"]
        assert await prune(conn, 2, now=datetime(2026, 9, 20, tzinfo=UTC)) == []
        with pytest.raises(ValueError):
            await prune(conn, 0)
    finally:
        await conn.close()
