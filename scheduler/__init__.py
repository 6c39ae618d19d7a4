"""horae: schedule a topic at an instant in a time zone; every @on_event
listener of the topic runs in a worker, with bounded retries and an audit trail.

The public API is what `__all__` lists; modules below are not public.
"""

from scheduler.api import Scheduler
from scheduler.errors import (
    ConfigError,
    DoNotRetry,
    InvalidCron,
    InvalidDelay,
    InvalidJobId,
    InvalidPayload,
    InvalidTimezone,
    InvalidTopic,
    Retry,
    RetryPolicyInvalid,
    ScheduleError,
    SchedulerError,
    StorageError,
)
from scheduler.job import JobInfo, JobState
from scheduler.retry import Backoff, RetryPolicy
from scheduler.worker import Worker

__all__ = [
    "Backoff",
    "ConfigError",
    "DoNotRetry",
    "InvalidCron",
    "InvalidDelay",
    "InvalidJobId",
    "InvalidPayload",
    "InvalidTimezone",
    "InvalidTopic",
    "JobInfo",
    "JobState",
    "Retry",
    "RetryPolicy",
    "RetryPolicyInvalid",
    "ScheduleError",
    "Scheduler",
    "SchedulerError",
    "StorageError",
    "Worker",
]
