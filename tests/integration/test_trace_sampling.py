"""Sampling (issue 15): a sampled job's call, attempts and listener runs are all in its
trace; an unsampled job records no span at all, yet carries its traceparent (flags 00)
so a downstream service decides the same way; the sampler comes from [telemetry] or the
standard OTEL_TRACES_SAMPLER variables. A job scheduled where no SDK runs (issue 34) is one
trace all the same: one derived from the job's id, which the worker's sampler decides by."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer, SpanKind

from listeners import ListenerRegistry, ScheduleArrivedEvent
from scheduler.core.config import TelemetrySettings
from scheduler.core.keys import Keys
from scheduler.core.traceparent import job_trace, parse_traceparent
from scheduler.observe.telemetry import sampler_of
from scheduler.testing.clocks import FakeClock
from tests.integration.engine_fixtures import START_MS, eventually, make_scheduler

JOBS = 40
RETRY = {"attempts": 2, "backoff": {"type": "fixed", "delay": 1000}}


async def test_a_sampled_job_is_whole_in_its_trace_and_an_unsampled_one_records_nothing(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    provider, exporter = _half_sampled()
    reg, runs = _flaky_registry()

    @reg.on_event("s")
    async def quiet(event: ScheduleArrivedEvent) -> None:
        return None

    clock = FakeClock(START_MS)
    s = make_scheduler(redis_url, namespace, reg, clock)
    s.tracer = provider.get_tracer("test")
    async with s:
        ids = await _every_job_run_twice(s, s, clock, runs)
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    by_trace: dict[int, list[Any]] = {}
    for sp in spans:
        by_trace.setdefault(sp.context.trace_id, []).append(sp)
    sampled = unsampled = 0
    for job_id in ids:
        stored = await redis.hget(Keys(namespace).job(job_id), "trace")
        parent = parse_traceparent(stored.decode() if stored else "")
        assert parent is not None, f"job {job_id} carries a traceparent whether sampled or not"
        mine = by_trace.get(parent.trace_id, [])
        if parent.flags & 1:
            sampled += 1
            kinds = sorted(sp.kind.name for sp in mine)
            # one call, two attempts, two listeners per attempt: all in the job's trace
            assert kinds == ["CONSUMER"] * 2 + ["INTERNAL"] * 4 + ["PRODUCER"], (job_id, kinds)
            producer = next(sp for sp in mine if sp.kind is SpanKind.PRODUCER)
            assert producer.attributes["messaging.message.id"] == job_id  # type: ignore[index]
        else:
            unsampled += 1
            assert mine == [], f"unsampled job {job_id} recorded {[sp.name for sp in mine]}"
    assert sampled and unsampled, f"ratio 0.5 over {JOBS} jobs: {sampled} sampled, {unsampled} not"
    assert len(spans) == 7 * sampled


async def test_a_job_scheduled_without_an_sdk_keeps_one_trace_across_its_attempts(
    redis_url: str, namespace: str, redis: aioredis.Redis
) -> None:
    """The producer has no SDK; the worker samples half of all new traces. No job stores a
    trace context; a sampled job's two attempts and their listeners are all in the one trace
    derived from its id, under its parent; an unsampled one records nothing (never one
    attempt of two)."""
    provider, exporter = _half_sampled()
    reg, runs = _flaky_registry()
    clock = FakeClock(START_MS)
    producer = make_scheduler(redis_url, namespace, ListenerRegistry(), clock)
    producer.tracer = NoOpTracer()
    worker = make_scheduler(redis_url, namespace, reg, clock)
    worker.tracer = provider.get_tracer("test")
    async with producer, worker:
        ids = await _every_job_run_twice(producer, worker, clock, runs)
    provider.shutdown()
    spans = list(exporter.get_finished_spans())
    sampled = 0
    for job_id in ids:
        assert await redis.hget(Keys(namespace).job(job_id), "trace") is None  # costs no byte
        parent = job_trace(job_id)
        mine = [sp for sp in spans if sp.context.trace_id == parent.trace_id]
        attempts = [sp for sp in mine if sp.kind is SpanKind.CONSUMER]
        if mine:
            sampled += 1
            assert len(attempts) == 2 and len(mine) == 4, (job_id, [sp.name for sp in mine])
            assert {sp.parent.span_id for sp in attempts if sp.parent} == {parent.span_id}
    assert 0 < sampled < JOBS, f"ratio 0.5 over {JOBS} jobs: {sampled} sampled"
    assert len(spans) == 4 * sampled  # no span outside a job's own trace


def _half_sampled() -> tuple[TracerProvider, InMemorySpanExporter]:
    """An SDK that samples half of all new traces, exporting to memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampling.ParentBased(sampling.TraceIdRatioBased(0.5)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _flaky_registry() -> tuple[ListenerRegistry, list[str]]:
    """A listener of topic "s" whose first attempt fails, and the job ids it ran, in order."""
    reg, runs = ListenerRegistry(), []

    @reg.on_event("s")
    async def flaky(event: ScheduleArrivedEvent) -> None:
        runs.append(event.scheduled_job_id)
        if event.attempt == 1:
            raise ConnectionError("first attempt fails")

    return reg, runs


async def _every_job_run_twice(
    producer: Any, worker: Any, clock: FakeClock, runs: list[str]
) -> list[str]:
    """Schedule JOBS jobs through `producer`; `worker` runs each twice (a failure, a retry)."""
    ids = [await producer.schedule_in("s", 0, retry=RETRY) for _ in range(JOBS)]
    async with worker.worker(concurrency=8):
        await eventually(
            lambda: _retrying(worker, JOBS), what="every first attempt settled as a retry"
        )
        clock.advance(1.5)
        await eventually(lambda: _all_ran(runs, 2 * JOBS), what="every retry")
    return ids


async def _all_ran(runs: list[str], n: int) -> bool:
    return len(runs) >= n


async def _retrying(s: Any, n: int) -> bool:
    return (await s.stats()).get("retrying", 0) == n


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("always_off", "AlwaysOffSampler"),
        ("traceidratio", "TraceIdRatioBased{0.01}"),
        ("parentbased_traceidratio", "ParentBased{root:TraceIdRatioBased{0.01}"),
    ],
)
def test_the_configured_sampler(name: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    sampler = sampler_of(TelemetrySettings(sampler=name, sample_ratio=0.01))  # type: ignore[arg-type]
    assert sampler.get_description().startswith(expected)


def test_the_standard_variables_win_and_unset_means_the_sdk_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    assert sampler_of(TelemetrySettings()) is None  # the SDK's own default: parentbased_always_on
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    assert sampler_of(TelemetrySettings(sampler="always_on")) is None  # the SDK reads the variable
    assert TracerProvider(sampler=None).sampler.get_description() == "AlwaysOffSampler"


def test_a_bad_ratio_names_the_field() -> None:
    with pytest.raises(ValueError, match="sample_ratio"):
        TelemetrySettings(sample_ratio=1.5)
