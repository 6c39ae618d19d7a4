"""The exported tables' columns, as pyarrow schemas and Spark DDL: the one
place that names them (export, the Spark reader, the JDBC reader and the
benchmark's generator all use these)."""

from __future__ import annotations

from typing import Final

import pyarrow as pa

TS: Final = pa.timestamp("us", tz="UTC")

JOBS: Final = pa.schema(
    [
        ("job_id", pa.string()),
        ("topic", pa.string()),
        ("status", pa.string()),
        ("attempts", pa.int32()),
        ("max_attempts", pa.int32()),
        ("failed_attempts", pa.int32()),
        ("created_at", TS),
        ("run_at", TS),
        ("finished_at", TS),
        ("last_error_type", pa.string()),
        ("last_error_message", pa.string()),
        ("cron_name", pa.string()),
    ]
)

ATTEMPTS: Final = pa.schema(
    [
        ("job_id", pa.string()),
        ("attempt_no", pa.int32()),
        ("topic", pa.string()),
        ("worker_id", pa.string()),
        ("started_at", TS),
        ("finished_at", TS),
        ("outcome", pa.string()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("duration_ms", pa.int64()),
        ("lateness_ms", pa.int64()),
        ("job_created_at", TS),
    ]
)

TABLES: Final = {"jobs": JOBS, "attempts": ATTEMPTS}

_SPARK_TYPES: Final = {
    pa.string(): "STRING",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    TS: "TIMESTAMP",
}


def spark_ddl(schema: pa.Schema, partition_column: str | None = "day") -> str:
    """Spark DDL of a table (`job_id STRING, ..., day DATE`), for an explicit read schema."""
    cols = [f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in schema]
    if partition_column:
        cols.append(f"`{partition_column}` DATE")
    return ", ".join(cols)
