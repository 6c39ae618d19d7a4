"""Spark test helpers: one shared local SparkSession per test process (starting
Spark costs seconds), the Java rule for Spark tests (the `spark` marker is
registered in pyproject.toml) and `History`, a hand-made exported dataset.

Rule: a Spark test skips only when Java is absent and HORAE_REQUIRE_SPARK is
not "1" (CI sets it, so there a missing Java fails); a Java older than 17 fails.
"""

from __future__ import annotations

import atexit
import os
from datetime import UTC, date, datetime, timedelta
from typing import Final

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from audit.analytics.export import write_partition
from audit.analytics.java import java_problem, java_version
from audit.analytics.location import DatasetLocation
from audit.analytics.schema import ATTEMPTS, JOBS
from audit.analytics.session import session_conf, use_worker_python

TEST_CONF: Final = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "1g",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "16384",
}

_session: list[SparkSession] = []


def require_spark() -> None:
    """Skip (Java absent, not required) or fail (Java required, or too old) unless Spark can run."""
    problem = java_problem()
    if problem is None:
        return
    if java_version() is None and os.environ.get("HORAE_REQUIRE_SPARK") != "1":
        pytest.skip(problem)
    pytest.fail(
        problem
        + (" (HORAE_REQUIRE_SPARK=1)" if os.environ.get("HORAE_REQUIRE_SPARK") == "1" else "")
    )


def spark_session() -> SparkSession:
    """The process's shared local[2] session for tests (started on first use, stopped at exit)."""
    require_spark()
    if _session and _session[0].sparkContext._jsc is None:  # stopped by a pipeline run meanwhile
        _session.clear()
    if not _session:
        master, conf = session_conf("local[2]", TEST_CONF)
        use_worker_python(conf)  # the workers run this interpreter, whatever python3 is (issue 29)
        builder = SparkSession.builder.appName("horae-tests").master(master or "local[2]")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _session.append(spark)
        atexit.register(spark.stop)
    return _session[0]


class History:
    """Jobs and their attempts, by UTC day, in the exported layout."""

    def __init__(self) -> None:
        self.jobs: dict[date, list[dict[str, object]]] = {}
        self.attempts: dict[date, list[dict[str, object]]] = {}
        self.n = 0

    def job(
        self,
        topic: str,
        day: date,
        outcomes: list[str],
        status: str,
        hour: int = 12,
        message: str = "card 42 declined",
    ) -> str:
        self.n += 1
        job_id = f"{topic}-{self.n:04d}"
        start = datetime(day.year, day.month, day.day, hour, tzinfo=UTC)
        failed = 0
        for i, outcome in enumerate(outcomes):
            finished = start + timedelta(minutes=i, seconds=1)
            is_failure = outcome in ("failed", "timed_out", "worker_lost")
            failed += is_failure
            self.attempts.setdefault(finished.date(), []).append(
                {
                    "job_id": job_id,
                    "attempt_no": i + 1,
                    "topic": topic,
                    "worker_id": "w",
                    "started_at": finished,
                    "finished_at": finished,
                    "outcome": outcome,
                    "error_type": "CardDeclined" if is_failure else None,
                    "error_message": f"{message} #{self.n}" if is_failure else None,
                    "duration_ms": 10 * (i + 1),
                    "lateness_ms": i,
                    "job_created_at": start,
                }
            )
        end = start + timedelta(minutes=len(outcomes), seconds=2)
        self.jobs.setdefault(end.date(), []).append(
            {
                "job_id": job_id,
                "topic": topic,
                "status": status,
                "attempts": len(outcomes),
                "max_attempts": 3,
                "failed_attempts": failed,
                "created_at": start,
                "run_at": start,
                "finished_at": end,
                "last_error_type": None,
                "last_error_message": None,
                "cron_name": None,
            }
        )
        return job_id

    def write(self, location: DatasetLocation, days: list[date]) -> None:
        for day in days:
            write_partition(
                location, "jobs", day, pa.Table.from_pylist(self.jobs.get(day, []), schema=JOBS)
            )
            write_partition(
                location,
                "attempts",
                day,
                pa.Table.from_pylist(self.attempts.get(day, []), schema=ATTEMPTS),
            )
