"""horae: schedule a topic at an instant in a time zone; every @on_event
listener of the topic runs in a worker, with bounded retries and an audit trail.

The public API is what `__all__` lists; modules below are not public. Names load
lazily (PEP 562), so `from scheduler.core.errors import ...` in the audit, the
migrations or the Spark child does not import redis, hiredis or OpenTelemetry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.lazy import lazy_exports

if TYPE_CHECKING:
    from scheduler.api import Scheduler
    from scheduler.core.errors import (
        AuditUnavailable,
        ConfigError,
        DeadLetterNotFound,
        DoNotRetry,
        FlowRefused,
        InvalidCron,
        InvalidDelay,
        InvalidDependency,
        InvalidFlowOption,
        InvalidJobId,
        InvalidPayload,
        InvalidProgress,
        InvalidTimezone,
        InvalidTopic,
        JobNotFound,
        KeyRequired,
        LeaseLost,
        Retry,
        RetryPolicyInvalid,
        ScheduleError,
        SchedulerError,
        ServerUnavailable,
        StorageError,
        TopicInUse,
        TopicPolicyLocked,
        UnknownParent,
        WaitTimeout,
    )
    from scheduler.core.flow import Dedupe, RateLimit
    from scheduler.core.flow_tree import Flow, FlowNode, Group, chain, group
    from scheduler.core.job import CronInfo, JobInfo, JobPage, JobState, ScheduleResult
    from scheduler.core.outbox import SCHEDULE_FAILED_TOPIC
    from scheduler.core.progress import LogLine, Progress
    from scheduler.core.retry import Backoff, RetryPolicy
    from scheduler.core.stats import Stats, TopicStats
    from scheduler.core.topic_options import TopicOptions
    from scheduler.store.topic_memory import KnownTopic
    from scheduler.worker.advertise import WorkerInfo
    from scheduler.worker.loop import Worker

# Public name -> the module defining it.
_SOURCES = {
    "Backoff": "scheduler.core.retry",
    "ConfigError": "scheduler.core.errors",
    "CronInfo": "scheduler.core.job",
    "DoNotRetry": "scheduler.core.errors",
    "InvalidCron": "scheduler.core.errors",
    "InvalidDelay": "scheduler.core.errors",
    "InvalidJobId": "scheduler.core.errors",
    "InvalidPayload": "scheduler.core.errors",
    "InvalidTimezone": "scheduler.core.errors",
    "InvalidTopic": "scheduler.core.errors",
    "InvalidProgress": "scheduler.core.errors",
    "JobInfo": "scheduler.core.job",
    "KnownTopic": "scheduler.store.topic_memory",
    "JobNotFound": "scheduler.core.errors",
    "LeaseLost": "scheduler.core.errors",
    "LogLine": "scheduler.core.progress",
    "Progress": "scheduler.core.progress",
    "WaitTimeout": "scheduler.core.errors",
    "JobPage": "scheduler.core.job",
    "JobState": "scheduler.core.job",
    "KeyRequired": "scheduler.core.errors",
    "InvalidDependency": "scheduler.core.errors",
    "UnknownParent": "scheduler.core.errors",
    "ScheduleResult": "scheduler.core.job",
    "Retry": "scheduler.core.errors",
    "RetryPolicy": "scheduler.core.retry",
    "RetryPolicyInvalid": "scheduler.core.errors",
    "SCHEDULE_FAILED_TOPIC": "scheduler.core.outbox",
    "ScheduleError": "scheduler.core.errors",
    "Scheduler": "scheduler.api",
    "SchedulerError": "scheduler.core.errors",
    "Stats": "scheduler.core.stats",
    "TopicStats": "scheduler.core.stats",
    "StorageError": "scheduler.core.errors",
    "ServerUnavailable": "scheduler.core.errors",
    "AuditUnavailable": "scheduler.core.errors",
    "InvalidFlowOption": "scheduler.core.errors",
    "TopicInUse": "scheduler.core.errors",
    "TopicPolicyLocked": "scheduler.core.errors",
    "DeadLetterNotFound": "scheduler.core.errors",
    "Dedupe": "scheduler.core.flow",
    "Flow": "scheduler.core.flow_tree",
    "FlowNode": "scheduler.core.flow_tree",
    "FlowRefused": "scheduler.core.errors",
    "Group": "scheduler.core.flow_tree",
    "chain": "scheduler.core.flow_tree",
    "group": "scheduler.core.flow_tree",
    "RateLimit": "scheduler.core.flow",
    "TopicOptions": "scheduler.core.topic_options",
    "Worker": "scheduler.worker.loop",
    "WorkerInfo": "scheduler.worker.advertise",
}

__all__ = [
    "AuditUnavailable",
    "Backoff",
    "ConfigError",
    "CronInfo",
    "DeadLetterNotFound",
    "Dedupe",
    "DoNotRetry",
    "Flow",
    "FlowNode",
    "FlowRefused",
    "Group",
    "InvalidCron",
    "InvalidDelay",
    "InvalidDependency",
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
    "KnownTopic",
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
    "ServerUnavailable",
    "Stats",
    "StorageError",
    "TopicInUse",
    "TopicOptions",
    "TopicPolicyLocked",
    "TopicStats",
    "UnknownParent",
    "WaitTimeout",
    "Worker",
    "WorkerInfo",
    "chain",
    "group",
]


__getattr__, __dir__ = lazy_exports("scheduler", _SOURCES, globals(), __all__)
