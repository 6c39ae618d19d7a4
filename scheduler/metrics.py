"""Metric instruments, built once per process from an OpenTelemetry meter
(a no-op meter unless the application or config installs an SDK)."""

from __future__ import annotations

from opentelemetry import metrics
from opentelemetry.metrics import Meter


class Metrics:
    """The instruments the engine updates. Low-cardinality labels only."""

    def __init__(self, meter: Meter | None = None) -> None:
        meter = meter or metrics.get_meter("horae")
        self.no_listener = meter.create_counter(
            "app_schedule_job_no_listener_total", description="Jobs that arrived with no listener for their topic"
        )
        self.scheduled = meter.create_counter("horae_jobs_scheduled_total", description="Jobs scheduled")
        self.attempts = meter.create_counter("horae_attempts_total", description="Attempts by outcome")
        self.completed = meter.create_counter("horae_jobs_completed_total", description="Jobs completed")
        self.failed = meter.create_counter("horae_jobs_failed_total", description="Jobs failed for good")
        self.cancelled = meter.create_counter("horae_jobs_cancelled_total", description="Jobs cancelled")
        self.retries = meter.create_counter("horae_retries_total", description="Retries scheduled")
        self.attempt_duration = meter.create_histogram(
            "horae_attempt_duration_seconds", unit="s", description="Wall time of one attempt"
        )
        self.lateness = meter.create_histogram(
            "horae_job_lateness_seconds", unit="s", description="Attempt start minus due time"
        )
        self.active_attempts = meter.create_up_down_counter(
            "horae_worker_active_attempts", description="Attempts running in this worker"
        )
