"""Events handed to listeners: a job arrived, or a job failed for good."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

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
