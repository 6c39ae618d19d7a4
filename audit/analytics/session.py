"""The SparkSession of a report: local[*] by default, a standalone/YARN/k8s
master by URL, the cluster's own master and settings under spark-submit, or a
Spark Connect client (`sc://host:port`, no local JVM); quiet JVM logs, UTC
session time zone. In local mode the Python workers run this process's own interpreter
(not the machine's `python3`, which may be another version: PYTHON_VERSION_MISMATCH);
on a cluster they run what `spark.pyspark.python` / PYSPARK_PYTHON name there."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from importlib import resources
from typing import Final

from pyspark.sql import SparkSession

from audit.analytics.errors import AnalyticsError
from audit.analytics.java import require_java
from audit.analytics.jvm_stderr import quiet_jvm_launch

APP_NAME: Final = "horae-analytics"
LOCAL_MASTER: Final = "local[*]"
CONNECT_SCHEME: Final = "sc://"
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


def is_connect(master: str | None) -> bool:
    """True for a Spark Connect URL (sc://host:port/;params): the client runs no JVM."""
    return bool(master) and str(master).startswith(CONNECT_SCHEME)


def connect_label(master: str) -> str:
    """sc://host:port of a Connect URL, without its ;params (a token may be among them)."""
    return CONNECT_SCHEME + master[len(CONNECT_SCHEME) :].split("/", 1)[0].split(";", 1)[0]


def connect_conf(master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """The settings a Connect client may set: runtime SQL settings (spark.sql.*) only.

    Raises:
        AnalyticsError: naming a setting that belongs to the Connect server (JVM, executors, jars).
    """
    server_side = sorted(key for key in conf if not key.startswith("spark.sql."))
    if server_side:
        raise AnalyticsError(
            f"spark settings {', '.join(server_side)} cannot be set by a Spark Connect client "
            f"({connect_label(master)}): only spark.sql.* runtime settings are allowed; "
            "set the others on the Connect server (start-connect-server.sh --conf ...)"
        )
    return {**{k: v for k, v in BASE_CONF.items() if k.startswith("spark.sql.")}, **conf}


def session_conf(master: str | None, conf: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """(master to set or None to keep spark-submit's, settings) for a new session.

    Under spark-submit its --master wins: `master` (the report's --master or the configured
    default, local[*]) is not set, else every submitted report would run locally on the driver.
    """
    settings = dict(BASE_CONF)
    if under_spark_submit():
        return None, {**settings, **conf}
    log4j = resources.files("audit.analytics").joinpath("log4j2.properties")
    settings.update(LOCAL_CONF)
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    extra = conf.get("spark.driver.extraJavaOptions")
    settings["spark.driver.extraJavaOptions"] = f"{java_opts} {extra}" if extra else java_opts
    settings.update({k: v for k, v in conf.items() if k != "spark.driver.extraJavaOptions"})
    chosen = master or LOCAL_MASTER
    settings.update(worker_python(chosen, conf, os.environ))
    return chosen, settings


def worker_python(master: str, conf: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """`spark.pyspark.python` = this interpreter (sys.executable) for a local master, unless
    the user chose one (that setting or PYSPARK_PYTHON); else nothing.

    A local master's Python workers run on this machine, and PySpark would start `python3`
    from PATH, whose version may differ from the driver's. A cluster's workers run on other
    machines, where this path may not exist: there the user names theirs.
    """
    if (
        not master.startswith("local")
        or "spark.pyspark.python" in conf
        or env.get("PYSPARK_PYTHON")
    ):
        return {}
    return {"spark.pyspark.python": sys.executable}


def use_worker_python(settings: Mapping[str, str]) -> None:
    """Make `spark.pyspark.python` of a session about to start take effect: PySpark's
    SparkContext takes its workers' interpreter from PYSPARK_PYTHON only (the setting alone
    is read by spark-submit), so set the variable for this process unless it is set."""
    chosen = settings.get("spark.pyspark.python")
    if chosen and not os.environ.get("PYSPARK_PYTHON"):
        os.environ["PYSPARK_PYTHON"] = chosen


def start_session(
    master: str | None = None, conf: Mapping[str, str] | None = None
) -> tuple[SparkSession, bool]:
    """A Spark Connect session for an sc:// master; else the active SparkSession if there is
    one (tests, spark-submit), else a new one.

    Returns:
        (session, created): stop the session only when `created`.

    Raises:
        JavaMissing: when no Java 17+ is available to start Spark (not asked for sc://).
        AnalyticsError: for sc://, a setting only the Connect server may have, or no Connect client.
    """
    if master and is_connect(master):
        return _connect_session(master, conf or {}), True
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
    use_worker_python(settings)
    # py4j logs each connection it closes at INFO: noise at the end of every report.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    with quiet_jvm_launch():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True


def _connect_session(master: str, conf: Mapping[str, str]) -> SparkSession:
    """A Spark Connect session: the server owns the JVM, the executors and their settings."""
    settings = connect_conf(master, conf)  # checked before the client is imported
    try:
        from pyspark.sql.connect.utils import check_dependencies

        check_dependencies()
    except ImportError as exc:
        raise AnalyticsError(
            f"--master {connect_label(master)} needs PySpark's Connect client: "
            f"pip install 'horae[connect]' ({exc})"
        ) from exc
    builder = SparkSession.builder.remote(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def master_of(spark: SparkSession, requested: str | None) -> str:
    """The session's master for display (a Connect session has no SparkContext)."""
    if requested and is_connect(requested):
        return connect_label(requested)
    return str(spark.sparkContext.master)
