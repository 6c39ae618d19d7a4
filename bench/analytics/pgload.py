"""Load synthetic days straight into the audit tables (COPY, bypassing the
relay: the benchmark measures the export, not the relay)."""

from __future__ import annotations

import json

import asyncpg
import pyarrow as pa

from audit.migrate import month_start

AUDIT_COLUMNS = (
    "id",
    "topic",
    "status",
    "attempts",
    "max_attempts",
    "last_error",
    "run_at",
    "created_at",
    "updated_at",
    "completed_at",
    "failed_at",
    "cancelled_at",
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


async def load(conn: asyncpg.Connection, jobs: pa.Table, attempts: pa.Table) -> int:
    """COPY one generated day into schedule_audit and schedule_attempts; returns rows written."""
    months = {month_start(t) for t in jobs.column("created_at").to_pylist()}
    for month in sorted(months):
        await conn.execute("SELECT audit_ensure_partitions($1::date)", month)
    records = []
    for j in jobs.to_pylist():
        end = j["finished_at"]
        error = (
            json.dumps(
                {"type": j["last_error_type"], "message": j["last_error_message"], "traceback": ""}
            )
            if j["last_error_type"]
            else None
        )
        records.append(
            (
                j["job_id"],
                j["topic"],
                j["status"],
                j["attempts"],
                j["max_attempts"],
                error,
                j["run_at"],
                j["created_at"],
                end,
                end if j["status"] == "completed" else None,
                end if j["status"] == "failed" else None,
                end if j["status"] == "cancelled" else None,
            )
        )
    await conn.copy_records_to_table("schedule_audit", records=records, columns=AUDIT_COLUMNS)
    rows = [tuple(a[c] for c in ATTEMPT_COLUMNS) for a in attempts.to_pylist()]
    await conn.copy_records_to_table("schedule_attempts", records=rows, columns=ATTEMPT_COLUMNS)
    return len(records) + len(rows)
