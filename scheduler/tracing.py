"""Span names, attribute names and the few helpers that create spans. Uses only
opentelemetry-api: without an SDK installed every call is a cheap no-op.

A job's life is one trace: the PRODUCER span of the scheduling call is stored
with the job as a W3C traceparent; every attempt is a CONSUMER span whose
parent is that context (retries are siblings), and every listener a child of
its attempt. A cron tick starts a new trace linked to its schedule's context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACER_NAME: Final = "horae"

# OpenTelemetry messaging semantic conventions.
MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_DESTINATION: Final = "messaging.destination.name"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
SYSTEM_NAME: Final = "horae"

# Our own attributes.
JOB_ID: Final = "horae.job.id"
JOB_ATTEMPT: Final = "horae.job.attempt"
JOB_MAX_ATTEMPTS: Final = "horae.job.max_attempts"
JOB_LATENESS_MS: Final = "horae.job.lateness_ms"
JOB_RUN_AT: Final = "horae.job.run_at"
JOB_TZ: Final = "horae.job.tz"
ATTEMPT_OUTCOME: Final = "horae.attempt.outcome"
CRON_NAME: Final = "horae.cron.name"
LISTENER: Final = "horae.listener"

EVENT_SCHEDULE_FAILED: Final = "schedule.failed"

_propagator = TraceContextTextMapPropagator()


def get_tracer() -> Tracer:
    """The tracer of whatever TracerProvider is installed when called (not at import)."""
    return trace.get_tracer(TRACER_NAME)


def is_noop(tracer: Tracer) -> bool:
    """True while no SDK is installed: spans would be no-ops, so the hot path skips them.

    Checked per call (an application may install its SDK after we start). A ProxyTracer
    delegates to a NoOpTracer until a provider is set; anything unknown counts as real.
    """
    if isinstance(tracer, trace.NoOpTracer):
        return True
    return isinstance(tracer, trace.ProxyTracer) and isinstance(getattr(tracer, "_tracer", None), trace.NoOpTracer)


def current_traceparent() -> str:
    """The W3C traceparent of the current span, or "" when there is none."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def context_from(traceparent: str) -> otel_context.Context | None:
    """An OpenTelemetry context carrying the remote parent, or None."""
    if not traceparent:
        return None
    return _propagator.extract({"traceparent": traceparent})


@contextmanager
def producer_span(tracer: Tracer, topic: str, operation: str = "send",
                  attributes: dict[str, Any] | None = None, new_trace: bool = False,
                  link_to: str = "") -> Iterator[Span]:
    """PRODUCER span of a scheduling call; a cron tick passes new_trace and links to its schedule."""
    attrs = {
        MESSAGING_SYSTEM: SYSTEM_NAME,
        MESSAGING_OPERATION_TYPE: operation,
        MESSAGING_OPERATION_NAME: "schedule",
        MESSAGING_DESTINATION: topic,
        **(attributes or {}),
    }
    links = []
    linked = context_from(link_to)
    if linked is not None:
        span_context = trace.get_current_span(linked).get_span_context()
        if span_context.is_valid:
            links.append(Link(span_context))
    ctx = otel_context.Context() if new_trace else None
    with tracer.start_as_current_span(f"schedule {topic}", context=ctx, kind=SpanKind.PRODUCER,
                                      attributes=attrs, links=links) as span:
        yield span


@contextmanager
def attempt_span(tracer: Tracer, topic: str, traceparent: str, attributes: dict[str, Any]) -> Iterator[Span]:
    """CONSUMER span of one attempt, child of the job's stored producer context."""
    attrs = {
        MESSAGING_SYSTEM: SYSTEM_NAME,
        MESSAGING_OPERATION_TYPE: "process",
        MESSAGING_OPERATION_NAME: "process",
        MESSAGING_DESTINATION: topic,
        **attributes,
    }
    with tracer.start_as_current_span(f"process {topic}", context=context_from(traceparent),
                                      kind=SpanKind.CONSUMER, attributes=attrs,
                                      record_exception=False, set_status_on_exception=False) as span:
        yield span


@contextmanager
def listener_span(tracer: Tracer, name: str) -> Iterator[Span]:
    """INTERNAL span of one listener run; an exception sets ERROR and is recorded."""
    with tracer.start_as_current_span(name, attributes={LISTENER: name}, record_exception=False,
                                      set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            raise
