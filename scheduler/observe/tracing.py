"""Span names, attribute names and the few helpers that create spans. Uses only
opentelemetry-api: without an SDK installed every call is a cheap no-op.

A job's life is one trace: the PRODUCER span of the scheduling call is stored
with the job as a W3C traceparent; every attempt is a CONSUMER span whose
parent is that context (retries are siblings), and every listener a child of
its attempt. A cron tick starts a new trace linked to its schedule's context.
A job scheduled where no SDK runs has a trace derived from its id (core/traceparent.py:
job_trace), so its attempts still share one trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from types import TracebackType
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)

from scheduler.core.traceparent import job_trace, parse_traceparent

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

_EMPTY: Final = otel_context.Context()


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
    return isinstance(tracer, trace.ProxyTracer) and isinstance(
        getattr(tracer, "_tracer", None), trace.NoOpTracer
    )


def traceparent_of(span: Span) -> str:
    """The W3C traceparent (version 00) of span, or "" when its context is invalid."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return ""
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"


def current_traceparent() -> str:
    """The W3C traceparent of the current span, or "" when there is none."""
    return traceparent_of(trace.get_current_span())


def span_context_of(value: str) -> SpanContext | None:
    """The remote SpanContext a W3C traceparent names, or None when it is not valid."""
    parsed = parse_traceparent(value)
    if parsed is None:
        return None
    return SpanContext(
        parsed.trace_id, parsed.span_id, is_remote=True, trace_flags=TraceFlags(parsed.flags)
    )


def _job_context(job_id: str, tracer: Tracer) -> otel_context.Context:
    """The parent of a job scheduled without a trace context (no SDK where it was scheduled):
    job_trace's, sampled as `tracer`'s sampler samples a new trace with that id (a ratio
    sampler decides by the id alone: every attempt of the job gets the same answer)."""
    parsed = job_trace(job_id)
    sampler = getattr(getattr(tracer, "_tracer", tracer), "sampler", None)  # SDK (via a proxy)
    sampled = (
        sampler is not None
        and sampler.should_sample(_EMPTY, parsed.trace_id, "process").decision.is_sampled()
    )
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    span_context = SpanContext(parsed.trace_id, parsed.span_id, is_remote=True, trace_flags=flags)
    return trace.set_span_in_context(NonRecordingSpan(span_context), _EMPTY)


@lru_cache(maxsize=256)
def context_from(traceparent: str) -> otel_context.Context | None:
    """A context whose span is the remote parent traceparent names, or None (none or invalid).

    A small cache: a job retried soon after its last attempt parses nothing; a unique value
    costs one insert (a bigger one buys nothing: under load most traceparents are seen
    once). Contexts are immutable, so sharing one between attempts is safe.
    """
    span_context = span_context_of(traceparent) if traceparent else None
    if span_context is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(span_context), _EMPTY)


class SpanScope:
    """Makes a started span current for a `with` block (unless `current` is False) and ends
    it on exit.

    What `start_as_current_span` does, without its two generator context managers
    (a noticeable share of an SDK span's cost). An exception of type `record`
    is recorded on the span and sets ERROR status; None leaves both to the caller.
    A span nothing runs under (a scheduling call's: only our own store call does) need
    not be current: attaching and detaching a context is a cost of its own.
    """

    __slots__ = ("span", "_record", "_token")

    def __init__(
        self, span: Span, record: type[BaseException] | None, current: bool = True
    ) -> None:
        self.span = span
        self._record = record
        self._token: object = current  # whether to attach; once attached, the token to detach

    def __enter__(self) -> Span:
        if self._token:
            self._token = otel_context.attach(trace.set_span_in_context(self.span))
        return self.span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token:
            otel_context.detach(self._token)  # type: ignore[arg-type]
        if exc is not None and self._record is not None and isinstance(exc, self._record):
            self.span.record_exception(exc)
            self.span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        self.span.end()


def producer_span(
    tracer: Tracer,
    topic: str,
    operation: str = "send",
    attributes: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    new_trace: bool = False,
    link_to: str = "",
    current: bool = True,
) -> SpanScope:
    """PRODUCER span of a scheduling call; a cron tick passes new_trace and links to its schedule.

    A failing call (an Exception) records it and sets ERROR, as start_as_current_span would.
    Attributes are set only on a recording span (a sampler sees none of them), in one call;
    a callable is called only then: an unsampled job pays for its span's context and
    traceparent, which propagation needs, and builds no attributes.
    """
    linked = span_context_of(link_to) if link_to else None
    links = (Link(linked),) if linked is not None else ()
    span = tracer.start_span(
        f"schedule {topic}",
        context=_EMPTY if new_trace else None,
        kind=SpanKind.PRODUCER,
        links=links,
    )
    if span.is_recording():
        extra = attributes() if callable(attributes) else attributes
        span.set_attributes(
            {
                MESSAGING_SYSTEM: SYSTEM_NAME,
                MESSAGING_OPERATION_TYPE: operation,
                MESSAGING_OPERATION_NAME: "schedule",
                MESSAGING_DESTINATION: topic,
                **(extra or {}),
            }
        )
    return SpanScope(span, Exception, current)


def attempt_span(
    tracer: Tracer,
    topic: str,
    traceparent: str,
    job_id: str,
    attempt: int,
    max_attempts: int,
    lateness_ms: int,
) -> SpanScope:
    """CONSUMER span of one attempt, child of the job's stored producer context.

    Exceptions are not recorded here: the worker sets the outcome and status itself.
    When the stored context says sampled, the span will almost surely record (a parent-based
    sampler follows it), so the attributes go in with the span, cheaper than a call after
    it; otherwise they are set only if it records (an unsampled job's attempt builds none).
    """
    name = f"process {topic}"
    parent = context_from(traceparent) if traceparent else _job_context(job_id, tracer)
    if parent is not None and (
        traceparent[54] in _ODD_HEX  # the flags' sampled bit
        if traceparent
        else trace.get_current_span(parent).get_span_context().trace_flags.sampled
    ):
        return SpanScope(
            tracer.start_span(
                name,
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes=_attempt_attributes(topic, job_id, attempt, max_attempts, lateness_ms),
            ),
            None,
        )
    span = tracer.start_span(name, context=parent, kind=SpanKind.CONSUMER)
    if span.is_recording():
        span.set_attributes(_attempt_attributes(topic, job_id, attempt, max_attempts, lateness_ms))
    return SpanScope(span, None)


_ODD_HEX: Final = frozenset("13579bdf")


def _attempt_attributes(
    topic: str, job_id: str, attempt: int, max_attempts: int, lateness_ms: int
) -> dict[str, Any]:
    return {
        MESSAGING_SYSTEM: SYSTEM_NAME,
        MESSAGING_OPERATION_TYPE: "process",
        MESSAGING_OPERATION_NAME: "process",
        MESSAGING_DESTINATION: topic,
        MESSAGING_MESSAGE_ID: job_id,
        JOB_ID: job_id,
        JOB_ATTEMPT: attempt,
        JOB_MAX_ATTEMPTS: max_attempts,
        JOB_LATENESS_MS: lateness_ms,
    }


def listener_span(tracer: Tracer, name: str) -> SpanScope:
    """INTERNAL span of one listener run, child of the current (attempt) span; any exception,
    cancellation included, sets ERROR and is recorded."""
    # Started under a recording attempt only (the worker calls listeners bare otherwise), so
    # the attribute goes in with the span: cheaper than a set_attribute call after it.
    return SpanScope(tracer.start_span(name, attributes={LISTENER: name}), BaseException)
