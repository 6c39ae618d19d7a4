"""Traces and metrics with in-memory exporters: one trace per job across its
attempts and listeners, error status on failing listeners, exact metric counts."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler import JobState, Scheduler
from scheduler.observe.logs import TraceContextFilter
from scheduler.observe.metrics import Metrics
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler
from tests.procs import child_env
from tests.procs.deployment import free_port

ROOT = Path(__file__).resolve().parents[2]

FAST = {"attempts": 3, "backoff": {"type": "fixed", "delay": 1000}}


@pytest.fixture
def spans() -> Any:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def instrument(
    s: Scheduler, provider: TracerProvider, meter_provider: MeterProvider | None = None
) -> None:
    s.tracer = provider.get_tracer("test")
    if meter_provider is not None:
        s.metrics = Metrics(meter_provider.get_meter("test"))


async def _state(s: Scheduler, job_id: str, state: JobState) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state is state


async def run_flaky_job(
    s: Scheduler, clock: FakeClock, fail_times: int, retry: dict[str, Any] = FAST
) -> str:
    job_id = await s.schedule_in("flaky", 0, retry=retry)
    async with s.worker():
        for n in range(1, fail_times + 1):
            await eventually(lambda: _attempts(s, job_id, n), what=f"attempt {n} settled")
            clock.advance(1)
        await eventually(lambda: _terminal(s, job_id), what="terminal state")
    return job_id


async def _attempts(s: Scheduler, job_id: str, n: int) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.attempts == n and info.state is not JobState.RUNNING


async def _terminal(s: Scheduler, job_id: str) -> bool:
    info = await s.get_job(job_id)
    return info is not None and info.state.terminal


def flaky_registry(fail_until: int) -> ListenerRegistry:
    reg = ListenerRegistry()

    @reg.on_event("flaky")
    async def charge(event: ScheduleArrivedEvent) -> None:
        if event.attempt <= fail_until:
            raise ConnectionError(f"gateway down #{event.attempt}")

    @reg.on_event("flaky")
    async def notify(event: ScheduleArrivedEvent) -> None:
        return None

    return reg


async def test_one_trace_links_the_call_every_attempt_and_every_listener(
    redis_url: str, namespace: str, spans: Any
) -> None:
    provider, exporter = spans
    clock = FakeClock(START_MS)
    s = make_scheduler(redis_url, namespace, flaky_registry(fail_until=2), clock)
    instrument(s, provider)
    async with s:
        job_id = await run_flaky_job(s, clock, fail_times=2)
        assert (await s.get_job(job_id)).state is JobState.COMPLETED  # type: ignore[union-attr]
    finished: list[ReadableSpan] = list(exporter.get_finished_spans())
    producer = [sp for sp in finished if sp.kind is SpanKind.PRODUCER]
    attempts = sorted(
        (sp for sp in finished if sp.kind is SpanKind.CONSUMER),
        key=lambda sp: sp.attributes["horae.job.attempt"],
    )  # type: ignore[index]
    assert len(producer) == 1 and producer[0].name == "schedule flaky"
    trace_id = producer[0].context.trace_id
    assert producer[0].attributes["messaging.message.id"] == job_id  # type: ignore[index]
    assert producer[0].attributes["messaging.system"] == "horae"  # type: ignore[index]
    assert [sp.attributes["horae.job.attempt"] for sp in attempts] == [1, 2, 3]  # type: ignore[index]
    for sp in attempts:
        assert sp.name == "process flaky"
        assert sp.context.trace_id == trace_id, "retries stay in the job's trace"
        assert sp.parent is not None and sp.parent.span_id == producer[0].context.span_id, (
            "attempts are siblings"
        )
        assert sp.attributes["messaging.destination.name"] == "flaky"  # type: ignore[index]
        assert sp.attributes["messaging.operation.type"] == "process"  # type: ignore[index]
        assert sp.attributes["horae.job.max_attempts"] == 3  # type: ignore[index]
        assert "horae.job.lateness_ms" in sp.attributes  # type: ignore[operator]
    assert [sp.attributes["horae.attempt.outcome"] for sp in attempts] == [
        "failed",
        "failed",
        "succeeded",
    ]  # type: ignore[index]
    assert [sp.status.status_code for sp in attempts] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    listeners = [sp for sp in finished if sp.kind is SpanKind.INTERNAL]
    by_parent = Counter(sp.parent.span_id for sp in listeners if sp.parent)
    assert all(by_parent[a.context.span_id] == 2 for a in attempts), (
        "one child span per listener per attempt"
    )
    failing = sorted(
        (sp for sp in listeners if sp.name.endswith("charge")), key=lambda sp: sp.start_time or 0
    )
    assert [sp.status.status_code for sp in failing] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    events = [e for e in failing[0].events if e.name == "exception"]
    assert len(events) == 1 and events[0].attributes["exception.type"] == "ConnectionError"  # type: ignore[index]
    assert all(
        sp.status.status_code is StatusCode.UNSET for sp in listeners if sp.name.endswith("notify")
    )


async def test_terminal_failure_adds_a_schedule_failed_span_event(
    redis_url: str, namespace: str, spans: Any
) -> None:
    provider, exporter = spans
    clock = FakeClock(START_MS)
    s = make_scheduler(redis_url, namespace, flaky_registry(fail_until=99), clock)
    instrument(s, provider)
    async with s:
        await run_flaky_job(
            s,
            clock,
            fail_times=1,
            retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}},
        )
    attempts = sorted(
        (sp for sp in exporter.get_finished_spans() if sp.kind is SpanKind.CONSUMER),
        key=lambda sp: sp.attributes["horae.job.attempt"],
    )  # type: ignore[index]
    assert [[e.name for e in sp.events] for sp in attempts] == [[], ["schedule.failed"]]


async def test_cron_tick_starts_a_new_trace_linked_to_its_schedule(
    redis_url: str, namespace: str, spans: Any
) -> None:
    provider, exporter = spans
    clock = FakeClock(START_MS)
    reg = ListenerRegistry()
    reg.add("tick", lambda event: None)
    s = make_scheduler(redis_url, namespace, reg, clock)
    instrument(s, provider)
    async with s:
        info = await s.schedule_cron("every-minute", "* * * * *", topic="tick")
        async with s.worker():
            assert info.next_run_at is not None
            clock.set_ms(int(info.next_run_at.timestamp() * 1000))
            await eventually(lambda: _any_attempt(exporter), what="the tick's attempt")
    finished = list(exporter.get_finished_spans())
    schedule_span = next(
        sp
        for sp in finished
        if sp.kind is SpanKind.PRODUCER
        and "horae.cron.name" in sp.attributes
        and sp.attributes.get("messaging.message.id") is None
    )  # type: ignore[operator]
    tick_span = next(
        sp
        for sp in finished
        if sp.kind is SpanKind.PRODUCER and sp.attributes.get("messaging.message.id")
    )  # type: ignore[union-attr]
    attempt = next(sp for sp in finished if sp.kind is SpanKind.CONSUMER)
    assert tick_span.parent is None and tick_span.context.trace_id != schedule_span.context.trace_id
    assert [link.context.span_id for link in tick_span.links] == [schedule_span.context.span_id]
    assert attempt.context.trace_id == tick_span.context.trace_id
    assert attempt.parent is not None and attempt.parent.span_id == tick_span.context.span_id


async def _any_attempt(exporter: InMemorySpanExporter) -> bool:
    return any(sp.kind is SpanKind.CONSUMER for sp in exporter.get_finished_spans())


async def test_log_lines_inside_a_listener_carry_trace_and_span_ids(
    redis_url: str, namespace: str, spans: Any
) -> None:
    provider, exporter = spans
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(TraceContextFilter())
    log = logging.getLogger("test.listener")
    log.addHandler(handler)
    reg = ListenerRegistry()

    @reg.on_event("logged")
    async def logged(event: ScheduleArrivedEvent) -> None:
        log.warning("inside the listener")

    s = make_scheduler(redis_url, namespace, reg)
    instrument(s, provider)
    try:
        async with s:
            job_id = await s.schedule_in("logged", 0)
            async with s.worker():
                await eventually(lambda: _state(s, job_id, JobState.COMPLETED), what="completed")
    finally:
        log.removeHandler(handler)
    listener_span = next(sp for sp in exporter.get_finished_spans() if sp.kind is SpanKind.INTERNAL)
    assert records[0].trace_id == format(listener_span.context.trace_id, "032x")  # type: ignore[attr-defined]
    assert records[0].span_id == format(listener_span.context.span_id, "016x")  # type: ignore[attr-defined]


def metric_points(
    reader: InMemoryMetricReader,
) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    data = reader.get_metrics_data()
    out = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    key = (m.name, tuple(sorted(p.attributes.items())))
                    out[key] = getattr(p, "value", None) if hasattr(p, "value") else p.count
    return out


async def test_metrics_count_exactly_what_happened(redis_url: str, namespace: str) -> None:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    clock = FakeClock(START_MS)
    reg = flaky_registry(fail_until=1)

    @reg.on_event("doomed")
    async def doomed(event: ScheduleArrivedEvent) -> None:
        raise RuntimeError("always")

    reg.add("ok", lambda event: None)
    s = make_scheduler(redis_url, namespace, reg, clock)
    s.metrics = Metrics(meter_provider.get_meter("test"))
    async with s:
        ok = await s.schedule_in("ok", 0)
        flaky = await s.schedule_in("flaky", 0, retry=FAST)
        doomed_id = await s.schedule_in(
            "doomed", 0, retry={"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}
        )
        nobody = await s.schedule_in("nobody", 0)
        later = await s.schedule_in("ok", "1h")
        assert await s.cancel(later)
        async with s.worker():
            for job_id in (ok, nobody):
                await eventually(lambda: _terminal(s, job_id), what="first-attempt jobs")
            await eventually(lambda: _attempts(s, flaky, 1), what="flaky attempt 1")
            await eventually(lambda: _attempts(s, doomed_id, 1), what="doomed attempt 1")
            clock.advance(1)
            for job_id in (flaky, doomed_id):
                await eventually(lambda: _terminal(s, job_id), what="retried jobs")
    points = metric_points(reader)
    assert points[("horae_jobs_scheduled_total", (("topic", "ok"),))] == 2
    assert points[("horae_jobs_scheduled_total", (("topic", "flaky"),))] == 1
    assert points[("app_schedule_job_no_listener_total", (("topic", "nobody"),))] == 1
    assert points[("horae_attempts_total", (("outcome", "succeeded"), ("topic", "flaky")))] == 1
    assert points[("horae_attempts_total", (("outcome", "failed"), ("topic", "flaky")))] == 1
    assert points[("horae_attempts_total", (("outcome", "failed"), ("topic", "doomed")))] == 2
    assert points[("horae_attempts_total", (("outcome", "no_listener"), ("topic", "nobody")))] == 1
    assert points[("horae_jobs_completed_total", (("topic", "ok"),))] == 1
    assert points[("horae_jobs_completed_total", (("topic", "flaky"),))] == 1
    assert points[("horae_jobs_failed_total", (("topic", "doomed"),))] == 1
    assert points[("horae_retries_total", (("topic", "flaky"),))] == 1
    assert points[("horae_retries_total", (("topic", "doomed"),))] == 1
    assert points[("horae_jobs_cancelled_total", ())] == 1
    assert (
        points[("horae_attempt_duration_seconds", (("topic", "doomed"),))] == 2
    )  # histogram count
    assert points[("horae_job_lateness_seconds", (("topic", "flaky"),))] == 2
    assert points[("horae_worker_active_attempts", ())] == 0
    meter_provider.shutdown()


async def test_a_worker_exports_its_topics_counters_from_zero(
    redis_url: str, namespace: str
) -> None:
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    reg = ListenerRegistry()
    reg.add("ok", lambda event: None)
    s = make_scheduler(redis_url, namespace, reg)
    s.metrics = Metrics(meter_provider.get_meter("test"))
    async with s, s.worker():
        points = metric_points(reader)
    meter_provider.shutdown()
    for name in (
        "horae_jobs_scheduled_total",
        "horae_jobs_completed_total",
        "horae_jobs_failed_total",
        "horae_retries_total",
        "app_schedule_job_no_listener_total",
        "horae_jobs_invalid_payload_total",
    ):
        assert points[(name, (("topic", "ok"),))] == 0, name
    assert points[("horae_attempts_total", (("outcome", "failed"), ("topic", "ok")))] == 0
    assert points[("horae_attempts_total", (("outcome", "succeeded"), ("topic", "ok")))] == 0
    assert points[("horae_jobs_cancelled_total", ())] == 0


PRODUCER = """
import asyncio, sys, urllib.request
import scheduler
from listeners import ListenerRegistry
from scheduler import Scheduler
from horae.settings import load_settings

redis_url, namespace, port = sys.argv[1], sys.argv[2], sys.argv[3]

async def main():
    settings = load_settings(
        env={"HORAE_TELEMETRY__METRICS_PORT": port, "HORAE_AUDIT__RELAY": "false"},
        redis_url=redis_url,
        namespace=namespace,
    )
    for topic in ("a", "b"):  # two Schedulers, one process: one exporter, no port taken twice
        async with Scheduler(settings=settings, listeners=ListenerRegistry()) as s:
            await s.schedule_in(topic, "1h")
    print(scheduler.__file__)
    print(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode())

asyncio.run(main())
"""


def test_a_producer_exports_its_metrics_when_telemetry_is_configured(
    redis_url: str, namespace: str
) -> None:
    """No worker in the process: `[telemetry] metrics_port` alone makes the Scheduler serve
    horae_jobs_scheduled_total (the "Jobs scheduled / s" panel's counter)."""
    env = child_env() | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", PRODUCER, redis_url, namespace, str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    code, _, text = out.stdout.partition("\n")
    assert Path(code).is_relative_to(ROOT), f"the child ran {code}"
    scheduled = {
        s.labels["topic"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "horae_jobs_scheduled_total"
    }
    assert scheduled == {"a": 1.0, "b": 1.0}
