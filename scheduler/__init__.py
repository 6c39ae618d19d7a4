"""horae: schedule a topic at an instant in a time zone; every @on_event
listener of the topic runs in a worker, with bounded retries and an audit trail.

The public API is what `__all__` lists; modules below are not public. Names load
lazily (PEP 562), so `from scheduler.errors import ...` in the audit, the
migrations or the Spark child does not import redis, hiredis or OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.lazy import lazy_exports

if TYPE_CHECKING:
    from scheduler.advertise import WorkerInfo
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
        AuditUnavailable,
        InvalidFlowOption,
        TopicInUse,
        TopicPolicyLocked,
        DeadLetterNotFound,
        KeyRequired,
        InvalidProgress,
        JobNotFound,
        LeaseLost,
        WaitTimeout,
    )
    from scheduler.flow import Dedupe, RateLimit
    from scheduler.job import JobInfo, JobPage, JobState, ScheduleResult
    from scheduler.outbox import SCHEDULE_FAILED_TOPIC
    from scheduler.progress import LogLine, Progress
    from scheduler.retry import Backoff, RetryPolicy
    from scheduler.topic_options import TopicOptions
    from scheduler.worker import Worker

# Public name -> the module defining it.
_SOURCES = {
    "Backoff": "scheduler.retry",
    "ConfigError": "scheduler.errors",
    "DoNotRetry": "scheduler.errors",
    "InvalidCron": "scheduler.errors",
    "InvalidDelay": "scheduler.errors",
    "InvalidJobId": "scheduler.errors",
    "InvalidPayload": "scheduler.errors",
    "InvalidTimezone": "scheduler.errors",
    "InvalidTopic": "scheduler.errors",
    "InvalidProgress": "scheduler.errors",
    "JobInfo": "scheduler.job",
    "JobNotFound": "scheduler.errors",
    "LeaseLost": "scheduler.errors",
    "LogLine": "scheduler.progress",
    "Progress": "scheduler.progress",
    "WaitTimeout": "scheduler.errors",
    "JobPage": "scheduler.job",
    "JobState": "scheduler.job",
    "KeyRequired": "scheduler.errors",
    "ScheduleResult": "scheduler.job",
    "Retry": "scheduler.errors",
    "RetryPolicy": "scheduler.retry",
    "RetryPolicyInvalid": "scheduler.errors",
    "SCHEDULE_FAILED_TOPIC": "scheduler.outbox",
    "ScheduleError": "scheduler.errors",
    "Scheduler": "scheduler.api",
    "SchedulerError": "scheduler.errors",
    "StorageError": "scheduler.errors",
    "AuditUnavailable": "scheduler.errors",
    "InvalidFlowOption": "scheduler.errors",
    "TopicInUse": "scheduler.errors",
    "TopicPolicyLocked": "scheduler.errors",
    "DeadLetterNotFound": "scheduler.errors",
    "Dedupe": "scheduler.flow",
    "RateLimit": "scheduler.flow",
    "TopicOptions": "scheduler.topic_options",
    "Worker": "scheduler.worker",
    "WorkerInfo": "scheduler.advertise",
}

__all__ = [
    "AuditUnavailable",
    "Backoff",
    "ConfigError",
    "DeadLetterNotFound",
    "Dedupe",
    "DoNotRetry",
    "InvalidCron",
    "InvalidDelay",
    "InvalidFlowOption",
    "InvalidJobId",
    "InvalidPayload",
    "InvalidProgress",
    "InvalidTimezone",
    "InvalidTopic",
    "JobInfo",
    "JobNotFound",
    "JobPage",
    "JobState",
    "KeyRequired",
    "LeaseLost",
    "LogLine",
    "Progress",
    "RateLimit",
    "Retry",
    "RetryPolicy",
    "RetryPolicyInvalid",
    "SCHEDULE_FAILED_TOPIC",
    "ScheduleError",
    "ScheduleResult",
    "Scheduler",
    "SchedulerError",
    "StorageError",
    "TopicInUse",
    "TopicOptions",
    "TopicPolicyLocked",
    "WaitTimeout",
    "Worker",
    "WorkerInfo",
]


__getattr__, __dir__ = lazy_exports('scheduler', _SOURCES, globals(), __all__)
