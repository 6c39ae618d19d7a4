"""Metric instruments, built once per process from an OpenTelemetry meter
(a no-op meter unless the application or config installs an SDK)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, Observation

from scheduler.core.outbox import ATTEMPT_FAILED_OUTCOME, SUCCEEDED

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.view import View

# Bucket upper bounds (seconds) of the two time histograms: 1 ms to 1 h, roughly 1-2.5-5
# per decade. OpenTelemetry's default boundaries (0, 5, 10, 25, ... 10000) are meant for
# milliseconds: read as seconds every sub-5-second value lands in one bucket, and
# histogram_quantile reports p50 = 2.5 s for a 5 ms lateness.
SECONDS_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
)
ZERO_OUTCOMES: tuple[str, ...] = (
    SUCCEEDED,
    ATTEMPT_FAILED_OUTCOME,
)  # attempt outcomes start_topics() exports at 0
SECONDS_HISTOGRAMS: tuple[str, ...] = (
    "horae_attempt_duration_seconds",
    "horae_job_lateness_seconds",
)


def histogram_views() -> list[View]:
    """SDK Views giving the time histograms SECONDS_BUCKETS; for every MeterProvider horae
    builds (`telemetry.py`). Needs opentelemetry-sdk."""
    from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View

    return [
        View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(SECONDS_BUCKETS))
        for name in SECONDS_HISTOGRAMS
    ]


class Metrics:
    """The instruments the engine updates. Low-cardinality labels only."""

    def __init__(self, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("horae")
        self.no_listener = meter.create_counter(
            "app_schedule_job_no_listener_total",
            description="Jobs that arrived with no listener for their topic",
        )
        self.invalid_payload = meter.create_counter(
            "horae_jobs_invalid_payload_total",
            description=(
                "Jobs completed without running listeners: their topic's schema refused the payload"
            ),
        )
        self.scheduled = meter.create_counter(
            "horae_jobs_scheduled_total", description="Jobs scheduled"
        )
        self.deduplicated = meter.create_counter(
            "horae_jobs_deduplicated_total",
            description=(
                "Scheduling calls a dedupe key or the topic's "
                "policy folded into an existing job, by reason"
            ),
        )
        self.backlog_warnings = meter.create_counter(
            "horae_topic_warning_size_exceeded_total",
            description=(
                "Jobs scheduled while their topic's waiting + "
                "retrying jobs exceeded its warning_size"
            ),
        )
        self.attempts = meter.create_counter(
            "horae_attempts_total", description="Attempts by outcome"
        )
        self.completed = meter.create_counter(
            "horae_jobs_completed_total", description="Jobs completed"
        )
        self.failed = meter.create_counter(
            "horae_jobs_failed_total", description="Jobs failed for good"
        )
        self.cancelled = meter.create_counter(
            "horae_jobs_cancelled_total", description="Jobs cancelled"
        )
        self.retries = meter.create_counter("horae_retries_total", description="Retries scheduled")
        self.dead_letters_dropped = meter.create_counter(
            "horae_dead_letters_dropped_total",
            description=(
                "Dead letters dropped by retention (age or the per-topic cap), by dead-letter topic"
            ),
        )
        # The Views of histogram_views() set the buckets where horae builds the provider; the
        # advisory gives the same buckets under an application's own SDK (one without Views).
        self.attempt_duration = meter.create_histogram(
            "horae_attempt_duration_seconds",
            unit="s",
            description="Wall time of one attempt",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.lateness = meter.create_histogram(
            "horae_job_lateness_seconds",
            unit="s",
            description="Attempt start minus due time",
            explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
        )
        self.active_attempts = meter.create_up_down_counter(
            "horae_worker_active_attempts", description="Attempts running in this worker"
        )
        # Gauges read values the worker's housekeeping and the audit relay refresh, so a
        # scrape never waits on Redis.
        self.jobs_by_state: dict[str, int] = {}
        self.outbox_pending: int | None = None
        self.outbox_oldest_age_s: float | None = None
        self.unserved: dict[
            str, int
        ] = {}  # topic -> due jobs waiting for a worker (scheduler/store/topic_memory.py)
        meter.create_observable_gauge(
            "horae_jobs", callbacks=[self._observe_jobs], description="Jobs in Redis by state"
        )
        meter.create_observable_gauge(
            "horae_jobs_unserved",
            callbacks=[self._observe_unserved],
            description="Due jobs of known topics that wait for a worker: no live worker "
            "serves their topic",
        )
        meter.create_observable_gauge(
            "horae_audit_outbox_pending",
            callbacks=[self._observe_pending],
            description="Outbox events not yet committed to Postgres",
        )
        meter.create_observable_gauge(
            "horae_audit_outbox_oldest_age_seconds",
            callbacks=[self._observe_age],
            unit="s",
            description="Age of the oldest uncommitted outbox event",
        )

    def start_topics(self, topics: Iterable[str]) -> None:
        """Export 0 for the per-topic counters of `topics` (a worker's, at start), so a rate
        or a ratio over them shows 0 instead of "no data" before anything happened."""
        for topic in topics:
            attrs = {"topic": topic}
            for counter in (
                self.scheduled,
                self.completed,
                self.failed,
                self.retries,
                self.no_listener,
                self.invalid_payload,
                self.backlog_warnings,
            ):
                counter.add(0, attrs)
            for outcome in ZERO_OUTCOMES:
                self.attempts.add(0, {**attrs, "outcome": outcome})
        self.cancelled.add(0)  # no topic label

    def _observe_jobs(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"state": state}) for state, n in self.jobs_by_state.items()]

    def _observe_unserved(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(n, {"topic": topic}) for topic, n in self.unserved.items()]

    def _observe_pending(self, options: CallbackOptions) -> Iterable[Observation]:
        return [] if self.outbox_pending is None else [Observation(self.outbox_pending)]

    def _observe_age(self, options: CallbackOptions) -> Iterable[Observation]:
        if self.outbox_pending is None:  # no relay in this process: nothing to say
            return []
        return [Observation(self.outbox_oldest_age_s or 0.0)]  # nothing pending = no lag
