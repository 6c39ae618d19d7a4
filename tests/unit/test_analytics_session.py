"""Where a report's Spark session comes from (no JVM started here): local[*] by
default, spark-submit's own master under spark-submit, a Spark Connect client
for sc:// URLs; and the bundle that spark-submit ships."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from audit.analytics.bundle import ENTRY_NAME, build_bundle
from audit.analytics.errors import AnalyticsError
from audit.analytics.session import (
    LOCAL_MASTER,
    connect_conf,
    connect_label,
    is_connect,
    session_conf,
)


def test_local_master_by_default_and_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert session_conf(None, {})[0] == LOCAL_MASTER
    master, conf = session_conf("spark://10.0.0.1:7077", {"spark.executor.memory": "4g"})
    assert master == "spark://10.0.0.1:7077" and conf["spark.executor.memory"] == "4g"
    assert (
        conf["spark.sql.session.timeZone"] == "UTC"
        and "log4j2" in conf["spark.driver.extraJavaOptions"]
    )


def test_spark_submit_keeps_its_own_master(monkeypatch: pytest.MonkeyPatch) -> None:
    """The configured default (local[*]) must not turn a submitted report into a local one."""
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "41234")
    for requested in (None, LOCAL_MASTER, "spark://elsewhere:7077"):
        master, conf = session_conf(requested, {"spark.sql.shuffle.partitions": "64"})
        assert master is None
        assert conf["spark.sql.shuffle.partitions"] == "64" and "spark.driver.memory" not in conf


def test_connect_urls() -> None:
    assert (
        is_connect("sc://spark:15002")
        and not is_connect("spark://spark:7077")
        and not is_connect(None)
    )
    assert connect_label("sc://spark:15002/;token=s3cret;use_ssl=true") == "sc://spark:15002"
    assert connect_label("sc://spark:15002") == "sc://spark:15002"


def test_a_connect_client_sets_runtime_sql_settings_only() -> None:
    conf = connect_conf("sc://spark:15002", {"spark.sql.shuffle.partitions": "4"})
    assert (
        conf["spark.sql.shuffle.partitions"] == "4" and conf["spark.sql.session.timeZone"] == "UTC"
    )
    assert all(key.startswith("spark.sql.") for key in conf)
    with pytest.raises(AnalyticsError) as caught:
        connect_conf(
            "sc://spark:15002/;token=s3cret",
            {
                "spark.executor.memory": "4g",
                "spark.jars": "/pg.jar",
                "spark.sql.ansi.enabled": "true",
            },
        )
    message = str(caught.value)
    assert "spark.executor.memory, spark.jars" in message and "spark.sql.*" in message
    assert "Connect server" in message and "s3cret" not in message


def test_the_bundle_imports_from_its_zip(tmp_path: Path) -> None:
    bundle = build_bundle(tmp_path)
    names = zipfile.ZipFile(bundle.zip).namelist()
    for needed in (
        "horae/__init__.py",
        "scheduler/store/lua/claim.lua",
        "audit/migrations/0003_analytics_tables.sql",
        "audit/analytics/sql/queries.sql",
        "audit/analytics/cli.py",
        "listeners/__init__.py",
    ):
        assert needed in names, needed
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert bundle.entry.name == ENTRY_NAME and bundle.submit_args() == [
        "--py-files",
        str(bundle.zip),
        str(bundle.entry),
    ]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import "
        "audit.analytics.cli, audit.analytics.sql as q; "
        "print(audit.analytics.cli.__file__); print(len(q.query('export_jobs')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(bundle.zip)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    where, length = done.stdout.split()
    assert where.startswith(str(bundle.zip)) and int(length) > 0


def test_local_python_workers_run_the_drivers_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: not the machine's `python3`, whose version may differ (PYTHON_VERSION_MISMATCH)."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    for requested in (None, "local[2]", "local"):
        assert session_conf(requested, {})[1]["spark.pyspark.python"] == sys.executable, requested
    chosen = session_conf(None, {"spark.pyspark.python": "/opt/py/bin/python3"})[1]
    assert chosen["spark.pyspark.python"] == "/opt/py/bin/python3"  # the user's choice stays
    # a cluster's workers run elsewhere: this path may not exist there
    assert "spark.pyspark.python" not in session_conf("spark://10.0.0.1:7077", {})[1]
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3.12")
    assert "spark.pyspark.python" not in session_conf(None, {})[1]  # the variable already says it
