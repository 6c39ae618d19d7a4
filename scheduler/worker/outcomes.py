"""What a worker reports about a settled attempt, apart from running it: the log lines
and counters of each outcome (no listener, invalid payload, completed, retried, failed
for good, a result the engine refused because the lease was lost)."""

from __future__ import annotations

import logging

from scheduler.core.job import ClaimedJob, Settlement
from scheduler.core.outbox import INVALID_PAYLOAD, NO_LISTENER, ErrorRecord
from scheduler.observe.metrics import Metrics
from scheduler.store.scripts import ScriptCode, SettleCode, SettleReply

log = logging.getLogger("horae.worker")


def note_success(metrics: Metrics, job: ClaimedJob, settlement: Settlement) -> None:
    """Before a successful settlement: warn and count the outcomes that complete a job
    without its listeners having done their work (no listener, an invalid payload)."""
    if settlement.outcome == NO_LISTENER:
        log.warning(
            "no listener for topic %r; job %s completed",
            job.topic,
            job.id,
            extra={"event": "no_listener", "job_id": job.id, "topic": job.topic},
        )
        metrics.no_listener.add(1, {"topic": job.topic})
    elif settlement.outcome == INVALID_PAYLOAD and settlement.rejection is not None:
        message = settlement.rejection["message"]
        log.warning(
            "job %s (topic %r) completed without retry: invalid payload: %s",
            job.id,
            job.topic,
            message,
            extra={
                "event": "invalid_payload",
                "job_id": job.id,
                "topic": job.topic,
                "error": message,
            },
        )
        metrics.invalid_payload.add(1, {"topic": job.topic})


def note_completed(metrics: Metrics, job: ClaimedJob) -> None:
    metrics.completed.add(1, {"topic": job.topic})
    log.debug(
        "job %s (topic %r) completed in attempt %d",
        job.id,
        job.topic,
        job.attempt,
        extra={"event": "job_completed", "job_id": job.id, "topic": job.topic},
    )


def note_attempt_failed(job: ClaimedJob, outcome: str, error: ErrorRecord) -> None:
    """An attempt that failed and will be retried (or whose result was refused)."""
    log.info(
        "attempt %d of job %s %s: %s",
        job.attempt,
        job.id,
        outcome,
        error["message"],
        extra={"event": "attempt_failed", "job_id": job.id, "topic": job.topic, "outcome": outcome},
    )


def note_failure(
    metrics: Metrics, job_id: str, topic: str, attempt: int, error: ErrorRecord, reply: SettleReply
) -> bool:
    """Count a written failure; True when the job failed for good (the caller delivers
    schedule.failed)."""
    attrs = {"topic": topic}
    if reply is SettleCode.RETRY_SCHEDULED:
        metrics.retries.add(1, attrs)
    elif reply is SettleCode.FAILED:
        metrics.failed.add(1, attrs)
        log.warning(
            "job %s (topic %r) failed after attempt %d: %s: %s",
            job_id,
            topic,
            attempt,
            error["type"],
            error["message"],
            extra={
                "event": "job_failed",
                "job_id": job_id,
                "topic": topic,
                "attempt": attempt,
                "error": f"{error['type']}: {error['message']}",
            },
        )
        return True
    elif isinstance(reply, ScriptCode):
        log_lost(job_id, reply)
    return False


def log_lost(job_id: str, reply: ScriptCode) -> None:
    """The engine refused a result: the lease was lost (recovered, cancelled, deleted)."""
    log.warning(
        "result for job %s ignored: %s",
        job_id,
        reply.name,
        extra={"event": "lease_lost", "job_id": job_id},
    )
