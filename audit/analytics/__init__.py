"""Nightly failure analytics over the audit history: export (Postgres COPY ->
date-partitioned Parquet), analyze (PySpark), publish (summary.json, Parquet
aggregates, report.html, Postgres tables for Grafana).

This is the only package that imports pyspark (the optional extra
`horae[analytics]`), and only inside `analyze`, `metrics`, `session` and
`jdbc`: importing `audit.analytics` or its CLI stays cheap and works without it.
"""

from __future__ import annotations

__all__: list[str] = []
