"""A report's local Spark session runs its Python workers with the driver's interpreter
(issue 29), not the `python3` found on PATH: here that one is a fake that fails, as the
machine's python3.11 fails a 3.13 venv's driver with PYTHON_VERSION_MISMATCH. A real JVM
and a Python UDF, in a process of its own (PATH is read when the JVM starts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.analytics_helpers import require_spark

pytestmark = pytest.mark.spark

SCRIPT = """
import sys
from pyspark.sql.functions import udf
from audit.analytics.session import start_session

spark, created = start_session(
    "local[1]", {"spark.ui.enabled": "false", "spark.driver.memory": "512m"}
)
version = udf(lambda _: sys.executable + " " + ".".join(map(str, sys.version_info[:2])))
print("worker:", spark.range(1).select(version("id")).collect()[0][0])
spark.stop()
"""


def test_local_workers_run_the_drivers_interpreter_not_pythons_on_path(tmp_path: Path) -> None:
    require_spark()
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'the python3 on PATH was started' >&2\nexit 3\n")
    fake.chmod(0o755)
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env["PATH"] = f"{fake.parent}{os.pathsep}{env.get('PATH', '')}"

    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=Path(__file__).resolve().parents[2],
    )

    driver = f"{sys.executable} {sys.version_info[0]}.{sys.version_info[1]}"
    assert f"worker: {driver}\n" in result.stdout, (result.stdout + result.stderr)[-3000:]
