"""The SparkSession of a report: local[*] by default, the cluster's own master
and settings under spark-submit, quiet JVM logs, UTC session time zone."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from typing import Final

from pyspark.sql import SparkSession

from audit.analytics.java import require_java

APP_NAME: Final = "horae-analytics"
LOCAL_MASTER: Final = "local[*]"
# Always: timestamps are instants and every day is computed explicitly in the report zone.
BASE_CONF: Final = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.showConsoleProgress": "false",
    # The exact percentiles are object-hash aggregates; past 128 groups per task Spark's default
    # falls back to sort-based aggregation, which is much slower for the daily metrics
    # (bench/analytics/README.md; a report has at most topics x days groups per task).
    "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "16384",
}
# Only when we start the JVM ourselves (not under spark-submit, which brings the cluster's).
LOCAL_CONF: Final = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    "spark.sql.parquet.enableVectorizedReader": "true",
}


def under_spark_submit() -> bool:
    """True when spark-submit started this Python process (it then owns master and jars)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def session_conf(master: str | None, conf: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(master to set or None to keep spark-submit's, settings) for a new session."""
    settings = dict(BASE_CONF)
    if under_spark_submit():
        return master, {**settings, **conf}
    log4j = resources.files("audit.analytics").joinpath("log4j2.properties")
    settings.update(LOCAL_CONF)
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    extra = conf.get("spark.driver.extraJavaOptions")
    settings["spark.driver.extraJavaOptions"] = f"{java_opts} {extra}" if extra else java_opts
    settings.update({k: v for k, v in conf.items() if k != "spark.driver.extraJavaOptions"})
    return master or LOCAL_MASTER, settings


def start_session(master: str | None = None, conf: Mapping[str, str] | None = None) -> tuple[SparkSession, bool]:
    """The active SparkSession if there is one (tests, spark-submit), else a new one.

    Returns:
        (session, created): stop the session only when `created`.

    Raises:
        JavaMissing: when no Java 17+ is available to start Spark.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    require_java()
    chosen, settings = session_conf(master, conf or {})
    builder = SparkSession.builder.appName(APP_NAME)
    if chosen:
        builder = builder.master(chosen)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True
