"""The nightly analysis on a real Spark standalone cluster (issue 17): a master
and two workers (1 core, 512 MiB each) on loopback, started from the installed
PySpark. The same hand-made dataset is reported on by `horae report --master
local[*]` (the reference), `horae report --master spark://...`, spark-submit of
the bundle (`audit/analytics/bundle.py`: the packages zipped for --py-files and
an entry file) and a Spark Connect client (`--master sc://...`) of a Connect
server on the cluster. Each summary.json must equal the reference byte for byte
(no field is removed: the summary holds no generation time nor master), and so
must the aggregates; each cluster run must have run tasks on both workers.

Skips only without Java and without HORAE_REQUIRE_SPARK=1 (tests/analytics_helpers.py);
a cluster that does not start, or a missing Connect client, fails."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from audit.analytics.bundle import build_bundle
from audit.analytics.location import DatasetLocation
from audit.analytics.window import ReportWindow
from tests.analytics_helpers import History, require_spark
from tests.procs import HORAE, ROOT, child_env
from tests.spark_cluster import (
    CONNECT_APP,
    SPARK_HOME,
    SQL_CONF,
    Driver,
    SparkCluster,
    conf_args,
    run_driver,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

SINCE, UNTIL = date(2026, 11, 20), date(2026, 11, 21)
WINDOW = ReportWindow(SINCE, UNTIL, "Europe/Paris", 4)
AGGREGATES = (
    "daily_stats",
    "topic_totals",
    "error_signatures",
    "top_errors",
    "attempts_histogram",
    "alerts",
)


def make_history() -> History:
    """Four topics over the baseline and two report days (every UTC day the Paris window needs):
    retries that recover, terminal failures, cancels, jobs without listener, a topic that
    fails more than its baseline (alert) and one that stopped running (no_runs); hours spread
    over the day, so some jobs fall on another local day than their UTC day; tied finish times."""
    h = History()
    for i, day in enumerate(WINDOW.all_utc_days):
        in_report = day >= SINCE
        for k in range(14):
            hour = (k * 5 + i * 7) % 24
            if k % 4 == 0:
                h.job(
                    "pay",
                    day,
                    ["failed", "succeeded"],
                    "completed",
                    hour,
                    f"gateway 10.0.{k}.1 refused job {k:08x}",
                )
            elif k % 5 == 1:
                h.job(
                    "pay",
                    day,
                    ["failed", "timed_out", "worker_lost"],
                    "failed",
                    hour,
                    f"card {4000 + k} declined for invoice 'inv-{i}-{k}'",
                )
            else:
                h.job("pay", day, ["succeeded"], "completed", hour)
        for k in range(8):
            bad = in_report and k < 5
            h.job(
                "sync",
                day,
                ["failed", "failed"] if bad else ["succeeded"],
                "failed" if bad else "completed",
                (k * 3) % 24,
                f"TimeoutError after {k}.5 s on 3f2504e0-4f89-11d3-9a0c-0305e82c3301",
            )
        h.job("mail", day, ["no_listener"], "completed", 23)
        h.job("mail", day, [], "cancelled", 1)  # cancelled before it ran
        if not in_report:
            h.job("gone", day, ["succeeded"], "completed", 6)
    return h


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> DatasetLocation:
    location = DatasetLocation.parse(str(tmp_path_factory.mktemp("dataset")))
    make_history().write(location, list(WINDOW.all_utc_days))
    return location


def report_args(dataset: DatasetLocation, out: Path) -> list[str]:
    """The report's own options, the same for every run."""
    return [
        "--dataset",
        dataset.uri,
        "--since",
        SINCE.isoformat(),
        "--until",
        UNTIL.isoformat(),
        "--zone",
        WINDOW.zone,
        "--baseline-days",
        str(WINDOW.baseline_days),
        "--alert-min-jobs",
        "5",
        "--no-export",
        "--no-db",
        "--out",
        str(out),
    ]


def driver_env(cluster: SparkCluster, tmp: Path, **extra: str) -> dict[str, str]:
    """A driver's environment: no HORAE_* of the test run, its own data dir, loopback Spark."""
    env = child_env()
    env.update(
        {
            "HORAE_DATA_DIR": str(tmp / "data"),
            "PYTHONPATH": str(ROOT),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_CONF_DIR": str(cluster.conf_dir),
            **extra,
        }
    )
    return env


@pytest.fixture(scope="module")
def spark(
    dataset: DatasetLocation, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SparkCluster, Driver, Path]]:
    """The cluster, and the local[*] run (the default master, set explicitly) started first, so
    that it runs while the cluster starts; its JVM leaves the class archive the others map."""
    require_spark()
    cluster = SparkCluster(tmp_path_factory.mktemp("spark"))
    tmp = tmp_path_factory.mktemp("local")
    conf = {**SQL_CONF, "spark.driver.extraJavaOptions": cluster.dump_opts}
    local = Driver(
        [
            str(HORAE),
            "report",
            "--master",
            "local[*]",
            *conf_args(conf),
            *report_args(dataset, tmp / "out"),
        ],
        driver_env(cluster, tmp),
        cwd=tmp,
    )
    try:
        cluster.start()
        yield cluster, local, tmp / "out"
    finally:
        local.kill()
        cluster.stop()


@pytest.fixture(scope="module")
def reference(spark: tuple[SparkCluster, Driver, Path]) -> Path:
    """The local[*] run's output directory, once it ended."""
    _, local, out = spark
    local.finish()
    return out


@pytest.fixture(scope="module")
def cluster(spark: tuple[SparkCluster, Driver, Path], reference: Path) -> SparkCluster:
    """The started cluster (after the local run: its JVMs then map the class archive)."""
    return spark[0]


def assert_same_report(out: Path, reference: Path) -> None:
    """summary.json byte for byte, and every aggregate table, equal to the local[*] run's."""
    summary = json.loads((out / "summary.json").read_text())
    assert summary == json.loads((reference / "summary.json").read_text())
    assert (out / "summary.json").read_bytes() == (reference / "summary.json").read_bytes()
    for name in AGGREGATES:
        table, expected = (
            pq.read_table(d / "aggregates" / f"{name}.parquet") for d in (out, reference)
        )
        assert table.equals(expected), f"aggregates/{name}.parquet differs from the local[*] run"


def run_on_cluster(
    cluster: SparkCluster,
    argv: list[str],
    env: dict[str, str],
    cwd: Path,
    then: Callable[[], None] | None = None,
) -> str:
    """Run a driver; the id of the one application it ran, which must have run tasks on every
    worker. `then` is called once it holds both workers (the next application may queue then)."""
    before = cluster.app_ids()
    driver = Driver(argv, env, cwd)
    try:
        deadline = time.monotonic() + 120
        while then is not None and driver.proc.poll() is None and time.monotonic() < deadline:
            new = cluster.app_ids() - before
            if new and all(cluster.tasks_by_worker(next(iter(new))).values()):
                then()
                break
            time.sleep(0.5)
    except BaseException:
        driver.kill()
        raise
    driver.finish()
    new = cluster.app_ids() - before
    assert len(new) == 1, f"expected one new application on {cluster.master_url}, got {sorted(new)}"
    app = new.pop()
    tasks = cluster.tasks_by_worker(app)
    assert all(tasks.values()), f"every worker runs tasks of {app}: {tasks}"
    return app


def test_the_reference_has_every_kind_of_figure(reference: Path) -> None:
    """The dataset exercises what could differ on a cluster: alerts, signatures, nulls,
    percentiles."""
    summary = json.loads((reference / "summary.json").read_text())
    topics = {t["topic"]: t for t in summary["topics"]}
    assert set(topics) == {"pay", "sync", "mail"}
    assert {(a["topic"], a["kind"]) for a in summary["alerts"]} == {
        ("sync", "failure_rate_above_baseline"),
        ("gone", "no_runs"),
    }
    assert len(summary["top_errors"]) >= 3 and topics["mail"]["retry_recovery_rate"] is None
    assert topics["pay"]["p95_duration_ms"] > topics["pay"]["p50_duration_ms"]


def test_horae_report_on_a_standalone_cluster(
    cluster: SparkCluster, dataset: DatasetLocation, reference: Path, tmp_path: Path
) -> None:
    # Executors start no Python (no UDFs): a PYSPARK_PYTHON that does not exist changes nothing.
    env = driver_env(cluster, tmp_path, PYSPARK_PYTHON=str(tmp_path / "no-python-here"))
    argv = [
        str(HORAE),
        "report",
        "--master",
        cluster.master_url,
        *conf_args({**cluster.conf(), **SQL_CONF}),
        *report_args(dataset, tmp_path / "out"),
    ]
    run_on_cluster(cluster, argv, env, tmp_path)
    assert_same_report(tmp_path / "out", reference)


def test_spark_submit_of_the_bundle(
    cluster: SparkCluster, dataset: DatasetLocation, reference: Path, tmp_path: Path
) -> None:
    bundle = build_bundle(tmp_path / "bundle")
    env = driver_env(cluster, tmp_path, PYSPARK_PYTHON=sys.executable)
    del env["PYTHONPATH"]  # the driver imports horae from --py-files horae.zip
    argv = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master",
        cluster.master_url,
        *conf_args({**cluster.conf(), **SQL_CONF}),
        *bundle.submit_args(),
        *report_args(dataset, tmp_path / "out"),
    ]
    run_on_cluster(cluster, argv, env, tmp_path, then=lambda: cluster.spawn_connect(cluster.conf()))
    assert_same_report(tmp_path / "out", reference)


def test_spark_connect_client(
    cluster: SparkCluster, dataset: DatasetLocation, reference: Path, tmp_path: Path
) -> None:
    url = cluster.connect_url(cluster.conf())  # started by the spark-submit test, unless run alone
    server_app = cluster.app_named(CONNECT_APP)
    tasks_before = cluster.tasks_by_worker(server_app)
    # The client runs no JVM: a JAVA_HOME without java changes nothing.
    env = driver_env(cluster, tmp_path, JAVA_HOME=str(tmp_path / "no-java-here"))
    run_driver(
        [
            str(HORAE),
            "report",
            "--master",
            url,
            *conf_args(SQL_CONF),
            *report_args(dataset, tmp_path / "out"),
        ],
        env,
        tmp_path,
    )
    assert_same_report(tmp_path / "out", reference)
    tasks = cluster.tasks_by_worker(server_app)
    assert all(tasks[w] > tasks_before[w] for w in tasks), (
        f"both workers ran the analysis: {tasks_before} -> {tasks}"
    )
