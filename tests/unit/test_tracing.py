"""Tracing helpers: no-op detection, our W3C traceparent format and parse (checked
against the OpenTelemetry propagator and the spec's invalid cases), and the span
scopes (current span, parentage, error recording) the worker and facade rely on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from scheduler.core.traceparent import job_trace
from scheduler.observe.tracing import (
    ATTEMPT_OUTCOME,
    JOB_ATTEMPT,
    JOB_ID,
    LISTENER,
    MESSAGING_DESTINATION,
    MESSAGING_MESSAGE_ID,
    MESSAGING_SYSTEM,
    attempt_span,
    context_from,
    current_traceparent,
    get_tracer,
    is_noop,
    listener_span,
    producer_span,
    span_context_of,
    traceparent_of,
)

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def sdk() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def test_tracer_without_sdk_is_noop_and_sdk_tracer_is_not() -> None:
    assert is_noop(get_tracer()), "no global provider is installed in the test suite"
    assert is_noop(trace.NoOpTracer())
    provider = TracerProvider()
    assert not is_noop(provider.get_tracer("t"))
    provider.shutdown()


def test_parse_reads_a_valid_traceparent_as_the_propagator_does() -> None:
    ours = span_context_of(VALID)
    theirs = trace.get_current_span(
        TraceContextTextMapPropagator().extract({"traceparent": VALID})
    ).get_span_context()
    assert ours == theirs
    assert ours is not None and ours.is_remote and ours.trace_flags.sampled
    assert span_context_of(VALID[:-2] + "00").trace_flags.sampled is False  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "value",
    [
        "",
        VALID[:-1],  # too short
        VALID + "-extra",  # version 00 has exactly 4 fields
        "ff" + VALID[2:],  # version ff is invalid
        VALID.upper(),  # hex is lowercase
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero parent id
        "00-4bf92f3577b34da6a3ce929d0e0e473--00f067aa0ba902b7-01",  # a dash inside an id
        "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # int() would accept a sign
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # wrong separator
        "01" + VALID[2:] + "x",  # later version: more fields follow a dash
    ],
)
def test_parse_rejects_what_the_spec_calls_invalid(value: str) -> None:
    assert span_context_of(value) is None
    assert context_from(value) is None


def test_a_later_version_keeps_its_first_four_fields() -> None:
    ctx = span_context_of("cc" + VALID[2:] + "-what-comes-next")
    assert ctx is not None and f"{ctx.trace_id:032x}" == VALID[3:35]


def test_format_round_trips_and_matches_the_propagator(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, _ = sdk
    with producer_span(tracer, "t") as span:
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)
        assert current_traceparent() == traceparent_of(span) == carrier["traceparent"]
        assert span_context_of(traceparent_of(span)) is not None
    assert current_traceparent() == "", "the scope restores the previous context"
    assert traceparent_of(trace.INVALID_SPAN) == ""


def test_attempt_and_listener_spans_continue_the_stored_trace(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = sdk
    with producer_span(tracer, "t", attributes={MESSAGING_MESSAGE_ID: "j1"}) as producer:
        stored = traceparent_of(producer)
    for attempt in (1, 2):
        with attempt_span(tracer, "t", stored, "j1", attempt, 3, 5) as span:
            span.set_attribute(ATTEMPT_OUTCOME, "succeeded")
            with listener_span(tracer, "mod.fn"):
                pass
    spans = exporter.get_finished_spans()
    producer_ctx = producer.get_span_context()
    attempts = [sp for sp in spans if sp.kind is SpanKind.CONSUMER]
    listeners = [sp for sp in spans if sp.kind is SpanKind.INTERNAL]
    assert [sp.attributes[JOB_ATTEMPT] for sp in attempts] == [1, 2]  # type: ignore[index]
    for sp in attempts:
        assert (
            sp.parent is not None
            and sp.parent.span_id == producer_ctx.span_id
            and sp.parent.is_remote
        )
        assert sp.context.trace_id == producer_ctx.trace_id
        assert sp.attributes[JOB_ID] == sp.attributes[MESSAGING_MESSAGE_ID] == "j1"  # type: ignore[index]
        assert (
            sp.attributes[MESSAGING_SYSTEM] == "horae"
            and sp.attributes[MESSAGING_DESTINATION] == "t"
        )  # type: ignore[index]
        assert sp.attributes[ATTEMPT_OUTCOME] == "succeeded"  # type: ignore[index]
    assert [sp.parent.span_id for sp in listeners] == [a.context.span_id for a in attempts]  # type: ignore[union-attr]
    assert all(sp.name == "mod.fn" and sp.attributes[LISTENER] == "mod.fn" for sp in listeners)  # type: ignore[index]


def test_a_bad_stored_traceparent_starts_a_new_trace(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = sdk
    with attempt_span(tracer, "t", "garbage", "j1", 1, 1, 0):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.parent is None


def test_errors_are_recorded_where_the_contract_says(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = sdk
    with pytest.raises(ValueError), attempt_span(tracer, "t", "", "j1", 1, 1, 0):
        with listener_span(tracer, "mod.fn"):
            raise ValueError("boom")
    with pytest.raises(RuntimeError), producer_span(tracer, "t"):
        raise RuntimeError("no store")
    listener, attempt, producer = exporter.get_finished_spans()
    assert (
        listener.status.status_code is StatusCode.ERROR
        and listener.status.description == "ValueError: boom"
    )
    assert [e.attributes["exception.type"] for e in listener.events] == ["ValueError"]  # type: ignore[index]
    assert attempt.status.status_code is StatusCode.UNSET and not attempt.events, (
        "the worker sets the outcome"
    )
    assert (
        producer.status.status_code is StatusCode.ERROR and producer.events[0].name == "exception"
    )
    assert current_traceparent() == ""


def test_a_cron_tick_starts_a_new_trace_linked_to_its_schedule(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = sdk
    with producer_span(tracer, "t", "create"):
        with producer_span(tracer, "t", "create", new_trace=True, link_to=VALID) as tick:
            pass
    tick_span = exporter.get_finished_spans()[0]
    assert tick_span.parent is None and tick_span.context.trace_id != int(VALID[3:35], 16)
    assert [link.context for link in tick_span.links] == [span_context_of(VALID)]
    assert tick.get_span_context() == tick_span.context


def _provider(sampler: object) -> tuple[trace.Tracer, InMemorySpanExporter, TracerProvider]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test"), exporter, provider


@pytest.mark.parametrize("flags", ["01", "03"])
def test_a_sampled_parent_gives_the_attempt_its_attributes_at_start(flags: str) -> None:
    """The sampled bit is bit 0 of the flags: 03 (sampled, random trace id) counts too."""
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    tracer, exporter, provider = _provider(ParentBased(TraceIdRatioBased(0.0)))
    with attempt_span(tracer, "t", VALID[:-2] + flags, "j1", 2, 3, 7):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.attributes[JOB_ATTEMPT] == 2 and span.attributes[MESSAGING_MESSAGE_ID] == "j1"  # type: ignore[index]
    provider.shutdown()


def test_an_unsampled_parent_builds_no_attributes_unless_the_sampler_records_anyway(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a parent-based sampler an unsampled job's attempt records nothing and builds no
    attribute dict; a sampler that ignores the parent (ALWAYS_ON) still gets them all."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased

    import scheduler.observe.tracing as tracing

    built: list[str] = []
    real = tracing._attempt_attributes  # noqa: SLF001
    monkeypatch.setattr(tracing, "_attempt_attributes", lambda *a: built.append(a[1]) or real(*a))
    unsampled = VALID[:-2] + "00"
    tracer, exporter, provider = _provider(ParentBased(ALWAYS_ON))
    with attempt_span(tracer, "t", unsampled, "j1", 1, 1, 0) as span:
        assert not span.is_recording()
    assert exporter.get_finished_spans() == () and built == []
    provider.shutdown()
    tracer, exporter, provider = _provider(ALWAYS_ON)
    with attempt_span(tracer, "t", unsampled, "j2", 1, 1, 0):
        pass
    (span,) = exporter.get_finished_spans()
    assert built == ["j2"] and span.attributes[JOB_ID] == "j2"  # type: ignore[index]
    provider.shutdown()


def test_a_producer_span_that_is_not_current_still_parents_under_the_callers_span(
    sdk: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    """The scheduling call's span is not made current (nothing runs under it but our store
    call), yet it is the child of the caller's span and its traceparent is its own; the
    attribute callable is called only for a recording span."""
    tracer, exporter = sdk
    calls: list[int] = []
    with producer_span(tracer, "caller") as caller:
        with producer_span(
            tracer,
            "t",
            attributes=lambda: calls.append(1) or {MESSAGING_MESSAGE_ID: "j1"},
            current=False,
        ) as span:
            assert current_traceparent() == traceparent_of(caller) != traceparent_of(span)
    inner = exporter.get_finished_spans()[0]
    assert inner.parent is not None and inner.parent.span_id == caller.get_span_context().span_id
    assert inner.attributes[MESSAGING_MESSAGE_ID] == "j1" and calls == [1]  # type: ignore[index]
    with producer_span(
        trace.NoOpTracer(), "t", attributes=lambda: calls.append(2) or {}, current=False
    ):
        pass
    assert calls == [1], "a non-recording span builds no attributes"


def test_a_job_without_a_trace_has_one_of_its_own_decided_by_the_workers_sampler() -> None:
    """A job scheduled where no SDK runs stores no trace context: its attempts are traced
    under one derived from its id (a different one per job); the worker's sampler decides by
    that trace id, so every attempt gets the same answer: TraceIdRatioBased(0.5) records
    about half of the jobs, all of their attempts or none."""
    ids = [f"job-{i}" for i in range(200)]
    derived = {job_id: job_trace(job_id) for job_id in ids}
    assert len({t.trace_id for t in derived.values()}) == 200
    assert job_trace("job-1") == derived["job-1"] and derived["job-1"].flags == 0
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampling.ParentBased(sampling.TraceIdRatioBased(0.5)))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for job_id in ids:
        for attempt in (1, 2):
            with attempt_span(tracer, "t", "", job_id, attempt, 2, 0):
                pass
    by_trace: dict[int, list[Any]] = {}
    for sp in exporter.get_finished_spans():
        by_trace.setdefault(sp.context.trace_id, []).append(sp)
    assert {len(spans) for spans in by_trace.values()} == {2}  # both attempts, or neither
    assert 60 < len(by_trace) < 140  # about half of 200
    parents = {t.trace_id: t.span_id for t in derived.values()}
    for trace_id, spans in by_trace.items():
        assert {sp.parent.span_id for sp in spans if sp.parent} == {parents[trace_id]}
