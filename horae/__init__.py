"""horae: schedule a topic at an instant in a time zone; every @on_event
listener of the topic runs in a worker, with bounded retries and an audit trail.

    from horae import Scheduler, on_event, ScheduleArrivedEvent, RetryPolicy, Backoff

This is the public face of the package: `__all__` is `scheduler`'s public API plus
the application-facing names of `listeners` (registration, events, schemas). The
packages `scheduler`, `listeners` and `audit` are the implementation; the worker's
dispatch internals (`listeners.dispatch`, `call_listener`, ...) stay there. Names load
lazily (PEP 562): `import horae` imports neither redis nor OpenTelemetry until a name
that needs them is used.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from listeners.events import ScheduleArrivedEvent, ScheduleFailedEvent
    from listeners.registry import Listener, ListenerRegistry, default_registry, on_event
    from listeners.schema import PayloadRejected, Schema, Validator
    from scheduler.advertise import WorkerInfo
    from scheduler.api import Scheduler
    from scheduler.errors import (
        ConfigError,
        DeadLetterNotFound,
        DoNotRetry,
        InvalidCron,
        InvalidDelay,
        InvalidFlowOption,
        InvalidJobId,
        InvalidPayload,
        InvalidTimezone,
        InvalidTopic,
        KeyRequired,
        Retry,
        RetryPolicyInvalid,
        ScheduleError,
        SchedulerError,
        StorageError,
        TopicInUse,
        TopicPolicyLocked,
    )
    from scheduler.flow import Dedupe, RateLimit
    from scheduler.job import JobInfo, JobPage, JobState, ScheduleResult
    from scheduler.outbox import SCHEDULE_FAILED_TOPIC
    from scheduler.retry import Backoff, RetryPolicy
    from scheduler.topic_options import TopicOptions
    from scheduler.worker import Worker

# Public name -> the implementation module defining it.
_SOURCES = {
    "Backoff": "scheduler.retry",
    "ConfigError": "scheduler.errors",
    "DeadLetterNotFound": "scheduler.errors",
    "Dedupe": "scheduler.flow",
    "DoNotRetry": "scheduler.errors",
    "InvalidCron": "scheduler.errors",
    "InvalidDelay": "scheduler.errors",
    "InvalidFlowOption": "scheduler.errors",
    "InvalidJobId": "scheduler.errors",
    "InvalidPayload": "scheduler.errors",
    "InvalidTimezone": "scheduler.errors",
    "InvalidTopic": "scheduler.errors",
    "JobInfo": "scheduler.job",
    "JobPage": "scheduler.job",
    "JobState": "scheduler.job",
    "KeyRequired": "scheduler.errors",
    "Listener": "listeners.registry",
    "ListenerRegistry": "listeners.registry",
    "PayloadRejected": "listeners.schema",
    "RateLimit": "scheduler.flow",
    "Retry": "scheduler.errors",
    "RetryPolicy": "scheduler.retry",
    "RetryPolicyInvalid": "scheduler.errors",
    "SCHEDULE_FAILED_TOPIC": "scheduler.outbox",
    "ScheduleArrivedEvent": "listeners.events",
    "ScheduleError": "scheduler.errors",
    "ScheduleFailedEvent": "listeners.events",
    "ScheduleResult": "scheduler.job",
    "Scheduler": "scheduler.api",
    "SchedulerError": "scheduler.errors",
    "Schema": "listeners.schema",
    "StorageError": "scheduler.errors",
    "TopicInUse": "scheduler.errors",
    "TopicOptions": "scheduler.topic_options",
    "TopicPolicyLocked": "scheduler.errors",
    "Validator": "listeners.schema",
    "Worker": "scheduler.worker",
    "WorkerInfo": "scheduler.advertise",
    "default_registry": "listeners.registry",
    "on_event": "listeners.registry",
}

__all__ = [
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
    "InvalidTimezone",
    "InvalidTopic",
    "JobInfo",
    "JobPage",
    "JobState",
    "KeyRequired",
    "Listener",
    "ListenerRegistry",
    "PayloadRejected",
    "RateLimit",
    "Retry",
    "RetryPolicy",
    "RetryPolicyInvalid",
    "SCHEDULE_FAILED_TOPIC",
    "ScheduleArrivedEvent",
    "ScheduleError",
    "ScheduleFailedEvent",
    "ScheduleResult",
    "Scheduler",
    "SchedulerError",
    "Schema",
    "StorageError",
    "TopicInUse",
    "TopicOptions",
    "TopicPolicyLocked",
    "Validator",
    "Worker",
    "WorkerInfo",
    "default_registry",
    "on_event",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module 'horae' has no attribute {name!r}")
    value = getattr(import_module(source), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
