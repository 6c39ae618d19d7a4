"""Pure parts of the analytics: the window and its UTC partitions, the alert
rule, the Java check, dataset URIs, JDBC URLs, the CLI's request building."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest

from audit.analytics.cli import build_request
from audit.analytics.errors import AnalyticsError
from audit.analytics.export import runs
from audit.analytics.java import java_problem, parse_java_version
from audit.analytics.location import DatasetLocation
from audit.analytics.nightly import nightly_window, report_command
from audit.analytics.options import AnalyticsConfig
from audit.analytics.results import AlertRule, Stats, add_up, find_alerts
from audit.analytics.settings import AnalyticsSettings
from audit.analytics.window import ReportWindow, yesterday
from horae.settings import Settings


def test_window_days_baseline_and_utc_partitions() -> None:
    w = ReportWindow(date(2026, 11, 20), date(2026, 11, 21), "UTC", 7)
    assert w.days == [date(2026, 11, 20), date(2026, 11, 21)]
    assert w.baseline_start == date(2026, 11, 13) and len(w.baseline) == 7
    assert w.report_utc_days == w.days
    assert w.all_utc_days[0] == date(2026, 11, 13) and w.all_utc_days[-1] == date(2026, 11, 21)
    assert w.label == "2026-11-20_2026-11-21"


def test_window_in_other_zones_needs_neighbouring_utc_days() -> None:
    paris = ReportWindow(date(2026, 11, 21), date(2026, 11, 21), "Europe/Paris", 0)
    assert paris.start_of(date(2026, 11, 21)) == datetime(2026, 11, 20, 23, 0, tzinfo=UTC)
    assert paris.report_utc_days == [date(2026, 11, 20), date(2026, 11, 21)]
    tokyo = ReportWindow(date(2026, 11, 21), date(2026, 11, 21), "Asia/Tokyo", 0)
    assert tokyo.report_utc_days == [date(2026, 11, 20), date(2026, 11, 21)]
    la = ReportWindow(date(2026, 11, 21), date(2026, 11, 21), "America/Los_Angeles", 0)
    assert la.report_utc_days == [date(2026, 11, 21), date(2026, 11, 22)]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"since": date(2026, 11, 2), "until": date(2026, 11, 1)},
        {"since": date(2026, 11, 1), "until": date(2026, 11, 1), "zone": "Mars/Olympus"},
        {"since": date(2026, 11, 1), "until": date(2026, 11, 1), "baseline_days": 91},
        {"since": date(2024, 1, 1), "until": date(2026, 1, 1)},
    ],
)
def test_window_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(AnalyticsError):
        ReportWindow(**kwargs)  # type: ignore[arg-type]


def test_yesterday_and_nightly_window_follow_the_zone() -> None:
    now = datetime(2026, 11, 22, 1, 30, tzinfo=UTC)
    assert yesterday(now, "UTC") == date(2026, 11, 21)
    assert yesterday(now, "America/New_York") == date(2026, 11, 20)
    assert nightly_window(now, "Asia/Tokyo") == (date(2026, 11, 21), date(2026, 11, 21))


def test_runs_groups_consecutive_days() -> None:
    days = [date(2026, 11, 3), date(2026, 11, 1), date(2026, 11, 2), date(2026, 11, 7)]
    assert runs(days) == [
        (date(2026, 11, 1), date(2026, 11, 3)),
        (date(2026, 11, 7), date(2026, 11, 7)),
    ]


def stats(topic: str, completed: int, failed: int, attempts: int | None = None) -> Stats:
    return add_up(
        topic,
        [
            Stats(
                topic,
                None,
                jobs=completed + failed,
                completed=completed,
                failed=failed,
                attempts=completed + failed if attempts is None else attempts,
            )
        ],
    )


def test_alerts_rise_above_baseline_by_margin_with_enough_jobs() -> None:
    window = {
        "up": stats("up", 70, 30),
        "flat": stats("flat", 88, 12),
        "few": stats("few", 1, 9),
        "new": stats("new", 0, 50),
    }
    baseline = {
        "up": stats("up", 95, 5),
        "flat": stats("flat", 90, 10),
        "few": stats("few", 100, 0),
    }
    alerts = find_alerts(window, baseline, AlertRule(margin=0.1, min_jobs=20))
    assert [(a.topic, a.kind, a.failure_rate, a.baseline_rate) for a in alerts] == [
        ("up", "failure_rate_above_baseline", 0.3, 0.05)
    ]


def test_alerts_no_runs_and_ordering() -> None:
    window = {"a": stats("a", 0, 10), "b": stats("b", 5, 5), "idle": Stats("idle", None)}
    baseline = {
        "a": stats("a", 10, 0),
        "b": stats("b", 10, 0),
        "gone": stats("gone", 3, 1),
        "idle": stats("idle", 1, 0),
        "never": Stats("never", None),
    }
    alerts = find_alerts(window, baseline, AlertRule(margin=0.0, min_jobs=1))
    assert [(a.topic, a.kind) for a in alerts] == [
        ("a", "failure_rate_above_baseline"),
        ("b", "failure_rate_above_baseline"),
        ("gone", "no_runs"),
        ("idle", "no_runs"),
    ]
    assert alerts[2].failure_rate is None and alerts[2].baseline_rate == 0.25


def test_alert_rule_bounds() -> None:
    with pytest.raises(ValueError):
        AlertRule(margin=1.5)
    with pytest.raises(ValueError):
        AlertRule(min_jobs=-1)


def test_add_up_recomputes_rates() -> None:
    total = add_up(
        "t",
        [
            Stats(
                "t",
                date(2026, 1, 1),
                jobs=2,
                completed=1,
                failed=1,
                attempts=4,
                failed_attempts=3,
                with_failure=1,
                recovered=0,
            ),
            Stats(
                "t", date(2026, 1, 2), jobs=2, completed=2, attempts=2, with_failure=1, recovered=1
            ),
        ],
    )
    assert (
        total.jobs,
        total.failure_rate,
        total.attempt_failure_rate,
        total.retry_recovery_rate,
    ) == (4, 0.25, 0.5, 0.5)
    assert add_up("t", []).failure_rate is None


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('java version "1.8.0_392"', 8),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "11.0.2-ea"', 11),
        ("nothing", None),
    ],
)
def test_parse_java_version(text: str, major: int | None) -> None:
    assert parse_java_version(text) == major


def test_java_problem_says_what_to_install(tmp_path: object) -> None:
    message = java_problem({"PATH": "/nonexistent"})
    assert message is not None and "Java 17+" in message and "openjdk-17" in message
    message = java_problem({"JAVA_HOME": "/nonexistent/jdk", "PATH": ""})
    assert message is not None and "JAVA_HOME" in message


def test_dataset_locations() -> None:
    local = DatasetLocation.parse("/tmp/x/../ds/")
    assert local.uri == "file:///tmp/ds" and local.is_local
    assert local.spark("jobs", "day=2026-11-21") == "file:///tmp/ds/jobs/day=2026-11-21"
    assert local.arrow()[1] == "/tmp/ds"
    s3 = DatasetLocation.parse("s3a://bucket/horae/")
    assert s3.uri == "s3a://bucket/horae" and not s3.is_local
    with pytest.raises(AnalyticsError):
        DatasetLocation.parse("ftp://host/x")
    with pytest.raises(AnalyticsError):
        DatasetLocation.parse(" ")


def test_config_from_settings() -> None:
    settings = Settings(
        data_dir="/var/lib/horae",
        analytics=AnalyticsSettings(
            zone="Europe/Paris",
            alert_min_jobs=5,
            spark_conf={"spark.executor.memory": "4g"},
            spark_jars="/usr/share/java/postgresql.jar",
        ),
    )
    config = AnalyticsConfig.from_settings(settings)
    assert (config.zone, config.alert_min_jobs, config.report_dir) == ("Europe/Paris", 5, "reports")
    assert config.dataset == "/var/lib/horae/analytics"
    assert config.spark_settings() == {
        "spark.executor.memory": "4g",
        "spark.jars": "/usr/share/java/postgresql.jar",
    }


DEFAULTS = AnalyticsConfig.from_settings(Settings())


def test_build_request_defaults_to_yesterday_under_report_dir() -> None:
    request = build_request(
        DEFAULTS,
        "postgresql://h/db",
        {"conf": ("a=b",)},
        now=datetime(2026, 11, 22, 2, 30, tzinfo=UTC),
    )
    assert (request.window.since, request.window.until) == (date(2026, 11, 21), date(2026, 11, 21))
    assert str(request.out) == "reports/2026-11-21"
    assert request.spark_conf["a"] == "b" and request.master == "local[*]"
    explicit = build_request(
        DEFAULTS,
        None,
        {"since": date(2026, 11, 1), "zone": "Asia/Tokyo", "alert_margin": 0.0, "no_db": True},
    )
    assert (
        explicit.window.until,
        explicit.window.zone,
        explicit.rule.margin,
        explicit.publish_db,
    ) == (date(2026, 11, 1), "Asia/Tokyo", 0.0, False)
    today = build_request(
        DEFAULTS,
        None,
        {"since": "yesterday", "until": "today", "zone": "Asia/Tokyo"},
        now=datetime(2026, 11, 21, 16, tzinfo=UTC),
    )  # 01:00 on 11-22 in Tokyo
    assert (today.window.since, today.window.until) == (date(2026, 11, 21), date(2026, 11, 22))


def test_report_command_keeps_the_url_out_of_argv() -> None:
    argv = report_command(
        date(2026, 11, 21), date(2026, 11, 21), "out", "local[2]", ["--zone", "UTC"]
    )
    assert (
        argv[1:3] == ["-m", "audit.analytics"]
        and "--master" in argv
        and "postgresql" not in " ".join(argv)
    )


def test_jdbc_target_and_predicates() -> None:
    from audit.analytics.jdbc import bounded_query, id_predicates, jdbc_target

    target = jdbc_target("postgresql://app:s%40cret@db.internal:6432/audit?sslmode=require")
    assert target.url == "jdbc:postgresql://db.internal:6432/audit?sslmode=require"
    assert target.properties == {
        "driver": "org.postgresql.Driver",
        "user": "app",
        "password": "s@cret",
    }
    with pytest.raises(AnalyticsError, match="unix socket"):
        jdbc_target("postgresql://postgres@/postgres?host=/run/pg&port=5432")
    assert id_predicates(2) == [
        "mod(hashtext(job_id)::bigint + 2147483648, 2) = 0",
        "mod(hashtext(job_id)::bigint + 2147483648, 2) = 1",
    ]
    sql = bounded_query(
        "export_attempts", datetime(2026, 11, 21, tzinfo=UTC), datetime(2026, 11, 22, tzinfo=UTC)
    )
    assert "TIMESTAMPTZ '2026-11-21T00:00:00+00:00'" in sql and "$1" not in sql and "$2" not in sql


def test_cli_and_nightly_import_neither_pyarrow_nor_pyspark() -> None:
    import subprocess
    import sys

    code = (
        "import sys, audit.analytics.cli, audit.analytics.nightly; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'pyspark', 'py4j'}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
