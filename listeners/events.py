"""Events handed to listeners: a job arrived, or a job failed for good."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class Reporter(Protocol):
    """Where an attempt's progress and log lines go: the worker injects one per attempt
    (scheduler/worker/attempt.py), which keeps them with the job."""

    async def progress(self, percent: float, message: str | None = None) -> None:
        """Record the attempt's progress (percent 0..100, an optional message)."""

    async def log(self, line: str) -> None:
        """Append one log line to the job's log."""


@dataclass(frozen=True)
class ScheduleArrivedEvent:
    """A scheduled job is due: every listener of `topic` receives this once per attempt.

    `payload` is the scheduled JSON value, or what the topic's schema parsed it into
    (a model instance for a pydantic model).
    """

    scheduled_job_id: str
    topic: str
    payload: Any
    attempt: int
    max_attempts: int
    run_at: datetime
    metadata: Mapping[str, Any] = field(default_factory=dict)
    # A job scheduled with after=: parent job id -> its result (None: it returned nothing, or
    # failed and this job's on_parent_failure is "ignore"); empty for any other job.
    parent_results: Mapping[str, Any] = field(default_factory=dict)
    # A node of a flow (Scheduler.flow): child job id -> its result (None as above); empty
    # for a leaf and for any job not created by a flow.
    children_results: Mapping[str, Any] = field(default_factory=dict)
    # Set by the worker; an event built by hand (a unit test of a listener) has none, and
    # progress() and log() then record nothing.
    reporter: Reporter | None = field(default=None, repr=False, compare=False)

    async def progress(self, percent: float, message: str | None = None) -> None:
        """Report how far this attempt got: kept with the job (JobInfo.progress, `horae jobs
        show`, the audit's attempt row). Costs one Redis call; none when never called.

        Raises:
            InvalidProgress: percent not a number in 0..100, or message not a str.
            LeaseLost: this attempt no longer holds its job (another worker took it over).
        """
        if self.reporter is not None:
            await self.reporter.progress(percent, message)

    async def log(self, line: str) -> None:
        """Append one line to the job's log (the last 100 lines are kept, each cut to 1 KiB).

        Raises:
            InvalidProgress: line not a str.
            LeaseLost: this attempt no longer holds its job.
        """
        if self.reporter is not None:
            await self.reporter.log(line)


@dataclass(frozen=True)
class ScheduleFailedEvent:
    """A job failed for good; delivered to the listeners of the topic the scheduler names for it
    ("schedule.failed")."""

    scheduled_job_id: str
    topic: str
    last_error: Mapping[str, Any] | None
    attempts: int
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The wire form of the spec: scheduledJobId, topic, lastError, attempts, metadata."""
        return {
            "scheduledJobId": self.scheduled_job_id,
            "topic": self.topic,
            "lastError": dict(self.last_error) if self.last_error is not None else None,
            "attempts": self.attempts,
            "metadata": dict(self.metadata),
        }
