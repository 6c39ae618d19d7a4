"""Scheduling one job: check the request into a `NewJob` (settings' defaults, the topic's
payload schema), then hand it to a local worker or store it under a PRODUCER span."""

from __future__ import annotations

import logging
import time
import weakref
from contextlib import nullcontext
from typing import TYPE_CHECKING, Protocol

from opentelemetry.trace import Tracer

from listeners import ListenerRegistry
from scheduler.core.clock import caller_now_ms
from scheduler.core.config import Settings
from scheduler.core.job import NewJob, ScheduleResult
from scheduler.core.request import JobRequest
from scheduler.core.retry import RetryPolicy
from scheduler.core.validation import build_job
from scheduler.facade import operations
from scheduler.observe.metrics import Metrics
from scheduler.observe.tracing import (
    JOB_RUN_AT,
    JOB_TZ,
    MESSAGING_MESSAGE_ID,
    current_traceparent,
    is_noop,
    producer_span,
    traceparent_of,
)
from scheduler.store.bulk import Enqueued

if TYPE_CHECKING:
    from scheduler.worker.partitioned import AnyWorker

log = logging.getLogger("horae.scheduler")


class Host(operations.Host, Protocol):
    """What scheduling (and `scheduler/facade/crons.py`) use of their Scheduler, besides the store,
    clock and metrics the operations use."""

    settings: Settings
    registry: ListenerRegistry
    default_retry: RetryPolicy
    tracer: Tracer


class Scheduling:
    """The single-job scheduling path of one Scheduler; `workers` are its own running
    workers, the candidates for local handoff."""

    def __init__(self, host: Host, workers: weakref.WeakSet[AnyWorker]) -> None:
        self._host = host
        self._workers = workers

    def build_job(
        self, request: JobRequest, *, now_ms: int = 0, due_by_ms: int | None = None
    ) -> NewJob:
        """Validate everything before anything is written (defaults from settings; the
        payload against the topic's schema when this process's registry has one)."""
        host = self._host
        topic = request.topic
        validate = host.registry.validator(topic) if isinstance(topic, str) else None
        return build_job(
            request,
            default_retry=host.default_retry,
            default_timeout_ms=host.settings.worker.timeout_ms,
            now_ms=now_ms,
            validate=validate,
            max_json_bytes=host.settings.limits.json_bytes,
            due_by_ms=due_by_ms,
        )

    async def enqueue(self, request: JobRequest) -> ScheduleResult:
        """Build the job and store it (or hand it to a local worker when due now): the path of
        Scheduler.schedule_at, schedule_in and schedule, whose keywords `request` holds
        (`run_at_ms`: schedule_at's run_at, or now + schedule_in's delay).

        Returns:
            What happened: the job's id, or the id of the job holding its slot when a
            dedupe key or the topic's policy kept it out (created False).

        Raises:
            ScheduleError: a subclass naming the field; nothing is stored.
        """
        host = self._host
        now = host.clock.now_ms()
        job = self.build_job(request, now_ms=now, due_by_ms=caller_now_ms(host.clock))
        # No SDK: skip the no-op span, but still keep a caller's propagated context. The span
        # is not made current: nothing but our own store call runs under it.
        scope = (
            nullcontext()
            if is_noop(host.tracer)
            else producer_span(
                host.tracer,
                job.topic,
                "send",
                lambda: {MESSAGING_MESSAGE_ID: job.id, JOB_RUN_AT: job.run_at_ms, JOB_TZ: job.tz},
                current=False,
            )
        )
        with scope as span:
            trace = current_traceparent() if span is None else traceparent_of(span)
            if trace:
                job = job.with_trace(trace)
            # (a job with parents waits for them: never handed to a worker at once)
            local = job.due_ms <= now and not job.after
            done = await self._enqueue_local(job, now) if local else None
            if done is None:
                done = await host.store.enqueue(job, now)
        observe(host.metrics, job.topic, done)
        return done.result

    async def _enqueue_local(self, job: NewJob, now_ms: int) -> Enqueued | None:
        """Hand a job due now to a running worker of this scheduler with a free slot (local
        handoff); what happened, or None when no worker took it (nothing written)."""
        if not self._host.settings.worker.local_handoff:
            return None
        for worker in list(self._workers):
            done = await worker.enqueue_local(job, now_ms)
            if done is not None:
                return done
        return None


# When a topic's backlog last got a WARN (monotonic seconds), so a flood logs once a minute.
_warned: dict[str, float] = {}


def observe(metrics: Metrics, topic: str, done: Enqueued) -> None:
    """Count what a scheduling call did: scheduled, or folded into another job (dedupe or
    policy, `horae_jobs_deduplicated_total{topic,reason}`); WARN (once a minute per topic)
    and count when the topic's waiting jobs exceed its warning_size."""
    result = done.result
    if result.created:
        metrics.scheduled.add(1, {"topic": topic})
    elif result.reason != "duplicate_id":
        metrics.deduplicated.add(1, {"topic": topic, "reason": result.reason})
    if done.waiting:
        metrics.backlog_warnings.add(1, {"topic": topic})
        now = time.monotonic()
        if now - _warned.get(topic, -60.0) >= 60.0:
            _warned[topic] = now
            log.warning(
                "topic %s has %d jobs waiting or retrying, over its warning_size",
                topic,
                done.waiting,
                extra={"event": "topic_warning_size", "topic": topic, "waiting": done.waiting},
            )
