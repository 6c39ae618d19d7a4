"""The audit trail's values: one job row (AuditRecord) and one attempt row
(AttemptRecord), as the read API returns them and the relay writes them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.core.outbox import Outcome, Status
from scheduler.core.progress import Progress


@dataclass(frozen=True)
class AuditRecord:
    """One scheduled job as the audit trail knows it (all timestamps aware UTC).

    `attempts` counts attempts that finished (failed, timed out, lost, or
    succeeded); an attempt given back by a graceful stop does not count.
    `last_error` is the serialized error of the latest failed attempt
    ({"type", "message", "traceback"}), kept after a later success, or the
    refusal of an attempt whose payload its topic's schema refused.
    """

    id: str
    topic: str
    status: Status
    attempts: int
    max_attempts: int | None
    backoff_type: str | None
    backoff_delay_ms: int | None
    last_error: dict[str, object] | None
    run_at: datetime | None
    tz: str | None
    payload: object
    metadata: dict[str, object] | None
    trace_id: str | None
    cron_name: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None
    failed_at: datetime | None
    cancelled_at: datetime | None
    deduplicated: int = 0  # later calls a dedupe key or the policy folded into this job
    # the ids of the jobs it waited for (scheduled with after=); () for none (migration 0012)
    parents: tuple[str, ...] = ()

    @property
    def job_id(self) -> str:
        """Alias of `id`."""
        return self.id


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job; `outcome` is None while it runs. error_type/error_message
    hold a failed attempt's error, or an invalid_payload attempt's refusal.
    progress_percent/progress_message and logs: what its listeners reported (event.progress,
    event.log; the attempt's own log lines, oldest first), None when nothing; known once
    the attempt is settled. `result`: what its listeners returned, on a successful attempt (as
    JobInfo.result: one listener's value, or a mapping listener name -> value); None when
    nothing."""

    job_id: str
    attempt: int
    worker: str | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: Outcome | None
    error_type: str | None
    error_message: str | None
    duration_ms: int | None
    lateness_ms: int | None
    progress_percent: float | None = None
    progress_message: str | None = None
    logs: list[str] | None = None
    result: Any = None

    @property
    def progress(self) -> Progress | None:
        """The attempt's last progress as JobInfo.progress has it (None: none reported)."""
        if self.progress_percent is None:
            return None
        p = self.progress_percent
        return Progress(int(p) if float(p).is_integer() else p, self.progress_message)

    @property
    def attempt_no(self) -> int:
        """Alias of `attempt` (the column is attempt_no)."""
        return self.attempt

    @property
    def worker_id(self) -> str | None:
        """Alias of `worker` (the column is worker_id)."""
        return self.worker


@dataclass(frozen=True)
class OperatorAction:
    """One action an operator took through the console or the HTTP API (migration 0008):
    `outcome` done, not_found, refused or error; `detail` what the action was given."""

    at: datetime
    actor: str
    role: str
    action: str
    target: str
    outcome: str
    detail: dict[str, object] | None
