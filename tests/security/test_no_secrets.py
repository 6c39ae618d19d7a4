"""No secret in any log line, error message, `horae services status`, span attribute or
metric label (issue 16, Security): a scheduler and a worker run with a password-bearing
Redis URL (the ACL user of the TLS server) and database URL (the relay role of the TLS
PostgreSQL), in this process and as a `horae -v worker` process exporting its spans and
metrics to the console; failures with wrong passwords and ports are provoked; everything
captured is searched for every password."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from audit.migrate import migrate_url
from horae.settings import load_settings
from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler, SchedulerError
from scheduler.cli.main import cli
from scheduler.observe.metrics import Metrics
from tests.integration.engine_fixtures import eventually, in_state
from tests.logging_guard import root_logging  # noqa: F401  (a fixture)
from tests.procs import HORAE, READY_LINE, ROOT, WorkerProcess, child_env
from tests.procs.worker_app import DOOMED_TOPIC
from tests.security.conftest import NS_A, USER_A
from tests.security.postgres_tls import TlsPostgres
from tests.security.redis_tls import TlsRedis

WRONG = "wrong-pw-0d15ea5e"  # a password given on purpose to a server that refuses it


def _spans_text(exporter: InMemorySpanExporter) -> str:
    parts = []
    for span in exporter.get_finished_spans():
        parts += [
            span.name,
            repr(dict(span.attributes or {})),
            repr(dict(span.resource.attributes)),
            str(span.status.description),
        ]
        parts += [f"{e.name} {dict(e.attributes or {})}" for e in span.events]
    return "\n".join(parts)


def _metrics_text(reader: InMemoryMetricReader) -> str:
    data = reader.get_metrics_data()
    parts = []
    for rm in data.resource_metrics if data else []:
        parts.append(repr(dict(rm.resource.attributes)))
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                parts += [f"{m.name} {dict(p.attributes or {})}" for p in m.data.data_points]
    return "\n".join(parts)


def _records_text(records: list[logging.LogRecord]) -> str:
    """Each record's message, arguments, extra fields and traceback."""
    lines = []
    for r in records:
        lines.append(
            repr({k: v for k, v in vars(r).items() if k not in ("exc_info",)}) + r.getMessage()
        )
        if r.exc_info and r.exc_info[1] is not None:
            lines.append(logging.Formatter().formatException(r.exc_info))
    return "\n".join(lines)


def _error_chain(exc: BaseException) -> str:
    """The message and repr of an error and every error it was raised from."""
    out, seen = [], set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        out += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    return "\n".join(out)


async def _run_in_process(redis_url: str, database_url: str, captured: list[str]) -> None:
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    reg = ListenerRegistry()

    @reg.on_event("secret.ok")
    async def ok(event: ScheduleArrivedEvent) -> None:
        logging.getLogger("app").info("ran %s", event.scheduled_job_id)

    @reg.on_event("secret.fails")
    async def fails(event: ScheduleArrivedEvent) -> None:
        raise RuntimeError("the listener failed")

    settings = load_settings(
        path=None, env={}, redis_url=redis_url, database_url=database_url, namespace=NS_A
    )
    s = Scheduler(settings=settings, listeners=reg)
    s.tracer = tracer_provider.get_tracer("test")
    s.metrics = Metrics(meter_provider.get_meter("test"))
    async with s:
        good = await s.schedule_in("secret.ok", 0)
        bad = await s.schedule_in("secret.fails", 0, retry={"attempts": 1})
        async with s.worker():
            await eventually(lambda: in_state(s, good, JobState.COMPLETED), what="the good job")
            await eventually(lambda: in_state(s, bad, JobState.FAILED), what="the failing job")
        await s.audit.flush(timeout=20)
        captured.append(repr(s.settings) + repr(s.store.wire.endpoint) + repr(s.services))
    captured += [_spans_text(exporter), _metrics_text(reader)]
    assert "secret.ok" in captured[-2] and "horae_attempts_total" in captured[-1], (
        "something was exported"
    )
    tracer_provider.shutdown()
    meter_provider.shutdown()


async def _provoke_errors(tls_redis: TlsRedis, pg: TlsPostgres, captured: list[str]) -> None:
    good_pg = pg.url("horae_relay")
    bad_redis = [
        tls_redis.url(USER_A).replace(tls_redis.passwords[USER_A], WRONG),
        tls_redis.url(USER_A).replace(f":{tls_redis.port}/", ":1/"),
    ]
    for url in bad_redis:
        settings = load_settings(
            path=None, env={"HORAE_AUDIT__RELAY": "false"}, redis_url=url, namespace=NS_A
        )
        with pytest.raises(SchedulerError) as info:
            async with Scheduler(settings=settings, listeners=ListenerRegistry()):
                pass
        captured.append(_error_chain(info.value))
    for url in (
        good_pg.replace(pg.passwords["horae_relay"], WRONG),
        good_pg.replace(f":{pg.port}/", ":1/"),
    ):
        with pytest.raises(SchedulerError) as info:
            await migrate_url(url)
        captured.append(_error_chain(info.value))


def _cli_outputs(tls_redis: TlsRedis, pg: TlsPostgres) -> list[str]:
    runner = CliRunner()
    out = []
    good = (tls_redis.url(USER_A), pg.url("horae_relay"))
    wrong = (
        good[0].replace(tls_redis.passwords[USER_A], WRONG),
        good[1].replace(pg.passwords["horae_relay"], WRONG),
    )
    for redis_url, database_url in (good, wrong):
        for args in (["services", "status"], ["jobs", "show", "nope"], ["audit", "lag"]):
            result = runner.invoke(
                cli,
                [
                    "--redis-url",
                    redis_url,
                    "--database-url",
                    database_url,
                    "--namespace",
                    NS_A,
                    *args,
                ],
            )
            out.append(f"{args} exit {result.exit_code}: {result.output}")
    assert "reachable" in out[0] and ("refuses" in out[3] or "WRONGPASS" in out[3]), out
    return out


async def _worker_process(tls_redis: TlsRedis, pg: TlsPostgres, log_dir: Path) -> str:
    env = child_env()
    env.update(
        {
            "HORAE_REDIS_URL": tls_redis.url(USER_A),
            "HORAE_DATABASE_URL": pg.url("horae_relay"),
            "HORAE_NAMESPACE": NS_A,
            "HORAE_TELEMETRY__EXPORTER": "console",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = log_dir / "worker.log"
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            str(HORAE),
            "-v",
            "worker",
            "--app",
            "tests.procs.worker_app:registry",
            "--topics",
            DOOMED_TOPIC,
        ],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    worker = WorkerProcess("secrets", proc, log_path, log_file)
    try:
        await worker.wait_ready()
        settings = load_settings(
            path=None,
            env={"HORAE_AUDIT__RELAY": "false"},
            redis_url=tls_redis.url(USER_A),
            namespace=NS_A,
        )
        async with Scheduler(settings=settings, listeners=ListenerRegistry()) as s:
            job = await s.schedule_in(DOOMED_TOPIC, 0, retry={"attempts": 1})
            await eventually(
                lambda: in_state(s, job, JobState.FAILED),
                timeout=30,
                what="the worker process ran it",
            )
        worker.signal(signal.SIGTERM)
        code, _ = await worker.wait_exit(30)
        assert code == 0, worker.describe()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log_file.close()
    text = log_path.read_text(errors="replace")
    assert READY_LINE in text and "doomed attempt 1" in text and '"name":' in text, (
        "logs and spans were printed"
    )
    return text


@pytest.mark.usefixtures("root_logging")
async def test_no_password_in_logs_errors_status_spans_or_metrics(
    tls_redis: TlsRedis,
    migrated_audit: TlsPostgres,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    pg = migrated_audit
    caplog.set_level(logging.DEBUG)
    captured: list[str] = []
    await _run_in_process(tls_redis.url(USER_A), pg.url("horae_relay"), captured)
    await _provoke_errors(tls_redis, pg, captured)
    captured += await asyncio.to_thread(
        _cli_outputs, tls_redis, pg
    )  # the CLI runs its own event loop
    captured.append(await _worker_process(tls_redis, pg, tmp_path))
    captured.append(_records_text(caplog.records))
    text = "\n".join(captured)
    assert "***" in text and "horae.servers" in text, "the URLs were shown, masked"
    secrets = [tls_redis.passwords[USER_A], pg.passwords["horae_relay"], WRONG]
    leaks = {
        secret: [line for line in text.splitlines() if secret in line][:3] for secret in secrets
    }
    assert not any(leaks.values()), f"passwords leaked: {leaks}"
