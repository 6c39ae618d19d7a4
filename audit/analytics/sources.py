"""Where the analysis reads jobs and attempts from: the exported Parquet
dataset (default), or PostgreSQL over JDBC (jdbc.py). Both give DataFrames
with the columns of schema.py plus `day` (UTC day of finished_at)."""

from __future__ import annotations

import logging
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession

from audit.analytics.errors import DatasetMissing
from audit.analytics.location import DatasetLocation, is_exported, partition
from audit.analytics.schema import TABLES, spark_ddl
from audit.analytics.window import ReportWindow

log = logging.getLogger("horae.analytics")


class Source(Protocol):
    """Reads one table ("jobs" or "attempts") for a window, baseline included."""

    def read(self, spark: SparkSession, table: str, window: ReportWindow) -> DataFrame: ...


class ParquetSource:
    """The dataset written by export.py. Report days must be there; missing
    baseline days are logged and skipped (the baseline is then shorter)."""

    def __init__(self, location: DatasetLocation) -> None:
        self.location = location

    def read(self, spark: SparkSession, table: str, window: ReportWindow) -> DataFrame:
        fs, root = self.location.arrow()
        present = [
            d for d in window.all_utc_days if is_exported(fs, f"{root}/{table}/{partition(d)}")
        ]
        missing_report = sorted(set(window.report_utc_days) - set(present))
        if missing_report:
            raise DatasetMissing(
                f"{table}: UTC days {', '.join(str(d) for d in missing_report)} "
                f"are not in the dataset at {self.location.uri}; run the export "
                f"(horae report without --no-export) first"
            )
        skipped = sorted(set(window.all_utc_days) - set(present))
        if skipped:
            log.warning(
                "%s: baseline days %s not exported; the baseline is shorter",
                table,
                ", ".join(str(d) for d in skipped),
                extra={"event": "analytics.baseline_missing"},
            )
        paths = [self.location.spark(table, partition(d)) for d in present]
        return (
            spark.read.schema(spark_ddl(TABLES[table]))
            .option("basePath", self.location.spark(table))
            .parquet(*paths)
        )
