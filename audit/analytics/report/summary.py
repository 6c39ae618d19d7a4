"""summary.json (the contract external acceptance tests read) and the
aggregates as Parquet files, from an Analysis."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from audit.analytics.results import Analysis, Stats

# The contract: exactly these keys, in this order.
TOPIC_FIELDS: Final = (
    "topic",
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
    "p95_lateness_ms",
)


def summary(analysis: Analysis) -> dict[str, Any]:
    """The summary.json document: whole-window totals per topic, top errors, alerts.

    Rates are floats in [0, 1] or null where the denominator is 0; counts are ints.
    """
    w = analysis.window
    return {
        "window": {"since": w.since.isoformat(), "until": w.until.isoformat(), "zone": w.zone},
        "topics": [{name: getattr(t, name) for name in TOPIC_FIELDS} for t in analysis.totals],
        "top_errors": [
            {
                "signature": e.signature,
                "count": e.count,
                "topics": list(e.topics),
                "example_job_id": e.example_job_id,
            }
            for e in analysis.top_errors
        ],
        "alerts": [
            {
                "topic": a.topic,
                "kind": a.kind,
                "failure_rate": a.failure_rate,
                "baseline_rate": a.baseline_rate,
            }
            for a in analysis.alerts
        ],
    }


def write_summary(analysis: Analysis, out: Path) -> Path:
    """Write out/summary.json; returns its path."""
    path = out / "summary.json"
    path.write_text(
        json.dumps(summary(analysis), indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    return path


_STATS_SCHEMA: Final = pa.schema(
    [("period", pa.string()), ("topic", pa.string()), ("day", pa.date32())]
    + [(name, pa.int64()) for name in ("jobs", "completed", "failed", "cancelled")]
    + [("failure_rate", pa.float64())]
    + [(name, pa.int64()) for name in ("attempts", "failed_attempts")]
    + [
        (name, pa.float64())
        for name in (
            "attempt_failure_rate",
            "retry_recovery_rate",
            "p50_duration_ms",
            "p95_duration_ms",
            "p99_duration_ms",
            "p50_lateness_ms",
            "p95_lateness_ms",
            "p99_lateness_ms",
        )
    ]
    + [
        (name, pa.int64())
        for name in ("timed_out", "worker_lost", "no_listener", "with_failure", "recovered")
    ]
)


def _stats_table(rows: list[tuple[str, Stats]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"period": period, **asdict(s)} for period, s in rows], schema=_STATS_SCHEMA
    )


def write_aggregates(analysis: Analysis, out: Path) -> list[Path]:
    """Write out/aggregates/*.parquet: daily stats (baseline and report days), per-topic totals,
    error signatures, top errors, attempts histogram, alerts. Returns the paths."""
    directory = out / "aggregates"
    directory.mkdir(parents=True, exist_ok=True)
    tables = {
        "daily_stats": _stats_table(
            [("baseline", s) for s in analysis.baseline_daily]
            + [("window", s) for s in analysis.daily]
        ),
        "topic_totals": _stats_table(
            [("window", s) for s in analysis.totals] + [("baseline", s) for s in analysis.baseline]
        ),
        "error_signatures": pa.Table.from_pylist(
            [asdict(s) for s in analysis.signatures],
            schema=pa.schema(
                [
                    ("day", pa.date32()),
                    ("topic", pa.string()),
                    ("signature", pa.string()),
                    ("count", pa.int64()),
                    ("example_job_id", pa.string()),
                ]
            ),
        ),
        "top_errors": pa.Table.from_pylist(
            [{**asdict(e), "topics": list(e.topics)} for e in analysis.top_errors],
            schema=pa.schema(
                [
                    ("signature", pa.string()),
                    ("count", pa.int64()),
                    ("topics", pa.list_(pa.string())),
                    ("example_job_id", pa.string()),
                ]
            ),
        ),
        "attempts_histogram": pa.Table.from_pylist(
            [asdict(b) for b in analysis.histogram],
            schema=pa.schema(
                [("topic", pa.string()), ("attempts", pa.int32()), ("jobs", pa.int64())]
            ),
        ),
        "alerts": pa.Table.from_pylist(
            [asdict(a) for a in analysis.alerts],
            schema=pa.schema(
                [
                    ("topic", pa.string()),
                    ("kind", pa.string()),
                    ("failure_rate", pa.float64()),
                    ("baseline_rate", pa.float64()),
                ]
            ),
        ),
    }
    paths = []
    for name, table in tables.items():
        path = directory / f"{name}.parquet"
        pq.write_table(table, path)
        paths.append(path)
    return paths
