"""horae: schedule a topic at an instant in a time zone; every @on_event
listener of the topic runs in a worker, with bounded retries and an audit trail.

    from horae import Scheduler, on_event, ScheduleArrivedEvent, RetryPolicy, Backoff

This is the public face of the package: `__all__` is `scheduler`'s public API plus
the application-facing names of `listeners` (registration, events, schemas). The
packages `scheduler`, `listeners` and `audit` are the implementation; the worker's
dispatch internals (`listeners.dispatch`, `call_listener`, ...) stay there. Names load
lazily (PEP 562): `import horae` imports neither redis nor OpenTelemetry until a name
that needs them is used.

Before anything else, `import horae` checks that `scheduler`, `listeners`, `audit` and
`console` are this distribution's packages, not a user's modules of the same name
(`horae._packages`: a PackageShadowed ImportError names the shadowing file).
`horae.__version__` is the installed distribution's version (package metadata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from horae import _packages

_packages.check_packages(_packages.LIBRARY)  # a user's own console.py does not stop the library

from scheduler import _SOURCES as _SCHEDULER_SOURCES  # noqa: E402  (after the check: maybe not ours)
from scheduler.lazy import lazy_exports  # noqa: E402

if TYPE_CHECKING:
    from listeners.events import ScheduleArrivedEvent, ScheduleFailedEvent
    from listeners.registry import Listener, ListenerRegistry, default_registry, on_event
    from listeners.schema import PayloadRejected, Schema, Validator
    from listeners.triggers import InvalidDeclaration
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

# Public name -> the implementation module defining it: scheduler's public API (its own
# table, not a copy) plus the application-facing names of listeners.
_SOURCES = {
    **_SCHEDULER_SOURCES,
    "InvalidDeclaration": "listeners.triggers",
    "Listener": "listeners.registry",
    "ListenerRegistry": "listeners.registry",
    "PayloadRejected": "listeners.schema",
    "ScheduleArrivedEvent": "listeners.events",
    "ScheduleFailedEvent": "listeners.events",
    "Schema": "listeners.schema",
    "Validator": "listeners.schema",
    "default_registry": "listeners.registry",
    "on_event": "listeners.registry",
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
    "InvalidDeclaration",
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
    "Listener",
    "ListenerRegistry",
    "LogLine",
    "PayloadRejected",
    "Progress",
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
    "ServerUnavailable",
    "Stats",
    "StorageError",
    "TopicInUse",
    "TopicOptions",
    "TopicPolicyLocked",
    "TopicStats",
    "UnknownParent",
    "Validator",
    "WaitTimeout",
    "Worker",
    "WorkerInfo",
    "chain",
    "default_registry",
    "group",
    "on_event",
]


_lazy_getattr, __dir__ = lazy_exports("horae", _SOURCES, globals(), __all__)


def __getattr__(name: str) -> Any:
    """`__version__` from the distribution's metadata (read once), else a public name, lazily."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("horae")
        except PackageNotFoundError:  # a source tree on sys.path, never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    return _lazy_getattr(name)
