"""Spark test helpers: one shared local SparkSession per test process (starting
Spark costs seconds) and the Java rule for Spark tests (the `spark` marker is
registered in pyproject.toml).

Rule: a Spark test skips only when Java is absent and HORAE_REQUIRE_SPARK is
not "1" (CI sets it, so there a missing Java fails); a Java older than 17 fails.
"""

from __future__ import annotations

import atexit
import os
from typing import Final

import pytest
from pyspark.sql import SparkSession

from audit.analytics.java import java_problem, java_version
from audit.analytics.session import session_conf

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
    pytest.fail(problem + (" (HORAE_REQUIRE_SPARK=1)" if os.environ.get("HORAE_REQUIRE_SPARK") == "1" else ""))


def spark_session() -> SparkSession:
    """The process's shared local[2] session for tests (started on first use, stopped at exit)."""
    require_spark()
    if _session and _session[0].sparkContext._jsc is None:  # stopped by a pipeline run meanwhile
        _session.clear()
    if not _session:
        master, conf = session_conf("local[2]", TEST_CONF)
        builder = SparkSession.builder.appName("horae-tests").master(master or "local[2]")
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _session.append(spark)
        atexit.register(spark.stop)
    return _session[0]
