"""Writes the Grafana dashboards (schemaVersion 39) from a compact panel list.

Run `python dashboards/generate.py` after editing; tests/integration/test_dashboards.py
checks the JSON files match this output and query only emitted metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA_VERSION = 39
PROM = {"type": "prometheus", "uid": "${datasource}"}
PG = {"type": "grafana-postgresql-datasource", "uid": "${datasource}"}

RATE = "[$__rate_interval]"
OPERATIONS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    # (title, panel type, unit, [(legend, expr)])
    (
        "Jobs scheduled / s by topic",
        "timeseries",
        "ops",
        [("{{topic}}", f"sum by (topic) (rate(horae_jobs_scheduled_total{RATE}))")],
    ),
    (
        "Attempts / s by outcome",
        "timeseries",
        "ops",
        [("{{outcome}}", f"sum by (outcome) (rate(horae_attempts_total{RATE}))")],
    ),
    (
        "Completed / failed / cancelled per s",
        "timeseries",
        "ops",
        [
            ("completed", f"sum(rate(horae_jobs_completed_total{RATE}))"),
            ("failed", f"sum(rate(horae_jobs_failed_total{RATE}))"),
            ("cancelled", f"sum(rate(horae_jobs_cancelled_total{RATE}))"),
        ],
    ),
    (
        "Retries / s by topic",
        "timeseries",
        "ops",
        [("{{topic}}", f"sum by (topic) (rate(horae_retries_total{RATE}))")],
    ),
    (
        "Failure ratio by topic (failed / finished)",
        "timeseries",
        "percentunit",
        [
            (
                "{{topic}}",
                f"sum by (topic) (rate(horae_jobs_failed_total{RATE})) / (sum by (topic) "
                f"(rate(horae_jobs_failed_total{RATE})) + sum by "
                f"(topic) (rate(horae_jobs_completed_total{RATE})))",
            )
        ],
    ),
    (
        "Lateness p50 / p99 (start - due)",
        "timeseries",
        "s",
        [
            (
                "p50 {{topic}}",
                f"histogram_quantile(0.5, sum by (le, topic) "
                f"(rate(horae_job_lateness_seconds_bucket{RATE})))",
            ),
            (
                "p99 {{topic}}",
                f"histogram_quantile(0.99, sum by (le, topic) "
                f"(rate(horae_job_lateness_seconds_bucket{RATE})))",
            ),
        ],
    ),
    (
        "Attempt duration p50 / p99",
        "timeseries",
        "s",
        [
            (
                "p50 {{topic}}",
                f"histogram_quantile(0.5, sum by (le, topic) "
                f"(rate(horae_attempt_duration_seconds_bucket{RATE})))",
            ),
            (
                "p99 {{topic}}",
                f"histogram_quantile(0.99, sum by (le, topic) "
                f"(rate(horae_attempt_duration_seconds_bucket{RATE})))",
            ),
        ],
    ),
    ("Queue depth by state", "timeseries", "short", [("{{state}}", "max by (state) (horae_jobs)")]),
    (
        "Audit lag: pending outbox events",
        "timeseries",
        "short",
        [("pending", "max(horae_audit_outbox_pending)")],
    ),
    (
        "Audit lag: oldest uncommitted event age",
        "timeseries",
        "s",
        [("age", "max(horae_audit_outbox_oldest_age_seconds)")],
    ),
    (
        "Jobs with no listener / s by topic",
        "timeseries",
        "ops",
        [("{{topic}}", f"sum by (topic) (rate(app_schedule_job_no_listener_total{RATE}))")],
    ),
    ("Attempts running now", "stat", "short", [("running", "sum(horae_worker_active_attempts)")]),
]

ANALYTICS: list[tuple[str, str, str, str]] = [
    # (title, panel type, format, SQL) over the nightly Spark job's tables
    (
        "Failure rate by topic per day",
        "timeseries",
        "time_series",
        "SELECT day::timestamptz AS time, topic AS metric, failure_rate AS value FROM "
        "schedule_failure_stats WHERE $__timeFilter(day::timestamptz) ORDER BY 1",
    ),
    (
        "Jobs finished per day",
        "timeseries",
        "time_series",
        "SELECT day::timestamptz AS time, topic AS metric, completed + failed + cancelled AS value "
        "FROM schedule_failure_stats WHERE $__timeFilter(day::timestamptz) ORDER BY 1",
    ),
    (
        "Retry recovery rate by topic",
        "timeseries",
        "time_series",
        "SELECT day::timestamptz AS time, topic AS metric, retry_recovery_rate AS value "
        "FROM schedule_failure_stats WHERE $__timeFilter(day::timestamptz) ORDER BY 1",
    ),
    (
        "Attempt duration p95 (ms)",
        "timeseries",
        "time_series",
        "SELECT day::timestamptz AS time, topic AS metric, p95_duration_ms AS value "
        "FROM schedule_failure_stats WHERE $__timeFilter(day::timestamptz) ORDER BY 1",
    ),
    (
        "Top error signatures",
        "table",
        "table",
        "SELECT signature, sum(count) AS count, string_agg(DISTINCT topic, "
        "', ') AS topics, max(example_job_id) AS example_job_id FROM "
        "schedule_error_signatures WHERE $__timeFilter(day::timestamptz) "
        "GROUP BY signature ORDER BY count DESC LIMIT 20",
    ),
]


def _grid(i: int, width: int = 12, height: int = 8) -> dict[str, int]:
    per_row = 24 // width
    return {"h": height, "w": width, "x": (i % per_row) * width, "y": (i // per_row) * height}


def _dashboard(uid: str, title: str, ds_type: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "tags": ["horae"],
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": ds_type,
                    "label": "Data source",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def operations() -> dict[str, Any]:
    panels = []
    for i, (title, kind, unit, queries) in enumerate(OPERATIONS):
        panels.append(
            {
                "id": i + 1,
                "type": kind,
                "title": title,
                "datasource": PROM,
                "gridPos": _grid(i),
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {},
                "targets": [
                    {"refId": chr(65 + j), "datasource": PROM, "expr": expr, "legendFormat": legend}
                    for j, (legend, expr) in enumerate(queries)
                ],
            }
        )
    return _dashboard("horae-operations", "horae: operations", "prometheus", panels)


def analytics() -> dict[str, Any]:
    panels = []
    for i, (title, kind, fmt, sql) in enumerate(ANALYTICS):
        panels.append(
            {
                "id": i + 1,
                "type": kind,
                "title": title,
                "datasource": PG,
                "gridPos": _grid(i),
                "fieldConfig": {
                    "defaults": {"unit": "percentunit" if "rate" in title.lower() else "short"},
                    "overrides": [],
                },
                "options": {},
                "targets": [
                    {
                        "refId": "A",
                        "datasource": PG,
                        "format": fmt,
                        "rawQuery": True,
                        "editorMode": "code",
                        "rawSql": sql,
                    }
                ],
            }
        )
    return _dashboard(
        "horae-failure-analytics",
        "horae: failure analytics (nightly)",
        "grafana-postgresql-datasource",
        panels,
    )


def render() -> dict[str, str]:
    """File name -> JSON text."""
    return {
        "horae-operations.json": json.dumps(operations(), indent=2) + "\n",
        "horae-failure-analytics.json": json.dumps(analytics(), indent=2) + "\n",
    }


if __name__ == "__main__":
    for name, text in render().items():
        (HERE / name).write_text(text)
        print(f"wrote dashboards/{name}")
