"""`horae report` end to end: real jobs through the scheduler (retries that
recover, terminal failures, timeouts, no listener, a cancel), plus an older
baseline relayed through the audit outbox; then the report, in-process via
the CLI command and again as the nightly subprocess. Every number of
summary.json and of the Grafana tables must equal an independent SQL query."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import click
import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner

from audit.analytics.cli import register
from audit.analytics.nightly import run_report_subprocess
from audit.options import RelayOptions
from audit.reader import AuditTrail
from audit.relay.consumer import AuditRelay
from horae.settings import Settings, load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import Scheduler
from tests.analytics_helpers import require_spark, spark_session
from tests.audit_outbox import Outbox

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]

FAILED = ("failed", "timed_out", "worker_lost")
RETRY = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1_000}}
EXPECTED_SIGNATURES = {
    "CardDeclined": "CardDeclined: card <n> declined for invoice <str>",
    "ConnectionError": "ConnectionError: gateway <n> refused job <id>",
    "TimeoutError": "TimeoutError: attempt <n> timed out after <n> s",
}


class CardDeclined(Exception):
    pass


def listeners() -> ListenerRegistry:
    registry = ListenerRegistry()

    @registry.on_event("pay.recover")
    async def recover(event: ScheduleArrivedEvent) -> None:
        if event.attempt <= event.payload["fail_first"]:
            raise ConnectionError(
                f"gateway 10.0.0.{event.attempt} refused job {event.scheduled_job_id}"
            )

    @registry.on_event("pay.fatal")
    async def fatal(event: ScheduleArrivedEvent) -> None:
        raise CardDeclined(
            f"card {4000 + event.attempt} declined for invoice 'inv-{event.payload['n']}'"
        )

    @registry.on_event("report.slow")
    async def slow(event: ScheduleArrivedEvent) -> None:
        await asyncio.sleep(event.payload["sleep"])

    return registry  # "orphan.topic" has no listener on purpose


async def run_real_jobs(settings: Settings) -> None:
    """Known outcomes: 4 recover-topic jobs (0, 1, 1, 2 failures), 2 terminal failures,
    a timeout, a fast completion, 2 jobs without listener, a cancel."""
    async with Scheduler(settings=settings, listeners=listeners()) as s:
        ids = [
            await s.schedule_in("pay.recover", 0, payload={"fail_first": n}, retry=RETRY)
            for n in (0, 1, 1, 2)
        ]
        ids += [
            await s.schedule_in("pay.fatal", 0, payload={"n": n}, retry={**RETRY, "attempts": 2})
            for n in (1, 2)
        ]
        ids.append(
            await s.schedule_in(
                "report.slow", 0, payload={"sleep": 5}, timeout=0.3, retry={**RETRY, "attempts": 1}
            )
        )
        ids.append(await s.schedule_in("report.slow", 0, payload={"sleep": 0}, timeout=5))
        ids += [await s.schedule_in("orphan.topic", 0) for _ in range(2)]
        later = await s.schedule_in("pay.recover", 3_600, payload={"fail_first": 0})
        assert await s.cancel(later)
        async with s.worker(concurrency=10):
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                states = [await s.get_job(i) for i in ids]
                if all(st is not None and st.state.terminal for st in states):
                    break
                assert asyncio.get_running_loop().time() < deadline, states
                await asyncio.sleep(0.1)
            await s.audit.flush(timeout=30)


async def relay_baseline(redis: aioredis.Redis, settings: Settings, day: date) -> None:
    """Older history written as outbox events (tests/audit_outbox.py, which writes what the scripts
    write): pay.fatal used to succeed (4 jobs), legacy.sync ran twice and has not run since."""
    outbox = Outbox(redis, settings.namespace)
    start = int(datetime(day.year, day.month, day.day, 12, tzinfo=UTC).timestamp() * 1000)
    for n, topic in enumerate(["pay.fatal"] * 4 + ["legacy.sync"] * 2):
        job = f"old-{n}"
        outbox.now = ts = start + n * 60_000
        await outbox.scheduled(
            job,
            topic=topic,
            run_at=ts,
            max_attempts=2,
            payload={},
            metadata={},
            backoff="fixed",
            tz="UTC",
            timeout_ms=1_000,
        )
        outbox.now = ts + 5
        await outbox.started(job, 1, due=ts, worker="w-old", topic=topic)
        outbox.now = ts + 20
        await outbox.completed(job, 1, worker="w-old", duration=12)
    options = RelayOptions.from_settings(settings.audit)
    relay = AuditRelay(redis, settings.namespace, str(settings.database_url), options)
    await relay.start()
    try:
        await AuditTrail(redis, settings.namespace, str(settings.database_url), options).flush(
            timeout=30
        )
    finally:
        await relay.stop()


JOBS_SQL = """
WITH j AS (
    SELECT id, topic, status,
           CASE status WHEN 'completed' THEN completed_at WHEN 'failed' THEN failed_at
                       WHEN 'cancelled' THEN cancelled_at END AS finished,
           EXISTS (SELECT 1 FROM schedule_attempts a WHERE a.job_id = s.id
                   AND a.outcome IN ('failed', 'timed_out', 'worker_lost')) AS had_failure
    FROM schedule_audit s WHERE status IN ('completed', 'failed', 'cancelled'))
SELECT topic, {day} AS day, count(*) AS jobs,
       count(*) FILTER (WHERE status = 'completed') AS completed,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE had_failure) AS with_failure,
       count(*) FILTER (WHERE had_failure AND status = 'completed') AS recovered
FROM j WHERE (finished AT TIME ZONE 'UTC')::date BETWEEN $1 AND $2 GROUP BY 1, 2
"""
ATTEMPTS_SQL = """
SELECT s.topic, {day} AS day, count(*) AS attempts,
       count(*) FILTER (WHERE a.outcome IN ('failed', 'timed_out', 'worker_lost'))
         AS failed_attempts,
       count(*) FILTER (WHERE a.outcome = 'timed_out') AS timed_out,
       count(*) FILTER (WHERE a.outcome = 'worker_lost') AS worker_lost,
       count(*) FILTER (WHERE a.outcome = 'no_listener') AS no_listener,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY a.duration_ms) AS p50_duration_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY a.duration_ms) AS p95_duration_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY a.duration_ms) AS p99_duration_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY a.lateness_ms) AS p50_lateness_ms,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY a.lateness_ms) AS p95_lateness_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY a.lateness_ms) AS p99_lateness_ms
FROM schedule_attempts a JOIN schedule_audit s ON s.id = a.job_id
WHERE a.finished_at IS NOT NULL AND (a.finished_at AT TIME ZONE 'UTC')::date BETWEEN $1 AND $2
GROUP BY 1, 2
"""


def rate(num: int, den: int) -> float | None:
    return num / den if den else None


async def expected(
    conn: asyncpg.Connection, first: date, last: date, per_day: bool
) -> dict[Any, dict[str, Any]]:
    """Per topic (or per topic and day) figures straight from the audit tables."""
    day = "(finished AT TIME ZONE 'UTC')::date" if per_day else "NULL::date"
    attempt_day = "(a.finished_at AT TIME ZONE 'UTC')::date" if per_day else "NULL::date"
    out: dict[Any, dict[str, Any]] = {}
    zero_jobs = dict(jobs=0, completed=0, failed=0, cancelled=0, with_failure=0, recovered=0)
    zero_attempts = dict(
        attempts=0,
        failed_attempts=0,
        timed_out=0,
        worker_lost=0,
        no_listener=0,
        **{f"p{p}_{m}_ms": None for m in ("duration", "lateness") for p in (50, 95, 99)},
    )
    for row in await conn.fetch(JOBS_SQL.format(day=day), first, last):
        out.setdefault((row["topic"], row["day"]), {**zero_jobs, **zero_attempts}).update(dict(row))
    for row in await conn.fetch(ATTEMPTS_SQL.format(day=attempt_day), first, last):
        out.setdefault((row["topic"], row["day"]), {**zero_jobs, **zero_attempts}).update(dict(row))
    for figures in out.values():
        figures["failure_rate"] = rate(figures["failed"], figures["completed"] + figures["failed"])
        figures["attempt_failure_rate"] = rate(figures["failed_attempts"], figures["attempts"])
        figures["retry_recovery_rate"] = rate(figures["recovered"], figures["with_failure"])
    return out


def same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=1e-9)  # type: ignore[arg-type]
    return a == b


def assert_figures(got: Mapping[str, Any], want: Mapping[str, Any], where: str) -> None:
    for name, value in got.items():
        if name in want:
            assert same(value, want[name]), (
                f"{where}.{name}: report {value!r} != SQL {want[name]!r}"
            )


async def expected_errors(
    conn: asyncpg.Connection, first: date, last: date
) -> list[dict[str, Any]]:
    """Failed attempts per error type (each type of this test has one message pattern), its topics,
    and the job of its latest attempt."""
    failed = """FROM schedule_attempts a JOIN schedule_audit s ON s.id = a.job_id
                WHERE a.outcome IN ('failed', 'timed_out', 'worker_lost')
                  AND (a.finished_at AT TIME ZONE 'UTC')::date BETWEEN $1 AND $2"""
    counts = await conn.fetch(
        f"SELECT a.error_type, count(*) AS n, array_agg(DISTINCT s.topic) AS topics {failed} "
        "GROUP BY 1",
        first,
        last,
    )
    latest = {
        r["error_type"]: r["job_id"]
        for r in await conn.fetch(
            f"SELECT DISTINCT ON (a.error_type) a.error_type, a.job_id {failed} "
            "ORDER BY a.error_type, a.finished_at DESC, a.job_id DESC",
            first,
            last,
        )
    }
    errors = [
        {
            "signature": EXPECTED_SIGNATURES[r["error_type"]],
            "count": r["n"],
            "topics": sorted(r["topics"]),
            "example_job_id": latest[r["error_type"]],
        }
        for r in counts
    ]
    return sorted(errors, key=lambda e: (-e["count"], e["signature"]))


def invoke_report(settings: Settings, args: list[str]) -> click.testing.Result:
    group = click.Group("horae")
    register(group)
    return CliRunner().invoke(group, ["report", *args], obj=settings, catch_exceptions=False)


async def test_report_equals_independent_sql(
    redis_url: str, database_url: str, namespace: str, redis: aioredis.Redis, tmp_path: Path
) -> None:
    require_spark()
    settings = load_settings(
        env={}, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    await run_real_jobs(settings)
    today = datetime.now(UTC).date()
    since, until = today - timedelta(days=1), today  # a run across midnight stays inside the window
    await relay_baseline(redis, settings, since - timedelta(days=3))

    spark_session()  # share the test process's session (the command reuses an active one)
    args = [
        "--since",
        str(since),
        "--until",
        str(until),
        "--zone",
        "UTC",
        "--dataset",
        str(tmp_path / "dataset"),
        "--alert-margin",
        "0.1",
        "--alert-min-jobs",
        "2",
    ]
    result = await asyncio.to_thread(
        invoke_report, settings, [*args, "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 0, result.output
    assert "pay.fatal" in result.output and "report:" in result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())

    conn = await asyncpg.connect(database_url)
    try:
        want = {
            topic: figures
            for (topic, _), figures in (await expected(conn, since, until, False)).items()
        }
        topics = {t["topic"]: t for t in summary["topics"]}
        assert (
            set(topics) == set(want) == {"pay.recover", "pay.fatal", "report.slow", "orphan.topic"}
        )
        for topic, figures in topics.items():
            assert_figures(figures, want[topic], topic)
        # the known outcomes, as a check on the SQL itself
        assert (
            want["pay.recover"]["jobs"],
            want["pay.recover"]["cancelled"],
            want["pay.recover"]["failed"],
        ) == (5, 1, 0)
        assert (
            want["pay.recover"]["retry_recovery_rate"] == 1.0
            and want["pay.recover"]["attempts"] == 8
        )
        assert (
            want["pay.fatal"]["failure_rate"] == 1.0 and want["pay.fatal"]["failed_attempts"] == 4
        )
        assert (want["report.slow"]["timed_out"], want["report.slow"]["failure_rate"]) == (1, 0.5)
        assert want["orphan.topic"]["no_listener"] == 2

        assert summary["top_errors"] == await expected_errors(conn, since, until)

        baseline = await expected(conn, since - timedelta(days=7), since - timedelta(days=1), False)
        assert {t for t, _ in baseline} == {"pay.fatal", "legacy.sync"}
        base_fatal = baseline[("pay.fatal", None)]["failure_rate"]
        assert summary["alerts"] == [
            {
                "topic": "pay.fatal",
                "kind": "failure_rate_above_baseline",
                "failure_rate": want["pay.fatal"]["failure_rate"],
                "baseline_rate": base_fatal,
            },
            {
                "topic": "legacy.sync",
                "kind": "no_runs",
                "failure_rate": None,
                "baseline_rate": baseline[("legacy.sync", None)]["failure_rate"],
            },
        ]

        daily_want = await expected(conn, since, until, True)
        rows = await conn.fetch("SELECT * FROM schedule_failure_stats ORDER BY topic, day")
        assert {(r["topic"], r["day"]) for r in rows} == set(daily_want)
        for r in rows:
            assert_figures(dict(r), daily_want[(r["topic"], r["day"])], f"{r['topic']}@{r['day']}")
        signature_rows = await conn.fetch(
            "SELECT signature, sum(count) AS n FROM schedule_error_signatures GROUP BY 1"
        )
        assert {r["signature"]: r["n"] for r in signature_rows} == {
            e["signature"]: e["count"] for e in summary["top_errors"]
        }
        html = (tmp_path / "out" / "report.html").read_text()
        assert html.index("Alerts") < html.index("Top errors") and "<script" not in html

        # The nightly path: the same window in a subprocess (python -m audit.analytics). It
        # re-exports the report days and re-publishes: same summary, no duplicated rows.
        done = await asyncio.to_thread(
            run_report_subprocess,
            database_url,
            since,
            until,
            tmp_path / "nightly",
            "local[2]",
            extra=args[4:],
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        # A report ends quietly: neither the JDK's incubator-module warning nor py4j's INFO line.
        assert "incubator" not in done.stderr and "py4j" not in done.stderr, done.stderr[-3000:]
        assert json.loads((tmp_path / "nightly" / "summary.json").read_text()) == summary
        assert await conn.fetchval("SELECT count(*) FROM schedule_failure_stats") == len(rows)
    finally:
        await conn.close()
